"""Three local clusters, one real node each, find each other on their LAN and in a DNS zone, and peer as told.

Each cluster runs liqo's discovery listener as installed (``liqoctl install --discovery``): a host-network pod
on its real node, announcing by multicast DNS on the underlay bridge the nodes of every local cluster sit
on, looking up the zones of DNS sources, and writing what it hears into the DiscoverySources' status; the
manager turns that into ForeignClusters. The zone is served by a real DNS server (dnsmasq) on this machine's
address on the underlay, from the records ``liqoctl generate dns-records`` prints. Other local clusters of this
machine may announce on the same bridge (another test run): the tests look at these three only.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import dns.rdatatype
import dns.zone
import orjson
import pytest

from liqo.api import names
from liqo.api.components import MANAGER
from liqo.api.discoverysources import LAN_SOURCE
from liqo.api.foreignclusters import record_of
from liqo.api.identity import read_cluster_key
from liqo.api.resources import DISCOVERY_SOURCES, FOREIGN_CLUSTERS
from liqo.discovery.announcements import Announcement
from liqo.discovery.dnszone import MIN_INTERVAL
from liqo.discovery.lan import TICK, TTL
from liqo.kube.client import KubeClient
from liqo.kube.resources import EVENTS, NAMESPACES, SECRETS
from liqo.localclusters.realnodes.nodes import UNDERLAY_BRIDGE, UNDERLAY_HOST
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering
from tests.integration.discovery.lan import Host, Listener, listeners
from tests.integration.helpers import Site, liqoctl, purge, signed_identity_request, start_sites, unique
from tests.integration.metrics import in_pods, total
from tests.shared import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root")]

DISCOVERY_DEADLINE = 10.0
"""Seconds from every listener up to every cluster knowing the two others (the issue's figure)."""


@pytest.fixture(scope="module")
def lan_sites() -> Iterator[dict[str, Site]]:
    made = start_sites(
        {n: ClusterSpec(name=unique(n), nodes=0, real_nodes=1) for n in ("rome", "milan", "paris")}, discovery=True
    )
    try:
        yield made
    finally:
        purge(*(site.cluster for site in made.values() if site.cluster.dir.exists()))


async def heard(client: KubeClient, among: set[str]) -> dict[str, dict[str, Any]]:
    """The neighbours of ``among`` that the source ``lan`` lists, by cluster ID."""
    source = await client.get_or_none(DISCOVERY_SOURCES, LAN_SOURCE)
    entries = ((source or {}).get("status") or {}).get("neighbours") or []
    return {n["clusterID"]: n for n in entries if n["clusterID"] in among}


async def listening(client: KubeClient) -> bool:
    source = await client.get_or_none(DISCOVERY_SOURCES, LAN_SOURCE)
    return bool(((source or {}).get("status") or {}).get("listener"))


async def token_secret(consumer: KubeClient, provider: KubeClient, provider_id: str) -> str:
    """A Secret in the consumer's ``liqo`` holding a token the provider minted, under the provider's ID: its name."""
    command = await peering.peer_command(provider)
    secret = unique("tokens")
    data = {provider_id: base64.b64encode(command.token.encode()).decode()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": names.LIQO_NAMESPACE}}
    await consumer.create(SECRETS, body | {"data": data})
    return secret


def sources_named(record: dict[str, Any]) -> set[str]:
    """The sources a ForeignCluster's status says hear its cluster now."""
    return {entry["source"] for entry in (record.get("status") or {}).get("discovery") or ()}


def test_three_clusters_discover_each_other_and_become_foreign_clusters(lan_sites: dict[str, Site]) -> None:
    ids = {site.cluster_id for site in lan_sites.values()}

    async def run() -> None:
        for site in lan_sites.values():
            async with site.client() as client:
                await eventually(functools.partial(listening, client), timeout=120, message=f"{site.cluster.name} up")
        started = asyncio.get_running_loop().time()
        for site in lan_sites.values():
            async with site.client() as client:
                others = ids - {site.cluster_id}

                async def all_heard(c: KubeClient = client, others: set[str] = others) -> bool:
                    return set(await heard(c, others)) == others

                await eventually(all_heard, timeout=DISCOVERY_DEADLINE, message=f"{site.cluster.name} hearing both")
        took = asyncio.get_running_loop().time() - started
        assert took <= DISCOVERY_DEADLINE
        for site in lan_sites.values():
            async with site.client() as client:
                identity_of = {s.cluster_id: s for s in lan_sites.values()}
                for other in ids - {site.cluster_id}:
                    found: list[dict[str, Any]] = []

                    async def made(c: KubeClient = client, other: str = other, found: list[Any] = found) -> bool:
                        listed, _ = await c.list_all(FOREIGN_CLUSTERS)
                        found[:] = [r for r in [record_of(listed, other)] if r is not None]
                        return bool(found)

                    async def said_heard(c: KubeClient = client, other: str = other, found: list[Any] = found) -> bool:
                        return await made(c, other, found) and sources_named(found[0]) == {LAN_SOURCE}

                    await eventually(said_heard, timeout=30, message=f"{site.cluster.name}'s record of {other}")
                    record = found[0]
                    peer = identity_of[other]
                    async with peer.client() as peer_client:
                        fingerprint = (await peering.installed(peer_client, role="provider")).key_fingerprint
                    assert record["spec"]["keyFingerprint"] == fingerprint
                    assert record["spec"]["outgoingPeeringEnabled"] == "No"  # Manual: known, not peered
                    assert record["metadata"]["labels"][names.DISCOVERED_BY] == LAN_SOURCE
                    # Known is not peered: no tenant namespace, nothing for the incoming side to reap.
                    assert await client.get_or_none(NAMESPACES, names.tenant_namespace(other)) is None
                rows = orjson.loads(liqoctl(site.cluster, "discover", "-o", "json"))
                verdicts = {r["clusterID"]: (r["verdict"], r["source"]) for r in rows if r["clusterID"] in ids}
                assert verdicts == dict.fromkeys(ids - {site.cluster_id}, ("Known", LAN_SOURCE))
                counted: dict[str, float] = {}

                def what_counted(s: Site = site, c: dict[str, float] = counted) -> str:
                    return f"{s.cluster.name}'s manager counting the others as Known: {c}"

                await eventually(functools.partial(counts_known, site, counted), timeout=30, message=what_counted)
        await a_known_neighbour_admits_no_one(lan_sites["rome"], lan_sites["milan"])
        await a_neighbour_its_source_admits_consumes_on_its_key_alone(lan_sites["paris"], lan_sites["milan"])
        await a_manual_peering_converges_on_the_discovered_record(lan_sites["paris"], lan_sites["rome"])

    asyncio.run(run())


async def counts_known(site: Site, seen: dict[str, float]) -> bool:
    """The manager's ``liqo_discovered_clusters`` counts at least the two others (other runs' clusters may add)."""
    samples = await asyncio.to_thread(in_pods, site.cluster, MANAGER)
    seen.clear()
    seen.update({str(sorted(labels)): v for (name, labels), v in samples.items() if name == "liqo_discovered_clusters"})
    return total(samples, "liqo_discovered_clusters", source=LAN_SOURCE, verdict="Known") >= 2


async def without_token(consumer: Site, provider: Site) -> tuple[int, dict[str, Any]]:
    """The consumer, as a hostile one would, signs an identity request with its own key and no token, at the
    endpoint its record of the provider names."""
    async with consumer.client() as home:
        key = await read_cluster_key(home)
        record = await record_on(home, provider.cluster_id)
    assert key is not None
    assert record is not None
    return await signed_identity_request(record["spec"]["authURL"], consumer=consumer.cluster_id, key=key, token=None)


async def record_on(client: KubeClient, cluster_id: str) -> dict[str, Any] | None:
    listed, _ = await client.list_all(FOREIGN_CLUSTERS)
    return record_of(listed, cluster_id)


def discovered(record: dict[str, Any] | None) -> bool:
    """Whether ``record`` is discovery's (not a peering's)."""
    return record is not None and names.DISCOVERED_BY in record["metadata"].get("labels", {})


async def a_manual_peering_converges_on_the_discovered_record(consumer: Site, provider: Site) -> None:
    """``liqoctl peer out-of-band`` with a cluster discovery already made a record of: that record, not a second."""
    async with consumer.client() as home, provider.client() as foreign:
        known = await record_on(home, provider.cluster_id)
        assert discovered(known)
        assert known is not None
        command = await peering.peer_command(foreign)
        liqoctl(
            consumer.cluster,
            "peer", "out-of-band", command.name, f"--auth-url={command.auth_url}",
            f"--cluster-id={command.cluster_id}", f"--key-fingerprint={command.key_fingerprint}",
            f"--auth-token={command.token}",
        )  # fmt: skip
        try:
            await peering.wait_established(home, provider.cluster_id, timeout=120)
            listed, _ = await home.list_all(FOREIGN_CLUSTERS)
            records = [fc for fc in listed if fc["spec"]["clusterID"] == provider.cluster_id]
            assert [fc["metadata"]["uid"] for fc in records] == [known["metadata"]["uid"]]
            assert records[0]["spec"]["outgoingPeeringEnabled"] == "Yes"
        finally:
            await peering.unpeer(home, provider.cluster_id, timeout=90)


async def a_known_neighbour_admits_no_one(consumer: Site, provider: Site) -> None:
    """The provider's record pins the key the consumer announced: it says who that is, it enrols no one."""
    status, answer = await without_token(consumer, provider)
    assert (status, answer["reason"].split(",")[0]) == (401, "this cluster does not know your key"), answer
    async with provider.client() as foreign:
        assert await foreign.get_or_none(NAMESPACES, names.tenant_namespace(consumer.cluster_id)) is None
        assert discovered(await record_on(foreign, consumer.cluster_id))  # unchanged


async def a_neighbour_its_source_admits_consumes_on_its_key_alone(consumer: Site, provider: Site) -> None:
    """The provider's opt-in (``admitConsumers`` on its source): the announced key is the consumer's proof."""
    tenant = names.tenant_namespace(consumer.cluster_id)
    async with provider.client() as foreign:
        await foreign.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"admitConsumers": True}})
        try:
            status, answer = await without_token(consumer, provider)
            assert (status, answer.get("namespace")) == (200, tenant), answer
            assert not discovered(await record_on(foreign, consumer.cluster_id))  # the peering's now
        finally:
            await foreign.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"admitConsumers": None}})
            await foreign.delete(NAMESPACES, tenant, missing_ok=True)

            async def released() -> bool:
                return await foreign.get_or_none(NAMESPACES, tenant) is None

            await eventually(released, timeout=60, message=f"{tenant} deleted on {provider.cluster.name}")
            if (kept := await record_on(foreign, consumer.cluster_id)) is not None:
                await foreign.delete(FOREIGN_CLUSTERS, kept["metadata"]["name"], missing_ok=True)

            async def known_again() -> bool:  # as the test found it: discovery's record, made anew
                return discovered(await record_on(foreign, consumer.cluster_id))

            await eventually(known_again, timeout=60, message=f"{consumer.cluster.name} known again")


