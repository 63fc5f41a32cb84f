"""A laptop with one real node tethers to an enterprise with two, and back: real containers, reached at home.

The laptop has one real node; the enterprise two, and a KWOK node reserved for another team (tainted: a pod
sent to a provider keeps no toleration, so none of the laptop's lands there, though it counts in the
enterprise's offer). Both use the same pod CIDR, so every address crossing between them goes through the
network fabric's remapping. Both are busy with their own work: a pod of the enterprise's fills each of its
real nodes but for room for one replica, one of the laptop's (in a namespace that stays local) fills the
laptop's node but for room for two. A Deployment of four replicas made on the laptop while tethered is then
scheduled by the enterprise, which can only run one on each of its real nodes and send two back to the
laptop's own node through its virtual node for the laptop.

What the laptop's user sees is checked with the laptop's kubectl only: every replica Running, ``exec`` and
``logs`` into each (those sent back cross both virtual kubelets), and a Service at home answering from every
replica: those on the enterprise through the tunnel, those sent back at their own address (the enterprise
reports them at the address it sees them at, which the laptop turns back into its own pod's once it found
that pod in the enterprise's twin here). The tether's end brings every replica home, a PodDisruptionBudget
keeping three of four available, and leaves nothing of the laptop's on the enterprise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest

from liqo.api import names
from liqo.api.podrequests import pod_requests
from liqo.api.quantity import parse_quantity
from liqo.api.resources import SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, EVENTS, NAMESPACES, NODES, PODS, SERVICES
from liqo.localclusters.realnodes import images
from liqo.localclusters.spec import ClusterSpec
from liqo.peering import operations as peering
from tests.integration.helpers import (
    Site,
    deployment,
    expect_clean,
    kubectl,
    kubectl_run,
    liqoctl,
    purge,
    running_pods,
    start_sites,
    unique,
)
from tests.integration.modes.tethers import accepting, budget, placed, virtual_node_of
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

TOOLBOX = images.TOOLBOX_PINNED
REPLICAS = 4
REPLICA_CPU = Decimal("0.2")
SERVER = [
    "sh",
    "-c",
    "echo started; exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo answered by $HOSTNAME'",
]
BUSY = "busy"
REAL_NODES = 2
"""The enterprise's: room for one replica each, so it sends the other two back to the laptop's node."""
"""The enterprise's own namespace, where its own work fills its real nodes."""


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Site, Site]]:
    made = start_sites(
        {
            "laptop": ClusterSpec(name=unique("t-lap"), nodes=0, real_nodes=1),
            "enterprise": ClusterSpec(name=unique("t-ent"), nodes=1, real_nodes=REAL_NODES),
        }
    )
    try:
        yield made["laptop"], made["enterprise"]
    finally:
        purge(made["laptop"].cluster, made["enterprise"].cluster)


def server(name: str, namespace: str) -> Obj:
    """A Deployment of TCP servers answering with their pod's name."""
    made = deployment(name, namespace, replicas=REPLICAS, cpu=str(REPLICA_CPU))
    spec = made["spec"]["template"]["spec"]
    spec["containers"][0] |= {"image": TOOLBOX, "command": SERVER}
    spec["terminationGracePeriodSeconds"] = 2
    return made


def toolbox_pod(name: str, namespace: str, **spec: object) -> Obj:
    container = {"name": "main", "image": TOOLBOX, "command": ["sleep", "3600"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container], **spec},
    }


async def free_cpu(client: KubeClient, node: Obj) -> Decimal:
    """The CPU ``node`` can still give, by its scheduler's count: allocatable minus its live pods' requests."""
    pods, _ = await client.list_all(PODS, field_selector=f"spec.nodeName={node['metadata']['name']}")
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    used = sum((pod_requests(p).get("cpu", Decimal(0)) for p in live), Decimal(0))
    return parse_quantity(node["status"]["allocatable"]["cpu"]) - used


async def fill(client: KubeClient, node: Obj, namespace: str, *, leaving: Decimal) -> str:
    """A pod taking what ``node`` has free but ``leaving`` CPU; its name."""
    name = node["metadata"]["name"]
    taken = await free_cpu(client, node) - leaving
    assert taken > 0, f"{name}: less than {leaving} CPU free"
    filler = toolbox_pod(f"fill-{name}"[:63], namespace, nodeName=name)
    filler["spec"]["containers"][0]["resources"] = {"requests": {"cpu": f"{int(taken * 1000)}m"}}
    await client.create(PODS, filler)
    return str(filler["metadata"]["name"])


