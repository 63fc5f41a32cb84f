"""``block_until``: the blocking wait with a deadline, for code without an event loop."""

from __future__ import annotations

from liqo.kube.waiting import block_until


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
