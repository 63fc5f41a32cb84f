"""The network fabric end to end: two clusters with the same pod CIDR, their pods talking through the tunnel.

The consumer has two real nodes, the provider one, both pod CIDR 10.244.0.0/16; liqo is installed on both
with ``liqoctl install`` (it runs as pods on the real nodes) and the consumer peers with the provider
(``liqoctl peer``): the manager makes a gateway pod per side (the provider's serves), the node agents route
the peer's remapped CIDR to it. A toolbox pod on every real node runs TCP and UDP servers that answer with
the address a connection came from, so a test sees both that a packet arrived and under which name:
always the remapped one, never a node's (nothing leaves the tunnel unNATed).

Every address is computed from the NetworkConfigs, as a user would: where a cluster sees the other's pods
(its word's ``spec.remappedPodCIDR``) plus the pod IP's offset in the other's pod CIDR (the other's word's
``spec.podCIDR``). Node state is read from the host, in each real node's network namespace. The module's
tests run in order and the last unpeers; every fault a test makes it undoes in a ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import os
import re
import subprocess
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from liqo.api import names
from liqo.api.components import MANAGER, NETWORK_AGENT
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS
from liqo.install import fabric as install_fabric
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, NAMESPACES, PODS, SECRETS, SERVICES
from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.nodes import RealNode
from liqo.network import agent, gateway_loop, gateway_objects, rules

# The servers of `liqoctl test network`'s probe pods: each answers a connection (TCP) or a datagram (UDP)
# with the address it came from; the pod also serves as a client.
from liqo.network.testplan import SERVER, TCP_PORT, UDP_PORT
from liqo.peering import operations
from tests.integration.helpers import LocalCluster, kubectl, kubectl_run, liqoctl, unique
from tests.integration.network.fabric import POD_CIDR, Side, in_node, node_routes, started_side
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
    pytest.mark.skipif(images.project_source() is None, reason="liqo's image is built from the source tree"),
]

TALK = textwrap.dedent(
    """\
    a={address}
    if timeout 8 ping -c 1 -w 5 "$a" >/dev/null 2>&1; then echo icmp=ok; else echo icmp=lost; fi
    echo "tcp=$(timeout 12 socat -T 5 -t 5 - TCP:$a:{tcp},connect-timeout=5 </dev/null 2>/dev/null)"
    for i in 1 2 3; do
      u=$(echo probe | timeout 5 socat -T 2 -t 2 - UDP:$a:{udp} 2>/dev/null); [ -n "$u" ] && break
    done
    echo "udp=$u"
    """
)
"""One round from a client pod to ``address``: an ICMP echo (one answer within 5 s), then what the TCP and
the UDP server say the client's address is (empty when nothing came back). Each probe may be sent again, as
a network's users do: ping sends an echo a second until one is answered, TCP retransmits its SYN, and the
UDP probe sends up to three datagrams (one lost datagram on a loaded machine is not a broken path; a wrong
address answered still is, at once). Each probe also runs under ``timeout``: in one CI run a UDP probe
outlived its socat timers by a minute, and a round must end so that the next one can be asked."""
WIREGUARD_GO = textwrap.dedent(
    """\
    import os, signal, sys
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/comm') as comm:
                if comm.read().strip() != 'wireguard-go':
                    continue
        except OSError:
            continue
        if sys.argv[1:] == ['kill']:
            os.kill(int(pid), signal.SIGKILL)
        print(pid)
    """
)
"""Lists (or SIGKILLs) the gateway container's wireguard-go processes: liqo's image has no shell, no kill."""
TRAFFIC_TIMEOUT = 90.0
"""How long traffic may take to pass again after a fault: WireGuard's own retry timers (a handshake is
retried 5 s after a lost one, a stale session noticed after 15 s) plus a loaded machine's pod start-up."""


@dataclass(frozen=True)
class Server:
    """A toolbox pod on a real node: a client, and the TCP and UDP servers that say who called."""

    name: str
    namespace: str
    ip: str
    node: str


@dataclass(frozen=True)
class Fabric:
    """The consumer peered with the provider, and their servers (one per real node)."""

    consumer: Side
    provider: Side
    servers: dict[str, list[Server]]
    """By role."""

    def other(self, side: Side) -> Side:
        return self.provider if side is self.consumer else self.consumer

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.consumer, self.provider


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def consumer_side() -> Iterator[Side]:
    """Two real nodes: a pod on the node without the gateway reaches it through the gateway node's address."""
    yield from started_side("fabc", "consumer", real_nodes=2)


@pytest.fixture(scope="module")
def provider_side() -> Iterator[Side]:
    yield from started_side("fabp", "provider", real_nodes=1)


