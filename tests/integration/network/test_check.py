"""``liqoctl test network`` between two, then three local clusters that all use the same pod CIDR.

Three clusters, one real node each, every one with pod CIDR 10.244.0.0/16, liqo installed as pods (with the
network fabric). milan consumes from rome; the check passes on milan (two clusters). Then milan also
consumes from paris and rome from paris: milan sees its two providers at two different blocks, and the
check passes on milan (three clusters, two tunnels) and on rome. A blocked tunnel makes it fail, naming the
tunnel. Every exchange is a real packet between real pods through real gateways.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from liqo.api import names
from liqo.api.resources import NETWORK_CONFIGS
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import DEPLOYMENTS, PODS, SECRETS, SERVICES
from liqo.localclusters.realnodes.host import run_in_node
from liqo.localclusters.spec import ClusterSpec
from liqo.network import gateway_objects
from liqo.peering import operations as peering
from tests.integration.helpers import LocalCluster, Site, only_real_node, purge, start_sites, unique
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

LIQOCTL = [str(Path(sys.executable).parent / "liqoctl")]
POD_CIDR = "10.244.0.0/16"


def check_network(cluster: LocalCluster, *, expect_ok: bool = True) -> dict[str, Any]:
    """``liqoctl test network -o json`` on ``cluster``; its JSON, and its exit code as ``expect_ok`` says."""
    result = subprocess.run(
        [*LIQOCTL, "test", "network", "-o", "json", "--timeout", "90", f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == (0 if expect_ok else 1), f"liqoctl test network: {result.stdout}{result.stderr}"
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


@pytest.fixture(scope="module")
def real_sites() -> Iterator[dict[str, Site]]:
    names = ("milan", "rome", "paris")
    made = start_sites({n: ClusterSpec(name=unique(n), nodes=0, real_nodes=1, pod_cidr=POD_CIDR) for n in names})
    try:
        yield made
    finally:
        purge(*(made_site.cluster for made_site in made.values()))


def peer(consumer: Site, provider: Site) -> None:
    async def run() -> None:
        async with consumer.client() as home, provider.client() as remote:
            await peering.peer(home, remote, timeout=90)

    asyncio.run(run())


async def connected(consumer: Site, provider: Site) -> None:
    """Wait until both gateways of the pair report Connected."""

    async def check(site: Site, peer: Site) -> bool:
        async with site.client() as client:
            try:
                word = await client.get(
                    NETWORK_CONFIGS, site.cluster_id, namespace=names.tenant_namespace(peer.cluster_id)
                )
            except NotFoundError:  # not there yet
                return False
        return ((word.get("status") or {}).get("connection") or {}).get("state") == "Connected"

    for site, peer in ((consumer, provider), (provider, consumer)):
        await eventually(
            functools.partial(check, site, peer),
            timeout=120,
            message=f"{site.cluster.name}'s tunnel to {peer.cluster.name}",
        )


def exchanges(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["source"], r["target"], r["protocol"]) for r in report["results"]}


def test_two_clusters_with_the_same_pod_cidr(real_sites: dict[str, Site]) -> None:
    milan_site, rome_site = real_sites["milan"], real_sites["rome"]
    peer(milan_site, rome_site)
    asyncio.run(connected(milan_site, rome_site))
    report = check_network(milan_site.cluster)
    assert report["passed"]
    remote = f"{rome_site.cluster.name}/remote-{rome_site.cluster.name}"
    direct = {
        (source, target, protocol)
        for protocol in ("ICMP", "TCP", "UDP")
        for source, target in (("here/local-0", remote), (remote, "here/local-0"))
    }
    through_service = {("here/local-0", "here/service/remote-pods", protocol) for protocol in ("TCP", "UDP")}
    assert exchanges(report) == direct | through_service
    for result in report["results"]:
        if "service/" in result["target"]:
            continue  # a cluster IP of ours, by design
        assert ipaddress.ip_address(result["address"].split(":")[0]) not in ipaddress.ip_network(POD_CIDR), (
            f"{result['source']} dialled {result['address']}, an address of its own pod CIDR: nothing was remapped"
        )


def test_three_clusters_with_the_same_pod_cidr(real_sites: dict[str, Site]) -> None:
    milan_site, rome_site, paris_site = real_sites["milan"], real_sites["rome"], real_sites["paris"]
    peer(milan_site, paris_site)
    peer(rome_site, paris_site)
    for consumer, provider in ((milan_site, rome_site), (milan_site, paris_site), (rome_site, paris_site)):
        asyncio.run(connected(consumer, provider))
    on_milan = check_network(milan_site.cluster)
    assert on_milan["passed"]
    assert {r["target"].split("/")[0] for r in on_milan["results"]} >= {rome_site.cluster.name, paris_site.cluster.name}
    assert check_network(rome_site.cluster)["passed"]

    async def blocks() -> set[str]:
        async with milan_site.client() as client:
            words = [
                await client.get(NETWORK_CONFIGS, milan_site.cluster_id, namespace=names.tenant_namespace(provider))
                for provider in (rome_site.cluster_id, paris_site.cluster_id)
            ]
        return {w["spec"]["remappedPodCIDR"] for w in words}

    assert len(asyncio.run(blocks())) == 2, "milan sees its two providers' pods at two different blocks"


async def server_node_port(provider: Site, *, consumer_id: str) -> int:
    """The node port of the provider's gateway Service for ``consumer_id`` (where the consumer's client dials)."""
    async with provider.client() as client:
        service = await client.get(SERVICES, gateway_objects.gateway_name(consumer_id), namespace=names.LIQO_NAMESPACE)
    port = gateway_objects.node_port(service)
    assert port is not None
    return port


def test_a_blocked_tunnel_fails_the_check_naming_the_tunnel(real_sites: dict[str, Site]) -> None:
    milan_site, rome_site = real_sites["milan"], real_sites["rome"]
    node = only_real_node(milan_site.cluster)
    port = asyncio.run(server_node_port(rome_site, consumer_id=milan_site.cluster_id))
    table = unique("liqo-test-block")
    run_in_node(node, "nft", "add", "table", "ip", table)
    try:
        # What milan's client gateway sends to rome's server crosses milan's node: dropped there.
        run_in_node(node, "nft", "add", "chain", "ip", table, "forward", "{ type filter hook forward priority 0 ; }")
        run_in_node(node, "nft", "add", "rule", "ip", table, "forward", "udp", "dport", str(port), "drop")

        async def lost() -> bool:
            async with milan_site.client() as client:
                word = await client.get(
                    NETWORK_CONFIGS, milan_site.cluster_id, namespace=names.tenant_namespace(rome_site.cluster_id)
                )
            return ((word.get("status") or {}).get("connection") or {}).get("state") == "Error"

        asyncio.run(eventually(lost, timeout=60, message="milan's tunnel to rome reported Error"))
        report = check_network(milan_site.cluster, expect_ok=False)
        failed = [r for r in report["results"] if not r["ok"]]
        assert failed
        # rome's pod, directly or as a backend of the Service: every failure involves it.
        assert all(
            rome_site.cluster.name in r["target"] or rome_site.cluster.name in r["source"] or "service/" in r["target"]
            for r in failed
        )
        assert all(r["hop"].startswith(f"tunnel to {rome_site.cluster.name}: Error") for r in failed), failed
    finally:
        run_in_node(node, "nft", "delete", "table", "ip", table)
    asyncio.run(connected(milan_site, rome_site))
    assert check_network(milan_site.cluster)["passed"]


def test_unpeering_leaves_nothing_of_the_fabric(real_sites: dict[str, Site]) -> None:
    milan_site, rome_site, paris_site = real_sites["milan"], real_sites["rome"], real_sites["paris"]

    async def unpeer_all() -> None:
        for consumer, provider in ((milan_site, rome_site), (milan_site, paris_site), (rome_site, paris_site)):
            async with consumer.client() as home:
                await peering.unpeer(home, provider.cluster_id, timeout=90)

    asyncio.run(unpeer_all())

    async def fabric_left(site: Site) -> list[str]:
        async with site.client() as client:
            configs, _ = await client.list_all(NETWORK_CONFIGS)
            left = [f"NetworkConfig {c['metadata']['namespace']}/{c['metadata']['name']}" for c in configs]
            selector = f"{names.COMPONENT}={names.GATEWAY}"
            for resource in (DEPLOYMENTS, SERVICES, SECRETS, PODS):
                items, _ = await client.list_all(resource, namespace=names.LIQO_NAMESPACE, label_selector=selector)
                left += [f"{resource.kind} {i['metadata']['name']}" for i in items]
        node = only_real_node(site.cluster)
        if run_in_node(node, "ip", "route", "show", "proto", "76").stdout.strip():
            left.append("routes with proto 76")
        if "liqo-node" in run_in_node(node, "nft", "list", "tables").stdout:
            left.append("nft table liqo-node")
        return left

    for each in (milan_site, rome_site, paris_site):
        found: list[str] = []

        async def clean(each: Site = each, found: list[str] = found) -> bool:
            found[:] = await fabric_left(each)
            return not found

        try:
            asyncio.run(eventually(clean, timeout=90, message=f"nothing of the fabric left on {each.cluster.name}"))
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {', '.join(found)}") from None
