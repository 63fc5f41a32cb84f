"""The free capacity of a provider: what its real nodes can still schedule.

An offer is a share of this, so it has to be what the scheduler would also conclude: only nodes that can
take new pods count (Ready, not cordoned), and a pod uses what the scheduler reserves for it, the Kubernetes
*effective request* (init containers run before the others, sidecars alongside them, plus the runtime's
overhead). Virtual nodes are left out: they stand for *other* clusters' offers, and counting them would
re-offer a third cluster's resources as this one's — a loop once two clusters peer both ways.

A consumer's own pods here are not subtracted from its capacity: they already run inside its offer, and
subtracting them would shrink the offer (the consumer's budget) as the consumer uses it, until the budget
holds back pods that fit the share it was given.

The offer is a sum over nodes, and a sum hides fragmentation: 8 CPUs free as 4 + 4 cannot run a pod of 6,
yet a virtual node of capacity 8 makes the consumer's scheduler bind one to it. So the offer also carries
its *largest slots* (:func:`largest_slots`): what a single pod can still get on one node, which the
consumer's virtual kubelet checks before sending a pod. A slot is physical room, so unlike the offer it
counts every pod on the node, the consumer's own included: they occupy the node whatever the budget says.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.podrequests import RESOURCE_PATHS, Resources, covers, pod_requests
from liqo.api.quantity import parse_quantity, round_down
from liqo.kube.projection import keep

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_REPELLING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

MAX_SLOTS = 3
"""How many slots an offer carries: enough for a few distinct shapes, small enough to compare cheaply."""

Requests = Callable[[Mapping[str, Any]], Resources]
"""How a pod's effective requests are measured: :func:`~liqo.api.podrequests.pod_requests`, or a memo of it."""

POD_FIELDS = keep("metadata", "spec.nodeName", "status.phase", *RESOURCE_PATHS)
"""All this module reads of a pod: a cache of pods used for capacity keeps only these."""
NODE_FIELDS = keep("metadata", "spec.unschedulable", "spec.taints", "status.allocatable", "status.conditions")
"""All this module reads of a node (not its images, addresses, daemon endpoints...)."""


