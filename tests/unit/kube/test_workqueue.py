import asyncio
import heapq
import itertools
from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.workqueue import ShutDown, WorkQueue

DEADLINE = 2.0


class FakeTimer:
    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False
        self.fired = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Time that moves only in :meth:`advance`, which runs due timers synchronously, in time order."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._sequence = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object], /) -> FakeTimer:
        timer = FakeTimer(callback)
        heapq.heappush(self._timers, (when, next(self._sequence), timer))
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while self._timers and self._timers[0][0] <= self.now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.fired = True
                timer.callback()

    @property
    def live_timers(self) -> int:
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)


async def get_soon(queue: WorkQueue[str]) -> str:
    async with asyncio.timeout(DEADLINE):
        return await queue.get()


def start_getter(queue: WorkQueue[str]) -> asyncio.Task[str]:
    return asyncio.create_task(get_soon(queue))


def after_getters_block(callback: Callable[[], object]) -> None:
    # Callbacks run in the order they were scheduled: getter tasks created before this call take their
    # first step (and block on the empty queue) before ``callback`` runs.
    asyncio.get_running_loop().call_soon(callback)


# -- add / get / done -------------------------------------------------------------------------------------


async def test_add_deduplicates_and_keeps_first_add_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for item in "abacba":
        queue.add(item)
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]
    assert len(queue) == 0


async def test_add_during_processing_requeues_on_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0, "an item being processed must not be handed out again"
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_done_without_get_is_an_error() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    with pytest.raises(ValueError, match="not being processed"):
        queue.done("a")
    assert await queue.get() == "a"
    queue.done("a")
    with pytest.raises(ValueError, match="not being processed"):
        queue.done("a")


async def test_get_waits_for_an_add() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = start_getter(queue)
    after_getters_block(lambda: queue.add("a"))
    assert await getter == "a"


async def test_each_add_wakes_one_getter() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getters = [start_getter(queue) for _ in range(3)]

    def add_three() -> None:
        for item in "abc":
            queue.add(item)

    after_getters_block(add_three)
    assert sorted(await asyncio.gather(*getters)) == ["a", "b", "c"]


async def test_a_cancelled_getter_passes_its_wake_up_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first, second = start_getter(queue), start_getter(queue)

    def add_then_cancel_the_woken_getter() -> None:
        queue.add("a")
        first.cancel()

    after_getters_block(add_then_cancel_the_woken_getter)
    assert await second == "a"
    assert first.cancelled()


async def test_a_cancelled_getter_is_not_woken() -> None:
    queue: WorkQueue[str] = WorkQueue()
    cancelled, waiting = start_getter(queue), start_getter(queue)
    after_getters_block(cancelled.cancel)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    queue.add("a")
    assert await waiting == "a"


# -- shutdown ---------------------------------------------------------------------------------------------


async def test_shut_down_wakes_every_getter() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getters = [start_getter(queue) for _ in range(3)]
    after_getters_block(queue.shut_down)
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(result, ShutDown) for result in results)
    assert queue.shutting_down


async def test_shut_down_drains_queued_items_and_ignores_new_ones() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    assert await queue.get() == "a"
    queue.add("a")
    queue.shut_down()
    queue.add("c")
    queue.add_after("d", 1.0)
    queue.add_rate_limited("e")
    assert await queue.get() == "b"
    queue.done("b")
    # "a" was added while being processed, before the shutdown: it is still handed out once more.
    queue.done("a")
    assert await queue.get() == "a"
    queue.done("a")
    with pytest.raises(ShutDown):
        await queue.get()


def test_shut_down_drops_waiting_items_and_their_timer() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1.0)
    assert clock.live_timers == 1
    queue.shut_down()
    assert clock.live_timers == 0
    clock.advance(10.0)
    assert len(queue) == 0


# -- add_after --------------------------------------------------------------------------------------------


def test_add_after_adds_when_due_and_not_before() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 5.0)
    clock.advance(4.999)
    assert len(queue) == 0
    clock.advance(0.001)
    assert len(queue) == 1


@pytest.mark.parametrize("delay", [0.0, -1.0])
def test_add_after_without_delay_adds_now(delay: float) -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", delay)
    assert len(queue) == 1
    assert clock.live_timers == 0


async def test_add_after_earlier_time_wins() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 10.0)
    queue.add_after("a", 2.0)
    clock.advance(2.0)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    clock.advance(100.0)
    assert len(queue) == 0, "the superseded later time must not add the item again"
    assert clock.live_timers == 0


def test_add_after_later_time_does_not_postpone() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 2.0)
    queue.add_after("a", 10.0)
    clock.advance(2.0)
    assert len(queue) == 1


async def test_add_after_hands_out_by_due_time_then_by_add_order() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for item, delay in [("late", 3.0), ("tie-1", 2.0), ("early", 1.0), ("tie-2", 2.0)]:
        queue.add_after(item, delay)
    clock.advance(5.0)
    assert [await queue.get() for _ in range(4)] == ["early", "tie-1", "tie-2", "late"]


