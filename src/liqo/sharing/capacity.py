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

Both are kept incrementally (:class:`CapacityLedger`), per node, from node and pod events: a provider
with tens of thousands of pods sees one event per pod change, and recomputing over every pod on each (or
once a second during a burst) would make the offer's upkeep grow with the cluster rather than with its
nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class _Node:
    allocatable: Resources
    eligible: bool
    placeable: bool


POD_FIELDS = keep("metadata", "spec.nodeName", "status.phase", *RESOURCE_PATHS)
"""All this module reads of a pod: a cache of pods used for capacity keeps only these."""
NODE_FIELDS = keep("metadata", "spec.unschedulable", "spec.taints", "status.allocatable", "status.conditions")
"""All this module reads of a node (not its images, addresses, daemon endpoints...)."""


@dataclass(slots=True)
class _Usage:
    """What the counted pods of one node (or of one namespace on it) take: summed amounts and how many pods."""

    amounts: Resources = field(default_factory=dict)
    count: int = 0

    def add(self, amounts: Mapping[str, Decimal], sign: int) -> None:
        for resource, amount in amounts.items():
            self.amounts[resource] = self.amounts.get(resource, Decimal(0)) + sign * amount
        self.count += sign


@dataclass(slots=True)
class _NodeUsage:
    total: _Usage = field(default_factory=_Usage)
    by_namespace: dict[str, _Usage] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Contribution:
    """What one pod added to its node's usage, remembered so that its update or delete takes back exactly that."""

    node: str
    namespace: str
    amounts: Resources


