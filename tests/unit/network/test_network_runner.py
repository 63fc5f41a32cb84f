"""The runner of ip/nft/wg: stdout back, errors naming the command and never its stdin; and the test fake."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from liqo.network.runner import MAX_STDERR, CommandError, ProcessRunner, Runner
from tests.unit.network.fakes import Call, RecordingRunner

KEY = "wKQlqGqIbpmqYM28unyrF277Il7I5yx8Cs6x9wnOgWM="


def tool(tmp_path: Path, script: str) -> str:
    """A fake ``ip``/``wg``: a shell script at a path of its own."""
    path = tmp_path / "tool"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


async def test_stdout_comes_back_and_stdin_goes_in(tmp_path: Path) -> None:
    runner: Runner = ProcessRunner()
    assert await runner.run(tool(tmp_path, 'echo "$@"'), "route", "show") == "route show\n"
    assert await runner.run(tool(tmp_path, "cat"), input="table ip x\n") == "table ip x\n"
    # Without stdin, a command reading it sees its end rather than waiting for ever.
    assert await runner.run(tool(tmp_path, "cat")) == ""


async def test_a_failure_names_the_command_and_its_stderr_but_not_its_stdin(tmp_path: Path) -> None:
    # As wg does with a malformed key file: it quotes what it read.
    path = tool(tmp_path, 'echo "Key is not the correct length or format: \\`$(cat)\'" >&2; exit 1')
    with pytest.raises(CommandError) as raised:
        await ProcessRunner().run(path, "set", "wg0", "private-key", "/dev/stdin", input=KEY + "\n")
    error = raised.value
    assert str(error) == f"{path} set: exit 1: Key is not the correct length or format: `<stdin line 1>'"
    assert error.command == f"{path} set"
    assert error.returncode == 1
    assert KEY not in str(error)
    assert KEY not in error.stderr


async def test_an_nft_error_points_at_the_stdin_line_it_quotes(tmp_path: Path) -> None:
    script = "table ip liqo {\n  chain x {\n    this is not a rule\n  }\n}\n"
    path = tool(tmp_path, 'echo "/dev/stdin:3:5-8: Error: syntax error" >&2; sed -n 3p >&2; exit 1')
    with pytest.raises(
        CommandError, match=r"^.*tool: exit 1: /dev/stdin:3:5-8: Error: syntax error\n    <stdin line 3>$"
    ):
        await ProcessRunner().run(path, "-f", "-", input=script)


async def test_stderr_is_bounded(tmp_path: Path) -> None:
    path = tool(tmp_path, "head -c 100000 /dev/zero | tr '\\0' x >&2; exit 3")
    with pytest.raises(CommandError) as raised:
        await ProcessRunner().run(path)
    assert len(raised.value.stderr) == MAX_STDERR


async def test_without_check_the_output_comes_back_whatever_the_exit_status(tmp_path: Path) -> None:
    assert await ProcessRunner().run(tool(tmp_path, "echo partial; exit 2"), check=False) == "partial\n"


async def test_a_missing_program_is_an_error_even_without_check(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"nft-missing delete: cannot be run: No such file or directory"):
        await ProcessRunner().run(str(tmp_path / "nft-missing"), "delete", "table", check=False)
    with pytest.raises(ValueError, match="no command"):
        await ProcessRunner().run()


def running(pid_file: Path) -> bool:
    """Whether the process whose pid a tool wrote still exists (reaped or not)."""
    return Path("/proc", pid_file.read_text().strip()).exists()


async def test_a_stuck_command_is_killed_after_the_timeout(tmp_path: Path) -> None:
    path = tool(tmp_path, f"echo $$ > {tmp_path}/pid; exec sleep 30")
    began = time.monotonic()
    with pytest.raises(CommandError, match=r"tool: did not finish in 0\.3 s: killed"):
        await ProcessRunner(timeout=0.3).run(path)
    assert time.monotonic() - began < 10
    assert not running(tmp_path / "pid")


async def test_a_cancelled_run_leaves_no_process(tmp_path: Path) -> None:
    path = tool(tmp_path, f"echo $$ > {tmp_path}/pid; exec sleep 30")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):  # cancels the run
            await ProcessRunner().run(path)
    assert not running(tmp_path / "pid")


# -- the fake ------------------------------------------------------------------------------------------


async def test_the_recording_runner_records_and_answers_from_its_script() -> None:
    failure = CommandError("ip route", "exit 2: RTNETLINK answers: File exists", returncode=2)
    runner = RecordingRunner(outputs={("wg", "show", "wg0", "dump"): "dump\n", ("ip", "route", "add"): failure})
    as_runner: Runner = runner
    assert await as_runner.run("wg", "show", "wg0", "dump") == "dump\n"
    assert await as_runner.run("nft", "-f", "-", input="table ip x\n") == ""
    assert await as_runner.run("ip", "route", "add", check=False) == ""
    with pytest.raises(CommandError, match="File exists"):
        await as_runner.run("ip", "route", "add")
    assert runner.calls[1] == Call(argv=("nft", "-f", "-"), input="table ip x\n")
    assert runner.argvs == [
        ["wg", "show", "wg0", "dump"],
        ["nft", "-f", "-"],
        ["ip", "route", "add"],
        ["ip", "route", "add"],
    ]