def test_auto_peers_with_the_token_for_that_cluster_and_offloads(lan_sites: dict[str, Site]) -> None:
    milan, rome = lan_sites["milan"], lan_sites["rome"]

    async def run() -> None:
        async with milan.client() as consumer, rome.client() as provider:
            secret = await token_secret(consumer, provider, rome.cluster_id)
            await consumer.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"peering": "Auto", "tokenSecret": secret}})
            try:
                await peering.wait_established(consumer, rome.cluster_id, timeout=120)
                # The record discovery made is the peering's: one ForeignCluster for rome, never two.
                listed, _ = await consumer.list_all(FOREIGN_CLUSTERS)
                assert len([fc for fc in listed if fc["spec"]["clusterID"] == rome.cluster_id]) == 1
                # rome's record of milan, discovery's until then, is the enrolment's: milan's key pinned by it.
                enrolled = await record_on(provider, milan.cluster_id)
                assert enrolled is not None
                assert not discovered(enrolled)
                namespace = unique("disc")
                await consumer.create(
                    NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
                await offloading.offload(consumer, namespace, pod_offloading_strategy="Remote")
                await offloading.wait_offloaded(consumer, namespace, timeout=60)
                await offloading.unoffload(consumer, namespace, timeout=120)
                await consumer.delete(NAMESPACES, namespace)
                # paris, heard in the same source, had no token: known, not peered, and the Event says why.
                listed, _ = await consumer.list_all(FOREIGN_CLUSTERS)
                paris = record_of(listed, lan_sites["paris"].cluster_id)
                assert paris is not None
                assert paris["spec"]["outgoingPeeringEnabled"] == "No"
                events, _ = await consumer.list_all(EVENTS, namespace="default")
                reasons = {e["reason"] for e in events if e["involvedObject"].get("name") == LAN_SOURCE}
                assert {"DiscoveredAuto", "DiscoveredKnown"} <= reasons
            finally:
                await consumer.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"peering": None, "tokenSecret": None}})

    asyncio.run(run())


