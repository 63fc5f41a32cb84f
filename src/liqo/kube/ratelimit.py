"""Rate limiters that decide how long a failed work item waits before it is retried.

The semantics are client-go's (``k8s.io/client-go/util/workqueue``) so that retry behaviour, and the
intuition operators have about it, carry over: a per-item exponential backoff keeps one broken object from
spinning, and a global token bucket keeps a burst of failures across many objects from hammering the API
server. :func:`default_controller_rate_limiter` is the combination every controller uses unless it has a
reason not to.

Limiters only compute delays; the work queue does the waiting. They are not thread-safe, by design: the
whole runtime lives on one event loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Protocol


class RateLimiter(Protocol):
    """How long an item must wait before it is retried, and the failure history behind that answer."""

    def when(self, item: Hashable) -> float:
        """Record one more failure of ``item`` and return the seconds to wait before retrying it."""
        ...

    def forget(self, item: Hashable) -> None:
        """Clear the failure history of ``item`` (it succeeded, or it is given up on)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many failures of ``item`` are on record."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-item exponential backoff: the n-th consecutive failure waits ``base_delay * 2**n``, at most ``max_delay``."""

    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        """Record a failure and return the backoff for it: ``base_delay``, then double that, and so on."""
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        try:
            backoff = math.ldexp(self._base_delay, exponent)
        except OverflowError:
            # An item that keeps failing for long enough outgrows a float; it has long been at the cap.
            return self._max_delay
        return min(backoff, self._max_delay)

    def forget(self, item: Hashable) -> None:
        """Reset the backoff of ``item``."""
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        """Consecutive failures of ``item`` since it was last forgotten."""
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """A token bucket shared by all items: ``burst`` retries at once, then ``qps`` per second.

    Like ``golang.org/x/time/rate``'s ``Reserve``, :meth:`when` always takes a token, borrowing from the future
    when the bucket is empty, and returns how long until that token exists. Later callers therefore queue
    up behind earlier ones instead of all waiting for the same token.
    """

    def __init__(self, *, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, item: Hashable) -> float:
        """Reserve a token and return the seconds until it is available (0 while the bucket has tokens)."""
        now = self._clock()
        # A clock that stepped back refills nothing rather than draining the bucket.
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps) - 1.0
        return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def forget(self, item: Hashable) -> None:
        """Nothing to forget: the bucket keeps no per-item state."""

    def num_requeues(self, item: Hashable) -> int:
        """Always 0: the bucket keeps no per-item state."""
        return 0


class MaxOfRateLimiter:
    """The strictest of several limiters: the longest wait and the highest failure count among them."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        """Ask every limiter (each records the failure) and return the longest wait."""
        return max((limiter.when(item) for limiter in self._limiters), default=0.0)

    def forget(self, item: Hashable) -> None:
        """Forget ``item`` in every limiter."""
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        """The highest failure count any limiter has on record for ``item``."""
        return max((limiter.num_requeues(item) for limiter in self._limiters), default=0)


def default_controller_rate_limiter() -> MaxOfRateLimiter:
    """client-go's ``DefaultControllerRateLimiter``: per-item backoff from 5 ms to 1000 s, and 10 qps (burst 100)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1000.0),
        BucketRateLimiter(qps=10.0, burst=100),
    )