def server_pod(name: str, namespace: str, node: str) -> Obj:
    container = {
        "name": "main",
        "image": images.TOOLBOX_PINNED,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", SERVER],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "fabric-test"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


async def start_servers(side: Side) -> list[Server]:
    namespace = unique("fabric")
    async with side.client() as client:
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for node in side.nodes:
            await client.create(PODS, server_pod(f"server-{node.index}", namespace, node.name))
        found: list[Obj] = []

        async def running() -> bool:
            found[:] = [
                p
                for p in (await client.list_all(PODS, namespace=namespace))[0]
                if p["status"].get("phase") == "Running"
            ]
            return len(found) == len(side.nodes)

        await eventually(running, timeout=120, message=f"a server pod Running on every real node of {side.role}")
    return sorted(
        (Server(p["metadata"]["name"], namespace, p["status"]["podIP"], p["spec"]["nodeName"]) for p in found),
        key=lambda s: s.name,
    )


async def words_written(side: Side, peer: Side) -> None:
    """Both words on ``side``, complete: each with its key, the server's with its endpoint."""

    async def complete() -> bool:
        async with side.client() as client:
            for author in (side.cluster_id, peer.cluster_id):
                try:
                    gateway_spec = (await word(client, author=author, about=peer.cluster_id))["spec"]["gateway"]
                except NotFoundError:
                    return False
                if "publicKey" not in gateway_spec or (
                    gateway_spec["role"] == "Server" and "endpoint" not in gateway_spec
                ):
                    return False
        return True

    await eventually(complete, timeout=120, message=f"both NetworkConfigs complete on {side.role}", every=0.5)


@pytest.fixture(scope="module")
def fabric(consumer_side: Side, provider_side: Side) -> Fabric:
    """The consumer peered with the provider (``liqoctl peer``), a server pod on every real node of both."""
    consumer, provider = consumer_side, provider_side
    liqoctl(consumer.cluster, "peer", f"--remote-kubeconfig={provider.cluster.kubeconfig}")

    async def servers() -> dict[str, list[Server]]:
        for side in (consumer, provider):
            await words_written(side, consumer if side is provider else provider)
        return {side.role: await start_servers(side) for side in (consumer, provider)}

    return Fabric(consumer=consumer, provider=provider, servers=asyncio.run(servers()))


# -- addresses, traffic -----------------------------------------------------------------------------------


async def word(client: KubeClient, *, author: str, about: str) -> Obj:
    """``author``'s NetworkConfig about ``about``, as this cluster holds it (in ``about``'s tenant namespace
    when the author is this cluster, in the author's when it is the peer)."""
    return await client.get(NETWORK_CONFIGS, author, namespace=names.tenant_namespace(about))


async def seen_at(viewer: Side, owner: Side, ip: str) -> str:
    """The address at which ``viewer``'s pods reach ``owner``'s pod ``ip`` (from the two words ``viewer`` holds)."""
    namespace = names.tenant_namespace(owner.cluster_id)
    async with viewer.client() as client:
        ours = await client.get(NETWORK_CONFIGS, viewer.cluster_id, namespace=namespace)
        theirs = await client.get(NETWORK_CONFIGS, owner.cluster_id, namespace=namespace)
    remapped = ipaddress.ip_network(ours["spec"]["remappedPodCIDR"])
    pods = ipaddress.ip_network(theirs["spec"]["podCIDR"])
    address = ipaddress.ip_address(ip)
    assert address in pods, f"{ip} is not in {owner.role}'s pod CIDR {pods}"
    offset = int(address) - int(pods.network_address)
    assert remapped.prefixlen == pods.prefixlen, (remapped, pods)
    return str(remapped.network_address + offset)


def talk(side: Side, client: Server, address: str) -> dict[str, str]:
    """What ``client`` (a pod of ``side``) gets from the servers at ``address``: icmp, tcp and udp."""
    script = TALK.format(address=address, tcp=TCP_PORT, udp=UDP_PORT)
    try:
        out = kubectl(side.cluster, "exec", "-n", client.namespace, client.name, "--", "sh", "-c", script, timeout=45)
    except subprocess.TimeoutExpired as exc:
        # The round is bounded inside the pod (every probe under `timeout`); an exec that outlives it lost its
        # stream, not a packet: what it said so far counts, and the round is asked again.
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else ""
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@dataclass(frozen=True)
class Round:
    """One client pod talking to one server pod across the tunnel."""

    client_side: Side
    client: Server
    server_side: Side
    server: Server
    target: str
    """Where the client reaches the server."""
    caller: str
    """Where the server sees the client: what it must answer."""

    def problem(self, got: dict[str, str]) -> str:
        wrong = [f"icmp {got.get('icmp')}"] if got.get("icmp") != "ok" else []
        wrong += [f"{proto} answered {got.get(proto)!r}" for proto in ("tcp", "udp") if got.get(proto) != self.caller]
        if not wrong:
            return ""
        return (
            f"{self.client_side.role} {self.client.name} ({self.client.ip} on {self.client.node}) -> "
            f"{self.server_side.role} {self.server.name} at {self.target}: {', '.join(wrong)} "
            f"(the server should see {self.caller})"
        )


async def traffic_problems(fab: Fabric) -> list[str]:
    """Every (client, server) pair across the tunnel, both ways, each consumer node: what did not pass as expected."""
    rounds = []
    for client_side in fab.sides:
        server_side = fab.other(client_side)
        for client in fab.servers[client_side.role]:
            for server in fab.servers[server_side.role]:
                target = await seen_at(client_side, server_side, server.ip)
                caller = await seen_at(server_side, client_side, client.ip)
                rounds.append(Round(client_side, client, server_side, server, target, caller))

    async def one(r: Round) -> str:
        return r.problem(await asyncio.to_thread(talk, r.client_side, r.client, r.target))

    return [problem for problem in await asyncio.gather(*(one(r) for r in rounds)) if problem]


async def traffic_passes(fab: Fabric, *, timeout: float, after: str) -> float:
    """Wait until every pair talks both ways with the right addresses; return how long that took."""
    started = time.monotonic()
    problems: list[str] = []

    async def passes() -> bool:
        problems[:] = await traffic_problems(fab)
        return not problems

    try:
        await eventually(passes, timeout=timeout, message=f"traffic passes {after}", every=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n" + "\n".join(problems)) from None
    return time.monotonic() - started


# -- gateways, nodes --------------------------------------------------------------------------------------


async def gateway_pod(side: Side, peer: Side) -> Obj | None:
    """The running gateway pod of ``side`` towards ``peer`` (None while there is none, or several)."""
    selector = f"{names.COMPONENT}={names.GATEWAY},{names.REMOTE_CLUSTER_ID}={peer.cluster_id}"
    async with side.client() as client:
        pods, _ = await client.list_all(PODS, namespace=names.LIQO_NAMESPACE, label_selector=selector)
    running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return running[0] if len(running) == 1 and len(pods) == 1 else None


async def the_gateway(side: Side, peer: Side, *, other_than: str | None = None, timeout: float = 120) -> Obj:
    """The one gateway pod of ``side`` once it runs alone (and is not the pod of uid ``other_than``)."""
    found: list[Obj] = []

    async def alone() -> bool:
        pod = await gateway_pod(side, peer)
        found[:] = [pod] if pod is not None and pod["metadata"]["uid"] != other_than else []
        return bool(found)

    await eventually(alone, timeout=timeout, message=f"one running gateway pod on {side.role}", every=0.25)
    return found[0]


def in_gateway(side: Side, pod: Obj, *argv: str) -> str:
    """Run a binary of liqo's image in the gateway container (no shell there: ``argv`` is run as is)."""
    name = pod["metadata"]["name"]
    return kubectl(side.cluster, "exec", "-n", names.LIQO_NAMESPACE, name, "-c", gateway_objects.CONTAINER, "--", *argv)


def nft_tables(ruleset: str) -> dict[str, int]:
    """``nft -j list ruleset`` as {"family name": number of rules}."""
    tables: dict[str, int] = {}
    for item in orjson.loads(ruleset)["nftables"]:
        if "table" in item:
            key = f"{item['table']['family']} {item['table']['name']}"
            assert key not in tables, f"table {key} listed twice"
            tables[key] = 0
        elif "rule" in item:
            tables[f"{item['rule']['family']} {item['rule']['table']}"] += 1
    return tables


def nft_counters(listed: str) -> list[int]:
    """The packets each counter of ``nft -j list ...``'s rules has seen."""
    items = orjson.loads(listed)["nftables"]
    return [e["counter"]["packets"] for i in items if "rule" in i for e in i["rule"]["expr"] if "counter" in e]


def gateway_tables(side: Side, pod: Obj) -> dict[str, int]:
    return nft_tables(in_gateway(side, pod, "nft", "-j", "list", "ruleset"))


def node_tables(node: RealNode) -> list[str]:
    return in_node(node, "nft", "list", "tables").splitlines()


def node_table_rules(node: RealNode) -> int:
    return nft_tables(in_node(node, "nft", "-j", "list", "table", "ip", agent.TABLE))[f"ip {agent.TABLE}"]


async def expected_routes(side: Side, peer: Side, pod: Obj) -> dict[str, list[tuple[str, str]]]:
    """Per node of ``side``: the one route to where it sees ``peer``'s pods, via the gateway ``pod`` (its IP
    on its own node, its node's address on the others)."""
    async with side.client() as client:
        cidr = (await word(client, author=side.cluster_id, about=peer.cluster_id))["spec"]["remappedPodCIDR"]
    here, there = pod["status"]["podIP"], pod["status"]["hostIP"]
    return {node.name: [(cidr, here if node.name == pod["spec"]["nodeName"] else there)] for node in side.nodes}


async def routes_follow(side: Side, peer: Side, pod: Obj, *, timeout: float = 60) -> None:
    """Every node of ``side`` routes the peer's CIDR to the gateway ``pod``, once, and holds liqo's table once."""
    wanted = await expected_routes(side, peer, pod)
    seen: dict[str, Any] = {}

    async def follow() -> bool:
        for node in side.nodes:
            seen[node.name] = ([(dst, via) for dst, via, _ in node_routes(node)], node_tables(node))
        return all(
            seen[name][0] == routes and seen[name][1].count(f"table ip {agent.TABLE}") == 1
            for name, routes in wanted.items()
        )

    try:
        await eventually(follow, timeout=timeout, message=f"{side.role}'s nodes route to its gateway", every=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: wanted {wanted}, seen {seen}") from None


# -- status -----------------------------------------------------------------------------------------------


async def network_status(side: Side, peer: Side) -> dict[str, str]:
    """The NetworkStatus condition of ``peer``'s ForeignCluster on ``side``."""
    async with side.client() as client:
        fcs, _ = await client.list_all(FOREIGN_CLUSTERS)
    [fc] = [f for f in fcs if f["spec"]["clusterID"] == peer.cluster_id]
    conditions = (fc.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "NetworkStatus"), {})


async def connection(side: Side, peer: Side) -> dict[str, str]:
    """What ``side``'s gateway wrote of its connection check (the status of ``side``'s word)."""
    async with side.client() as client:
        ours = await word(client, author=side.cluster_id, about=peer.cluster_id)
    return dict((ours.get("status") or {}).get("connection") or {})


async def network_is(fab: Fabric, status: str, state: str, *, timeout: float) -> float:
    """Wait until both ForeignClusters' NetworkStatus is ``status`` and both gateways report ``state``."""
    started = time.monotonic()
    seen: dict[str, Any] = {}

    async def both() -> bool:
        for side in fab.sides:
            peer = fab.other(side)
            seen[side.role] = (await network_status(side, peer), await connection(side, peer))
        return all(cond.get("status") == status and conn.get("state") == state for cond, conn in seen.values())

    try:
        await eventually(both, timeout=timeout, message=f"NetworkStatus {status} and {state} on both sides", every=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen}") from None
    return time.monotonic() - started


def netcfg_columns(side: Side, peer: Side) -> dict[str, str]:
    """``kubectl get netcfg -A``'s row of ``side``'s own word, by column (the columns a user reads)."""
    lines = kubectl(side.cluster, "get", "netcfg", "-A").splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    columns = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(columns, cells, strict=True)))
    [row] = [
        r for r in rows if r["NAME"] == side.cluster_id and r["NAMESPACE"] == names.tenant_namespace(peer.cluster_id)
    ]
    return row