@pytest.fixture
def impostor_host() -> Iterator[Host]:
    """A namespace on the underlay bridge, at an address no local cluster's /24 holds."""
    host = Host(namespace=f"imp{secrets.token_hex(3)}", address=f"172.30.250.{2 + secrets.randbelow(250)}")
    outside = f"{host.namespace}v"

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True)

    ip("netns", "add", host.namespace)
    try:
        ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        ip("link", "set", outside, "master", UNDERLAY_BRIDGE, "up")
        ip("-n", host.namespace, "addr", "add", f"{host.address}/16", "dev", "eth0")
        ip("-n", host.namespace, "link", "set", "eth0", "up")
        yield host
    finally:
        subprocess.run(["ip", "netns", "del", host.namespace], check=False, capture_output=True)


def test_an_impostor_claiming_rome_with_another_key_changes_nothing(
    lan_sites: dict[str, Site], impostor_host: Host
) -> None:
    milan, rome = lan_sites["milan"], lan_sites["rome"]
    fake = Announcement(
        cluster_id=rome.cluster_id,
        cluster_name="rome",
        auth_url=f"https://{impostor_host.address}:30443",
        key_fingerprint="sha256:" + "e" * 64,
        labels=(("corp.example/tier", "edge"),),  # through the listener and the status schema, as any cluster's
    )

    async def run() -> None:
        async with milan.client() as client:
            listed, _ = await client.list_all(FOREIGN_CLUSTERS)
            before = record_of(listed, rome.cluster_id)
            assert before is not None
            with listeners() as running:
                running.append(Listener(impostor_host, announcement=fake))
                running[0].wait_up()

                async def conflict() -> bool:
                    source = await client.get(DISCOVERY_SOURCES, LAN_SOURCE)
                    entries = [n for n in source["status"]["neighbours"] if n["clusterID"] == rome.cluster_id]
                    return len(entries) == 2 and all(n["conflict"] for n in entries)

                await eventually(conflict, timeout=30, message="milan seeing two keys for rome")
                source = await client.get(DISCOVERY_SOURCES, LAN_SOURCE)
                neighbours = source["status"]["neighbours"]
                claimed = [n for n in neighbours if n["keyFingerprint"] == fake.key_fingerprint]
                assert [n.get("labels") for n in claimed] == [{"corp.example/tier": "edge"}], neighbours

                async def warned() -> bool:
                    events, _ = await client.list_all(EVENTS, namespace="default")
                    return any(e["reason"] == "DiscoveredConflict" for e in events)

                await eventually(warned, timeout=30, message="an Event about the conflict")
                listed, _ = await client.list_all(FOREIGN_CLUSTERS)
                during = record_of(listed, rome.cluster_id)
                assert during is not None
                assert during["spec"] == before["spec"]
                assert during["metadata"]["name"] == before["metadata"]["name"]

    asyncio.run(run())