class RequestsMemo:
    """:func:`~liqo.api.podrequests.pod_requests`, remembered per pod version.

    Free capacity and slots are recomputed over every pod of the cluster, up to once a second during a
    burst, while a pod's requests change only with its spec: measuring every pod afresh each time was most
    of a provider manager's CPU in a 1000-pod rollout (``make bench-offload``). Entries are keyed by UID and
    checked against the resourceVersion, so a pod that changed (an in-place resize) is measured again;
    :meth:`forget` drops a deleted pod's.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, Resources]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> Resources:
        """``pod``'s effective requests, measured once per version of the pod."""
        meta = pod["metadata"]
        uid, version = meta.get("uid", ""), meta.get("resourceVersion", "")
        known = self._known.get(uid)
        if known is not None and known[0] == version:
            return known[1]
        requests = pod_requests(pod)
        self._known[uid] = (version, requests)
        return requests

    def __len__(self) -> int:
        """How many pods are remembered."""
        return len(self._known)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Drop what is known of ``pod`` (it was deleted)."""
        self._known.pop(pod["metadata"].get("uid", ""), None)


def free_capacity(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    exclude_namespaces: Collection[str] = frozenset(),
    requests: Requests = pod_requests,
) -> Resources:
    """What the schedulable, real nodes can still host, per resource.

    Args:
        nodes: Node objects.
        pods: Pod objects (of every namespace).
        exclude_namespaces: Namespaces whose pods are not subtracted: those this cluster hosts for the
            consumer the capacity is computed for.
        requests: How a pod's requests are measured (a :class:`RequestsMemo` spares measuring it again).

    Returns:
        Per resource of the eligible nodes' allocatable (``cpu``, ``memory``, ``pods``, extended
        resources...): allocatable minus the requests of the non-terminal pods bound to those nodes, each
        pod counting 1 toward ``pods``. Never negative; empty when no node is eligible.
    """
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
        for resource, amount in requests(pod).items():
            if resource in free:
                free[resource] -= amount
        if "pods" in free:
            free["pods"] -= 1
    return {resource: max(amount, Decimal(0)) for resource, amount in free.items()}


def is_eligible(node: Mapping[str, Any]) -> bool:
    """Whether ``node`` counts as local capacity: Ready, schedulable and not a virtual node."""
    labels = node["metadata"].get("labels") or {}
    if labels.get(names.VIRTUAL_NODE_TYPE) == names.VIRTUAL_NODE or (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_placeable(node: Mapping[str, Any]) -> bool:
    """Whether an offloaded pod can be placed on ``node``: eligible, and without a taint keeping pods off.

    The pods a provider runs for consumers tolerate none of its taints (the ShadowPod drops the home
    pod's tolerations: they name home taints), so a ``NoSchedule`` or ``NoExecute`` taint — a control
    plane, a node reserved for a team, one the node lifecycle controller marked — keeps every one of them
    off; ``PreferNoSchedule`` only discourages the scheduler.
    """
    taints = (node.get("spec") or {}).get("taints") or []
    return is_eligible(node) and not any(taint.get("effect") in _REPELLING_EFFECTS for taint in taints)


def node_free(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *, requests: Requests = pod_requests
) -> dict[str, Resources]:
    """Per placeable node (by name): its allocatable minus the requests of the non-terminal pods bound to it.

    Every pod counts (see the module's note on slots), each 1 toward ``pods``; never negative.
    """
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
        for resource, amount in requests(pod).items():
            if resource in room:
                room[resource] -= amount
        if "pods" in room:
            room["pods"] -= 1
    return {name: {r: max(amount, Decimal(0)) for r, amount in room.items()} for name, room in free.items()}


def largest_slots(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    offer: Mapping[str, Decimal],
    requests: Requests = pod_requests,
) -> list[Resources]:
    """The largest pods the provider can still place, as up to :data:`MAX_SLOTS` distinct shapes.

    Args:
        nodes: Node objects.
        pods: Pod objects (of every namespace).
        offer: The offer the slots go with (:func:`liqo.sharing.policy.compute_offer`).
        requests: How a pod's requests are measured (as for :func:`free_capacity`).

    Returns:
        One shape per placeable node with room for one more pod (:func:`node_free`), over the offer's
        resources but ``pods`` (0 for one the node lacks), each amount capped by the offer — a slot never
        promises more than the offer — and rounded down as the offer is. Shapes another one covers are
        dropped (every pod fitting them fits it too); of the rest, the largest by CPU and the largest by
        memory are always kept (so that neither a CPU-heavy nor a memory-heavy pod is refused for want of a
        slot), then the next ones by CPU. Ordered by CPU, then memory, then the other resources by name,
        largest first. Empty when no node can take a pod.

    ``pods`` is left out of the shapes: every pod needs exactly one, so it says nothing about size, and it
    moves with every pod, which would make every pod look like a change of slots.
    """
    shapes: dict[tuple[tuple[str, Decimal], ...], Resources] = {}
    for room in node_free(nodes, pods, requests=requests).values():
        if room.get("pods", Decimal(1)) < 1:
            continue  # full: not even the smallest pod goes there
        shape = {
            r: round_down(min(room.get(r, Decimal(0)), cap), resource=r) for r, cap in offer.items() if r != "pods"
        }
        shapes.setdefault(tuple(sorted(shape.items())), shape)
    ordered = sorted(shapes.values(), key=_cpu_first, reverse=True)
    if not ordered:
        return []
    # A shape covering another is at least as large in every resource, so it comes first in either order:
    # the first by CPU and the first by memory are covered by nothing, and coverage needs only the shapes
    # before a candidate (the scan stops as soon as enough slots are found).
    chosen = [max(ordered, key=_memory_first)]
    for index, shape in enumerate(ordered):
        if len(chosen) == MAX_SLOTS:
            break
        if shape not in chosen and not any(covers(other, shape) for other in ordered[:index]):
            chosen.append(shape)
    return sorted(chosen, key=_cpu_first, reverse=True)


def _cpu_first(slot: Mapping[str, Decimal]) -> tuple[Decimal, ...]:
    others = (amount for resource, amount in sorted(slot.items()) if resource not in ("cpu", "memory"))
    return slot.get("cpu", Decimal(0)), slot.get("memory", Decimal(0)), *others


def _memory_first(slot: Mapping[str, Decimal]) -> tuple[Decimal, ...]:
    cpu, memory, *others = _cpu_first(slot)
    return memory, cpu, *others
