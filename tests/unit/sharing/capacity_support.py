"""What the sharing tests share: the ledger's oracle, and a ledger fed lists of nodes and pods.

The provider keeps free capacity and per-node room incrementally
(:class:`liqo.sharing.capacity.CapacityLedger`); :func:`free_capacity` and :func:`node_free` are the
definitions it must agree with, computed from scratch over every node and pod as plainly as possible.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from liqo.api.podrequests import Resources, pod_requests
from liqo.api.quantity import parse_quantity
from liqo.sharing.capacity import CapacityLedger, is_eligible, is_placeable

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def free_capacity(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    exclude_namespaces: Collection[str] = frozenset(),
) -> Resources:
    """Allocatable of the eligible nodes minus the requests of the non-terminal pods bound there (and 1 pod each)."""
    eligible = [node for node in nodes if is_eligible(node)]
    eligible_names = {node["metadata"]["name"] for node in eligible}
    free: Resources = defaultdict(Decimal)
    for node in eligible:
        for resource, amount in ((node.get("status") or {}).get("allocatable") or {}).items():
            free[resource] += parse_quantity(amount)
    for pod in pods:
        if (
            (pod.get("spec") or {}).get("nodeName") not in eligible_names
            or (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES
            or pod["metadata"].get("namespace") in exclude_namespaces
        ):
            continue
        for resource, amount in pod_requests(pod).items():
            if resource in free:
                free[resource] -= amount
        if "pods" in free:
            free["pods"] -= 1
    return {resource: max(amount, Decimal(0)) for resource, amount in free.items()}


def node_free(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> dict[str, Resources]:
    """Per placeable node: its allocatable minus the requests of every non-terminal pod bound to it."""
    free: dict[str, Resources] = {
        node["metadata"]["name"]: {
            resource: parse_quantity(amount)
            for resource, amount in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        for node in nodes
        if is_placeable(node)
    }
    for pod in pods:
        room = free.get((pod.get("spec") or {}).get("nodeName") or "")
        if room is None or (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
            continue
        for resource, amount in pod_requests(pod).items():
            if resource in room:
                room[resource] -= amount
        if "pods" in room:
            room["pods"] -= 1
    return {name: {r: max(amount, Decimal(0)) for r, amount in room.items()} for name, room in free.items()}


def ledger_of(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> CapacityLedger:
    """A ledger fed ``nodes`` and ``pods``, each pod renamed apart so that none replaces another."""
    ledger = CapacityLedger()
    for node in nodes:
        ledger.set_node(node)
    for index, pod in enumerate(pods):
        ledger.set_pod(dict(pod) | {"metadata": pod["metadata"] | {"name": f"{pod['metadata']['name']}-{index}"}})
    return ledger
