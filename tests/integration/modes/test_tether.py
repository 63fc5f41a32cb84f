"""A laptop tethers to an enterprise and back: its namespaces go there, its pods move there and home again.

Two clusters of this module's own: the laptop (one node) and the enterprise (two), liqo installed on both,
peered both ways (a tether needs it). The enterprise's SharingPolicy for the laptop is what accepts the tether.
Pods here run on KWOK nodes: where each is bound, and that it is Running, is what a switch changes; what runs
inside a pod (exec, logs, a Service) is the offloading tests' concern (and the tether demo's, on real nodes).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_OFFLOADINGS, RESOURCE_OFFERS, VIRTUAL_NODES, WORKING_MODES
from liqo.api.workingmodes import NAME
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, NAMESPACES, PODS
from liqo.localclusters.spec import ClusterSpec
from liqo.peering import operations as peering
from tests.integration.helpers import (
    Site,
    deployment,
    expect_clean,
    liqoctl_run,
    purge,
    sharing_policy,
    start_sites,
    unique,
)
from tests.shared import eventually

REPLICAS = 12
"""Pods of 100m: the laptop's virtual node for the enterprise holds them all (the enterprise offers its 2 CPUs whole),
and the enterprise's scheduler spreads them over its own nodes and the laptop's, which has the most room."""


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Site, Site]]:
    made = start_sites(
        {
            "laptop": ClusterSpec(name=unique("t-laptop"), nodes=1),
            "enterprise": ClusterSpec(name=unique("t-corp"), nodes=2, node_cpu="1", node_memory="4Gi"),
        }
    )
    try:
        yield made["laptop"], made["enterprise"]
    finally:
        purge(made["laptop"].cluster, made["enterprise"].cluster)


async def mode(site: Site, *args: str) -> tuple[int, dict[str, Any] | str]:
    """``liqoctl mode ARGS -o json`` on ``site``: its exit code and what it printed (JSON, or the error)."""
    argv = ("mode", *args, "-o", "json", f"--kubeconfig={site.cluster.kubeconfig}")
    done = await asyncio.to_thread(liqoctl_run, *argv, timeout=240)
    return done.returncode, orjson.loads(done.stdout) if done.returncode == 0 else done.stderr


async def placed(client: KubeClient, namespace: str, *, count: int, where: Any) -> list[Obj]:
    """Until ``count`` live pods of ``namespace`` are Running and ``where(node)`` holds for each one's node."""
    last: list[Obj] = []

    async def check() -> bool:
        pods, _ = await client.list_all(PODS, namespace=namespace)
        last[:] = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in last if (p.get("status") or {}).get("phase") == "Running"]
        return len(last) == len(running) == count and all(where(p["spec"].get("nodeName")) for p in running)

    def said() -> str:
        seen = collections.Counter(
            f"{(p.get('spec') or {}).get('nodeName')}/{(p.get('status') or {}).get('phase')}" for p in last
        )
        return f"{count} pods Running where asked in {client.name}/{namespace}; last: {dict(seen)}"

    await eventually(check, timeout=120, message=said)
    return last


async def virtual_node_of(client: KubeClient, peer_id: str) -> str:
    nodes, _ = await client.list_all(VIRTUAL_NODES, namespace=names.tenant_namespace(peer_id))
    return str(nodes[0]["metadata"]["name"])


async def tethered_on_both_sides(home: KubeClient, corp: KubeClient, *, laptop_id: str, work: str) -> None:
    """What the enterprise shows of a laptop tethered to it: its record, and the laptop's twin offloaded back."""

    async def seen() -> bool:
        records, _ = await corp.list_all(FOREIGN_CLUSTERS)
        return any(r["spec"]["clusterID"] == laptop_id and (r.get("status") or {}).get("tethered") for r in records)

    await eventually(seen, timeout=60, message="the enterprise's record of the laptop: tethered")
    twin = names.twin_namespace(work, home_cluster_id=laptop_id)

    async def offloaded_back() -> bool:
        back = await corp.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=twin)
        return back is not None and back["spec"]["clusterSelector"] == {names.REMOTE_CLUSTER_ID: laptop_id}

    await eventually(offloaded_back, timeout=60, message="the laptop's twin offloaded back to it")