class ZoneServer:
    """dnsmasq on the underlay host's address (which the nodes reach), serving zone-file lines; stopped by pid."""

    def __init__(self) -> None:
        self.address = f"{UNDERLAY_HOST}:{20000 + secrets.randbelow(20000)}"
        self.process: subprocess.Popen[str] | None = None

    def serve(self, lines: list[str], *, ttl: int) -> None:
        """Serve exactly ``lines`` (a restart: what is not there any more is withdrawn)."""
        self.stop()
        host, _, port = self.address.partition(":")
        argv = [
            "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--pid-file=",
            f"--listen-address={host}", "--bind-interfaces", f"--port={port}", f"--local-ttl={ttl}", "--user=root",
        ]  # fmt: skip
        if lines:
            argv += dnsmasq_records(lines)
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        self.process = None


def dnsmasq_records(lines: list[str]) -> list[str]:
    """dnsmasq's flags for zone-file lines (it reads no zone file): PTR, SRV, TXT and A records."""
    zone = dns.zone.from_text("\n".join(lines), origin=".", check_origin=False, relativize=False)
    flags = []
    for name, node in zone.nodes.items():
        owner = str(name).rstrip(".")
        for rdataset in node.rdatasets:
            for rdata in rdataset:
                kind = dns.rdatatype.to_text(rdataset.rdtype)
                if kind == "PTR":
                    flags.append(f"--ptr-record={owner},{str(rdata.target).rstrip('.')}")
                elif kind == "SRV":
                    flags.append(f"--srv-host={owner},{str(rdata.target).rstrip('.')},{rdata.port},0,0")
                elif kind == "TXT":
                    flags.append(f"--txt-record={owner}," + ",".join(s.decode() for s in rdata.strings))
                elif kind == "A":
                    flags.append(f"--host-record={owner},{rdata.address}")
    return flags