async def busy_enterprise(corp: KubeClient) -> None:
    """The enterprise's own work fills each real node but for room for one replica; its KWOK node is reserved for
    another team (a taint no pod sent to a provider tolerates: it counts in the enterprise's offer, never in a
    slot a pod could take)."""
    await corp.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BUSY}})
    nodes, _ = await corp.list_all(NODES)
    kinds = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}) for n in nodes}
    for node in nodes:
        labels = kinds[node["metadata"]["name"]]
        if labels.get("type") == "kwok":
            taint = {"key": "team", "value": "batch", "effect": "NoSchedule"}
            await corp.patch(NODES, node["metadata"]["name"], {"spec": {"taints": [taint]}})
        elif labels.get(names.VIRTUAL_NODE_TYPE) != names.VIRTUAL_NODE:
            await fill(corp, node, BUSY, leaving=REPLICA_CPU * Decimal("1.5"))
    await running_pods(corp, BUSY, REAL_NODES, timeout=120)


@contextlib.asynccontextmanager
async def availability(client: KubeClient, namespace: str, name: str) -> AsyncIterator[list[int]]:
    """The Deployment's available replicas, read every quarter second for the duration."""
    seen: list[int] = []

    async def sample() -> None:
        while True:
            current = await client.get(DEPLOYMENTS, name, namespace=namespace)
            seen.append(int((current.get("status") or {}).get("availableReplicas") or 0))
            await asyncio.sleep(0.25)  # a sampling period, not a wait on anything

    task = asyncio.create_task(sample())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def service_answers(laptop: Site, client_namespace: str, address: str, expected: set[str]) -> None:
    """Until each of ``expected`` (pod names) answered the Service at ``address``, asked from the client pod."""
    heard: set[str] = set()

    async def everyone() -> bool:
        # A replica not reachable yet is a connection that fails (within 5 s), and the next look asks again.
        said = await asyncio.to_thread(
            kubectl_run, laptop.cluster, "exec", "-n", client_namespace, "client", "--",
            "socat", "-t3", "-T5", "-", f"TCP:{address}:80,connect-timeout=5",
            stdin="", timeout=30,
        )  # fmt: skip
        heard.update(re.findall(r"answered by (\S+)", said.stdout))
        return expected <= heard

    await eventually(
        everyone, timeout=90, message=lambda: f"{sorted(expected)} answering {address}; heard {sorted(heard)}"
    )


async def has_an_address(home: KubeClient, pod: Obj) -> None:
    """The home pod has an IP (its Events say why not)."""
    if (pod.get("status") or {}).get("podIP"):
        return
    name = pod["metadata"]["name"]
    events, _ = await home.list_all(
        EVENTS, namespace=pod["metadata"]["namespace"], field_selector=f"involvedObject.name={name}"
    )
    said = [f"{e.get('reason')}: {e.get('message')}" for e in events if e.get("type") == "Warning"]
    raise AssertionError(f"{name} has no IP at home; its warnings: {said}")


def reached_by_kubectl(laptop: Site, namespace: str, pod: str) -> None:
    """``kubectl logs`` and ``exec`` at home reach the pod's container, wherever it runs."""
    assert "started" in kubectl(laptop.cluster, "logs", "-n", namespace, pod)
    assert kubectl(laptop.cluster, "exec", "-n", namespace, pod, "--", "cat", "/etc/hostname").strip() == pod


async def make_namespaces(home: KubeClient, *, work: str, probe: str) -> None:
    """``work`` for the servers; ``probe`` for a client pod, a namespace that stays on the laptop."""
    for namespace, labels in ((work, {}), (probe, {names.STAYS_LOCAL: "true"})):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
        await home.create(NAMESPACES, body)
    await home.create(PODS, toolbox_pod("client", probe))


async def make_workload(home: KubeClient, work: str) -> str:
    """The servers' Deployment, its budget and Service in ``work``; the Service's address."""
    await home.create(DEPLOYMENTS, server("web", work))
    await budget(home, work, "web")
    port = {"port": 80, "targetPort": 8080, "protocol": "TCP"}
    spec = {"selector": {"app": "web"}, "ports": [port]}
    meta = {"name": "web", "namespace": work}
    made = await home.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec})
    return str(made["spec"]["clusterIP"])


async def plain_deployment_goes_there(laptop: Site, home: KubeClient, work: str, *, peer_node: str) -> None:
    """A Deployment made the plainest way while tethered runs on the enterprise too."""
    kubectl(laptop.cluster, "create", "deployment", "plain", "-n", work, f"--image={TOOLBOX}", "--", "sleep", "3600")

    async def there() -> bool:
        pods, _ = await home.list_all(PODS, namespace=work, label_selector="app=plain")
        return (
            len(pods) == 1
            and pods[0]["spec"].get("nodeName") == peer_node
            and (pods[0].get("status") or {}).get("phase") == "Running"
        )

    await eventually(there, timeout=90, message="the plain Deployment's pod Running on the enterprise")