# -- 1. traffic -------------------------------------------------------------------------------------------


async def test_pods_talk_both_ways_through_the_remapped_addresses_from_every_real_node(fabric: Fabric) -> None:
    # Same pod CIDR on both sides: each names the other's pods somewhere else.
    for side in fabric.sides:
        peer = fabric.other(side)
        async with side.client() as client:
            remapped = (await word(client, author=side.cluster_id, about=peer.cluster_id))["spec"]["remappedPodCIDR"]
        assert not ipaddress.ip_network(remapped).overlaps(ipaddress.ip_network(POD_CIDR)), (side.role, remapped)
    # The consumer's servers sit on both of its nodes: one beside the gateway, one behind the other node.
    gw = await the_gateway(fabric.consumer, fabric.provider)
    nodes = {s.node for s in fabric.servers["consumer"]}
    assert len(nodes) == 2, nodes
    assert gw["spec"]["nodeName"] in nodes, (nodes, gw["spec"]["nodeName"])
    for side in fabric.sides:
        await routes_follow(side, fabric.other(side), await the_gateway(side, fabric.other(side)))

    took = await traffic_passes(fabric, timeout=120, after="the peering")
    print(f"pod-to-pod traffic both ways after the peering: {took:.1f} s")
    # Once passing, it keeps passing: a second round, at once.
    assert not await traffic_problems(fabric)


