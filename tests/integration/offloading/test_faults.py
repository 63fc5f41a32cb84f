"""Faults while pods are offloaded: killed processes mid-burst, the provider's API server gone for a minute.

After each fault the two clusters must agree exactly: every home pod Running with one ShadowPod and one
pod in milan, nothing left over on either side (no duplicate, no orphan).
"""

from __future__ import annotations

import asyncio
from typing import Any

from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.resources import SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.resources import DEPLOYMENTS, NODES, PODS
from tests.integration.helpers import Offloaded, Site, deployment, running, running_pods, sigkill, stopped
from tests.shared import eventually

BURST = 30


async def agree(rome: KubeClient, milan: KubeClient, offloaded: Offloaded, count: int) -> None:
    """Exactly ``count`` pods, Running at home, each with one ShadowPod and one pod in milan."""

    async def settled() -> bool:
        home = [p for p in (await rome.list_all(PODS, namespace=offloaded.namespace))[0] if running(p)]
        shadows, _ = await milan.list_all(SHADOW_PODS, namespace=offloaded.twin)
        remote = [p for p in (await milan.list_all(PODS, namespace=offloaded.twin))[0] if running(p)]
        names = sorted(p["metadata"]["name"] for p in home)
        return (
            len(home) == count
            and sorted(s["metadata"]["name"] for s in shadows) == names
            and sorted(p["metadata"]["name"] for p in remote) == names
        )

    await eventually(settled, timeout=120, message=f"{count} pods agreeing between rome and milan")
    # Nothing extra at home either: no pod of the Deployment is stuck elsewhere.
    everything, _ = await rome.list_all(PODS, namespace=offloaded.namespace)
    assert len(everything) == count


async def sigkill_mid_burst(site: Site, component: str, shadows_seen: KubeClient, offloaded: Offloaded) -> None:
    """SIGKILL ``component`` of ``site`` once milan holds a few ShadowPods of the burst."""

    async def some_shadows() -> bool:
        return len((await shadows_seen.list_all(SHADOW_PODS, namespace=offloaded.twin))[0]) >= 3

    await eventually(some_shadows, timeout=60, message="the burst under way", every=0.02)
    await sigkill(site, component)


async def test_virtual_kubelet_killed_mid_burst(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(DEPLOYMENTS, deployment("burst", offloaded.namespace, replicas=BURST, cpu="10m"))
    await sigkill_mid_burst(sites["rome"], VIRTUAL_KUBELET, milan, offloaded)
    await agree(rome, milan, offloaded, BURST)
    await rome.patch(DEPLOYMENTS, "burst", {"spec": {"replicas": 5}}, namespace=offloaded.namespace)
    await agree(rome, milan, offloaded, 5)


async def test_provider_manager_killed_mid_burst(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(DEPLOYMENTS, deployment("burst", offloaded.namespace, replicas=BURST, cpu="10m"))
    await sigkill_mid_burst(sites["milan"], MANAGER, milan, offloaded)
    await agree(rome, milan, offloaded, BURST)


async def test_consumer_manager_killed_mid_burst(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(DEPLOYMENTS, deployment("burst", offloaded.namespace, replicas=BURST, cpu="10m"))
    await sigkill_mid_burst(sites["rome"], MANAGER, milan, offloaded)
    await agree(rome, milan, offloaded, BURST)


async def test_provider_api_server_down_for_a_minute(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(DEPLOYMENTS, deployment("steady", offloaded.namespace, replicas=5, cpu="10m"))
    await agree(rome, milan, offloaded, 5)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, offloaded.twin, 5)}
    home_before = {p["metadata"]["uid"] for p in await running_pods(rome, offloaded.namespace, 5)}

    def ready(node: dict[str, Any]) -> str:
        return str(next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"))

    async with stopped(sites["milan"], "kube-apiserver"):
        down_at = asyncio.get_running_loop().time()

        async def not_ready() -> bool:
            return ready(await rome.get(NODES, offloaded.node)) == "False"

        await eventually(not_ready, timeout=30, message="the virtual node NotReady while milan's API is down")
        # Home keeps its pods meanwhile: nothing at home deletes them for a provider outage.
        assert {p["metadata"]["uid"] for p in (await rome.list_all(PODS, namespace=offloaded.namespace))[0]} == (
            home_before
        )
        # A minute without milan's API server, counted from when it went down (the fault's duration).
        await asyncio.sleep(max(0.0, 60 - (asyncio.get_running_loop().time() - down_at)))

    async def ready_again() -> bool:
        return ready(await rome.get(NODES, offloaded.node)) == "True"

    await eventually(ready_again, timeout=60, message="the virtual node Ready again")
    # milan's own nodes came back with their addresses (its API server reaches its kubelets: logs, exec).
    for node in (await milan.list_all(NODES))[0]:
        assert {a["type"] for a in node["status"]["addresses"]} == {"InternalIP", "Hostname"}
    await agree(rome, milan, offloaded, 5)
    # The pods kept running in milan all along: the same pods, not re-created ones.
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, offloaded.twin, 5)}
    assert after == before
    assert {p["metadata"]["uid"] for p in await running_pods(rome, offloaded.namespace, 5)} == home_before


async def test_pods_keep_running_in_milan_while_home_is_unreachable(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """Split brain: rome's API server gone; nothing in milan depends on it, so nothing there changes."""
    await rome.create(DEPLOYMENTS, deployment("steady", offloaded.namespace, replicas=3, cpu="10m"))
    await agree(rome, milan, offloaded, 3)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, offloaded.twin, 3)}
    async with stopped(sites["rome"], "kube-apiserver"):
        # Meanwhile milan is asked directly: its pods are the same ones, still Running, and deleting one
        # brings it back (its ShadowPod, which only rome could withdraw, still wants it).
        victim = sorted(before)[0]
        await milan.delete(PODS, victim, namespace=offloaded.twin)

        async def back() -> bool:
            pods = {p["metadata"]["name"]: p for p in (await milan.list_all(PODS, namespace=offloaded.twin))[0]}
            again = pods.get(victim)
            return again is not None and again["metadata"]["uid"] != before[victim] and running(again)

        await eventually(back, timeout=30, message="milan re-created the pod while rome was away")
        survivors = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, offloaded.twin, 3)}
        assert {n: u for n, u in survivors.items() if n != victim} == {n: u for n, u in before.items() if n != victim}
    await agree(rome, milan, offloaded, 3)
