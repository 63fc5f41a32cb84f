"""A peer's pod CIDR is a name for its pods only: never a route on our nodes outside the peer pools.

The attacker is a consumer that is nothing but a cluster key and the provider's token. It declares at its
handshake the pod CIDR of its choosing, then enrols as any consumer does: its ResourceRequest and its
NetworkConfig, written with the identity the handshake gave it, and its acceptance of the offer the provider
makes it (the phase on the offer's status: a provider makes a gateway and its word only for a consumer that
accepted its offer, and an attacker accepts it as readily as anyone). Were its CIDR taken as the name of its
pods, every node of the provider would route that range into its tunnel: the provider's traffic to
``8.8.0.0/16`` (a DNS upstream) or ``100.64.0.0/16`` (the shared address space clouds run their own
services in) would go to the peer.

The provider is a local cluster with one real node (pod CIDR 10.244.0.0/16), liqo installed with
``liqoctl install`` (as pods: the manager, a gateway per peer, the node agent), with the default pools
(10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16). Routes are read from the host, in the node's network
namespace. The tests run in order on the one provider; the strangers enrolled stay until it is purged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.components import NETWORK_AGENT
from liqo.api.networks import ClusterNetwork
from liqo.api.offers import OfferPhase
from liqo.api.resources import NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, EVENTS, PODS
from liqo.localclusters.realnodes import images
from liqo.network import gateway_objects, ipam, rules, wireguard
from liqo.network.links import Role, our_word
from liqo.peering import authclient, operations
from tests.integration.helpers import kubectl, unique
from tests.integration.network.fabric import POD_CIDR, Side, in_node, node_routes, started_side
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
    pytest.mark.skipif(images.project_source() is None, reason="liqo's image is built from the source tree"),
]

POOLS = ipam.DEFAULT_POOLS
"""The provider's pools: the install's default."""
OUTSIDE = ("100.64.0.0/16", "8.8.0.0/16")
"""Pod CIDRs a stranger declares, outside every pool: a /16 of each pool could name them."""
TOO_WIDE = "1.0.0.0/8"
"""No pool can name a /8 here: 10.0.0.0/8 holds the provider's pods, the other pools are smaller. (Clear of
what the first test's strangers declared, so that nothing but the pools stands in its way.)"""


@pytest.fixture(scope="module")
def provider_side() -> Iterator[Side]:
    yield from started_side("poolp", "provider", real_nodes=1)


@dataclass(frozen=True)
class Stranger:
    """A consumer enrolled on the provider with nothing but a key and the token."""

    cluster_id: str
    pod_cidr: str
    namespace: str
    """Its tenant namespace on the provider."""


async def enrol(provider_side: Side, pod_cidr: str) -> Stranger:
    """Handshake declaring ``pod_cidr``, then the consumer's request, word and yes to the offer, with its identity."""
    async with provider_side.client() as admin:
        command = await operations.peer_command(admin)
    consumer_id = str(uuid.uuid4())
    identity = await authclient.request_identity(
        auth_url=command.auth_url,
        key=ClusterKey.generate(),
        token=command.token,
        consumer_id=consumer_id,
        consumer_name=f"stranger-{consumer_id[:8]}",
        consumer_network=ClusterNetwork.parse(pod_cidr=pod_cidr, service_cidr="172.31.0.0/16"),
        expected_provider_id=command.cluster_id,
        expected_fingerprint=command.key_fingerprint,
    )
    namespace = identity.namespace
    request = {
        "apiVersion": RESOURCE_REQUESTS.api_version,
        "kind": RESOURCE_REQUESTS.kind,
        "metadata": {"name": consumer_id, "namespace": namespace},
        "spec": {"consumerClusterID": consumer_id, "consumerClusterName": f"stranger-{consumer_id[:8]}"},
    }
    word = our_word(
        local_id=consumer_id,
        peer_id=command.cluster_id,
        pod_cidr=ipaddress.ip_network(pod_cidr),
        remapped_pod_cidr=ipaddress.ip_network("10.0.0.0/16"),
        gateway_role=Role.CLIENT,
        public_key=wireguard.public_key(wireguard.generate_private_key()),
        endpoint=None,
    )
    word["metadata"]["namespace"] = namespace
    async with KubeClient.from_kubeconfig_dict(identity.kubeconfig(), name="stranger") as peer:
        await peer.create(RESOURCE_REQUESTS, request)
        await peer.create(NETWORK_CONFIGS, word)
        await accept_offer(peer, provider_id=command.cluster_id, namespace=namespace)
    return Stranger(consumer_id, pod_cidr, namespace)


