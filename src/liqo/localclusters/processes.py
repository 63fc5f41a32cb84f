"""Process identity that survives pid reuse, and stopping what we started.

A bare pid is not an identity: after a crash the number can be handed to an unrelated process, and
``kill`` would hit it. We record ``(pid, start time in clock ticks since boot)`` from ``/proc`` and act
only when both still match. Every child runs in its own session, so stopping a component stops its
whole process group, and it is told by the kernel (``PR_SET_PDEATHSIG``) to die if its supervisor dies,
so no component outlives the supervisor that owns it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessRef:
    """A process, identified by pid and start time."""

    pid: int
    start_ticks: int

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ProcessRef | None:
        """The inverse of :meth:`to_dict`; ``None`` for missing data."""
        if not data or not data.get("pid"):
            return None
        return cls(int(data["pid"]), int(data["start_ticks"]))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) of a process, or None if it does not exist."""
    try:
        raw = open(f"/proc/{pid}/stat", "rb").read().decode()  # noqa: SIM115
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing one.
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def ref_of(pid: int) -> ProcessRef | None:
    """The identity of a live process."""
    stat = _stat(pid)
    return ProcessRef(pid, stat[1]) if stat else None


def is_alive(ref: ProcessRef) -> bool:
    """Whether the very process ``ref`` names still runs (zombies count as gone)."""
    stat = _stat(ref.pid)
    return stat is not None and stat[1] == ref.start_ticks and stat[0] not in ("Z", "X")


def signal_group(ref: ProcessRef, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``ref`` (and to ``ref`` itself), if it is still ``ref``."""
    if not is_alive(ref):
        return
    try:
        os.killpg(ref.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        pass
    try:
        os.kill(ref.pid, sig)
    except ProcessLookupError:
        return


def wait_gone(ref: ProcessRef, *, timeout: float) -> bool:
    """Wait until ``ref`` has exited; False if it still runs after ``timeout`` seconds.

    Uses a pidfd, which becomes readable when the process exits, so this works for processes that are
    not our children (the supervisor's components, seen from the CLI).
    """
    try:
        fd = os.pidfd_open(ref.pid)
    except (ProcessLookupError, FileNotFoundError):
        # ESRCH: no such process. ENOENT: seen here for one that exited between our look and the call (a
        # purge's component racing its own exit in CI): gone either way.
        return True
    try:
        if not is_alive(ref):  # the pid was reused, or the process is already a zombie
            return True
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def terminate(ref: ProcessRef, *, timeout: float = 10.0) -> None:
    """SIGTERM the group, then SIGKILL it if it has not exited within ``timeout`` seconds."""
    signal_group(ref, signal.SIGTERM)
    if not wait_gone(ref, timeout=timeout):
        signal_group(ref, signal.SIGKILL)
        wait_gone(ref, timeout=5.0)


def die_with_parent(parent_pid: int) -> None:
    """In a freshly forked child: ask the kernel for SIGKILL when the parent dies.

    Checks the parent afterwards, in case it died between ``fork`` and the ``prctl`` call.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)
