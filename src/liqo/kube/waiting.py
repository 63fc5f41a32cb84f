"""Waiting for a condition with a deadline: the one polling loop the code base allows (async and blocking).

Watches are the first choice; where a condition spans several objects or endpoints, a short poll with a
deadline is simpler and just as correct. Either way the caller gets a clear error naming what it waited
for, never an open-ended sleep.

The first look comes ``interval`` after the first call, the next ones half as late again each time, up to
:data:`MAX_INTERVAL` (:func:`delays`): what comes true at once is seen at once, and a wait of a minute (a
namespace's deletion, a rollout) asks the API server some eighty times, not six hundred. On a machine running
three clusters' tests at once, fixed 0.1 s polls were a steady load on every API server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


MAX_INTERVAL = 0.5
"""Seconds between two looks, at most (a longer ``interval`` is kept as it is)."""
GROWTH = 1.5


class WaitTimeout(TimeoutError):
    """The condition did not hold before the deadline; the message names it."""


def delays(interval: float, *, longest: float = MAX_INTERVAL) -> Iterator[float]:
    """The pauses between looks: ``interval``, then half as long again each time, up to ``longest`` (pure)."""
    delay, cap = interval, max(interval, longest)
    while True:
        yield delay
        delay = min(cap, delay * GROWTH)


async def poll_until(
    check: Callable[[], Awaitable[T | None]], *, timeout: float, message: str, interval: float = 0.1
) -> T:
    """Call ``check`` until it returns something other than None (or False); return that.

    Raises:
        WaitTimeout: after ``timeout`` seconds, with ``message``.
    """
    deadline = time.monotonic() + timeout
    pauses = delays(interval)
    while True:
        result = await check()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{message} (waited {timeout:.0f}s)")
        await asyncio.sleep(next(pauses))


def block_until(check: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> bool:
    """Call ``check`` until it is true (True) or ``timeout`` seconds passed (False), blocking the thread.

    :func:`poll_until` for code that runs without an event loop (the local clusters' commands, a node's
    entry process); the caller raises its own error on False, naming what it waited for.
    """
    deadline = time.monotonic() + timeout
    pauses = delays(interval)
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(next(pauses))
    return True


def changes_only(progress: Callable[[str], None]) -> Callable[[str], None]:
    """``progress``, called only when the line differs from the last one: a wait says each new state once."""
    last: list[str] = []

    def say(line: str) -> None:
        if last != [line]:
            last[:] = [line]
            progress(line)

    return say
