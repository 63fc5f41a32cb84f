"""What a pod asks of a node: the Kubernetes *effective request*, per resource (pure).

Two sides need the very rule the scheduler applies: the provider, to tell how much of a node its pods
already hold (``liqo.sharing.capacity``), and the consumer's virtual kubelet, to tell whether a pod fits
any slot the provider can still place (``liqo.virtualkubelet.fit``). If the two computed a pod's size
differently, a pod judged to fit at home could fit no node remotely — so the rule lives once, down here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from liqo.api.quantity import parse_quantity

Resources = dict[str, Decimal]


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for ``pod``: its effective requests, per resource.

    The rule of Kubernetes' ``resource.PodRequests``: regular containers and sidecars (init containers with
    ``restartPolicy: Always``) run together, so their requests add up; every other init container runs alone
    after the sidecars declared before it, so it needs its own requests plus theirs; the pod needs the larger
    of the two phases, per resource. Pod-level requests (``spec.resources``), where set, replace that
    aggregate, and the runtime's ``overhead`` comes on top.

    Raises:
        QuantityError: A request is not a quantity (the API server normally prevents it).
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


def covers(room: Mapping[str, Decimal], request: Mapping[str, Decimal]) -> bool:
    """Whether ``room`` holds at least ``request`` of every resource ``request`` names (missing room: 0)."""
    return all(room.get(resource, Decimal(0)) >= amount for resource, amount in request.items())


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
