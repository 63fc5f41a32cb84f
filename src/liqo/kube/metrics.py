"""A process's Prometheus metrics, and the plain-HTTP listener serving them beside its health probes.

Two kinds of metric, chosen by where the number lives:

- **Events** (a reconcile took 40 ms, failed, was retried) exist only as they happen, so the controller
  runtime records them as they happen: :class:`RuntimeMetrics`, which every
  :class:`~liqo.kube.controller.Controller` records into under its name, so every control loop of every
  capability is measured without a line of its own.
- **States** (peers by condition, what an offer holds, pods on a virtual node, a queue's depth) already live
  in informer caches or in a controller's memory. They are read when Prometheus scrapes (:class:`CacheGauge`,
  a pure function of the caches, served by :class:`CacheCollector`) rather than pushed from the hot paths
  that change them: a change costs nothing, a value cannot go stale, and a component that stops (a replica
  losing the lease) takes its series with it instead of leaving its last values behind.

The collectors read caches that the event loop mutates, so a scrape runs on the event loop, never in a
thread: a dict changing size mid-iteration would fail the scrape. Scraping a few hundred series takes a
millisecond or two.

One registry per process, prometheus_client's default, which also carries the process's own CPU, memory
and file descriptors (``process_*``) and the interpreter's (``python_*``). The runtime metrics, gauges and
the listener take the registry as an argument, so tests use a fresh one; a metric of a capability's own
(reflection lag) sits on the default one and is tested by its increase.

prometheus_client takes a tenth of a second to import, which liqoctl (it imports modules defining
controllers, never running one) must not pay: :mod:`liqo.kube.controller` and :mod:`liqo.kube.component`
import this module only when a controller is built or components run.

The listener (:func:`serve_metrics`) is plain HTTP, separate from the TLS listeners peers and the API
server call: ``/metrics``, ``/healthz`` (the process's event loop answers) and ``/readyz`` (what the
process says readiness is: its serving listeners are up, not that it leads).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

Sample = tuple[Sequence[str], float]
"""One sample of a gauge: its label values (in the order of :attr:`CacheGauge.labels`) and its value."""

RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a reconcile reading caches takes about a millisecond, one writing takes an API round trip (a few
ms on loopback, tens across clusters), one probing an unreachable peer runs into its client's timeout."""


@dataclass(frozen=True, slots=True)
class CacheGauge:
    """A gauge family whose samples are computed from caches (or a controller's memory) at each scrape.

    Attributes:
        name: The family's name.
        documentation: Its help text.
        labels: Its label names.
        samples: The samples now; must only read memory (it runs on the event loop, during the scrape).
    """

    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: Callable[[], Iterable[Sample]]


class CacheCollector(Collector):
    """Serves :class:`CacheGauge` families to a registry."""

    def __init__(self, gauges: Sequence[CacheGauge]) -> None:
        self._gauges = list(gauges)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without samples: what the registry checks for name clashes, computing nothing."""
        for gauge in self._gauges:
            yield GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Every family with its samples now; a family whose reader fails is left out, not the whole scrape."""
        for gauge in self._gauges:
            family = GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)
            try:
                for labels, value in gauge.samples():
                    family.add_metric(labels, value)
            except Exception:
                log.exception("metric %s could not be read", gauge.name)
                continue
            yield family


@contextlib.contextmanager
def registered(collector: Collector, registry: CollectorRegistry = REGISTRY) -> Iterator[None]:
    """``collector`` in ``registry`` for the duration (while a component runs, while a replica leads)."""
    registry.register(collector)
    try:
        yield
    finally:
        registry.unregister(collector)


class RuntimeMetrics:
    """The controller runtime's metrics, labelled by controller name.

    Counters and the latency histogram accumulate per name across a controller's restarts (the reflection of
    a virtual node restarts with a renewed identity), as Prometheus expects of counters. Queue depth is read
    at scrape time from the queues of the controllers running now (:meth:`running`).
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.reconcile_duration = Histogram(
            "liqo_controller_reconcile_duration_seconds",
            "Time a reconcile took, failed ones included.",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "liqo_controller_reconcile_errors_total", "Reconciles that raised.", ["controller"], registry=registry
        )
        self.retries = Counter(
            "liqo_workqueue_retries_total",
            "Items put back in the queue with a backoff after a failed reconcile.",
            ["controller"],
            registry=registry,
        )
        self.dropped = Counter(
            "liqo_controller_dropped_total",
            "Items given up on after failing max_retries times in a row (until an event queues them again).",
            ["controller"],
            registry=registry,
        )
        self._queues: dict[str, list[Sized]] = {}
        registry.register(
            CacheCollector(
                [
                    CacheGauge(
                        "liqo_workqueue_depth",
                        "Items waiting for a worker (neither being reconciled nor waiting for a delay).",
                        ("controller",),
                        self._depths,
                    )
                ]
            )
        )

    @contextlib.contextmanager
    def running(self, name: str, queue: Sized) -> Iterator[None]:
        """Report the depth of ``queue`` under ``name`` while the block runs."""
        self._queues.setdefault(name, []).append(queue)
        try:
            yield
        finally:
            queues = self._queues[name]
            queues.remove(queue)
            if not queues:
                del self._queues[name]

    def _depths(self) -> Iterator[Sample]:
        # Two controllers of one name (a reflection restarting while the old one drains) add up.
        for name, queues in self._queues.items():
            yield (name,), float(sum(len(queue) for queue in queues))


RUNTIME = RuntimeMetrics()
"""The runtime metrics of this process, on the default registry: what a controller records into by default."""


def metrics_app(*, ready: Callable[[], bool], registry: CollectorRegistry = REGISTRY) -> web.Application:
    """``/metrics`` (Prometheus text or OpenMetrics, as the scraper asks), ``/healthz`` and ``/readyz``.

    Args:
        ready: Whether the process is ready to serve; ``/readyz`` answers 200 when it is, 503 when not.
        registry: What ``/metrics`` serves.
    """

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def listen_address(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (the host may be an IPv6 address in brackets) as a pair; ``""`` as None, "not at all" (pure).

    Raises:
        ValueError: Not ``HOST:PORT`` with a port from 0 to 65535.
    """
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


async def serve_metrics(
    address: tuple[str, int], *, ready: Callable[[], bool], registry: CollectorRegistry = REGISTRY
) -> web.AppRunner:
    """Start :func:`metrics_app` on ``address`` (plain HTTP); the caller cleans the runner up."""
    runner = web.AppRunner(metrics_app(ready=ready, registry=registry), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address[0], address[1]).start()
    log.info("metrics and health probes on http://%s:%d", *address)
    return runner
