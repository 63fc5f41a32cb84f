"""No black holes: a pod rome's scheduler binds to the virtual node, but no milan node can hold, waits at home.

milan's two nodes of 8 CPUs are half filled, so its offer to rome (100 % of the free capacity, by a policy
naming rome) is 8 CPUs while neither node has more than 4 free. A pod of 6 CPUs fits the virtual node, so
rome's scheduler binds it there; the virtual kubelet checks it against milan's largest slot, holds it
back (Pending, ``DoesNotFitRemote``, an Event) and sends nothing. Freeing milan's nodes grows the slots,
the offer is republished, and the very same pod goes to milan and runs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from liqo.api import names
from liqo.api.quantity import parse_quantity
from liqo.api.resources import SHADOW_PODS, SHARING_POLICIES, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, NODES, PODS
from liqo.offloading import operations as offloading
from liqo.peering import operations
from tests.integration.helpers import RUN_ID, Site, expect_clean, recorded_event, unique
from tests.shared import eventually

REASON = "DoesNotFitRemote"


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def pod(name: str, namespace: str, *, cpu: str, node_name: str | None = None) -> Obj:
    requests = {"cpu": cpu, "memory": "64Mi"}
    spec: Obj = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name  # bound by hand: each filler on its own node, no scheduler involved
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def ready_condition(obj: Obj) -> Obj:
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return conditions.get("Ready") or {}


async def drop_namespace(client: KubeClient, name: str) -> None:
    """Delete a namespace and wait until it is gone (later tests measure milan's free capacity)."""
    await client.delete(NAMESPACES, name)

    async def gone() -> bool:
        try:
            await client.get(NAMESPACES, name)
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout=60, message=f"namespace {name} gone from {client.name}")


@dataclass
class HalfFull:
    """milan with both nodes half filled, its whole free capacity offered to rome, a namespace offloaded."""

    home: str
    twin: str
    filler: str
    fillers: list[str]


@pytest.fixture
async def half_full(sites: dict[str, Site], rome: KubeClient, milan: KubeClient) -> AsyncIterator[HalfFull]:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    filler, home = unique("filler"), unique("nbh")
    policy = f"all-for-rome-{RUN_ID}"
    async with contextlib.AsyncExitStack() as undo:  # undone in reverse: unoffload, unpeer, then milan's load
        await milan.create(NAMESPACES, namespace(filler))
        undo.push_async_callback(drop_namespace, milan, filler)
        nodes, _ = await milan.list_all(NODES, label_selector="type=kwok")
        assert len(nodes) == 2
        fillers = []
        for node in nodes:
            name = node["metadata"]["name"]
            await milan.create(PODS, pod(f"half-{name}", filler, cpu="4", node_name=name))
            fillers.append(f"half-{name}")
        await milan.apply(
            SHARING_POLICIES,
            {
                "apiVersion": SHARING_POLICIES.api_version,
                "kind": SHARING_POLICIES.kind,
                "metadata": {"name": policy},
                "spec": {"peers": [rome_id], "action": "Share", "percentage": 100},
            },
        )
        undo.push_async_callback(milan.delete, SHARING_POLICIES, policy)
        await operations.peer(rome, milan, timeout=30)
        undo.push_async_callback(operations.unpeer, rome, milan_id, timeout=90)
        await rome.create(NAMESPACES, namespace(home))
        undo.push_async_callback(rome.delete, NAMESPACES, home)
        await offloading.offload(rome, home, pod_offloading_strategy="Remote")
        undo.push_async_callback(offloading.unoffload, rome, home, timeout=60)
        await offloading.wait_offloaded(rome, home, timeout=60)
        twin = names.twin_namespace(home, home_cluster_id=rome_id)
        yield HalfFull(home=home, twin=twin, filler=filler, fillers=fillers)
    await expect_clean(rome, milan)


async def wait_offer(rome: KubeClient, *, provider_id: str, cpu: str, slot_cpu: str) -> Obj:
    """The virtual node once it (and its Node's capacity) offers ``cpu`` with a largest slot of ``slot_cpu``."""
    seen: list[Obj] = []

    async def offered() -> bool:
        found, _ = await rome.list_all(VIRTUAL_NODES, namespace=names.tenant_namespace(provider_id))
        if not found:
            return False
        spec = found[0]["spec"]
        slots = spec.get("largestSlots") or [{}]
        node = await rome.get(NODES, found[0]["metadata"]["name"])
        seen[:] = [node]
        return bool(
            parse_quantity(spec["resources"]["cpu"]) == parse_quantity(cpu)
            and parse_quantity(slots[0].get("cpu", "0")) == parse_quantity(slot_cpu)
            and node["status"]["capacity"]["cpu"] == spec["resources"]["cpu"]
        )

    await eventually(offered, timeout=30, message=f"an offer of {cpu} CPUs whose largest slot has {slot_cpu}")
    return seen[0]


async def test_a_pod_no_provider_node_can_hold_waits_at_home_until_one_can(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, half_full: HalfFull
) -> None:
    home, twin = half_full.home, half_full.twin
    node = await wait_offer(rome, provider_id=sites["milan"].cluster_id, cpu="8", slot_cpu="4")
    assert json.loads(node["metadata"]["annotations"][names.LARGEST_SLOTS])[0]["cpu"] == "4"

    # 6 CPUs: within the virtual node's capacity, beyond any milan node's free room.
    await rome.create(PODS, pod("big", home, cpu="6"))

    async def held_back() -> bool:
        big = await rome.get(PODS, "big", namespace=home)
        return bool(ready_condition(big).get("reason") == REASON)

    await eventually(held_back, timeout=30, message="the pod held back at home with DoesNotFitRemote")
    big = await rome.get(PODS, "big", namespace=home)
    assert big["spec"]["nodeName"] == node["metadata"]["name"]  # rome's scheduler did accept it
    assert big["status"]["phase"] == "Pending"
    message = ready_condition(big)["message"]
    assert "requests cpu=6, memory=64Mi" in message
    assert "largest slot is cpu=4" in message
    assert (await recorded_event(rome, namespace=home, reason=REASON, about="big"))["type"] == "Warning"
    assert not (await milan.list_all(SHADOW_PODS, namespace=twin))[0]  # nothing sent to milan

    # Free milan's nodes: the slots grow to 8 CPUs, the offer is republished, and the same pod goes.
    for name in half_full.fillers:
        await milan.delete(PODS, name, namespace=half_full.filler, grace_period_seconds=0)
    await wait_offer(rome, provider_id=sites["milan"].cluster_id, cpu="16", slot_cpu="8")

    async def running() -> bool:
        big = await rome.get(PODS, "big", namespace=home)
        try:
            remote = await milan.get(PODS, "big", namespace=twin)
        except NotFoundError:
            return False
        phase = (big.get("status") or {}).get("phase")
        return phase == "Running" and (remote.get("status") or {}).get("phase") == "Running"

    await eventually(running, timeout=60, message="the pod running in milan and shown Running at home")
    big = await rome.get(PODS, "big", namespace=home)
    assert "reason" not in big["status"]  # kubectl shows it as the pod's STATUS: not DoesNotFitRemote any more
    assert ready_condition(big)["status"] == "True"