async def accept_offer(peer: KubeClient, *, provider_id: str, namespace: str) -> None:
    """Once the provider offers (its answer to the ResourceRequest), accept, as ``operations.manual_decision`` does."""

    async def offered() -> bool:
        try:
            await peer.get(RESOURCE_OFFERS, provider_id, namespace=namespace)
        except NotFoundError:
            return False
        return True

    await eventually(offered, timeout=60, message=f"the provider's offer in {namespace}", every=0.5)
    verdict = {"status": {"phase": OfferPhase.ACCEPTED, "reason": "approved"}}
    await peer.patch(RESOURCE_OFFERS, provider_id, verdict, namespace=namespace, subresource="status")


async def providers_word(provider_side: Side, stranger: Stranger) -> Obj | None:
    """The provider's NetworkConfig about ``stranger`` (where it names its pods); None while there is none."""
    async with provider_side.client() as admin:
        try:
            return await admin.get(NETWORK_CONFIGS, provider_side.cluster_id, namespace=stranger.namespace)
        except NotFoundError:
            return None


async def no_free_block_events(provider_side: Side, stranger: Stranger) -> list[Obj]:
    """The Warning Events saying no pool can name ``stranger``'s pods, on its ForeignCluster."""
    async with provider_side.client() as admin:
        fc = await operations.foreign_cluster(admin, stranger.cluster_id)
        assert fc is not None, f"no ForeignCluster for {stranger.cluster_id}"
        meta = fc["metadata"]
        selector = (
            f"involvedObject.name={meta['name']},involvedObject.uid={meta['uid']},reason=NoFreeBlock,type=Warning"
        )
        events, _ = await admin.list_all(EVENTS, namespace="default", field_selector=selector)
    return events


def in_pools(cidr: str) -> bool:
    network = ipaddress.ip_network(cidr)
    return isinstance(network, ipaddress.IPv4Network) and any(network.subnet_of(pool) for pool in POOLS)


def all_routes(provider_side: Side) -> list[Obj]:
    """Every IPv4 route of every table of the provider's real node, as ``ip -j`` prints them."""
    [node] = provider_side.nodes
    routes: list[Obj] = orjson.loads(in_node(node, "ip", "-4", "-j", "route", "show", "table", "all"))
    return routes


async def test_a_pod_cidr_outside_the_pools_is_named_inside_them_and_routed_nowhere_else(provider_side: Side) -> None:
    strangers = [await enrol(provider_side, cidr) for cidr in OUTSIDE]
    blocks: dict[str, str] = {}
    for stranger in strangers:
        found: list[Obj] = []

        async def named(stranger: Stranger = stranger, found: list[Obj] = found) -> bool:
            word = await providers_word(provider_side, stranger)
            found[:] = [word] if word is not None else []
            return bool(found)

        await eventually(named, timeout=60, message=f"the provider names {stranger.pod_cidr}", every=0.5)
        block = found[0]["spec"]["remappedPodCIDR"]
        assert in_pools(block), f"the provider names {stranger.pod_cidr} at {block}: outside the pools {POOLS}"
        assert ipaddress.ip_network(block).prefixlen == ipaddress.ip_network(stranger.pod_cidr).prefixlen, block
        assert not ipaddress.ip_network(block).overlaps(ipaddress.ip_network(POD_CIDR)), block
        blocks[stranger.pod_cidr] = block
    assert len(set(blocks.values())) == len(blocks), blocks

    # Positive evidence first: the node routes each block (its gateway runs, the agent has acted on it) ...
    [node] = provider_side.nodes
    seen: list[list[tuple[str, str, str]]] = [[]]

    async def routed() -> bool:
        seen[0] = node_routes(node)
        return set(blocks.values()) <= {dst for dst, _, _ in seen[0]}

    await eventually(routed, timeout=120, message=f"{node.name} routes {sorted(blocks.values())}", every=0.5)
    # ... and then nothing else: every liqo route of the node leads into the pools, none to a declared CIDR.
    routes = node_routes(node)
    assert all(in_pools(dst) for dst, _, _ in routes), routes
    declared = [ipaddress.ip_network(cidr) for cidr in OUTSIDE]
    for route in all_routes(provider_side):
        if route["dst"] != "default":
            network = ipaddress.ip_network(route["dst"], strict=False)
            assert not any(network.overlaps(cidr) for cidr in declared), f"{node.name} routes {route}"