async def test_a_tether_moves_the_laptops_workloads_to_the_enterprise_and_its_end_brings_them_home(
    pair: tuple[Site, Site],
) -> None:
    laptop, enterprise = pair
    async with laptop.client() as home, enterprise.client() as corp:
        await peering.peer(home, corp, timeout=60)
        await peering.peer(corp, home, timeout=60)
        work = unique("work")
        await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": work}})
        await home.create(DEPLOYMENTS, deployment("web", work, replicas=REPLICAS, cpu="100m"))
        await placed(home, work, count=REPLICAS, where=bool)

        # Refused while the enterprise does not accept tethered clusters: said, and nothing written.
        code, said = await mode(laptop, "tethered", "--to", enterprise.cluster_id)
        assert code == 1
        assert "refused (NotAccepted)" in str(said)
        assert await home.get_or_none(WORKING_MODES, NAME) is None

        async with sharing_policy(corp, laptop.cluster_id, prefix="tether", tethering="Accept", percentage=100):
            corp_namespace = names.tenant_namespace(enterprise.cluster_id)

            async def accepted() -> bool:
                offer = await home.get_or_none(RESOURCE_OFFERS, enterprise.cluster_id, namespace=corp_namespace)
                return bool(((offer or {}).get("spec") or {}).get("acceptsTethering"))

            await eventually(accepted, timeout=60, message="the enterprise's offer accepting tethered clusters")
            code, row = await mode(laptop, "tethered", "--to", enterprise.cluster_id)
            assert code == 0, row
            assert isinstance(row, dict)
            assert (row["mode"], row["phase"], row["switched"]) == ("Tethered", "Tethered", "True")
            assert work in row["offloaded"]
            assert "kube-system" not in row["offloaded"]
            peer_node = await virtual_node_of(home, enterprise.cluster_id)
            await placed(home, work, count=REPLICAS, where=lambda node: node == peer_node)  # the evictions moved all
            await tethered_on_both_sides(home, corp, laptop_id=laptop.cluster_id, work=work)
            # The enterprise's scheduler, short of room, sent some back to the laptop's own node.
            back = names.twin_namespace(
                names.twin_namespace(work, home_cluster_id=laptop.cluster_id), home_cluster_id=enterprise.cluster_id
            )
            sent_back, _ = await home.list_all(PODS, namespace=back)
            assert sent_back, f"no pod of {work} sent back to the laptop (namespace {back})"

            later = unique("later")
            await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": later}})

            async def offloaded_later() -> bool:
                return await home.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=later) is not None

            await eventually(offloaded_later, timeout=30, message="a namespace made while tethered offloaded")

            code, row = await mode(laptop, "autonomous")
            assert code == 0, row
            assert isinstance(row, dict)
            assert (row["mode"], row["phase"], row["switched"]) == ("Autonomous", "Autonomous", "True")
            await placed(home, work, count=REPLICAS, where=lambda node: node and node != peer_node)
            for namespace in (work, later):
                assert await home.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace) is None
            twin = names.twin_namespace(work, home_cluster_id=laptop.cluster_id)

            async def twins_gone() -> bool:
                return (
                    await corp.get_or_none(NAMESPACES, twin) is None
                    and await home.get_or_none(NAMESPACES, back) is None
                )

            await eventually(twins_gone, timeout=60, message="no twin left of the laptop's namespace, either way")
        for namespace in (work, later):
            await home.delete(NAMESPACES, namespace)
        await peering.unpeer(home, enterprise.cluster_id, timeout=90)
        await peering.unpeer(corp, laptop.cluster_id, timeout=90)
        await expect_clean(home, corp)
