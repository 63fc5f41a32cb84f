"""A pod offloaded from home onto a provider's real node: a real container, managed with kubectl at home; and
volumes of the virtual class ``liqo``, on the provider for an offloaded pod, on the node for a local one.

The home cluster (rome, fake nodes) peers with florence, whose only node is real. Every kubectl command
runs against rome; it reaches the container through rome's API server, the virtual kubelet, florence's API
server and florence's kubelet, containerd and runc.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from liqo.api import volumes as volume_protocol
from liqo.api.storage import LABEL_PREFIX, STORAGE_NAMESPACE, VIRTUAL_CLASS
from liqo.kube.client import KubeClient
from liqo.kube.resources import EVENTS, NAMESPACES, NODES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, PODS
from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.volumes import STORAGE_CLASS
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    Site,
    kubectl,
    kubectl_run,
    offloaded_to,
    pod,
    port_forward,
    purge,
    running,
    running_pods,
    sharing_policy,
    start_sites,
    unique,
)
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

TOOLBOX = images.TOOLBOX_PINNED
SERVER = ["sh", "-c", "echo started; exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong'"]


@pytest.fixture(scope="module")
def home_and_florence() -> Iterator[dict[str, Site]]:
    """rome (fake nodes) and florence (one real node), started and installed together.

    Not the shared ``sites``: this module runs in the lane of clusters with real nodes, which holds no
    family, and milan would idle through it.
    """
    made = start_sites(
        {
            "rome": ClusterSpec(name=unique("rome"), nodes=1, node_cpu="4", node_memory="8Gi"),
            "florence": ClusterSpec(name=unique("florence"), nodes=0, real_nodes=1, pod_cidr="10.246.0.0/16"),
        }
    )
    yield made
    purge(*(site.cluster for site in made.values()))


@pytest.fixture(scope="module")
def rome_site(home_and_florence: dict[str, Site]) -> Site:
    return home_and_florence["rome"]


@pytest.fixture(scope="module")
def florence(home_and_florence: dict[str, Site]) -> Site:
    return home_and_florence["florence"]


async def test_a_pod_offloaded_to_a_real_node_answers_kubectl_at_home(
    rome_site: Site, florence: Site, tmp_path: Path
) -> None:
    async with offloaded_to(rome_site, florence, strategy="Remote", prefix="rn") as offloaded:
        home, ns = rome_site.cluster, offloaded.namespace
        container = {"name": "app", "image": TOOLBOX, "command": SERVER}
        async with rome_site.client() as consumer:
            await consumer.create(PODS, pod("worker", ns, containers=[container]))
            await running_pods(consumer, ns, 1)
        async with florence.client() as provider:
            (twin,) = await running_pods(provider, offloaded.twin, 1)
            assert twin["spec"]["nodeName"] == f"{florence.cluster.name}-real-1"

        assert "started" in kubectl(home, "logs", "-n", ns, "worker")
        assert kubectl(home, "exec", "-n", ns, "worker", "--", "cat", "/proc/1/cmdline").startswith("socat\0")
        # stdin's end crosses both API servers and the virtual kubelet: cat ends, so does kubectl.
        echoed = kubectl(home, "exec", "-i", "-n", ns, "worker", "--", "cat", stdin="across\n", timeout=30)
        assert echoed == "across\n"
        (tmp_path / "in.txt").write_text("copied across\n")
        kubectl(home, "cp", str(tmp_path / "in.txt"), f"{ns}/worker:/tmp/in.txt", timeout=30)
        kubectl(home, "cp", f"{ns}/worker:/tmp/in.txt", str(tmp_path / "out.txt"), timeout=30)
        assert (tmp_path / "out.txt").read_text() == "copied across\n"

        with port_forward(home, ns, "worker", 8080) as port:
            for _ in range(2):  # one connection after another over the same forward
                with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                    assert conn.recv(100) == b"pong\n"

        # kubectl run -it: the pod is created, scheduled on the virtual node, attached to through it.
        shell = kubectl(
            home, "run", "shell", "-n", ns, f"--image={TOOLBOX}", "--restart=Never", "-i", "--rm", "--quiet",
            "--", "sh", "-c", "read line; echo got $line on $(hostname)", stdin="hello\n", timeout=120,
        )  # fmt: skip
        assert shell.startswith("got hello on shell")

        # An image no registry has: florence's kubelet refuses exec and attach ("container not found") behind
        # florence's API server; kubectl at home is told which container and why, not an empty error.
        unpullable = {"name": "app", "image": "registry.liqo.invalid/nowhere:1", "command": SERVER}
        async with rome_site.client() as consumer:
            await consumer.create(PODS, pod("unpulled", ns, containers=[unpullable]))
        async with florence.client() as provider:

            async def waiting() -> bool:
                found = await provider.get_or_none(PODS, "unpulled", namespace=offloaded.twin)
                statuses = ((found or {}).get("status") or {}).get("containerStatuses") or []
                return bool(statuses and "waiting" in statuses[0].get("state", {}))

            await eventually(waiting, timeout=60, message="florence's pod unpulled waiting for its image")
        for verb in (["exec", "unpulled", "--", "true"], ["attach", "unpulled"]):
            refused = kubectl_run(home, verb[0], "-n", ns, *verb[1:])
            assert refused.returncode != 0
            assert 'container "app" is waiting to start on the provider' in refused.stderr, refused.stderr


def stateful_set(namespace: str, *, replicas: int, size: str) -> str:
    """A StatefulSet whose pods each keep a volume of the virtual class ``liqo``, as YAML for ``kubectl apply``."""
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "app",
                                "image": TOOLBOX,
                                "command": ["sh", "-c", "exec sleep 3600"],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "storageClassName": VIRTUAL_CLASS,
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": size}},
                        },
                    }
                ],
            },
        }
    )


async def test_an_offloaded_stateful_set_keeps_its_volumes_on_the_provider_across_pod_restarts(
    rome_site: Site, florence: Site
) -> None:
    """Three replicas with claims of class ``liqo``: each claim is copied into the twin with the class florence
    offers and made on its real node; at home a PV bound to it ties the claim to florence's virtual node. The
    pods deleted come back on florence with their data; a claim beyond the offer is refused, saying why."""
    home, replicas = rome_site.cluster, 3
    async with (
        florence.client() as provider,
        rome_site.client() as consumer,
        sharing_policy(
            provider, rome_site.cluster_id, prefix="vol", storage=[{"class": STORAGE_CLASS, "capacity": "1Gi"}]
        ),
        offloaded_to(rome_site, florence, strategy="Remote", prefix="vol") as offloaded,
    ):
        ns, twin = offloaded.namespace, offloaded.twin

        async def offered() -> bool:
            node = await consumer.get(NODES, offloaded.node)
            return (node["metadata"].get("labels") or {}).get(f"{LABEL_PREFIX}{STORAGE_CLASS}") == "true"

        await eventually(offered, timeout=60, message=f"the virtual node never said florence offers {STORAGE_CLASS}")
        kubectl(home, "apply", "-f", "-", stdin=stateful_set(ns, replicas=replicas, size="100Mi"))
        first = {p["metadata"]["uid"] for p in await running_pods(consumer, ns, replicas, timeout=120)}
        for i in range(replicas):
            kubectl(home, "exec", "-n", ns, f"web-{i}", "--", "sh", "-c", f"echo web-{i} > /data/who")

        volumes = {v["spec"]["claimRef"]["name"]: v for v in (await consumer.list_all(PERSISTENT_VOLUMES))[0]
                   if (v["spec"].get("claimRef") or {}).get("namespace") == ns}  # fmt: skip
        assert sorted(volumes) == [f"data-web-{i}" for i in range(replicas)]
        for name, volume in volumes.items():
            assert volume["spec"]["csi"]["volumeHandle"] == f"{florence.cluster_id}/{ns}/{name}"
            assert volume_protocol.node_of(volume) == offloaded.node
        copies, _ = await provider.list_all(PERSISTENT_VOLUME_CLAIMS, namespace=twin)
        assert {(c["metadata"]["name"], c["spec"]["storageClassName"], c["status"]["phase"]) for c in copies} == {
            (f"data-web-{i}", STORAGE_CLASS, "Bound") for i in range(replicas)
        }

        kubectl(home, "delete", "pod", "-n", ns, *(f"web-{i}" for i in range(replicas)), "--wait=false")
        await eventually(
            lambda: _replaced(consumer, ns, replicas, before=first),
            timeout=120,
            message="the StatefulSet's pods did not come back Running",
        )
        for i in range(replicas):
            assert kubectl(home, "exec", "-n", ns, f"web-{i}", "--", "cat", "/data/who") == f"web-{i}\n"

        # Beyond the offer (1Gi of the class in all, 300Mi taken): florence refuses the copy, home says why.
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "big", "namespace": ns},
            "spec": {"storageClassName": VIRTUAL_CLASS, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "2Gi"}}},
        }  # fmt: skip
        await consumer.create(PERSISTENT_VOLUME_CLAIMS, claim)
        big = pod("big", ns, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "big"}}])
        await consumer.create(PODS, big)

        said: list[str] = []

        async def refused() -> bool:
            events, _ = await consumer.list_all(EVENTS, namespace=ns, field_selector="involvedObject.name=big")
            said[:] = [e["message"] for e in events if e.get("reason") == "ProviderRefused"]
            return bool(said)

        await eventually(refused, timeout=60, message="the claim beyond the offer was not refused at home")
        assert "more than the 1Gi of local" in said[0], said
        assert await provider.get_or_none(PERSISTENT_VOLUME_CLAIMS, "big", namespace=twin) is None

        kubectl(home, "delete", "statefulset,pod", "-n", ns, "--all", "--wait=true", timeout=120)
        kubectl(home, "delete", "pvc", "-n", ns, "--all", "--wait=true", timeout=120)

        async def released() -> bool:
            here = [v for v in (await consumer.list_all(PERSISTENT_VOLUMES))[0]
                    if (v["spec"].get("claimRef") or {}).get("namespace") == ns]  # fmt: skip
            there, _ = await provider.list_all(PERSISTENT_VOLUME_CLAIMS, namespace=twin)
            return not here and not there

        await eventually(released, timeout=90, message="the volumes were not deleted with their claims")


async def _replaced(client: KubeClient, namespace: str, count: int, *, before: set[str]) -> bool:
    """``count`` pods Running again, none of them one of ``before`` (by uid)."""
    found, _ = await client.list_all(PODS, namespace=namespace)
    fresh = [p for p in found if running(p) and not p["metadata"].get("deletionTimestamp")]
    return len(fresh) == count and not {p["metadata"]["uid"] for p in fresh} & before


async def test_a_claim_of_class_liqo_for_a_pod_on_a_local_node_is_a_plain_local_volume(florence: Site) -> None:
    """On florence itself: a real claim of its default class holds the data on its real node; the claim of class
    ``liqo`` is bound to a PV of the same directory; the data outlives the pod; all goes with the claim."""
    home = florence.cluster
    async with florence.client() as client:
        ns = unique("lv")
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        try:
            kubectl(home, "apply", "-f", "-", stdin=stateful_set(ns, replicas=1, size="50Mi"))
            (first,) = await running_pods(client, ns, 1, timeout=120)
            kubectl(home, "exec", "-n", ns, "web-0", "--", "sh", "-c", "echo kept > /data/file")
            claim = await client.get(PERSISTENT_VOLUME_CLAIMS, "data-web-0", namespace=ns)
            volume = await client.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
            backing = await client.get(
                PERSISTENT_VOLUME_CLAIMS, volume["metadata"]["name"], namespace=STORAGE_NAMESPACE
            )
            real = await client.get(PERSISTENT_VOLUMES, backing["spec"]["volumeName"])
            assert backing["spec"]["storageClassName"] == STORAGE_CLASS
            assert volume["spec"]["local"] == real["spec"]["local"]
            assert volume_protocol.node_of(volume) == volume_protocol.node_of(real) == first["spec"]["nodeName"]

            kubectl(home, "delete", "pod", "-n", ns, "web-0")
            await eventually(
                lambda: _replaced(client, ns, 1, before={first["metadata"]["uid"]}),
                timeout=60,
                message="web-0 did not come back",
            )
            assert kubectl(home, "exec", "-n", ns, "web-0", "--", "cat", "/data/file") == "kept\n"

            kubectl(home, "delete", "statefulset", "-n", ns, "web", "--wait=true")
            kubectl(home, "delete", "pvc", "-n", ns, "data-web-0", "--wait=true", timeout=60)

            async def gone() -> bool:
                left = [
                    await client.get_or_none(PERSISTENT_VOLUMES, volume["metadata"]["name"]),
                    await client.get_or_none(
                        PERSISTENT_VOLUME_CLAIMS, backing["metadata"]["name"], namespace=STORAGE_NAMESPACE
                    ),
                    await client.get_or_none(PERSISTENT_VOLUMES, real["metadata"]["name"]),
                ]
                return left == [None, None, None]

            await eventually(gone, timeout=60, message="the volume, its real claim or the real volume stayed")
        finally:
            await client.delete(NAMESPACES, ns, missing_ok=True)
