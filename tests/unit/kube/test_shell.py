"""The process shell: how every liqo process stops (a signal, a loop that ends, a loop that fails)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from liqo.kube.shell import Shell


async def forever(started: list[str], name: str) -> None:
    started.append(name)
    await asyncio.Event().wait()


async def test_a_loop_that_fails_by_itself_stops_the_others_and_its_failure_is_raised() -> None:
    cancelled: list[str] = []

    async def crashes() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the informer gave up")

    async def other() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("other")
            raise

    async with Shell(metrics_address=None) as shell:
        with pytest.raises(RuntimeError, match="gave up"):
            await shell.run(crashes(), other())
    assert cancelled == ["other"]


async def test_a_loop_that_ends_cleanly_stops_the_process_without_error_and_without_the_delay() -> None:
    slept: list[float] = []
    started: list[str] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    async def settings_changed() -> None:
        await asyncio.sleep(0)

    async with Shell(metrics_address=None, shutdown_delay=5, sleep=record) as shell:
        await shell.run(settings_changed(), forever(started, "controllers"))
    assert started == ["controllers"]
    assert slept == []  # the delay is for a Service withdrawing a terminating pod, not for a restart


async def test_sigterm_cancels_the_loops_then_answers_for_the_shutdown_delay_and_leaves_no_handler() -> None:
    slept: list[float] = []
    cancelled: list[str] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    async def loop() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("loop")
            raise

    async with Shell(metrics_address=None, shutdown_delay=5, sleep=record) as shell:
        await shell.run(loop())
    assert cancelled == ["loop"]
    assert slept == [5]
    # The handler went with the run: a later SIGTERM is the default's again, not an event nobody waits on.
    assert not asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
