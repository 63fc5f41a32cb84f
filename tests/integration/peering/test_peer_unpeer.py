"""Peering between real local clusters, each with liqo installed and its manager running.

Three clusters: ``rome`` and ``naples`` consume, ``milan`` provides (and, bidirectionally, consumes). Each
test leaves the peerings it made undone, and checks it.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import VIRTUAL_KUBELET
from liqo.api.quantity import parse_quantity
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, SHARING_POLICIES, VIRTUAL_NODES
from liqo.install.installer import InstallError, InstallOptions, install, uninstall
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import EVENTS, NAMESPACES, NODES, PODS, SECRETS
from liqo.localclusters import clusters
from liqo.localclusters.launch import detect
from liqo.peering import enrolment, operations
from tests.integration.helpers import RUN_ID, Site, expect_clean, kubectl, stopped, unpeered
from tests.shared import eventually


async def free_cpu_and_memory(client: KubeClient) -> tuple[Decimal, Decimal]:
    """Free capacity computed independently of liqo's code: allocatable minus running pods' requests."""
    nodes, _ = await client.list_all(NODES)
    pods, _ = await client.list_all(PODS)
    cpu = sum((parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes), Decimal(0))
    memory = sum((parse_quantity(n["status"]["allocatable"]["memory"]) for n in nodes), Decimal(0))
    for pod in pods:
        if pod["status"].get("phase") in ("Succeeded", "Failed") or not pod["spec"].get("nodeName"):
            continue
        for container in pod["spec"]["containers"]:
            requests = (container.get("resources") or {}).get("requests") or {}
            cpu -= parse_quantity(requests.get("cpu", "0"))
            memory -= parse_quantity(requests.get("memory", "0"))
    return cpu, memory


async def test_peer_then_unpeer_leaves_nothing_on_either_side(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    started = time.monotonic()
    offer = await operations.peer(rome, milan, timeout=30)
    elapsed = time.monotonic() - started
    print(f"\npeer -> accepted offer: {elapsed:.2f}s")  # the closing note reports this figure

    cpu, memory = await free_cpu_and_memory(milan)
    resources = offer["spec"]["resources"]
    assert parse_quantity(resources["cpu"]) == cpu / 2  # default policy: 50 % of free capacity
    assert abs(parse_quantity(resources["memory"]) - memory / 2) < 1
    assert offer["status"]["phase"] == "Accepted"

    milan_id = sites["milan"].cluster_id
    fc = await operations.foreign_cluster(rome, milan_id)
    assert fc is not None
    conditions = {c["type"]: c["status"] for c in fc["status"]["conditions"]}
    assert conditions["OutgoingPeering"] == "Established"
    assert conditions["AuthenticationStatus"] == "Established"
    nodes, _ = await rome.list_all(VIRTUAL_NODES, namespace=names.tenant_namespace(milan_id))
    assert [n["spec"]["resources"] for n in nodes] == [resources]

    rome_id = sites["rome"].cluster_id
    provider_view = await operations.foreign_cluster(milan, rome_id)
    assert provider_view is not None

    async def incoming_established() -> bool:
        view = await operations.foreign_cluster(milan, rome_id)
        return any(
            c["type"] == "IncomingPeering" and c["status"] == "Established"
            for c in (view or {}).get("status", {}).get("conditions", [])
        )

    await eventually(incoming_established, timeout=20, message="the provider sees an established incoming peering")

    await operations.unpeer(rome, fc["metadata"]["name"], timeout=60)
    await expect_clean(rome, milan)


async def test_an_unpeer_while_the_virtual_kubelet_is_down_leaves_no_node(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """The VirtualNode goes while no virtual kubelet runs: the next one to start deletes its Node."""
    milan_id = sites["milan"].cluster_id
    selector = f"{names.REMOTE_CLUSTER_ID}={milan_id}"

    async def one_node() -> bool:
        return len((await rome.list_all(NODES, label_selector=selector))[0]) == 1

    await operations.peer(rome, milan, timeout=30)
    await eventually(one_node, timeout=60, message="milan's virtual node at rome")
    async with stopped(sites["rome"], VIRTUAL_KUBELET):
        await operations.unpeer(rome, milan_id, timeout=60)
        assert not (await rome.list_all(VIRTUAL_NODES))[0]
        assert await one_node()  # nobody left to delete it: the case this test is about
    await expect_clean(rome, milan)  # the virtual kubelet started again deletes it


async def test_offer_follows_the_providers_real_free_capacity(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    offer = await operations.peer(rome, milan, timeout=30)
    milan_id = sites["milan"].cluster_id
    namespace = names.tenant_namespace(milan_id)
    before = parse_quantity(offer["spec"]["resources"]["cpu"])
    busy = "busy-" + RUN_ID
    await milan.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": busy}})
    try:
        for i in range(4):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"load-{i}", "namespace": busy},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
                    ]
                },
            }
            await milan.create(PODS, pod)

        async def bound() -> bool:  # free capacity counts pods on nodes: measure once the scheduler placed them
            pods, _ = await milan.list_all(PODS, namespace=busy)
            return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

        await eventually(bound, timeout=30, message="the load is scheduled on milan's nodes")
        cpu, _ = await free_cpu_and_memory(milan)

        async def shrunk() -> bool:
            nodes, _ = await rome.list_all(VIRTUAL_NODES, namespace=namespace)
            return bool(nodes) and parse_quantity(nodes[0]["spec"]["resources"]["cpu"]) == cpu / 2

        await eventually(shrunk, timeout=30, message="the virtual node shrinks to half the provider's new free CPU")
        assert cpu / 2 < before
    finally:
        await milan.delete(NAMESPACES, busy)
        await operations.unpeer(rome, milan_id, timeout=60)

        async def load_gone() -> bool:
            try:
                await milan.get(NAMESPACES, busy)
            except NotFoundError:
                return True
            return False

        await eventually(load_gone, timeout=60, message="the load's namespace is gone (later tests measure capacity)")
    await expect_clean(rome, milan)


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_two_consumers_get_the_offers_their_policies_allow(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, naples: KubeClient
) -> None:
    rome_id, naples_id, milan_id = (sites[s].cluster_id for s in ("rome", "naples", "milan"))
    await milan.apply(SHARING_POLICIES, policy(f"rome-{RUN_ID}", peers=[rome_id], action="Share", percentage=25))
    await milan.apply(
        SHARING_POLICIES,
        policy(
            f"naples-{RUN_ID}", peers=[naples_id], action="Share", percentage=100, limits={"cpu": "1", "memory": "1Gi"}
        ),
    )
    try:
        command = await operations.peer_command(milan)
        rome_offer = await operations.peer(rome, milan, timeout=30)
        await operations.peer_out_of_band(naples, command)  # the out-of-band path: no kubeconfig of milan
        naples_offer = await operations.wait_established(naples, milan_id, timeout=30)
        cpu, _ = await free_cpu_and_memory(milan)
        assert parse_quantity(rome_offer["spec"]["resources"]["cpu"]) == cpu / 4
        assert naples_offer["spec"]["resources"]["cpu"] == "1"
        assert naples_offer["spec"]["resources"]["memory"] == "1Gi"
    finally:
        for client in (rome, naples):
            await operations.unpeer(client, milan_id, timeout=60)
        for name in (f"rome-{RUN_ID}", f"naples-{RUN_ID}"):
            await milan.delete(SHARING_POLICIES, name)
    await expect_clean(rome, milan, naples)


async def test_a_denied_peer_gets_a_clear_refusal_and_nothing_is_created(
    sites: dict[str, Site], naples: KubeClient, milan: KubeClient
) -> None:
    naples_id, milan_id = sites["naples"].cluster_id, sites["milan"].cluster_id
    await milan.apply(SHARING_POLICIES, policy(f"deny-{RUN_ID}", peers=[naples_id], action="Deny"))
    try:
        with pytest.raises(operations.PeeringError, match="denies"):
            await operations.peer(naples, milan, timeout=30)
        with pytest.raises(NotFoundError):
            await milan.get(NAMESPACES, names.tenant_namespace(naples_id))
    finally:
        await operations.unpeer(naples, milan_id, timeout=60, force=True)
        await milan.delete(SHARING_POLICIES, f"deny-{RUN_ID}")
    await expect_clean(naples, milan)


async def test_bidirectional_peering_and_unpeer_both_ways(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    try:
        await operations.peer(rome, milan, timeout=30)
        await operations.peer(milan, rome, timeout=30)
        # peer() returns once the consumer (milan) accepted; rome's status says it provides a moment later.
        peers: list[dict[str, Any]] = []

        async def both_roles() -> bool:
            peers[:] = (await operations.info(rome))["peers"]
            return [p["role"] for p in peers] == ["ConsumerAndProvider"]

        await eventually(both_roles, timeout=30, message=lambda: f"rome consumer and provider of milan: {peers}")
        assert peers[0]["accepted"]
        assert peers[0]["offered"]
        await operations.unpeer(rome, sites["milan"].cluster_id, timeout=60)
        still = await operations.info(milan)
        assert [p["role"] for p in still["peers"]] == ["Consumer"]
        await operations.unpeer(milan, sites["rome"].cluster_id, timeout=60)
        await expect_clean(rome, milan)
    finally:  # whatever failed, the next tests of this family start from two clusters that never peered
        await unpeered(sites["rome"], sites["milan"])
        await unpeered(sites["milan"], sites["rome"])


async def test_the_token_never_appears_in_logs_events_or_info(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """Nor on the provider at all: its Secret holds a hash of the token's public key (checked on one not used yet)."""
    command = await operations.peer_command(milan)
    token = command.token
    await operations.peer_out_of_band(rome, command)
    await operations.wait_established(rome, sites["milan"].cluster_id, timeout=30)
    spare_command = await operations.peer_command(milan)
    spare = spare_command.token
    try:
        secrets, _ = await milan.list_all(SECRETS, namespace=names.LIQO_NAMESPACE)
        for secret in map(str, secrets):
            assert spare not in secret
            assert base64.b64encode(spare.encode()).decode() not in secret
        for site in (sites["rome"], sites["milan"]):
            logs = "".join(p.read_text(errors="replace") for p in site.cluster.dir.logs.glob("*.log"))
            assert token not in logs
            async with site.client() as client:
                events, _ = await client.list_all(EVENTS)
                assert all(token not in str(e) for e in events)
        cli = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "liqo.cli.main",
                "info",
                "-o",
                "json",
                f"--kubeconfig={sites['rome'].cluster.kubeconfig}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert token not in cli.stdout
        assert sites["milan"].cluster_id in cli.stdout
        encoded = base64.b64encode(token.encode()).decode()
        assert encoded not in cli.stdout
    finally:
        assert spare_command.enrolment is not None
        await enrolment.revoke(milan, [spare_command.enrolment.id])
        await operations.unpeer(rome, sites["milan"].cluster_id, timeout=60)
    await expect_clean(rome, milan)