# -- 2. status --------------------------------------------------------------------------------------------


async def test_network_status_is_established_with_a_latency_and_netcfg_shows_connected(fabric: Fabric) -> None:
    await network_is(fabric, "Established", "Connected", timeout=60)
    for side in fabric.sides:
        peer = fabric.other(side)
        condition = await network_status(side, peer)
        assert condition["reason"] == "ProbesAnswered", condition
        latency = re.search(r"round trip (\d+\.\d+)ms", condition["message"])
        assert latency, condition
        # A round trip, not a timestamp: positive and seconds at most. Through userspace WireGuard on 2 loaded
        # cores it reached 1002 ms once (CI, 2026-11-28), so no tighter wall-clock bound here.
        assert 0 < float(latency.group(1)) < 10_000, condition
        conn = await connection(side, peer)
        assert re.fullmatch(r"\d+\.\d+ms", conn.get("latency", "")), conn
        assert conn.get("lastHandshakeTime"), conn
        row = netcfg_columns(side, peer)
        assert row["CONNECTION"] == "Connected", row
        assert re.fullmatch(r"\d+\.\d+ms", row["LATENCY"]), row


# -- 3. gateway restart -----------------------------------------------------------------------------------


async def test_a_restarted_gateway_resumes_traffic_and_rewrites_its_rules_and_the_routes_once(fabric: Fabric) -> None:
    for side in fabric.sides:
        peer = fabric.other(side)
        old = await the_gateway(side, peer)
        before = gateway_tables(side, old)
        assert before[f"ip {gateway_loop.TABLE}"] > 0, before
        deleted = time.monotonic()
        kubectl(side.cluster, "delete", "pod", "-n", names.LIQO_NAMESPACE, old["metadata"]["name"], "--wait=false")
        new = await the_gateway(side, peer, other_than=old["metadata"]["uid"])
        took = await traffic_passes(fabric, timeout=TRAFFIC_TIMEOUT, after=f"{side.role}'s gateway restarted")
        print(f"{side.role}'s gateway deleted: traffic passes again after {time.monotonic() - deleted:.1f} s "
              f"({took:.1f} s after the new pod ran)")  # fmt: skip
        # The new pod's namespace holds liqo's table once, with as many rules as the old one had.
        after = gateway_tables(side, new)
        assert after == before, (before, after)
        # Every node routes to the new pod (its IP on its node, its node's address elsewhere), once. (Pods
        # beside a gateway go through their node too: one that had learnt the old pod IP as its next hop from
        # an ICMP redirect would still be sending there.)
        assert new["status"]["podIP"] != old["status"]["podIP"]
        await routes_follow(side, peer, new)


