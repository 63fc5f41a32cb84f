"""The free capacity of a provider: what its real nodes can still schedule.

An offer is a share of this, so it has to be what the scheduler would also conclude: only nodes that can
take new pods count (Ready, not cordoned), and a pod uses what the scheduler reserves for it, the Kubernetes
*effective request* (init containers run before the others, sidecars alongside them, plus the runtime's
overhead). Virtual nodes are left out: they stand for *other* clusters' offers, and counting them would
re-offer a third cluster's resources as this one's — a loop once two clusters peer both ways.

A consumer's own pods here are not subtracted from its capacity: they already run inside its offer, and
subtracting them would shrink the offer (and the quota enforcing it) as the consumer uses it, until the
quota refuses pods that fit the share it was given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.quantity import parse_quantity

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

Resources = dict[str, Decimal]


def free_capacity(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    exclude_namespaces: Collection[str] = frozenset(),
) -> Resources:
    """What the schedulable, real nodes can still host, per resource.

    Args:
        nodes: Node objects.
        pods: Pod objects (of every namespace).
        exclude_namespaces: Namespaces whose pods are not subtracted: those this cluster hosts for the
            consumer the capacity is computed for.

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
        for resource, amount in pod_requests(pod).items():
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


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for ``pod``: its effective requests, per resource.

    The rule of Kubernetes' ``resource.PodRequests``: regular containers and sidecars (init containers with
    ``restartPolicy: Always``) run together, so their requests add up; every other init container runs alone
    after the sidecars declared before it, so it needs its own requests plus theirs; the pod needs the larger
    of the two phases, per resource. Pod-level requests (``spec.resources``), where set, replace that
    aggregate, and the runtime's ``overhead`` comes on top.
    """
    spec = pod.get("spec") or {}
    running = _sum(_container_requests(c) for c in spec.get("containers") or [])
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            running = _sum((running, requests))
            sidecars = _sum((sidecars, requests))
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _sum((sidecars, requests)))
    effective = _max(running, init_peak)
    effective |= _quantities((spec.get("resources") or {}).get("requests"))
    return _sum((effective, _quantities(spec.get("overhead"))))


def _container_requests(container: Mapping[str, Any]) -> Resources:
    return _quantities((container.get("resources") or {}).get("requests"))


def _quantities(resources: Mapping[str, Any] | None) -> Resources:
    return {name: parse_quantity(amount) for name, amount in (resources or {}).items()}


def _sum(lists: Iterable[Resources]) -> Resources:
    total: Resources = defaultdict(Decimal)
    for resources in lists:
        for name, amount in resources.items():
            total[name] += amount
    return dict(total)


def _max(a: Resources, b: Resources) -> Resources:
    return {name: max(a.get(name, Decimal(0)), b.get(name, Decimal(0))) for name in a.keys() | b.keys()}
