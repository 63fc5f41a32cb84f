"""A probe's failure must last to count: ``liqoctl test network`` tries an exchange three times, backing off."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liqo.network import testrun
from liqo.network.testplan import Result


def outcome(ok: bool) -> Result:
    return Result(source="here/a", target="there/b", protocol="UDP", address="10.96.0.9:7002", ok=ok, detail="x")


@pytest.fixture
def tries(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], list[float]]:
    """Outcomes to hand out, one per try, and the delays slept between tries."""
    planned: list[bool] = []
    slept: list[float] = []

    async def try_probe(*_: Any) -> Result:
        return outcome(planned.pop(0))

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(testrun, "_try_probe", try_probe)
    monkeypatch.setattr(asyncio, "sleep", sleep)  # restored after the test; only the probe retries sleep
    return planned, slept


@pytest.mark.parametrize(
    ("planned", "ok", "detail", "delays"),
    [
        ([True], True, "x", []),
        ([False, True], True, "x (try 2)", [1.0]),
        ([False, False, True], True, "x (try 3)", [1.0, 2.0]),
        ([False, False, False], False, "x", [1.0, 2.0]),
    ],
)
async def test_a_failure_counts_only_after_three_tries(
    tries: tuple[list[bool], list[float]], planned: list[bool], ok: bool, detail: str, delays: list[float]
) -> None:
    queue, slept = tries
    queue.extend(planned)
    result = await testrun._run_probe(None, "ns", None, None)  # type: ignore[arg-type]
    assert (result.ok, result.detail, slept, queue) == (ok, detail, delays, [])