def test_add_after_uses_one_timer_for_all_waiting_items() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for index in range(100):
        queue.add_after(f"item-{index}", 1.0 + (index * 7919 % 100) / 10)
        assert clock.live_timers == 1
    for _ in range(25):
        clock.advance(0.5)
        assert clock.live_timers == (1 if len(queue) < 100 else 0)
    assert len(queue) == 100


def test_add_after_an_item_already_queued_keeps_one_entry() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add("a")
    queue.add_after("a", 1.0)
    clock.advance(1.0)
    assert len(queue) == 1


async def test_add_after_on_the_event_loop_clock() -> None:
    queue: WorkQueue[str] = WorkQueue()
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue.add_after("a", 0.02)
    assert len(queue) == 0
    assert await get_soon(queue) == "a"
    assert loop.time() - start >= 0.02 - 1e-6


# -- rate limiting ----------------------------------------------------------------------------------------


async def test_add_rate_limited_backs_off_until_forgotten() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(
        rate_limiter=ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=4.0), clock=clock
    )
    for expected_delay in [1.0, 2.0, 4.0, 4.0]:
        queue.add_rate_limited("a")
        clock.advance(expected_delay - 0.01)
        assert len(queue) == 0
        clock.advance(0.01)
        assert await queue.get() == "a"
        queue.done("a")
    assert queue.num_requeues("a") == 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    clock.advance(1.0)
    assert len(queue) == 1


# -- invariants under arbitrary interleavings -------------------------------------------------------------

ITEMS = st.sampled_from("abcd")
DELAYS = st.sampled_from([0.0, 1.0, 2.0, 3.0])


class WorkQueueMachine(RuleBasedStateMachine):
    """Drives a queue with arbitrary add/add_after/get/done/time/shutdown steps, next to a model of it.

    The model is client-go's queue, written as plainly as possible. The properties checked on top:
    (a) an item is never handed out while it is being processed; (b) every add is followed by the item
    being handed out (checked when the run is drained); (c) the queue never holds an item twice; (d) items
    come out in the order of their first add (or of their due time, for add_after).
    """

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.queue: WorkQueue[str] = WorkQueue(clock=self.clock)
        self.fifo: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, int]] = {}
        self.sequence = itertools.count()
        self.shut = False
        # Items added since they were last handed out: (b) requires this to end up empty.
        self.owed: set[str] = set()

    def model_add(self, item: str) -> None:
        if self.shut:
            return
        self.owed.add(item)
        if item in self.dirty:
            return
        self.dirty.add(item)
        if item not in self.processing:
            self.fifo.append(item)

    def get(self) -> str:
        return self.loop.run_until_complete(self.queue.get())

    @rule(item=ITEMS)
    def add(self, item: str) -> None:
        self.queue.add(item)
        self.model_add(item)

    @rule(item=ITEMS, delay=DELAYS)
    def add_after(self, item: str, delay: float) -> None:
        self.queue.add_after(item, delay)
        if self.shut:
            return
        if delay <= 0:
            self.model_add(item)
            return
        ready_at = self.clock.now + delay
        if item not in self.waiting or self.waiting[item][0] > ready_at:
            self.waiting[item] = (ready_at, next(self.sequence))

    @rule(seconds=DELAYS)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        due = sorted((when, item) for item, when in self.waiting.items() if when[0] <= self.clock.now)
        for _, item in due:
            del self.waiting[item]
            self.model_add(item)

    @precondition(lambda self: bool(self.fifo))
    @rule()
    def get_one(self) -> None:
        item = self.get()
        assert item not in self.processing, "(a) handed out an item that is being processed"
        assert item == self.fifo.pop(0), "(d) not in FIFO order"
        self.dirty.remove(item)
        self.processing.add(item)
        self.owed.discard(item)

    @precondition(lambda self: self.shut and not self.fifo)
    @rule()
    def get_after_drain(self) -> None:
        with pytest.raises(ShutDown):
            self.get()

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.processing)))
        self.queue.done(item)
        self.processing.remove(item)
        if item in self.dirty:
            self.fifo.append(item)

    @rule()
    def shut_down(self) -> None:
        self.queue.shut_down()
        self.shut = True
        self.waiting.clear()

    @invariant()
    def matches_model(self) -> None:
        assert len(set(self.fifo)) == len(self.fifo)
        assert len(self.queue) == len(self.fifo), "(c) the queue holds an item twice, or lost one"
        assert self.queue.shutting_down == self.shut
        assert self.clock.live_timers == (1 if self.waiting else 0)

    def teardown(self) -> None:
        try:
            self.drain_and_check_nothing_is_owed()
        finally:
            self.loop.close()

    def drain_and_check_nothing_is_owed(self) -> None:
        self.advance(max(self.waiting.values(), default=(self.clock.now, 0))[0] - self.clock.now)
        for item in sorted(self.processing):
            self.queue.done(item)
        self.queue.shut_down()
        for _ in range(100):
            try:
                item = self.get()
            except ShutDown:
                break
            self.owed.discard(item)
            self.queue.done(item)
        assert not self.owed, f"(b) added but never handed out afterwards: {sorted(self.owed)}"


def test_workqueue_invariants_hold_for_any_interleaving() -> None:
    run_state_machine_as_test(
        WorkQueueMachine, settings=settings(max_examples=300, stateful_step_count=40, deadline=None)
    )