async def test_identity_is_renewed_before_it_expires(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    milan_id = sites["milan"].cluster_id
    namespace = names.tenant_namespace(milan_id)
    await operations.peer(rome, milan, timeout=30)
    try:
        before = await rome.get(SECRETS, names.IDENTITY_SECRET, namespace=namespace)
        # Make the stored identity look two thirds through its life: the manager must renew it now.
        await rome.patch(
            SECRETS,
            names.IDENTITY_SECRET,
            {"metadata": {"annotations": {"liqo.io/issued-at": "2000-01-01T00:00:00Z"}}},
            namespace=namespace,
        )

        async def renewed() -> bool:
            secret = await rome.get(SECRETS, names.IDENTITY_SECRET, namespace=namespace)
            return bool(secret["data"]["kubeconfig"] != before["data"]["kubeconfig"])

        await eventually(renewed, timeout=30, message="a new identity (new key and certificate)")
        offer = await operations.wait_established(rome, milan_id, timeout=30)
        assert offer["status"]["phase"] == "Accepted"
        async with KubeClient.from_kubeconfig_dict(await operations.peer_kubeconfig(rome, milan_id)) as renewed_client:
            await renewed_client.get(
                RESOURCE_OFFERS, milan_id, namespace=names.tenant_namespace(sites["rome"].cluster_id)
            )
    finally:
        await operations.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)