@pytest.fixture
def zone_server() -> Iterator[ZoneServer]:
    server = ZoneServer()
    try:
        yield server
    finally:
        server.stop()


def test_a_cluster_published_only_in_dns_is_found_and_peered_and_expires_when_withdrawn(
    lan_sites: dict[str, Site], zone_server: ZoneServer
) -> None:
    rome, paris = lan_sites["rome"], lan_sites["paris"]
    domain, ttl = f"{unique('corp')}.example", 20
    records = liqoctl(paris.cluster, "generate", "dns-records", f"--domain={domain}", f"--ttl={ttl}").splitlines()
    zone_server.serve(records, ttl=ttl)
    source = unique("corp")

    async def run() -> None:
        async with rome.client() as client, paris.client() as provider:
            secret = await token_secret(client, provider, paris.cluster_id)
            # The LAN says Never here: whatever rome peers with below, it found in the zone.
            await client.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"peering": "Never"}})
            spec = {
                "type": "DNS",
                "domain": domain,
                "nameservers": [zone_server.address],
                "peering": "Auto",
                "tokenSecret": secret,
            }
            await client.create(
                DISCOVERY_SOURCES,
                {
                    "apiVersion": DISCOVERY_SOURCES.api_version,
                    "kind": "DiscoverySource",
                    "metadata": {"name": source},
                    "spec": spec,
                },
            )
            try:

                async def listed(present: bool) -> bool:
                    found = await client.get(DISCOVERY_SOURCES, source)
                    ids = {n["clusterID"] for n in (found.get("status") or {}).get("neighbours") or []}
                    return (paris.cluster_id in ids) == present

                await eventually(functools.partial(listed, True), timeout=30, message=f"paris in {source}")
                await peering.wait_established(client, paris.cluster_id, timeout=120)
                listed_fcs, _ = await client.list_all(FOREIGN_CLUSTERS)
                [record] = [fc for fc in listed_fcs if fc["spec"]["clusterID"] == paris.cluster_id]
                assert record["metadata"]["labels"][names.DISCOVERED_BY] == source

                async def named(expected: set[str]) -> bool:
                    listed_fcs, _ = await client.list_all(FOREIGN_CLUSTERS)
                    record = record_of(listed_fcs, paris.cluster_id)
                    return record is not None and sources_named(record) == expected

                # The LAN hears it too (it says Never: it peers with nothing, it still tells where it hears).
                await eventually(functools.partial(named, {LAN_SOURCE, source}), timeout=30, message="both sources")
                # Withdrawn from the zone: still believed for its TTL, then forgotten by the source.
                zone_server.serve([], ttl=ttl)
                await eventually(
                    functools.partial(listed, False),
                    timeout=ttl + MIN_INTERVAL + 15,
                    message=f"paris gone from {source}",
                )
                await eventually(functools.partial(named, {LAN_SOURCE}), timeout=30, message=f"{source} unnamed")
            finally:
                await client.delete(DISCOVERY_SOURCES, source, missing_ok=True)
                await client.patch(DISCOVERY_SOURCES, LAN_SOURCE, {"spec": {"peering": None}})
                await peering.unpeer(client, paris.cluster_id, timeout=90)

    asyncio.run(run())


def test_a_cluster_taken_down_expires_from_the_others(lan_sites: dict[str, Site]) -> None:
    paris = lan_sites["paris"]
    others = [lan_sites["rome"], lan_sites["milan"]]
    purge(paris.cluster)  # no goodbye can be relied on: the node's network goes with it
    # Its last announcement may have left while it was being taken down: from then, its records' life.
    deadline = time.monotonic() + TTL + TICK + 10

    async def run() -> None:
        for site in others:
            async with site.client() as client:
                seen: list[Any] = []

                async def state(c: KubeClient = client, seen: list[Any] = seen) -> bool:
                    listed, _ = await c.list_all(FOREIGN_CLUSTERS)
                    seen[:] = [await heard(c, {paris.cluster_id}), record_of(listed, paris.cluster_id)]
                    return not seen[0] and seen[1] is None

                def message(name: str = site.cluster.name, seen: list[Any] = seen) -> str:
                    return f"{name} forgetting paris: heard, record {seen}"

                await eventually(state, timeout=max(0.0, deadline - time.monotonic()), message=message)

    asyncio.run(run())
