import os
import signal
import subprocess
import sys
import time

import pytest

from liqo.localclusters.processes import ProcessRef, is_alive, ref_of, terminate, wait_gone


def spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_ref_identifies_a_live_process_and_not_a_reused_pid() -> None:
    proc = spawn("import time; time.sleep(60)")
    try:
        ref = ref_of(proc.pid)
        assert ref is not None
        assert is_alive(ref)
        assert not is_alive(ProcessRef(ref.pid, ref.start_ticks + 1))
    finally:
        proc.kill()
        proc.wait()
    assert not is_alive(ref)


def test_terminate_escalates_to_sigkill_for_the_whole_group() -> None:
    # The child ignores SIGTERM and starts a grandchild in its process group.
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal,time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    grandchild = ref_of(int(proc.stdout.readline()))
    ref = ref_of(proc.pid)
    assert ref is not None
    assert grandchild is not None
    started = time.monotonic()
    terminate(ref, timeout=0.5)
    proc.wait(timeout=5)
    assert time.monotonic() - started < 5
    assert wait_gone(grandchild, timeout=5)


def test_wait_gone_times_out_on_a_live_process() -> None:
    proc = spawn("import time; time.sleep(60)")
    try:
        ref = ref_of(proc.pid)
        assert ref is not None
        assert not wait_gone(ref, timeout=0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_process_that_exits_as_its_pidfd_is_opened_counts_as_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a purge in CI met: pidfd_open failing with ENOENT for a component exiting at that moment.
    proc = spawn("import time; time.sleep(60)")
    try:
        ref = ref_of(proc.pid)
        assert ref is not None

        def vanished(pid: int) -> int:
            raise FileNotFoundError(2, "No such file or directory")

        monkeypatch.setattr(os, "pidfd_open", vanished)
        assert wait_gone(ref, timeout=0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
