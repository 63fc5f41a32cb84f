import asyncio
import logging
from collections import Counter
from typing import cast

import pytest

from liqo.kube.controller import Controller, Result
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.workqueue import WorkQueue

DEADLINE = 2.0


def immediate_retry_queue() -> WorkQueue[str]:
    """A queue whose rate limiter counts failures but never delays, so retries need no waiting."""
    return WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(base_delay=0.0, max_delay=0.0))


async def stop(controller: Controller[str], runner: asyncio.Task[None]) -> None:
    """Shut the queue down and wait for the workers to finish what they hold."""
    controller.queue.shut_down()
    async with asyncio.timeout(DEADLINE):
        await runner


async def test_reconciles_added_items_and_returns_once_the_queue_is_shut_down() -> None:
    seen: list[str] = []
    all_seen = asyncio.Event()

    async def reconcile(item: str) -> None:
        seen.append(item)
        if len(seen) == 3:
            all_seen.set()

    controller = Controller(name="test", reconcile=reconcile)
    runner = asyncio.create_task(controller.run())
    for item in "abca":
        controller.queue.add(item)
    async with asyncio.timeout(DEADLINE):
        await all_seen.wait()
    await stop(controller, runner)
    assert seen == ["a", "b", "c"]
    assert (controller.reconciles, controller.errors, controller.dropped) == (3, 0, 0)