# -- 4. agent restart -------------------------------------------------------------------------------------


async def agent_pod(side: Side, node: RealNode) -> Obj | None:
    async with side.client() as client:
        pods, _ = await client.list_all(
            PODS,
            namespace=names.LIQO_NAMESPACE,
            label_selector=f"app.kubernetes.io/name={NETWORK_AGENT}",
            field_selector=f"spec.nodeName={node.name}",
        )
    running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return running[0] if len(running) == 1 else None


async def test_a_restarted_agent_restores_a_deleted_route_once(fabric: Fabric) -> None:
    for side in fabric.sides:
        for node in side.nodes:
            [route] = node_routes(node)
            rule_count = node_table_rules(node)
            old = await agent_pod(side, node)
            assert old is not None, f"no agent on {node.name}"
            in_node(node, "ip", "route", "del", route[0], "proto", rules.ROUTE_PROTO)
            assert node_routes(node) == []
            kubectl(side.cluster, "delete", "pod", "-n", names.LIQO_NAMESPACE, old["metadata"]["name"], "--wait=false")
            restarted = time.monotonic()

            async def back(side: Side = side, node: RealNode = node, uid: str = old["metadata"]["uid"]) -> bool:
                new = await agent_pod(side, node)
                return new is not None and new["metadata"]["uid"] != uid and bool(node_routes(node))

            await eventually(back, timeout=60, message=f"a new agent on {node.name} and the route back", every=0.2)
            print(f"{node.name}: route back {time.monotonic() - restarted:.1f} s after the agent pod was deleted")
            assert node_routes(node) == [route]
            assert node_tables(node).count(f"table ip {agent.TABLE}") == 1
            assert node_table_rules(node) == rule_count
    assert not await traffic_problems(fabric)


# -- 5. a killed tunnel -----------------------------------------------------------------------------------


@contextlib.contextmanager
def udp_blocked(node: RealNode, address: str, port: int) -> Iterator[str]:
    """What the node forwards to ``address:port`` (UDP) dropped, for the duration: a table of the test's own
    (its name yielded)."""
    table = unique("liqo-test-block")
    script = (
        f"table ip {table} {{\n  chain forward {{\n"
        "    type filter hook forward priority filter; policy accept;\n"
        f"    ip daddr {address} udp dport {port} counter drop\n  }}\n}}\n"
    )
    try:
        in_node(node, "nft", "-f", "-", input=script)
        yield table
    finally:
        in_node(node, "nft", "delete", "table", "ip", table, check=False)
    assert f"table ip {table}" not in node_tables(node)


