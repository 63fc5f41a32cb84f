"""A laptop tethers to an enterprise and back: its namespaces go there, its pods move there and home again.

Three clusters of this module's own: the laptop (one node), the enterprise (two) and a friend (one), liqo
installed on each; the laptop and the enterprise peered both ways for the whole module (a tether needs it).
The enterprise's SharingPolicy for the laptop is what accepts the tether; the friend, consuming from the
laptop, is what a tether must refuse. Pods here run on KWOK nodes: where each is bound, and that it is
Running, is what a switch changes, and what faults in the middle of a switch must not change; what runs inside
a pod (exec, logs, a Service) is tests/integration/modes/test_real_nodes.py's concern. The tests run in order,
each in namespaces of its own; the last unpeers and finds nothing left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from liqo.api import names
from liqo.api.components import MANAGER
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_OFFLOADINGS, WORKING_MODES
from liqo.api.workingmodes import NAME
from liqo.kube.client import KubeClient
from liqo.kube.resources import DEPLOYMENTS, NAMESPACES, PODS
from liqo.localclusters.spec import ClusterSpec
from liqo.peering import operations as peering
from tests.integration.helpers import (
    Site,
    deployment,
    expect_clean,
    liqoctl_run,
    purge,
    sigkill,
    start_sites,
    stopped,
    unique,
)
from tests.integration.modes.tethers import accepting, budget, placed, virtual_node_of
from tests.shared import eventually

REPLICAS = 12
"""Pods of 100m: the laptop's virtual node for the enterprise holds them all (the enterprise offers its 2 CPUs whole),
and the enterprise's scheduler spreads them over its own nodes and the laptop's, which has the most room."""


@pytest.fixture(scope="module")
def trio() -> Iterator[dict[str, Site]]:
    made = start_sites(
        {
            "laptop": ClusterSpec(name=unique("t-laptop"), nodes=1),
            "enterprise": ClusterSpec(name=unique("t-corp"), nodes=2, node_cpu="1", node_memory="4Gi"),
            "friend": ClusterSpec(name=unique("t-friend"), nodes=1),
        }
    )
    try:
        yield made
    finally:
        purge(*(site.cluster for site in made.values()))


@pytest.fixture(scope="module")
def pair(trio: dict[str, Site]) -> tuple[Site, Site]:
    """The laptop and the enterprise, peered both ways (the last test unpeers them)."""
    laptop, enterprise = trio["laptop"], trio["enterprise"]

    async def peer_both_ways() -> None:
        async with laptop.client() as home, enterprise.client() as corp:
            await peering.peer(home, corp, timeout=60)
            await peering.peer(corp, home, timeout=60)

    asyncio.run(peer_both_ways())
    return laptop, enterprise


async def mode(site: Site, *args: str) -> tuple[int, dict[str, Any] | str]:
    """``liqoctl mode ARGS -o json`` on ``site``: its exit code and what it printed (JSON, or the error)."""
    argv = ("mode", *args, "-o", "json", f"--kubeconfig={site.cluster.kubeconfig}")
    done = await asyncio.to_thread(liqoctl_run, *argv, timeout=240)
    return done.returncode, orjson.loads(done.stdout) if done.returncode == 0 else done.stderr


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
        work = unique("work")
        await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": work}})
        await home.create(DEPLOYMENTS, deployment("web", work, replicas=REPLICAS, cpu="100m"))
        await placed(home, work, count=REPLICAS, where=bool)

        # Refused while the enterprise does not accept tethered clusters: said, and nothing written.
        code, said = await mode(laptop, "tethered", "--to", enterprise.cluster_id)
        assert code == 1
        assert "refused (NotAccepted)" in str(said)
        assert await home.get_or_none(WORKING_MODES, NAME) is None

        async with accepting(corp, home, laptop=laptop, enterprise=enterprise):
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

            async def untethered() -> bool:  # the laptop's offer lost its tether's mark
                records, _ = await corp.list_all(FOREIGN_CLUSTERS)
                laptop_records = [r for r in records if r["spec"]["clusterID"] == laptop.cluster_id]
                return bool(laptop_records) and not any((r.get("status") or {}).get("tethered") for r in laptop_records)

            await eventually(untethered, timeout=60, message="the enterprise's record of the laptop: not tethered")
        for namespace in (work, later):
            await home.delete(NAMESPACES, namespace)


async def test_a_tether_is_refused_while_the_laptop_also_provides_to_another_peer(
    trio: dict[str, Site], pair: tuple[Site, Site]
) -> None:
    laptop, enterprise = pair
    friend = trio["friend"]
    async with laptop.client() as home, enterprise.client() as corp, friend.client() as pal:
        await peering.peer(pal, home, timeout=60)  # the friend consumes from the laptop
        try:
            async with accepting(corp, home, laptop=laptop, enterprise=enterprise):
                before = await home.get_or_none(WORKING_MODES, NAME)
                code, said = await mode(laptop, "tethered", "--to", enterprise.cluster_id)
                assert code == 1
                assert "refused (ProvidesToOthers)" in str(said)
                assert friend.cluster_id in str(said)
                after = await home.get_or_none(WORKING_MODES, NAME)
                assert (after or {}).get("spec") == (before or {}).get("spec"), "a refused switch wrote its spec"
        finally:
            await peering.unpeer(pal, laptop.cluster_id, timeout=90)
        await expect_clean(pal)


async def phase_of(client: KubeClient) -> str:
    return str(((await client.get(WORKING_MODES, NAME)).get("status") or {}).get("phase"))


async def switched(client: KubeClient, phase: str) -> None:
    async def there() -> bool:
        working_mode = await client.get(WORKING_MODES, NAME)
        conditions = (working_mode.get("status") or {}).get("conditions") or []
        done = any(c.get("type") == "Switched" and c.get("status") == "True" for c in conditions)
        return done and await phase_of(client) == phase

    await eventually(there, timeout=120, message=f"the switch to {phase} done")


async def some_placed(client: KubeClient, namespace: str, *, at_least: int, where: Any) -> None:
    """Until ``at_least`` live pods of ``namespace`` run where ``where(node)`` says: a switch under way."""

    async def enough() -> bool:
        pods, _ = await client.list_all(PODS, namespace=namespace)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return (
            sum(
                1
                for p in live
                if (p.get("status") or {}).get("phase") == "Running" and where(p["spec"].get("nodeName"))
            )
            >= at_least
        )

    await eventually(enough, timeout=60, message=f"{at_least} pods moved in {namespace}", every=0.05)


async def test_a_manager_killed_in_the_middle_of_either_switch_resumes_it(pair: tuple[Site, Site]) -> None:
    laptop, enterprise = pair
    async with laptop.client() as home, enterprise.client() as corp:
        work = unique("killed")
        await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": work}})
        await home.create(DEPLOYMENTS, deployment("web", work, replicas=REPLICAS, cpu="100m"))
        await budget(home, work, "web")  # one pod at a time: the switch takes long enough to be caught in it
        await placed(home, work, count=REPLICAS, where=bool)
        async with accepting(corp, home, laptop=laptop, enterprise=enterprise):
            code, row = await mode(laptop, "tethered", "--to", enterprise.cluster_id, "--no-wait")
            assert code == 0, row
            peer_node = await virtual_node_of(home, enterprise.cluster_id)
            await some_placed(home, work, at_least=2, where=lambda node: node == peer_node)
            assert await phase_of(home) == "Tethering"
            await sigkill(laptop, MANAGER)
            await placed(home, work, count=REPLICAS, where=lambda node: node == peer_node, timeout=180)
            await switched(home, "Tethered")

            code, row = await mode(laptop, "autonomous", "--no-wait")
            assert code == 0, row
            await some_placed(home, work, at_least=2, where=lambda node: node and node != peer_node)
            assert await phase_of(home) == "Untethering"
            await sigkill(laptop, MANAGER)
            await placed(home, work, count=REPLICAS, where=lambda node: node and node != peer_node, timeout=180)
            await switched(home, "Autonomous")
            assert await home.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=work) is None
            twin = names.twin_namespace(work, home_cluster_id=laptop.cluster_id)

            async def twin_gone() -> bool:
                return await corp.get_or_none(NAMESPACES, twin) is None

            await eventually(twin_gone, timeout=60, message="no twin left on the enterprise")
        await home.delete(NAMESPACES, work)


async def test_the_tether_falls_back_while_the_enterprise_is_gone_longer_than_asked(pair: tuple[Site, Site]) -> None:
    laptop, enterprise = pair
    replicas = 4
    async with laptop.client() as home, enterprise.client() as corp:
        work = unique("alone")
        await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": work}})
        await home.create(DEPLOYMENTS, deployment("web", work, replicas=replicas, cpu="100m"))
        async with accepting(corp, home, laptop=laptop, enterprise=enterprise):
            code, row = await mode(laptop, "tethered", "--to", enterprise.cluster_id, "--fallback-after", "30")
            assert code == 0, row
            peer_node = await virtual_node_of(home, enterprise.cluster_id)
            await placed(home, work, count=replicas, where=lambda node: node == peer_node)
            async with stopped(enterprise, "kube-apiserver"):
                code, row = await mode(laptop)
                assert code == 0, row

                async def fell_back() -> bool:
                    working_mode = await home.get(WORKING_MODES, NAME)
                    conditions = (working_mode.get("status") or {}).get("conditions") or []
                    return await phase_of(home) == "Autonomous" and any(
                        c.get("type") == "Switched" and c.get("reason") == "FellBack" for c in conditions
                    )

                await eventually(fell_back, timeout=150, message="the laptop Autonomous again (FellBack)")
                # Every replica runs on the laptop alone; those on the silent enterprise wait, Terminating.
                await placed(home, work, count=replicas, where=lambda node: node and node != peer_node)
            code, row = await mode(laptop)
            assert isinstance(row, dict)
            assert (row["mode"], row["phase"]) == ("Tethered", "Autonomous"), row  # asked, but not made again

            async def settled() -> bool:
                pods, _ = await home.list_all(PODS, namespace=work)
                offloading = await home.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=work)
                return len(pods) == replicas and offloading is None

            await eventually(
                settled, timeout=120, message="the enterprise back: its leftovers finished, no offloading left"
            )
        code, row = await mode(laptop, "autonomous")
        assert code == 0, row
        await home.delete(NAMESPACES, work)


async def test_zz_unpeered_both_ways_nothing_is_left(pair: tuple[Site, Site]) -> None:
    laptop, enterprise = pair
    async with laptop.client() as home, enterprise.client() as corp:
        await peering.unpeer(home, enterprise.cluster_id, timeout=90)
        await peering.unpeer(corp, laptop.cluster_id, timeout=90)
        await expect_clean(home, corp)