async def test_failures_are_retried_then_dropped_after_max_retries(caplog: pytest.LogCaptureFixture) -> None:
    attempts = 0
    last_attempt = asyncio.Event()

    async def reconcile(item: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 4:
            last_attempt.set()
        raise RuntimeError(f"boom {attempts}")

    controller = Controller(name="flaky", reconcile=reconcile, queue=immediate_retry_queue(), max_retries=3)
    runner = asyncio.create_task(controller.run())
    with caplog.at_level(logging.WARNING, logger="liqo.kube.controller"):
        controller.queue.add("ns/obj")
        async with asyncio.timeout(DEADLINE):
            await last_attempt.wait()
        await stop(controller, runner)

    assert attempts == 4, "one attempt plus max_retries retries"
    assert (controller.reconciles, controller.errors, controller.dropped) == (4, 4, 1)
    assert controller.queue.num_requeues("ns/obj") == 0, "a dropped item must be forgotten"
    records = [record for record in caplog.records if record.name == "liqo.kube.controller"]
    assert [record.levelno for record in records] == [logging.WARNING] * 3 + [logging.ERROR]
    assert all("flaky" in record.getMessage() and "'ns/obj'" in record.getMessage() for record in records)
    assert all(record.exc_info is not None for record in records)


async def test_success_after_failures_forgets_the_backoff() -> None:
    attempts = 0
    succeeded = asyncio.Event()

    async def reconcile(item: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("not yet")
        succeeded.set()

    controller = Controller(name="test", reconcile=reconcile, queue=immediate_retry_queue())
    runner = asyncio.create_task(controller.run())
    controller.queue.add("a")
    async with asyncio.timeout(DEADLINE):
        await succeeded.wait()
    await stop(controller, runner)
    assert controller.queue.num_requeues("a") == 0
    assert (controller.reconciles, controller.errors, controller.dropped) == (3, 2, 0)


async def test_requeue_after_reconciles_again_later() -> None:
    loop = asyncio.get_running_loop()
    times: list[float] = []
    twice = asyncio.Event()

    async def reconcile(item: str) -> Result | None:
        times.append(loop.time())
        if len(times) == 2:
            twice.set()
            return None
        return Result(requeue_after=0.02)

    controller = Controller(name="test", reconcile=reconcile)
    runner = asyncio.create_task(controller.run())
    controller.queue.add("a")
    async with asyncio.timeout(DEADLINE):
        await twice.wait()
    await stop(controller, runner)
    assert len(times) == 2
    assert times[1] - times[0] >= 0.02 - 1e-6
    assert (controller.reconciles, controller.errors) == (2, 0)


async def test_workers_share_the_load_but_never_the_same_item() -> None:
    gates = {item: asyncio.Event() for item in "ab"}
    entered = {item: asyncio.Event() for item in "ab"}
    active: set[str] = set()
    overlaps: list[str] = []
    runs: Counter[str] = Counter()
    most_active = 0

    async def reconcile(item: str) -> None:
        nonlocal most_active
        if item in active:
            overlaps.append(item)
        active.add(item)
        most_active = max(most_active, len(active))
        runs[item] += 1
        entered[item].set()
        await gates[item].wait()
        active.discard(item)

    controller = Controller(name="test", reconcile=reconcile, workers=3)
    runner = asyncio.create_task(controller.run())
    async with asyncio.timeout(DEADLINE):
        controller.queue.add("a")
        await entered["a"].wait()
        entered["a"].clear()
        # "a" changes again while it is being reconciled, and "b" arrives: two workers are idle.
        controller.queue.add("a")
        controller.queue.add("b")
        await entered["b"].wait()
        assert active == {"a", "b"}
        assert len(controller.queue) == 0, "the re-added 'a' must wait for the running reconcile"
        gates["a"].set()
        await entered["a"].wait()
        gates["b"].set()
    await stop(controller, runner)
    assert overlaps == []
    assert runs == {"a": 2, "b": 1}
    assert most_active == 2
    assert controller.errors == 0


async def test_cancellation_stops_run_cleanly_and_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    entered = asyncio.Event()
    never = asyncio.Event()

    async def reconcile(item: str) -> None:
        entered.set()
        await never.wait()

    controller = Controller(name="test", reconcile=reconcile, workers=2)
    runner = asyncio.create_task(controller.run())
    controller.queue.add("a")
    async with asyncio.timeout(DEADLINE):
        await entered.wait()
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
    assert controller.queue.shutting_down
    assert (controller.reconciles, controller.errors, controller.dropped) == (0, 0, 0)
    with pytest.raises(ValueError, match="not being processed"):
        controller.queue.done("a")  # the worker released it on the way out
    assert not [record for record in caplog.records if record.name == "liqo.kube.controller"]


def test_a_controller_needs_a_worker() -> None:
    async def reconcile(item: str) -> None:
        return None

    with pytest.raises(ValueError, match="at least one worker"):
        Controller(name="test", reconcile=reconcile, workers=0)


class _Informer:
    """What ``Controller.watch`` needs of an informer: somewhere to add its handler."""

    def __init__(self) -> None:
        self.handlers: list[HandlerFuncs] = []

    def add_handler(self, handler: HandlerFuncs) -> None:
        self.handlers.append(handler)


async def reconcile_nothing(_item: str) -> None:
    return None


async def test_an_update_predicate_lets_through_only_the_updates_that_matter() -> None:
    """A quota's usage moves with every object made under it; its keeper reads only its bounds."""
    controller = Controller(name="test", reconcile=reconcile_nothing)
    informer = _Informer()
    controller.watch(
        cast(Informer, informer), lambda obj: [obj["key"]], changed=lambda old, new: old["bound"] != new["bound"]
    )
    [handler] = informer.handlers
    handler.on_update({"key": "a", "bound": 1, "used": 0}, {"key": "a", "bound": 1, "used": 5})
    assert len(controller.queue) == 0
    handler.on_update({"key": "a", "bound": 1, "used": 5}, {"key": "a", "bound": 2, "used": 5})
    handler.on_add({"key": "b", "bound": 1})
    handler.on_delete({"key": "c", "bound": 1})
    assert len(controller.queue) == 3
    controller.watch(cast(Informer, informer), lambda obj: [obj["key"]])
    informer.handlers[1].on_update({"key": "d", "bound": 1}, {"key": "d", "bound": 1})
    assert len(controller.queue) == 4  # no predicate: every update