async def test_a_blocked_tunnel_turns_the_network_status_error_then_recovers(fabric: Fabric) -> None:
    consumer, provider = fabric.consumer, fabric.provider
    gw = await the_gateway(consumer, provider)
    [node] = [n for n in consumer.nodes if n.name == gw["spec"]["nodeName"]]
    async with consumer.client() as client:
        endpoint = (await word(client, author=provider.cluster_id, about=provider.cluster_id))["spec"]["gateway"][
            "endpoint"
        ]
    await network_is(fabric, "Established", "Connected", timeout=60)
    with udp_blocked(node, endpoint["address"], endpoint["port"]) as table:
        took = await network_is(fabric, "Error", "Error", timeout=60)
        print(f"tunnel blocked: NetworkStatus Error on both sides after {took:.1f} s")
        [dropped] = nft_counters(in_node(node, "nft", "-j", "list", "table", "ip", table))
        assert dropped > 0, "the block dropped nothing: the tunnel went down for another reason"
        for side in fabric.sides:
            condition = await network_status(side, fabric.other(side))
            assert condition["reason"] == "ProbesLost", condition
    took = await network_is(fabric, "Established", "Connected", timeout=TRAFFIC_TIMEOUT)
    print(f"tunnel unblocked: Established again after {took:.1f} s")
    await traffic_passes(fabric, timeout=TRAFFIC_TIMEOUT, after="the tunnel was unblocked")


async def test_a_killed_wireguard_go_is_restarted_by_its_gateway_and_traffic_resumes(fabric: Fabric) -> None:
    for side in fabric.sides:
        peer = fabric.other(side)
        pod = await the_gateway(side, peer)
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        tables = gateway_tables(side, pod)
        killed = in_gateway(side, pod, "python3", "-c", WIREGUARD_GO, "kill").split()
        assert len(killed) == 1, killed
        started = time.monotonic()

        async def rebuilt(side: Side = side, pod: Obj = pod, killed: list[str] = killed) -> bool:
            now = in_gateway(side, pod, "python3", "-c", WIREGUARD_GO).split()
            return len(now) == 1 and now != killed

        await eventually(rebuilt, timeout=30, message=f"{side.role}'s gateway restarts wireguard-go", every=0.25)
        took = await traffic_passes(fabric, timeout=TRAFFIC_TIMEOUT, after=f"wireguard-go was killed on {side.role}")
        print(f"{side.role}'s wireguard-go killed: traffic passes again after {time.monotonic() - started:.1f} s "
              f"({took:.1f} s of tries)")  # fmt: skip
        logs = kubectl(side.cluster, "logs", "-n", names.LIQO_NAMESPACE, pod["metadata"]["name"])
        assert "wireguard-go exited (-9): rebuilding the tunnel" in logs, logs[-2000:]
        # The same pod and container did it (not the kubelet), and its rules are whole, once.
        now = await the_gateway(side, peer)
        assert now["metadata"]["uid"] == pod["metadata"]["uid"]
        assert now["status"]["containerStatuses"][0]["restartCount"] == restarts
        assert gateway_tables(side, now) == tables
        assert in_gateway(side, now, "wg", "show", gateway_loop.INTERFACE, "peers").split() == [
            await peer_public_key(side, peer)
        ]


async def peer_public_key(side: Side, peer: Side) -> str:
    """The key ``side``'s gateway should have as its one WireGuard peer: the peer's word's."""
    async with side.client() as client:
        theirs = await word(client, author=peer.cluster_id, about=peer.cluster_id)
    return str(theirs["spec"]["gateway"]["publicKey"])


# -- 6. attacks with the peer's own identity --------------------------------------------------------------


@contextlib.asynccontextmanager
async def as_peer(fab: Fabric) -> AsyncIterator[KubeClient]:
    """The consumer's identity on the provider: what the consumer (or whoever stole it) holds there."""
    async with fab.consumer.client() as client:
        identity = await operations.peer_kubeconfig(client, fab.provider.cluster_id)
    async with KubeClient.from_kubeconfig_dict(identity, name="consumer-on-provider") as peer:
        yield peer


async def refused(call: Any, *, status: int = 403) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == status, caught.value
    return caught.value


def by_policy(error: ApiError | str, message: str) -> None:
    text = error if isinstance(error, str) else error.message
    assert f"ValidatingAdmissionPolicy '{install_fabric.PEER_NETWORK_CONFIGS_POLICY}'" in text, text
    assert message in text, text


def kubectl_refused(cluster: LocalCluster, *args: str) -> str:
    """What kubectl says when the API server refuses ``args`` (it must)."""
    result = kubectl_run(cluster, *args)
    assert result.returncode != 0, f"kubectl {' '.join(args)} was accepted: {result.stdout}"
    return result.stderr


NOT_ITS_NAME, NOT_ITS_ID, NO_STATUS = (message for _, message in install_fabric.PEER_NETWORK_CONFIG_RULES)