async def nothing_of_the_laptops_left(home: KubeClient, corp: KubeClient, *, laptop: Site, enterprise: Site) -> None:
    """No twin of the laptop's on the enterprise, no twin of those back on the laptop, no ShadowPod of it."""

    async def none() -> bool:
        twins_there = f"{names.REMOTE_CLUSTER_ID}={laptop.cluster_id},{names.ORIGIN_NAMESPACE}"
        twins_back = f"{names.REMOTE_CLUSTER_ID}={enterprise.cluster_id},{names.ORIGIN_NAMESPACE}"
        shadows, _ = await corp.list_all(SHADOW_PODS)
        return (
            not (await corp.list_all(NAMESPACES, label_selector=twins_there))[0]
            and not (await home.list_all(NAMESPACES, label_selector=twins_back))[0]
            and not shadows
        )

    await eventually(none, timeout=90, message="nothing of the laptop's left on the enterprise, nor back on it")


async def where_the_enterprise_ran(
    home: KubeClient, corp: KubeClient, *, laptop: Site, enterprise: Site, work: str
) -> tuple[set[str], set[str]]:
    """The laptop's replicas the enterprise ran on its real nodes, and those it sent back to the laptop's node."""
    twin = names.twin_namespace(work, home_cluster_id=laptop.cluster_id)
    back = names.twin_namespace(twin, home_cluster_id=enterprise.cluster_id)
    there, _ = await corp.list_all(PODS, namespace=twin)
    on_real = {
        p["metadata"]["name"]
        for p in there
        if str(p["spec"].get("nodeName")).startswith(f"{enterprise.cluster.name}-real-")
    }
    returned = await running_pods(home, back, REPLICAS - len(on_real))
    assert all(p["spec"].get("nodeName") == f"{laptop.cluster.name}-real-1" for p in returned)
    return on_real, {p["metadata"]["name"] for p in returned}


async def test_the_enterprise_schedules_the_laptops_replicas_on_real_nodes_both_sides_and_gives_them_back(
    pair: tuple[Site, Site],
) -> None:
    laptop, enterprise = pair
    async with laptop.client() as home, enterprise.client() as corp:
        await peering.peer(home, corp, timeout=90)
        await peering.peer(corp, home, timeout=90)
        await busy_enterprise(corp)
        work, probe = unique("work"), unique("probe")
        await make_namespaces(home, work=work, probe=probe)
        local_node = f"{laptop.cluster.name}-real-1"
        # The laptop busy too, but for room for two replicas: what the enterprise can send back.
        laptop_filler = await fill(home, await home.get(NODES, local_node), probe, leaving=REPLICA_CPU * Decimal("2.5"))
        await running_pods(home, probe, 2, timeout=120)

        async with accepting(corp, home, laptop=laptop, enterprise=enterprise):
            liqoctl(laptop.cluster, "mode", "tethered", "--to", enterprise.cluster_id, timeout=300)
            peer_node = await virtual_node_of(home, enterprise.cluster_id)
            address = await make_workload(home, work)
            moved = await placed(home, work, count=REPLICAS, where=lambda node: node == peer_node, timeout=240)

            # The enterprise ran one on each of its real nodes and sent the others back to the laptop's.
            on_real, sent_back = await where_the_enterprise_ran(
                home, corp, laptop=laptop, enterprise=enterprise, work=work
            )
            assert len(on_real) == REAL_NODES, f"on the enterprise's real nodes: {on_real}; sent back: {sent_back}"
            names_at_home = {p["metadata"]["name"] for p in moved}
            assert on_real | sent_back == names_at_home

            # Each one answers kubectl at home, and has an address home dials: the Service reaches them all.
            for pod in moved:
                await has_an_address(home, pod)
                reached_by_kubectl(laptop, work, pod["metadata"]["name"])
            await service_answers(laptop, probe, address, names_at_home)
            await plain_deployment_goes_there(laptop, home, work, peer_node=peer_node)

            # The tether ends: every replica comes back to the laptop, one at a time (the budget holds).
            await home.delete(PODS, laptop_filler, namespace=probe)
            async with availability(home, work, "web") as seen:
                await asyncio.to_thread(liqoctl, laptop.cluster, "mode", "autonomous", timeout=300)
                home_again = await placed(home, work, count=REPLICAS + 1, where=lambda node: node == local_node)
            assert min(seen) >= REPLICAS - 1, f"the budget let more than one replica go at once: {seen}"
            web_pods = {p["metadata"]["name"] for p in home_again if p["metadata"]["name"].startswith("web-")}
            assert len(web_pods) == REPLICAS
            reached_by_kubectl(laptop, work, sorted(web_pods)[0])
            await service_answers(laptop, probe, address, web_pods)
            await nothing_of_the_laptops_left(home, corp, laptop=laptop, enterprise=enterprise)
        for namespace in (work, probe):
            await home.delete(NAMESPACES, namespace)
        await corp.delete(NAMESPACES, BUSY)
        await peering.unpeer(home, enterprise.cluster_id, timeout=120)
        await peering.unpeer(corp, laptop.cluster_id, timeout=120)
        await expect_clean(home, corp)
