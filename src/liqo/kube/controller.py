"""The reconcile loop: a fixed number of workers draining one work queue into a reconcile function.

Reconcilers are level-triggered and idempotent, so the loop needs no knowledge of what changed: it hands
an item (usually an object key) to the reconciler, and on failure puts the item back with a rate-limited
delay until it succeeds or has failed ``max_retries`` times in a row, as virtual-kubelet's queue does. A
reconciler that wants to look again later returns :class:`Result` with ``requeue_after`` rather than
sleeping, which would tie up a worker.

Workers are tasks in one :class:`asyncio.TaskGroup`; cancellation is the only way to stop them, and it is
never mistaken for a reconcile error.

Every controller records its reconciles' latency, its errors, retries and dropped items, and its queue's
depth into :class:`~liqo.kube.metrics.RuntimeMetrics` under its name, so no capability instruments its own
loops. It also remembers, per item, when the oldest change it has not yet reconciled was observed
(:meth:`Controller.since_change`): a reconciler that writes elsewhere (the virtual kubelet's reflectors) can
tell how far its writes lag behind the changes they follow, retries and backoff included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.workqueue import ShutDown, WorkQueue

if TYPE_CHECKING:
    from liqo.kube.metrics import RuntimeMetrics

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Result:
    """What a successful reconcile asks of the loop.

    Attributes:
        requeue_after: reconcile the item again after this many seconds, even if nothing changes.
    """

    requeue_after: float | None = None


Reconciler = Callable[[T], Awaitable[Result | None]]
"""Reconciles one item; raising an exception means "retry later with backoff"."""


class Controller(Generic[T]):
    """Runs ``workers`` concurrent reconciles over the items of one work queue.

    An item is never reconciled by two workers at once (the queue guarantees it). The counters are plain
    attributes, this instance's alone, for tests and benchmarks; ``metrics`` adds up every instance of a name.

    Args:
        name: names the controller in logs, task names and the ``controller`` label of its metrics.
        reconcile: the reconcile function.
        workers: how many items may be reconciled concurrently.
        queue: the queue event handlers add items to; by default a new one with the default rate limiter.
        max_retries: consecutive failures after which an item is retried no more (until it is added again).
        metrics: where reconciles are recorded; by default the process's (``liqo.kube.metrics.RUNTIME``).
        clock: monotonic seconds, for latencies and :meth:`since_change`.

    Attributes:
        queue: the work queue.
        reconciles: reconciles that finished, successfully or not.
        errors: reconciles that raised.
        dropped: items given up on after ``max_retries`` failures.
    """

    def __init__(
        self,
        *,
        name: str,
        reconcile: Reconciler[T],
        workers: int = 1,
        queue: WorkQueue[T] | None = None,
        max_retries: int = 15,
        metrics: RuntimeMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a controller needs at least one worker, got {workers}")
        if metrics is None:
            # Here, not at the top: liqoctl imports modules that define controllers without running one, and
            # prometheus_client would add a tenth of a second to every command (docs/architecture.md, departure 1).
            from liqo.kube.metrics import RUNTIME  # noqa: PLC0415

            metrics = RUNTIME
        self.name = name
        self.queue: WorkQueue[T] = queue if queue is not None else WorkQueue()
        self.reconciles = 0
        self.errors = 0
        self.dropped = 0
        self._reconcile = reconcile
        self._workers = workers
        self._max_retries = max_retries
        self._metrics = metrics
        self._clock = clock
        self._duration = metrics.reconcile_duration.labels(name)
        self._errors = metrics.reconcile_errors.labels(name)
        self._retries = metrics.retries.labels(name)
        self._dropped = metrics.dropped.labels(name)
        # When each item's oldest unreconciled change was observed; moved to _acting_on while a reconcile of
        # the item runs, so that a change observed meanwhile starts a new entry for the next reconcile.
        self._changed: dict[T, float] = {}
        self._acting_on: dict[T, float] = {}

    def watch(
        self,
        informer: Informer,
        key: Callable[[dict[str, Any]], Iterable[T]],
        *,
        coalesce: float = 0.0,
        changed: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
    ) -> None:
        """Enqueue ``key(obj)`` for every object ``informer`` adds, updates or deletes.

        ``key`` maps an object to the items to reconcile (none, one, or several: an owner and its peers),
        as controller-runtime's ``Watches`` with a map function. It runs in the informer's handler, so it
        must be cheap and pure. ``coalesce`` (seconds) delays the item so that a burst of events (every pod
        of a rollout) makes one reconcile, not one per event. ``changed(old, new)``, if given, lets through
        only the updates it says matter (controller-runtime's update predicate): an object others keep
        rewriting in fields the reconciler does not read wakes it for nothing.
        """

        def enqueue(obj: dict[str, Any]) -> None:
            now = self._clock()
            for item in key(obj):
                self._changed.setdefault(item, now)
                self.queue.add_after(item, coalesce)

        def update(old: dict[str, Any], new: dict[str, Any]) -> None:
            if changed is None or changed(old, new):
                enqueue(new)

        informer.add_handler(HandlerFuncs(add=enqueue, update=update, delete=enqueue))

    async def run(self) -> None:
        """Reconcile items until cancelled (or until the queue is shut down and drained).

        The queue is shut down on the way out, so that nothing keeps adding to a queue nobody serves.
        """
        try:
            with self._metrics.running(self.name, self.queue):
                async with asyncio.TaskGroup() as workers:
                    for index in range(self._workers):
                        workers.create_task(self._work(), name=f"{self.name}-worker-{index}")
        finally:
            self.queue.shut_down()

    def since_change(self, item: T) -> float | None:
        """Seconds since the oldest change of ``item`` that the running reconcile of ``item`` acts on was observed.

        A change is an event of a watched informer that queued ``item``; a failed reconcile hands its change
        on to the retry. None outside a reconcile of ``item``, or when nothing observed queued it (a requeue,
        a re-queue of every key).
        """
        changed = self._acting_on.get(item)
        return None if changed is None else self._clock() - changed

    async def _work(self) -> None:
        while True:
            try:
                item = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._process(item)
            finally:
                self.queue.done(item)

    async def _process(self, item: T) -> None:
        changed = self._changed.pop(item, None)
        if changed is not None:
            self._acting_on[item] = changed
        started = self._clock()
        # CancelledError is a BaseException, so it passes through here and stops the worker.
        try:
            result = await self._reconcile(item)
        except Exception:
            self._duration.observe(self._clock() - started)
            self.reconciles += 1
            self.errors += 1
            self._errors.inc()
            failures = self.queue.num_requeues(item)
            if failures < self._max_retries:
                if changed is not None:
                    self._changed[item] = min(changed, self._changed.get(item, changed))
                self._retries.inc()
                logger.warning(
                    "%s: reconcile of %r failed, retrying (%d earlier failures)",
                    self.name,
                    item,
                    failures,
                    exc_info=True,
                )
                self.queue.add_rate_limited(item)
            else:
                logger.error(
                    "%s: reconcile of %r failed %d times, giving up", self.name, item, failures + 1, exc_info=True
                )
                self.dropped += 1
                self._dropped.inc()
                self.queue.forget(item)
        else:
            self._duration.observe(self._clock() - started)
            self.reconciles += 1
            self.queue.forget(item)
            if result is not None and result.requeue_after is not None:
                self.queue.add_after(item, result.requeue_after)
        finally:
            self._acting_on.pop(item, None)