async def test_a_pod_cidr_no_pool_can_name_is_refused_with_a_warning_event_and_leaves_nothing(
    provider_side: Side,
) -> None:
    [node] = provider_side.nodes
    before, liqos_before = not_liqos(all_routes(provider_side)), node_routes(node)
    stranger = await enrol(provider_side, TOO_WIDE)

    async def decided() -> bool:
        return (
            bool(await no_free_block_events(provider_side, stranger))
            or await providers_word(provider_side, stranger) is not None
        )

    await eventually(decided, timeout=60, message=f"the provider decides where it names {TOO_WIDE}", every=0.5)
    word = await providers_word(provider_side, stranger)
    assert word is None, f"the provider names {TOO_WIDE} at {word['spec']['remappedPodCIDR']}"
    [event] = await no_free_block_events(provider_side, stranger)
    assert event["message"] == (
        f"no gateway to {stranger.cluster_id}: no free /8 to name {TOO_WIDE} in the pools"
        " 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16: every block of that size overlaps a network this cluster uses"
        " (its pods, Services, nodes, control plane, reserved subnets) or one named for another peer"
    ), event["message"]
    async with provider_side.client() as admin:
        with pytest.raises(NotFoundError):
            await admin.get(
                DEPLOYMENTS, gateway_objects.gateway_name(stranger.cluster_id), namespace=names.LIQO_NAMESPACE
            )
    assert not_liqos(all_routes(provider_side)) == before
    assert node_routes(node) == liqos_before


def not_liqos(routes: list[Obj]) -> list[Obj]:
    """The routes of ``routes`` that liqo did not write (those it did carry its protocol, in the main table)."""
    return [r for r in routes if not (r.get("protocol") == rules.ROUTE_PROTO and "table" not in r)]


def fake_gateway(name: str, *, node: str, peer_cidr: str) -> Obj:
    """A pod the node agent takes for a gateway routing ``peer_cidr``: what a wrong manager would make."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.COMPONENT: names.GATEWAY},
            "annotations": {gateway_objects.PEER_CIDR: peer_cidr},
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": images.TOOLBOX_PINNED,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def connected_lan(provider_side: Side) -> str:
    """The node's own network (its connected route, not the pods'): what no peer may be routed into."""
    [node] = provider_side.nodes
    for route in orjson.loads(in_node(node, "ip", "-4", "-j", "route", "show")):
        if route.get("protocol") == "kernel" and route.get("scope") == "link":
            network = ipaddress.ip_network(route["dst"])
            if not network.overlaps(ipaddress.ip_network(POD_CIDR)):
                return str(network)
    raise AssertionError(f"no connected route on {node.name} outside the pod CIDR")


async def test_the_node_agent_refuses_routes_outside_the_pools_or_over_the_nodes_own_network(
    provider_side: Side,
) -> None:
    """The second line: the manager's word aside, the agent judges each route itself."""
    [node] = provider_side.nodes
    lan = connected_lan(provider_side)
    assert in_pools(lan), f"the node's network {lan} should lie in a pool, for the overlap to be what is refused"
    before = not_liqos(all_routes(provider_side))
    wrong = {"outside": "8.8.0.0/16", "lan": lan}
    made = {kind: unique(f"fake-gateway-{kind}") for kind in wrong}
    async with provider_side.client() as admin:
        for kind, cidr in wrong.items():
            await admin.create(PODS, fake_gateway(made[kind], node=node.name, peer_cidr=cidr))
        try:
            ips: dict[str, str] = {}

            async def running() -> bool:
                for kind, name in made.items():
                    pod = await admin.get(PODS, name, namespace=names.LIQO_NAMESPACE)
                    if pod["status"].get("phase") == "Running" and pod["status"].get("podIP"):
                        ips[kind] = pod["status"]["podIP"]
                return len(ips) == len(made)

            await eventually(running, timeout=120, message="both fake gateways Running", every=0.5)
            reasons = {
                "outside": f"route to 8.8.0.0/16 via {ips['outside']} refused: 8.8.0.0/16 is outside the peer pools"
                " (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)",
                # Its route to the LAN, and in the local table its own address there: one or several.
                "lan": f"route to {lan} via {ips['lan']} refused: {lan} overlaps this node's route",
            }
            logs: list[str] = [""]

            async def judged() -> bool:
                logs[0] = await asyncio.to_thread(
                    kubectl, provider_side.cluster, "logs", "-n", names.LIQO_NAMESPACE,
                    f"--selector=app.kubernetes.io/name={NETWORK_AGENT}", "--tail=-1",
                )  # fmt: skip
                routed = {dst for dst, _, _ in node_routes(node)}
                return all(r in logs[0] for r in reasons.values()) or bool(routed & set(wrong.values()))

            await eventually(judged, timeout=60, message="the node agent judges both routes", every=0.5)
            routes = node_routes(node)
            assert not {dst for dst, _, _ in routes} & set(wrong.values()), f"{node.name}: {routes}"
            assert all(in_pools(dst) for dst, _, _ in routes), f"{node.name}: {routes}"
            for reason in reasons.values():
                assert reason in logs[0], logs[0][-3000:]
            assert not_liqos(all_routes(provider_side)) == before, "the node's own routes changed"
        finally:
            for name in made.values():
                await admin.delete(PODS, name, namespace=names.LIQO_NAMESPACE)
