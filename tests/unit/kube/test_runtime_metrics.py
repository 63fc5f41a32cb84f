"""Runtime metrics: what a controller records (on an injected clock), queue depth, cache gauges, the listener."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, cast

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from liqo.kube.controller import Controller, Result
from liqo.kube.informer import EventHandler, Informer
from liqo.kube.metrics import CacheCollector, CacheGauge, RuntimeMetrics, Sample, listen_address, serve_metrics
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.workqueue import WorkQueue

DEADLINE = 2.0


class Clock:
    """Monotonic seconds that move only when a test (or a reconcile) says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeInformer:
    """Just enough of an Informer for ``Controller.watch``: the test fires the events."""

    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def update(self, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            handler.on_update(obj, obj)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def immediate_retry_queue() -> WorkQueue[str]:
    return WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(base_delay=0.0, max_delay=0.0))


class Calls:
    """Counts a test's reconcile calls; :meth:`reached` waits for the n-th to have started."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Event()

    def __call__(self) -> int:
        self.count += 1
        self._changed.set()
        return self.count

    async def reached(self, count: int) -> None:
        async with asyncio.timeout(DEADLINE):
            while self.count < count:
                self._changed.clear()
                await self._changed.wait()


async def drain(controller: Controller[str], calls: Calls, count: int) -> None:
    """Run ``controller`` until its reconcile has been called ``count`` times and that call has finished."""
    runner = asyncio.create_task(controller.run())
    await calls.reached(count)
    controller.queue.shut_down()  # the workers finish what they hold, then stop
    async with asyncio.timeout(DEADLINE):
        await runner


async def test_a_reconcile_records_its_latency_on_the_controllers_clock() -> None:
    registry, clock, calls = CollectorRegistry(), Clock(), Calls()

    async def reconcile(item: str) -> None:
        calls()
        clock.now += {"fast": 0.002, "slow": 3.0}[item]

    controller = Controller(name="timed", reconcile=reconcile, metrics=RuntimeMetrics(registry), clock=clock)
    controller.queue.add("fast")
    controller.queue.add("slow")
    await drain(controller, calls, 2)

    assert value(registry, "liqo_controller_reconcile_duration_seconds_count", controller="timed") == 2
    assert value(registry, "liqo_controller_reconcile_duration_seconds_sum", controller="timed") == pytest.approx(3.002)
    bucket = "liqo_controller_reconcile_duration_seconds_bucket"
    assert value(registry, bucket, controller="timed", le="0.0025") == 1
    assert value(registry, bucket, controller="timed", le="2.5") == 1
    assert value(registry, bucket, controller="timed", le="5.0") == 2
    assert value(registry, "liqo_controller_reconcile_errors_total", controller="timed") == 0


async def test_failures_count_as_errors_retries_and_finally_a_drop() -> None:
    registry, clock, calls = CollectorRegistry(), Clock(), Calls()

    async def reconcile(item: str) -> None:
        calls()
        clock.now += 0.5
        raise RuntimeError("boom")

    controller = Controller(
        name="flaky",
        reconcile=reconcile,
        queue=immediate_retry_queue(),
        max_retries=2,
        metrics=RuntimeMetrics(registry),
        clock=clock,
    )
    controller.queue.add("a")
    await drain(controller, calls, 3)

    assert controller.dropped == 1
    assert value(registry, "liqo_controller_reconcile_errors_total", controller="flaky") == 3
    assert value(registry, "liqo_workqueue_retries_total", controller="flaky") == 2
    assert value(registry, "liqo_controller_dropped_total", controller="flaky") == 1
    assert value(registry, "liqo_controller_reconcile_duration_seconds_sum", controller="flaky") == pytest.approx(1.5)


async def test_counters_add_up_over_every_controller_of_a_name() -> None:
    registry, calls = CollectorRegistry(), Calls()
    metrics = RuntimeMetrics(registry)

    async def reconcile(item: str) -> None:
        calls()
        raise RuntimeError("boom")

    for restart in range(2):  # a reflection restarted with a renewed identity: same name, new controller
        controller = Controller(name="again", reconcile=reconcile, max_retries=0, metrics=metrics)
        controller.queue.add("a")
        await drain(controller, calls, restart + 1)
    assert value(registry, "liqo_controller_reconcile_errors_total", controller="again") == 2


async def test_queue_depth_is_read_from_the_running_controllers_and_goes_with_them() -> None:
    registry, calls = CollectorRegistry(), Calls()
    release = asyncio.Event()

    async def reconcile(item: str) -> None:
        calls()
        await release.wait()

    controller = Controller(name="busy", reconcile=reconcile, metrics=RuntimeMetrics(registry))
    for item in "abc":
        controller.queue.add(item)
    assert value(registry, "liqo_workqueue_depth", controller="busy") is None, "not running: not reported"
    runner = asyncio.create_task(controller.run())
    await calls.reached(1)
    assert value(registry, "liqo_workqueue_depth", controller="busy") == 2, "one taken by the only worker"
    release.set()
    await calls.reached(3)
    assert value(registry, "liqo_workqueue_depth", controller="busy") == 0
    controller.queue.shut_down()
    async with asyncio.timeout(DEADLINE):
        await runner
    assert value(registry, "liqo_workqueue_depth", controller="busy") is None


async def test_since_change_is_the_age_of_the_oldest_change_a_reconcile_acts_on_retries_included() -> None:
    clock, calls = Clock(), Calls()
    informer = FakeInformer()
    ages: list[float | None] = []

    async def reconcile(item: str) -> Result | None:
        clock.now += 1.0
        ages.append(controller.since_change(item))
        if calls() == 1:
            informer.update({"name": item})  # observed during the reconcile: the retry still acts on the first
            raise RuntimeError("boom")
        return None

    controller: Controller[str] = Controller(
        name="lagging",
        reconcile=reconcile,
        queue=immediate_retry_queue(),
        metrics=RuntimeMetrics(CollectorRegistry()),
        clock=clock,
    )
    controller.watch(cast(Informer, informer), lambda obj: [obj["name"]])
    informer.update({"name": "a"})
    clock.now += 5.0  # waiting in the queue counts
    await drain(controller, calls, 2)

    assert ages == [6.0, 7.0]
    assert controller.since_change("a") is None, "only within a reconcile of the item"


async def test_a_requeue_alone_has_no_change_to_measure() -> None:
    ages: list[float | None] = []
    calls = Calls()

    async def reconcile(item: str) -> None:
        calls()
        ages.append(controller.since_change(item))

    metrics = RuntimeMetrics(CollectorRegistry())
    controller: Controller[str] = Controller(name="plain", reconcile=reconcile, metrics=metrics)
    controller.queue.add("a")
    await drain(controller, calls, 1)
    assert ages == [None]


def gauge(name: str, samples: Callable[[], Iterable[Sample]]) -> CacheGauge:
    return CacheGauge(name, f"{name} help", ("peer",), samples)


def test_cache_gauges_are_read_at_scrape_time_and_a_failing_one_is_left_out() -> None:
    registry = CollectorRegistry()
    peers = {"rome": 1.0}
    reads = 0

    def read() -> Iterable[Sample]:
        nonlocal reads
        reads += 1
        return [((peer,), amount) for peer, amount in peers.items()]

    def broken() -> Iterable[Sample]:
        raise KeyError("spec")

    registry.register(CacheCollector([gauge("liqo_test_broken", broken), gauge("liqo_test_peers", read)]))
    assert reads == 0, "registering describes the families without reading the caches"
    assert value(registry, "liqo_test_peers", peer="rome") == 1
    peers["milan"] = 2.0
    assert value(registry, "liqo_test_peers", peer="milan") == 2
    assert value(registry, "liqo_test_broken", peer="rome") is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9100", ("::1", 9100)),
        ("", None),
    ],
)
def test_listen_address(text: str, parsed: tuple[str, int] | None) -> None:
    assert listen_address(text) == parsed


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", "host:65536", "host:-1", "host:٣"])
def test_listen_address_refuses_what_is_no_host_and_port(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        listen_address(text)


async def test_the_listener_serves_metrics_liveness_and_readiness() -> None:
    registry = CollectorRegistry()
    registry.register(CacheCollector([gauge("liqo_test_peers", lambda: [(("rome",), 1.0)])]))
    ready = False
    runner = await serve_metrics(("127.0.0.1", 0), ready=lambda: ready, registry=registry)
    try:
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=")
                assert 'liqo_test_peers{peer="rome"} 1.0' in await response.text()
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 503
            ready = True
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 200
    finally:
        await runner.cleanup()
