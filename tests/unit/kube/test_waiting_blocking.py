"""``block_until``: the blocking wait with a deadline, for code without an event loop; the pauses of every wait."""

from __future__ import annotations

import itertools

from liqo.kube.waiting import MAX_INTERVAL, block_until, delays


def test_it_returns_true_once_the_check_holds_and_stops_asking() -> None:
    answers = iter([False, False, True])
    asked: list[int] = []

    def check() -> bool:
        asked.append(1)
        return next(answers)

    assert block_until(check, timeout=5, interval=0)
    assert len(asked) == 3


def test_it_returns_false_at_the_deadline_having_asked() -> None:
    asked: list[int] = []

    def never() -> bool:
        asked.append(1)
        return False

    assert not block_until(never, timeout=0, interval=0)
    assert asked  # the check runs before the deadline is looked at


def test_the_pauses_start_at_the_interval_and_grow_to_the_cap_but_a_longer_interval_stays() -> None:
    pauses = delays(0.1)
    first = [next(pauses) for _ in range(8)]
    assert first[0] == 0.1
    assert all(b >= a for a, b in itertools.pairwise(first))
    assert first[-1] == MAX_INTERVAL
    slow = delays(2.0)
    assert [next(slow) for _ in range(3)] == [2.0, 2.0, 2.0]
