"""The virtual kubelet's metrics: offloaded pods and what they use, read from its caches, and reflection lag.

Pods bound to a virtual node are the ones its pod reflector already caches (a field-selected informer per
node), so counting them per phase and adding up their requests happens at scrape time over that cache
(:func:`offloaded_pods`, :func:`used_resources`: pure), never on the reflection's path. Only pods whose
reflection runs are seen: a node whose provider identity is missing reflects, and reports, nothing.

Reflection lag is an event, so it is recorded as it happens: the time from the change a reflector follows
being observed (an informer event that queued its key) to the write on the provider completing, retries and
their backoff included (:meth:`liqo.kube.controller.Controller.since_change`). A change that needs no write
records nothing: the histogram measures how stale the provider's copy was, not how busy the reflector is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Iterator
from decimal import Decimal
from typing import Any

from prometheus_client import Histogram

from liqo.api.podrequests import pod_requests
from liqo.api.quantity import QuantityError
from liqo.kube.controller import Controller
from liqo.kube.metrics import Sample
from liqo.kube.objects import Obj

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

REFLECTION_LAG = Histogram(
    "liqo_reflection_lag_seconds",
    "From a change being observed to the provider's copy written (ShadowPods, copies), retries included.",
    ["reflector"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)


def written(reflector: str, controller: Controller[Any], key: Hashable) -> None:
    """The provider's copy of ``key`` was just written by ``controller``'s reconcile: record the lag."""
    lag = controller.since_change(key)
    if lag is not None:
        REFLECTION_LAG.labels(reflector).observe(lag)


def _phase(pod: Obj) -> str:
    # A pod just bound has no phase yet: the API server reports it Pending.
    return str((pod.get("status") or {}).get("phase") or "Pending")


def offloaded_pods(pods: Iterable[Obj], *, node: str, provider: str) -> Iterator[Sample]:
    """``((node, provider, phase), count)`` for the pods bound to virtual node ``node``."""
    for phase, count in sorted(Counter(_phase(pod) for pod in pods).items()):
        yield (node, provider, phase), float(count)


def used_resources(pods: Iterable[Obj], *, provider: str) -> Iterator[Sample]:
    """``((provider, resource), amount)``: the effective requests of the pods not finished, ``pods`` included.

    What the consumer's scheduler counts against the virtual node, and what the provider's budget holds for
    them once they run: a finished pod holds nothing. A pod whose requests do not parse counts as a pod only.
    """
    total: defaultdict[str, Decimal] = defaultdict(Decimal)
    for pod in pods:
        if _phase(pod) in _TERMINAL_PHASES:
            continue
        total["pods"] += 1
        try:
            requests = pod_requests(pod)
        except QuantityError:
            continue
        for resource, amount in requests.items():
            total[resource] += amount
    for resource, amount in sorted(total.items()):
        yield (provider, resource), float(amount)
