"""One small runner for ``ip``, ``nft`` and ``wg``: the only place the fabric's controllers run commands.

Everything the gateway and the node agent write is computed by pure functions (argv lists, nft scripts);
what is left is running them. Behind a :class:`Runner` protocol, so that unit tests replace it with a
recording fake, and on a real host the :class:`ProcessRunner`: no shell (argv is passed as it is, so no
address or name can be read as shell syntax), a timeout (a command stuck on a netlink or UAPI socket
must not stall a controller forever), and errors that name the command and carry what it printed on
stderr — never its standard input, which may be a private key (``wg set ... private-key /dev/stdin``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

MAX_STDERR = 2000
"""The most of a failed command's stderr an error carries."""
_REDACTED_MIN = 8
"""Standard input lines at least this long are cut out of stderr (a key is 44 characters; shorter lines
are syntax such as ``}``, which would blank every brace of an nft error)."""


class CommandError(Exception):
    """A command failed, timed out or could not be started; the message names it, never its stdin.

    Attributes:
        command: the program and its subcommand (``ip route``, ``wg set``, ``nft``).
        returncode: its exit status; None when it did not exit by itself.
        stderr: what it printed on stderr (at most :data:`MAX_STDERR` characters, stdin cut out).
    """

    def __init__(self, command: str, detail: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(f"{command}: {detail}")
        self.command = command
        self.returncode = returncode
        self.stderr = stderr


class Runner(Protocol):
    """Runs one command and returns its standard output."""

    async def run(self, *argv: str, input: str | None = None, check: bool = True) -> str:
        """Run ``argv`` with ``input`` as standard input; its stdout.

        Raises:
            CommandError: it could not be started or timed out; or it exited non-zero and ``check`` is set
                (without ``check`` its stdout is returned whatever its exit status).
        """


@dataclass(frozen=True)
class ProcessRunner:
    """A :class:`Runner` of real processes (no shell), each given at most ``timeout`` seconds."""

    timeout: float = 30.0

    async def run(self, *argv: str, input: str | None = None, check: bool = True) -> str:
        """Run ``argv`` as a process; see :meth:`Runner.run`."""
        if not argv:
            raise ValueError("no command to run")
        command = _command_name(argv)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL if input is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as error:
            raise CommandError(command, f"cannot be run: {error.strerror or type(error).__name__}") from None
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(None if input is None else input.encode()), self.timeout
            )
        except TimeoutError:
            raise CommandError(command, f"did not finish in {self.timeout:g} s: killed") from None
        finally:
            if process.returncode is None:  # timed out, or the caller was cancelled: leave no process behind
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if check and process.returncode:
            printed = _redact(stderr.decode(errors="replace"), secret=input).strip()[:MAX_STDERR]
            raise CommandError(
                command, f"exit {process.returncode}: {printed}", returncode=process.returncode, stderr=printed
            )
        return stdout.decode(errors="replace")


def _command_name(argv: tuple[str, ...]) -> str:
    """How errors name a command: its program and subcommand (``ip route``, ``wg set``, ``nft``)."""
    subcommand = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    return argv[0] if subcommand is None else f"{argv[0]} {subcommand}"


def _redact(text: str, *, secret: str | None) -> str:
    """``text`` without any line of ``secret`` (stdin) in it: ``wg`` quotes a malformed key it read."""
    if not secret:
        return text
    numbered = [(number, line.strip()) for number, line in enumerate(secret.splitlines(), start=1)]
    # Longest first, so that a line containing another is cut out whole.
    for number, line in sorted(numbered, key=lambda item: -len(item[1])):
        if len(line) >= _REDACTED_MIN:
            text = text.replace(line, f"<stdin line {number}>")
    return text
