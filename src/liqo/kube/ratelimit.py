"""Rate limiters that decide how long a failed work item waits before it is retried.

The semantics are client-go's (``k8s.io/client-go/util/workqueue``) so that retry behaviour, and the
intuition operators have about it, carry over: a per-item exponential backoff keeps one broken object from
spinning, and a global token bucket keeps a burst of failures across many objects from hammering the API
server. :func:`default_controller_rate_limiter` is the combination every controller uses unless it has a
reason not to.

Limiters only compute delays; the work queue does the waiting. They are not thread-safe, by design: the
whole runtime lives on one event loop.

:class:`SourceLimiter` is the same bucket turned the other way: one per client address of an endpoint that
strangers reach (the authentication endpoint), answering whether a request may go on at all.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
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


def check_bucket(*, rate: float, burst: int) -> None:
    """Refuse a bucket that is no bucket: a rate that is not a positive number, a burst under 1."""
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"the rate must be a positive number, got {rate}")
    if burst < 1:
        raise ValueError(f"burst must be at least 1, got {burst}")


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second up to ``burst``; the time is the caller's (pure state).

    Two ways to draw: :meth:`reserve` always takes a token, borrowing from the future when the bucket is empty
    (``golang.org/x/time/rate``'s ``Reserve``: later callers queue up behind earlier ones), for work that will
    be done anyway, later; :meth:`take` takes one only if there is one (``Allow``), for requests refused
    when there is none, which must not push the next token further away.
    """

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        check_bucket(rate=rate, burst=burst)
        self._rate = rate
        self._burst = burst
        self._tokens = float(burst)
        self._last = now

    def _refill(self, now: float) -> None:
        # A clock that stepped back refills nothing rather than draining the bucket.
        self._tokens = min(float(self._burst), self._tokens + max(0.0, now - self._last) * self._rate)
        self._last = max(self._last, now)

    def reserve(self, now: float) -> float:
        """Take a token and return the seconds until it exists (0 while the bucket has tokens)."""
        self._refill(now)
        self._tokens -= 1.0
        return -self._tokens / self._rate if self._tokens < 0 else 0.0

    def take(self, now: float) -> float:
        """Take a token if there is one and return 0; else take nothing and return the seconds until one exists."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate

    def full(self, now: float) -> bool:
        """Whether the bucket holds ``burst`` tokens: then it is as good as a new one."""
        self._refill(now)
        return self._tokens >= self._burst


class BucketRateLimiter:
    """A token bucket shared by all items: ``burst`` retries at once, then ``qps`` per second.

    :meth:`when` always takes a token (:meth:`TokenBucket.reserve`) and returns how long until that token
    exists.
    """

    def __init__(self, *, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        self._clock = clock
        self._bucket = TokenBucket(rate=qps, burst=burst, now=clock())

    def when(self, item: Hashable) -> float:
        """Reserve a token and return the seconds until it is available (0 while the bucket has tokens)."""
        return self._bucket.reserve(self._clock())

    def forget(self, item: Hashable) -> None:
        """Nothing to forget: the bucket keeps no per-item state."""

    def num_requeues(self, item: Hashable) -> int:
        """Always 0: the bucket keeps no per-item state."""
        return 0


@dataclass(frozen=True)
class Admission:
    """A :class:`SourceLimiter`'s answer: how long the source must wait (0: admitted), and if it just started to."""

    wait: float
    first_refusal: bool

    @property
    def admitted(self) -> bool:
        """Whether the request may go on."""
        return self.wait == 0.0


class SourceLimiter:
    """A token bucket per source (a client's address): each may make ``burst`` requests at once, ``rate`` a second.

    Memory is bounded: at most ``max_sources`` buckets are kept, and the least recently seen source is
    forgotten first. A source not seen for ``burst / rate`` seconds has a full bucket, which is what a new one
    holds, so forgetting it loses nothing; only more than ``max_sources`` sources within that time can make a
    source that emptied its bucket start again with a full one.
    """

    def __init__(
        self, *, rate: float, burst: int, max_sources: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_sources < 1:
            raise ValueError(f"max_sources must be at least 1, got {max_sources}")
        check_bucket(rate=rate, burst=burst)  # now, not at the first request
        self.rate = rate
        self.burst = burst
        self._max_sources = max_sources
        self._clock = clock
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()
        self._refusing: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(self, source: Hashable) -> Admission:
        """Whether ``source`` may make one more request now (it then used a token), or how long it must wait."""
        now = self._clock()
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = self._buckets[source] = TokenBucket(rate=self.rate, burst=self.burst, now=now)
            while len(self._buckets) > self._max_sources:
                forgotten, _ = self._buckets.popitem(last=False)
                self._refusing.discard(forgotten)
        else:
            self._buckets.move_to_end(source)
        wait = bucket.take(now)
        if wait == 0.0:
            self._refusing.discard(source)
            return Admission(0.0, first_refusal=False)
        first = source not in self._refusing
        self._refusing.add(source)
        return Admission(wait, first_refusal=first)


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