class CapacityLedger:
    """Free capacity and per-node room, kept up to date from node and pod events.

    Recomputing free capacity and slots over every pod (O(pods), about 0.4 CPU-s at 20 000 pods) once a
    second during a burst was most of a provider manager's work; here each event costs O(1) (a pod's
    requests are measured once, when it is added or changes), and :meth:`free` and :meth:`rooms` cost
    O(nodes). Per node, the ledger holds its allocatable and eligibility and the sum of the effective
    requests of the non-terminal pods bound to it — in total and per namespace, so that a consumer's own
    namespaces can be left out of its capacity — each pod's contribution remembered so that an update or a
    delete subtracts exactly what was added. Pods bound to a node not (yet) seen are accounted all the
    same: the node's events may come after its pods'.

    It is fed by informer handlers (:meth:`set_node`, :meth:`remove_node`, :meth:`set_pod`,
    :meth:`remove_pod`) and gives what the from-scratch computation over every node and pod would
    (property-tested against it).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._usage: dict[str, _NodeUsage] = {}
        self._pods: dict[tuple[str, str], _Contribution] = {}

    def __len__(self) -> int:
        """How many pods are counted."""
        return len(self._pods)

    def set_node(self, node: Mapping[str, Any]) -> None:
        """``node`` appeared or changed."""
        allocatable = ((node.get("status") or {}).get("allocatable")) or {}
        self._nodes[node["metadata"]["name"]] = _Node(
            allocatable={resource: parse_quantity(amount) for resource, amount in allocatable.items()},
            eligible=is_eligible(node),
            placeable=is_placeable(node),
        )

    def remove_node(self, node: Mapping[str, Any]) -> None:
        """``node`` is gone (its pods' usage stays, for as long as they are there)."""
        self._nodes.pop(node["metadata"]["name"], None)

    def set_pod(self, pod: Mapping[str, Any], *, source: str = "") -> None:
        """``pod`` appeared or changed: its previous contribution is replaced by what it takes now.

        ``source`` names the watch the event came from, when pods come from several whose selectors split
        them: a pod whose labels move it from one to the other is deleted from the first and added to the
        second, in either order, and must never end up uncounted.
        """
        self.remove_pod(pod, source=source)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
            return
        amounts = pod_requests(pod)
        # Every pod takes one of its node's ``pods``, on top of whatever it requests.
        amounts["pods"] = amounts.get("pods", Decimal(0)) + 1
        contribution = _Contribution(node=node_name, namespace=pod["metadata"].get("namespace") or "", amounts=amounts)
        self._pods[source, _pod_key(pod)] = contribution
        usage = self._usage.setdefault(node_name, _NodeUsage())
        usage.total.add(amounts, 1)
        usage.by_namespace.setdefault(contribution.namespace, _Usage()).add(amounts, 1)

    def remove_pod(self, pod: Mapping[str, Any], *, source: str = "") -> None:
        """``pod`` is gone (from the watch ``source``): take back what it added."""
        contribution = self._pods.pop((source, _pod_key(pod)), None)
        if contribution is None:
            return
        usage = self._usage[contribution.node]
        usage.total.add(contribution.amounts, -1)
        part = usage.by_namespace[contribution.namespace]
        part.add(contribution.amounts, -1)
        if not part.count:
            del usage.by_namespace[contribution.namespace]
        if not usage.total.count:
            del self._usage[contribution.node]

    def free(self, *, exclude_namespaces: Collection[str] = frozenset()) -> Resources:
        """What the schedulable, real nodes can still host, per resource.

        Args:
            exclude_namespaces: Namespaces whose pods are not subtracted: those this cluster hosts for the
                consumer the capacity is computed for.

        Returns:
            Per resource of the eligible nodes' allocatable (``cpu``, ``memory``, ``pods``, extended
            resources...): allocatable minus the requests of the non-terminal pods bound to those nodes, each
            pod counting 1 toward ``pods``. Never negative; empty when no node is eligible.
        """
        eligible = [name for name, node in self._nodes.items() if node.eligible]
        free: Resources = defaultdict(Decimal)
        for name in eligible:
            for resource, amount in self._nodes[name].allocatable.items():
                free[resource] += amount
        for name in eligible:
            usage = self._usage.get(name)
            if usage is None:
                continue
            _subtract(free, usage.total.amounts)
            for namespace in exclude_namespaces:
                part = usage.by_namespace.get(namespace)
                if part is not None:
                    _subtract(free, part.amounts, sign=-1)
        return {resource: max(amount, Decimal(0)) for resource, amount in free.items()}

    def rooms(self) -> dict[str, Resources]:
        """Per placeable node (by name): its allocatable minus the requests of the non-terminal pods bound to it.

        Every pod counts (see the module's note on slots), each 1 toward ``pods``; never negative.
        """
        rooms: dict[str, Resources] = {}
        for name, node in self._nodes.items():
            if not node.placeable:
                continue
            room = dict(node.allocatable)
            usage = self._usage.get(name)
            if usage is not None:
                _subtract(room, usage.total.amounts)
            rooms[name] = {resource: max(amount, Decimal(0)) for resource, amount in room.items()}
        return rooms


def _subtract(into: Resources, amounts: Mapping[str, Decimal], *, sign: int = 1) -> None:
    """Take ``amounts`` out of ``into`` (give them back if ``sign`` is -1), for the resources ``into`` has."""
    for resource, amount in amounts.items():
        if resource in into:
            into[resource] -= sign * amount


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or ''}/{meta['name']}"


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


def largest_slots(rooms: Iterable[Mapping[str, Decimal]], *, offer: Mapping[str, Decimal]) -> list[Resources]:
    """The largest pods the provider can still place, as up to :data:`MAX_SLOTS` distinct shapes.

    Args:
        rooms: What each placeable node can still host (:meth:`CapacityLedger.rooms`).
        offer: The offer the slots go with (:func:`liqo.sharing.policy.compute_offer`).

    Returns:
        One shape per room with space for one more pod, over the offer's resources but ``pods`` (0 for one
        the node lacks), each amount capped by the offer — a slot never promises more than the offer — and
        rounded down as the offer is. Shapes another one covers are dropped (every pod fitting them fits it
        too); of the rest, the largest by CPU and the largest by memory are always kept (so that neither a
        CPU-heavy nor a memory-heavy pod is refused for want of a slot), then the next ones by CPU. Ordered
        by CPU, then memory, then the other resources by name, largest first. Empty when no node can take a
        pod.

    ``pods`` is left out of the shapes: every pod needs exactly one, so it says nothing about size, and it
    moves with every pod, which would make every pod look like a change of slots.
    """
    shapes: dict[tuple[tuple[str, Decimal], ...], Resources] = {}
    for room in rooms:
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
