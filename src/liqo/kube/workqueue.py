"""A deduplicating, delaying, rate-limited work queue with client-go's semantics, for one event loop.

Controllers are level-triggered: an item (usually an object key) must be reconciled once after its latest
change, not once per event. So, as in client-go's ``workqueue``, the queue keeps three structures:

* a FIFO of items waiting for a worker;
* a ``dirty`` set of items that need processing, which makes a burst of adds of one item collapse into a
  single entry in the FIFO;
* a ``processing`` set of items handed out and not yet :meth:`~WorkQueue.done`. Adding such an item only
  marks it dirty; ``done`` puts it back in the FIFO. Two workers therefore never hold the same item, and an
  add during processing is never lost.

On top of that, :meth:`~WorkQueue.add_after` parks items on a heap served by a single timer (never a task
or a sleep per item), and :meth:`~WorkQueue.add_rate_limited` asks a :class:`~liqo.kube.ratelimit.RateLimiter`
how long to park a failed item. Everything but :meth:`~WorkQueue.get` is synchronous, so informer event
handlers can enqueue without awaiting anything.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from liqo.kube.errors import KubeError
from liqo.kube.ratelimit import RateLimiter, default_controller_rate_limiter

T = TypeVar("T", bound=Hashable)


class ShutDown(KubeError):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down and has no items left to hand out."""


class Timer(Protocol):
    """A scheduled callback that can be called off (an :class:`asyncio.TimerHandle` is one)."""

    def cancel(self) -> None:
        """Make sure the callback does not run."""
        ...


class Clock(Protocol):
    """The time source and timer of the delaying part of the queue.

    A running :class:`asyncio.AbstractEventLoop` is one, and the default. Tests inject a fake one whose time
    moves only when told to, which makes delays deterministic without patching the event loop.
    """

    def time(self) -> float:
        """The current time, in seconds on a monotonic scale."""
        ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> Timer:
        """Run ``callback`` once :meth:`time` reaches ``when``."""
        ...


# (ready_at, sequence number, item): the sequence number keeps items due at the same time in the order they
# were added, and means items themselves are never compared.
_Entry = tuple[float, int, T]


class WorkQueue(Generic[T]):
    """client-go's rate-limiting work queue: ``add``/``get``/``done`` plus ``add_after`` and ``add_rate_limited``.

    Args:
        rate_limiter: decides the delays of :meth:`add_rate_limited`; by default
            :func:`~liqo.kube.ratelimit.default_controller_rate_limiter`.
        clock: time source and timer for :meth:`add_after`; by default the running event loop.
    """

    def __init__(self, *, rate_limiter: RateLimiter | None = None, clock: Clock | None = None) -> None:
        self._rate_limiter = rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        self._clock = clock
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        # Waiting items: a heap, plus each item's live entry. An add_after with an earlier time replaces the
        # live entry; the superseded one stays in the heap and is skipped when it surfaces.
        self._heap: list[_Entry[T]] = []
        self._waiting: dict[T, _Entry[T]] = {}
        self._sequence = itertools.count()
        self._timer: Timer | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        """The number of items ready for a worker (neither those being processed nor those waiting)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        """Whether :meth:`shut_down` has been called."""
        return self._shutting_down

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing; a no-op if it already is, or if the queue is shut down."""
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if item in self._processing:
            return  # done() puts it back in the queue
        self._queue.append(item)
        self._wake_one()

    async def get(self) -> T:
        """Wait for an item and mark it as being processed; the caller must call :meth:`done` with it.

        Raises:
            ShutDown: the queue is shut down and no item is left.
        """
        while not self._queue:
            if self._shutting_down:
                raise ShutDown
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                if getter in self._getters:
                    self._getters.remove(getter)
                # This getter may have been woken for an item just before being cancelled: pass the wake-up on
                # so the item does not sit in the queue while another getter waits.
                if self._queue:
                    self._wake_one()
                raise
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.remove(item)
        return item

    def done(self, item: T) -> None:
        """Mark the processing of ``item`` as finished, queueing it again if it was added meanwhile.

        Raises:
            ValueError: ``item`` is not being processed (``done`` was called twice, or without ``get``).
        """
        if item not in self._processing:
            raise ValueError(f"{item!r} is not being processed")
        self._processing.remove(item)
        if item in self._dirty:
            self._queue.append(item)
            self._wake_one()

    def shut_down(self) -> None:
        """Stop accepting items and wake every waiting :meth:`get`.

        Items already queued are still handed out, after which :meth:`get` raises :class:`ShutDown`. Items
        waiting for their :meth:`add_after` time are dropped.
        """
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._waiting.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    def add_after(self, item: T, delay: float) -> None:
        """Add ``item`` once ``delay`` seconds have passed (at once if ``delay <= 0``).

        If ``item`` is already waiting, the earlier of the two times wins.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        clock = self._current_clock()
        ready_at = clock.time() + delay
        live = self._waiting.get(item)
        if live is not None and live[0] <= ready_at:
            return
        entry = (ready_at, next(self._sequence), item)
        self._waiting[item] = entry
        heapq.heappush(self._heap, entry)
        self._arm(clock)

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after the delay the rate limiter assigns to it (which counts as one more failure)."""
        self.add_after(item, self._rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Clear the failure history of ``item`` in the rate limiter; it does not remove ``item`` from the queue."""
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many failures of ``item`` the rate limiter has on record."""
        return self._rate_limiter.num_requeues(item)

    def _current_clock(self) -> Clock:
        return self._clock if self._clock is not None else asyncio.get_running_loop()

    def _wake_one(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            # A cancelled getter is done before its task gets to remove it from the deque.
            if not getter.done():
                getter.set_result(None)
                return

    def _arm(self, clock: Clock) -> None:
        """Point the one timer at the earliest live entry."""
        # Dropping superseded entries here keeps the timer from firing for them.
        while self._heap and self._waiting.get(self._heap[0][2]) is not self._heap[0]:
            heapq.heappop(self._heap)
        if not self._heap:
            return
        ready_at = self._heap[0][0]
        if self._timer is not None:
            if self._timer_at == ready_at:
                return
            self._timer.cancel()
        self._timer = clock.call_at(ready_at, self._fire)
        self._timer_at = ready_at

    def _fire(self) -> None:
        clock = self._current_clock()
        # The event loop may run a timer a clock tick early; the time it was set for counts as reached.
        now = max(clock.time(), self._timer_at)
        self._timer = None
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            item = entry[2]
            if self._waiting.get(item) is entry:
                del self._waiting[item]
                self.add(item)
        self._arm(clock)