async def test_offer_policies_price_limit_and_manual(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    namespace = names.tenant_namespace(milan_id)
    await milan.apply(
        SHARING_POLICIES,
        policy(f"priced-{RUN_ID}", peers=[rome_id], action="Share", percentage=50, prices={"cpu": "2"}),
    )
    try:
        too_cheap = {"mode": "PriceLimit", "maxPrices": {"cpu": "1"}}
        with pytest.raises(operations.PeeringError, match="price"):
            await operations.peer(rome, milan, offer_policy=too_cheap, timeout=30)
        await operations.unpeer(rome, milan_id, timeout=60)
        await expect_clean(rome)

        command = await operations.peer_command(milan)
        await operations.peer_out_of_band(rome, command, offer_policy={"mode": "Manual"})

        async def awaiting_a_human() -> bool:
            try:
                offer = await rome.get(RESOURCE_OFFERS, milan_id, namespace=namespace)
            except NotFoundError:
                return False
            return bool((offer.get("status") or {}).get("phase") == "ManualActionRequired")

        await eventually(awaiting_a_human, timeout=30, message="the offer waits for a manual decision")
        nodes, _ = await rome.list_all(VIRTUAL_NODES, namespace=namespace)
        assert nodes == []
        # Exactly what `liqoctl peer` tells the operator to run (operations.manual_decision_hint).
        decision = operations.manual_decision(milan_id)
        assert decision[0] == "kubectl"
        await asyncio.to_thread(kubectl, sites["rome"].cluster, *decision[1:])
        accepted = await operations.wait_established(rome, milan_id, timeout=30)
        assert accepted["status"]["reason"] == "approved"
    finally:
        await operations.unpeer(rome, milan_id, timeout=60)
        await milan.delete(SHARING_POLICIES, f"priced-{RUN_ID}")
    await expect_clean(rome, milan)


async def test_unpeer_never_hangs_on_an_unreachable_provider(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """Bounded wait and a clear error, then --force finishes here; the provider revokes on its side."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    async with stopped(sites["milan"], "kube-apiserver"):
        started = time.monotonic()
        with pytest.raises(operations.PeeringError, match="--force"):
            await operations.unpeer(rome, milan_id, timeout=5)
        assert time.monotonic() - started < 15
        await operations.unpeer(rome, milan_id, timeout=5, force=True)
        await expect_clean(rome)
    fc = await operations.foreign_cluster(milan, rome_id)
    assert fc is not None  # the provider never heard from rome: it still hosts it, until revoked
    await operations.unpeer(milan, fc["metadata"]["name"], timeout=60)
    revoked = await operations.foreign_cluster(milan, rome_id)
    assert revoked is not None  # the record of the revocation stays, refusing rome until allowed again
    assert revoked["spec"]["incomingPeeringEnabled"] == "No"
    await milan.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])  # the admin forgets rome
    await expect_clean(milan)


async def test_uninstall_refuses_while_peered_then_purges_everything(
    sites: dict[str, Site], naples: KubeClient, milan: KubeClient
) -> None:
    try:
        # Inside the try: a peering that fails half-way is undone too, not left to the next modules.
        await operations.peer(naples, milan, timeout=60)
        with pytest.raises(InstallError, match="peerings are still active"):
            await uninstall(naples, purge=False, progress=lambda _: None, launch=detect(naples.server))
    finally:
        await operations.unpeer(naples, sites["milan"].cluster_id, timeout=60)
    await expect_clean(naples, milan)
    await uninstall(naples, purge=True, progress=lambda _: None, launch=detect(naples.server))
    with pytest.raises(NotFoundError):
        await naples.list_all(RESOURCE_OFFERS)  # the CRDs are gone
    with pytest.raises(NotFoundError):
        await naples.get(NAMESPACES, names.LIQO_NAMESPACE)
    assert "liqo-manager" not in {c.name for c in clusters.components(sites["naples"].cluster.name)}
    await install(
        naples, InstallOptions(identity_ttl=600), progress=lambda _: None, launch=detect(naples.server)
    )  # as the other tests expect
