"""What a pod asks of a node: the Kubernetes *effective request* (and limit), per resource (pure).

Three places need the very rule the scheduler applies: the provider, to tell how much of a node its pods
already hold (``liqo.sharing.capacity``) and how much of a consumer's budget a ShadowPod takes
(``liqo.offloading.budget``), and the consumer's virtual kubelet, to tell whether a pod fits any slot the
provider can still place (``liqo.virtualkubelet.fit``). If they computed a pod's size differently, a pod
judged to fit at home could fit no node, or no budget, remotely — so the rule lives once, down here.

A container's limit with no request of the same resource is also its request: the API server defaults it
so when the pod is created. Pods read back from an API server already carry it; a ShadowPod's pod, which
no API server has defaulted yet, must be measured as the pod it will become.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from liqo.api.quantity import parse_quantity

Resources = dict[str, Decimal]

RESOURCE_PATHS = (
    "spec.containers[].resources",
    "spec.containers[].restartPolicy",
    "spec.initContainers[].resources",
    "spec.initContainers[].restartPolicy",
    "spec.resources",
    "spec.overhead",
)
"""Every field of a pod the rules below read: what a cache (:class:`~liqo.kube.projection.Projection`) of pods
that are only measured must keep. Change it with the rules."""


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for ``pod``: its effective requests, per resource.

    The rule of Kubernetes' ``resource.PodRequests``: regular containers and sidecars (init containers with
    ``restartPolicy: Always``) run together, so their requests add up; every other init container runs alone
    after the sidecars declared before it, so it needs its own requests plus theirs; the pod needs the larger
    of the two phases, per resource. Pod-level requests (``spec.resources``), where set, replace that
    aggregate, and the runtime's ``overhead`` comes on top. A limit without a request counts as the request
    (the API server's defaulting).

    Raises:
        QuantityError: A request is not a quantity (the API server normally prevents it).
    """
    return _effective(pod, _requests)


def pod_limits(pod: Mapping[str, Any]) -> Resources:
    """The limits ``pod`` declares, aggregated by the same rule as :func:`pod_requests` (``PodLimits``).

    Only declared limits count: a container without a limit of some resource adds nothing for it.

    Raises:
        QuantityError: A limit is not a quantity.
    """
    return _effective(pod, _limits)


def _effective(pod: Mapping[str, Any], amounts: Callable[[Mapping[str, Any]], Resources]) -> Resources:
    spec = pod.get("spec") or {}
    running = _sum(amounts(c) for c in spec.get("containers") or [])
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        own = amounts(container)
        if container.get("restartPolicy") == "Always":
            running = _sum((running, own))
            sidecars = _sum((sidecars, own))
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _sum((sidecars, own)))
    effective = _max(running, init_peak)
    effective |= amounts(spec)  # pod-level resources
    return _sum((effective, _quantities(spec.get("overhead"))))


def covers(room: Mapping[str, Decimal], request: Mapping[str, Decimal]) -> bool:
    """Whether ``room`` holds at least ``request`` of every resource ``request`` names (missing room: 0)."""
    return all(room.get(resource, Decimal(0)) >= amount for resource, amount in request.items())


def _requests(holder: Mapping[str, Any]) -> Resources:
    resources = holder.get("resources") or {}
    return _quantities(resources.get("limits")) | _quantities(resources.get("requests"))


def _limits(holder: Mapping[str, Any]) -> Resources:
    return _quantities((holder.get("resources") or {}).get("limits"))


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
