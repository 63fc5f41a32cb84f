"""A burst of offloaded pods rewrites the provider's offer a bounded number of times, not once per pod.

Each write of a ResourceOffer cascades (replicated to the consumer, its VirtualNode, the Node's spec,
status and Lease), and nearly every pod the provider places shrinks its largest slot: published as they
moved, a rollout of N pods cost up to one offer write per second of the rollout. Here a Deployment of
:data:`BURST` pods is offloaded from rome to milan while a watch on milan counts the offer's rewrites; the
offer must still catch up with the slots milan's nodes really have left.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.quantity import parse_quantity, round_down
from liqo.api.resources import RESOURCE_OFFERS
from liqo.kube.client import KubeClient
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.resources import DEPLOYMENTS, NODES, PODS
from liqo.sharing.policy import REPUBLISH_SECONDS
from tests.integration.helpers import Offloaded, Site, deployment, running
from tests.shared import eventually

BURST = 100
MAX_REWRITES = 5
"""A few threshold-sized steps of the slots, plus one catch-up per REPUBLISH_SECONDS of the burst."""


async def largest_free_cpu(client: KubeClient) -> Decimal:
    """The most CPU one of the provider's schedulable nodes has left, computed independently of liqo's code."""
    nodes, _ = await client.list_all(NODES)
    pods, _ = await client.list_all(PODS)
    rooms: dict[str, Decimal] = {}
    for node in nodes:
        spec, status = node.get("spec") or {}, node.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        repelled = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
        virtual = (node["metadata"].get("labels") or {}).get(names.VIRTUAL_NODE_TYPE) == names.VIRTUAL_NODE
        if ready and not repelled and not virtual and not spec.get("unschedulable"):
            rooms[node["metadata"]["name"]] = parse_quantity(status["allocatable"]["cpu"])
    for pod in pods:
        name = pod["spec"].get("nodeName")
        if name not in rooms or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            rooms[name] -= parse_quantity(((container.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
    return max(rooms.values())


async def test_a_burst_of_offloaded_pods_rewrites_the_offer_a_few_times(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    tenant, offer_key = names.tenant_namespace(sites["rome"].cluster_id), sites["milan"].cluster_id
    rewrites = 0

    def count(old: dict[str, Any], new: dict[str, Any]) -> None:
        nonlocal rewrites
        rewrites += old.get("spec") != new.get("spec")

    offers = Informer(client=milan, resource=RESOURCE_OFFERS, namespace=tenant)
    offers.add_handler(HandlerFuncs(update=count))
    watching = asyncio.create_task(offers.run())
    try:
        assert await offers.wait_synced(30)
        await rome.create(DEPLOYMENTS, deployment("burst", offloaded.namespace, replicas=BURST, cpu="20m"))

        async def all_running() -> bool:
            pods, _ = await milan.list_all(PODS, namespace=offloaded.twin)
            return sum(running(p) for p in pods) == BURST

        await eventually(all_running, timeout=300, every=1, message=f"{BURST} pods Running in milan")
        during_burst = rewrites

        async def caught_up() -> bool:
            offer = offers.store.get(f"{tenant}/{offer_key}")
            if offer is None:
                return False
            spec = offer["spec"]
            expected = round_down(
                min(await largest_free_cpu(milan), parse_quantity(spec["resources"]["cpu"])), resource="cpu"
            )
            return max(parse_quantity(s["cpu"]) for s in spec["largestSlots"]) == expected

        await eventually(
            caught_up, timeout=REPUBLISH_SECONDS + 30, every=1, message="the offer's largest slot is milan's real one"
        )
        print(f"\n{BURST} offloaded pods: {during_burst} offer rewrites during the burst, {rewrites} in all")
        assert rewrites <= MAX_REWRITES
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await rome.delete(DEPLOYMENTS, "burst", namespace=offloaded.namespace)