async def test_the_peers_identity_writes_its_own_word_and_nothing_else(fabric: Fabric) -> None:
    consumer, provider = fabric.consumer, fabric.provider
    namespace = names.tenant_namespace(consumer.cluster_id)  # on the provider: both words are there
    async with provider.client() as admin, as_peer(fabric) as peer:
        theirs = await admin.get(NETWORK_CONFIGS, provider.cluster_id, namespace=namespace)
        version = theirs["metadata"]["resourceVersion"]
        # The provider's word: no create (even over it), update or delete.
        body = {k: copy.deepcopy(v) for k, v in theirs.items() if k in ("apiVersion", "kind", "spec")}
        body["metadata"] = {"name": provider.cluster_id, "namespace": namespace}
        by_policy(await refused(peer.create(NETWORK_CONFIGS, body)), NOT_ITS_NAME)
        patch = {"spec": {"remappedPodCIDR": "10.99.0.0/16"}}
        by_policy(await refused(peer.patch(NETWORK_CONFIGS, provider.cluster_id, patch, namespace=namespace)),
                  NOT_ITS_NAME)  # fmt: skip
        by_policy(await refused(peer.delete(NETWORK_CONFIGS, provider.cluster_id, namespace=namespace)), NOT_ITS_NAME)
        # A word under any other name, even one speaking for that name.
        other = unique("another-cluster")
        forged = copy.deepcopy(body)
        forged["metadata"]["name"] = other
        forged["spec"]["clusterID"] = other
        by_policy(await refused(peer.create(NETWORK_CONFIGS, forged)), NOT_ITS_NAME)
        with pytest.raises(NotFoundError):
            await admin.get(NETWORK_CONFIGS, other, namespace=namespace)
        # Its own name, speaking for someone else: refused at create; an update cannot change the author.
        ours = await admin.get(NETWORK_CONFIGS, consumer.cluster_id, namespace=namespace)
        impostor = {k: copy.deepcopy(v) for k, v in ours.items() if k in ("apiVersion", "kind", "spec")}
        impostor["metadata"] = {"name": consumer.cluster_id, "namespace": namespace}
        impostor["spec"]["clusterID"] = provider.cluster_id
        by_policy(await refused(peer.create(NETWORK_CONFIGS, impostor)), NOT_ITS_ID)
        switch = {"spec": {"clusterID": provider.cluster_id}}
        error = await refused(peer.patch(NETWORK_CONFIGS, consumer.cluster_id, switch, namespace=namespace), status=422)
        assert "clusterID is immutable" in error.message, error
        # No status, of either word: RBAC refuses first ...
        for name in (consumer.cluster_id, provider.cluster_id):
            status = {"connection": {"state": "Connected", "reason": "Forged", "message": "forged"}}
            error = await refused(peer.apply_status(NETWORK_CONFIGS, name=name, namespace=namespace, status=status))
            assert "networkconfigs/status" in error.message, error
        # ... and the policy would too, were the peer's user granted more.
        for name, message in ((consumer.cluster_id, NO_STATUS), (provider.cluster_id, NOT_ITS_NAME)):
            error_text = await asyncio.to_thread(
                kubectl_refused, provider.cluster, "patch", "netcfg", name, "-n", namespace, "--subresource=status",
                "--type=merge", "-p", '{"status":{"connection":{"state":"Error"}}}',
                f"--as={names.PEER_USER_PREFIX}{consumer.cluster_id}", "--as-group=system:masters",
            )  # fmt: skip
            by_policy(error_text, message)
        # Nothing changed; and its own word it may write.
        assert (await admin.get(NETWORK_CONFIGS, provider.cluster_id, namespace=namespace))["metadata"][
            "resourceVersion"
        ] == version
        label = {"metadata": {"labels": {"test.liqo.io/touched": "yes"}}}
        written = await peer.patch(NETWORK_CONFIGS, consumer.cluster_id, label, namespace=namespace)
        assert written["metadata"]["labels"]["test.liqo.io/touched"] == "yes"
    await network_is(fabric, "Established", "Connected", timeout=60)


async def set_replicas(side: Side, name: str, replicas: int, *, timeout: float = 120) -> int:
    """Scale ``side``'s Deployment ``name`` in ``liqo`` and wait for its pods to match; the previous count."""
    async with side.client() as client:
        deployment = await client.get(DEPLOYMENTS, name, namespace=names.LIQO_NAMESPACE)
        before = int(deployment["spec"]["replicas"])
        await client.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, namespace=names.LIQO_NAMESPACE)

        async def settled() -> bool:
            pods, _ = await client.list_all(
                PODS, namespace=names.LIQO_NAMESPACE, label_selector=f"app.kubernetes.io/name={name}"
            )
            ready = [
                p
                for p in pods
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions", [])
                )
            ]
            return len(pods) == len(ready) == replicas

        await eventually(settled, timeout=timeout, message=f"{name} at {replicas} replicas on {side.role}", every=0.5)
    return before


