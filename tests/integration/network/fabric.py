"""What the fabric's modules share: a cluster with real nodes and liqo installed as pods by ``liqoctl install``
(a :class:`Side`), started for a module, and commands in a real node's network namespace."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from liqo.api.identity import read_identity
from liqo.kube.client import KubeClient
from liqo.localclusters.layout import read_json
from liqo.localclusters.realnodes.nodes import RealNode, real_nodes
from liqo.localclusters.spec import ClusterSpec
from liqo.network import rules
from tests.integration.helpers import LocalCluster, liqoctl, purge, start, unique

POD_CIDR = "10.244.0.0/16"
"""Every side's pod CIDR: the same on both, as the fabric must allow."""


@dataclass(frozen=True)
class Side:
    """One of the two clusters, liqo installed."""

    role: str
    cluster: LocalCluster
    cluster_id: str

    def client(self) -> KubeClient:
        return self.cluster.client()

    @property
    def nodes(self) -> list[RealNode]:
        stored = read_json(self.cluster.dir.cluster_file)
        return real_nodes(
            cluster=self.cluster.name,
            count=self.cluster.spec.real_nodes,
            underlay=int(stored["underlay"]),
            cluster_root=self.cluster.dir.root,
        )


def install_side(local: LocalCluster, role: str) -> Side:
    liqoctl(local, "install")

    async def cluster_id() -> str:
        async with local.client() as client:
            identity = await read_identity(client)
        assert identity is not None, f"liqoctl install made no identity on {local.name}"
        return identity.cluster_id

    return Side(role, local, asyncio.run(cluster_id()))


def started_side(prefix: str, role: str, *, real_nodes: int) -> Iterator[Side]:
    """A module's side: started (named ``prefix-…``), installed, and purged when the module is done."""
    local = start(ClusterSpec(name=unique(prefix), nodes=0, real_nodes=real_nodes, pod_cidr=POD_CIDR))
    try:
        yield install_side(local, role)
    finally:
        purge(local)


def in_node(node: RealNode, *argv: str, input: str | None = None, check: bool = True) -> str:
    """Run ``argv`` (the host's ``ip``, ``nft``) in a real node's network namespace."""
    result = subprocess.run(
        ["nsenter", f"--net={node.netns}", "--", *argv],
        input=input,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0 or not check, f"{' '.join(argv)} in {node.name}: {result.stderr}"
    return result.stdout


def node_routes(node: RealNode) -> list[tuple[str, str, str]]:
    """liqo's routes in a node's network namespace (``proto 76``): (destination, next hop, device)."""
    listed = orjson.loads(in_node(node, "ip", "-j", "route", "show", "proto", rules.ROUTE_PROTO))
    return [(r["dst"], r.get("gateway", ""), r.get("dev", "")) for r in listed]