async def test_a_hostile_word_is_refused_by_the_providers_gateway_and_breaks_nothing(fabric: Fabric) -> None:
    consumer, provider = fabric.consumer, fabric.provider
    namespace = names.tenant_namespace(consumer.cluster_id)
    async with provider.client() as admin:
        good = (await admin.get(NETWORK_CONFIGS, consumer.cluster_id, namespace=namespace))["spec"]
    gw = await the_gateway(provider, consumer)
    ruleset = in_gateway(provider, gw, "nft", "list", "ruleset")
    wrong_size = str(ipaddress.ip_network(good["remappedPodCIDR"]).supernet(new_prefix=15))
    hostile = [
        (wrong_size, f"spec.remappedPodCIDR {wrong_size} is not the size of our pod CIDR"),
        ("169.254.0.0/16", "spec.remappedPodCIDR 169.254.0.0/16 overlaps the special-purpose range 169.254.0.0/16"),
    ]
    # The consumer's manager would put its word back at once: out of the way while the peer's identity writes.
    replicas = await set_replicas(consumer, MANAGER, 0)
    try:
        async with as_peer(fabric) as peer:
            for cidr, reason in hostile:
                patch = {"spec": {"remappedPodCIDR": cidr}}
                await peer.patch(NETWORK_CONFIGS, consumer.cluster_id, patch, namespace=namespace)

                async def logged(reason: str = reason) -> bool:
                    logs = kubectl(provider.cluster, "logs", "-n", names.LIQO_NAMESPACE, gw["metadata"]["name"])
                    return f"the peer's network config is refused: {reason}" in logs

                await eventually(logged, timeout=60, message=f"the provider's gateway refuses {cidr}", every=0.5)
                # The tunnel stays as the last good words made it: same rules, traffic both ways.
                assert in_gateway(provider, gw, "nft", "list", "ruleset") == ruleset
                assert not await traffic_problems(fabric)
            # A key that is no key does not even get in.
            garbage = {"spec": {"gateway": {"publicKey": "not-a-key"}}}
            error = await refused(
                peer.patch(NETWORK_CONFIGS, consumer.cluster_id, garbage, namespace=namespace), status=422
            )
            assert "spec.gateway.publicKey" in error.message, error
        assert (await the_gateway(provider, consumer))["metadata"]["uid"] == gw["metadata"]["uid"]
    finally:
        await set_replicas(consumer, MANAGER, replicas)

    async def restored() -> bool:
        async with provider.client() as admin:
            return bool((await admin.get(NETWORK_CONFIGS, consumer.cluster_id, namespace=namespace))["spec"] == good)

    await eventually(restored, timeout=60, message="the consumer's manager puts its good word back", every=0.5)
    await traffic_passes(fabric, timeout=TRAFFIC_TIMEOUT, after="the good word is back")
    await network_is(fabric, "Established", "Connected", timeout=60)


# -- 7. unpeer --------------------------------------------------------------------------------------------


async def test_zz_unpeer_leaves_no_config_gateway_route_or_table_on_either_side(fabric: Fabric) -> None:
    liqoctl(fabric.consumer.cluster, "unpeer", fabric.provider.cluster_id)
    left: dict[str, list[str]] = {}

    async def clean() -> bool:
        for side in fabric.sides:
            found: list[str] = []
            async with side.client() as client:
                configs, _ = await client.list_all(NETWORK_CONFIGS)
                found += [f"NetworkConfig {c['metadata']['namespace']}/{c['metadata']['name']}" for c in configs]
                selector = f"{names.COMPONENT}={names.GATEWAY}"
                for resource in (DEPLOYMENTS, SERVICES, SECRETS, PODS):
                    items, _ = await client.list_all(resource, namespace=names.LIQO_NAMESPACE, label_selector=selector)
                    found += [f"{resource.kind} {i['metadata']['name']}" for i in items]
                    with contextlib.suppress(NotFoundError):
                        named = gateway_objects.gateway_name(fabric.other(side).cluster_id)
                        if resource is not PODS:
                            await client.get(resource, named, namespace=names.LIQO_NAMESPACE)
                            found.append(f"{resource.kind} {named}")
            for node in side.nodes:
                found += [f"{node.name}: route {r}" for r in node_routes(node)]
                found += [f"{node.name}: {t}" for t in node_tables(node) if t == f"table ip {agent.TABLE}"]
            left[side.role] = found
        return not any(left.values())

    try:
        await eventually(clean, timeout=90, message="nothing of the fabric left on either side", every=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {left}") from None
