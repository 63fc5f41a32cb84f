"""Who used the machine's CPU during a run: CPU-seconds per program (kube-apiserver, etcd, kubelet, liqo's...).

A pytest plugin (``tests/conftest.py`` loads it) beside :mod:`tests.timing`. The module table says whether a
module computed or waited, not who computed: the clusters run detached from the tests, and on 2 cores what
one lane's clusters burn slows every other lane. In the run that made this plugin, with 7 API servers
alive on average, the API servers took 38% of all CPU, the kubelets 13%: a run gets faster by making those
programs do less, not the tests.

The controller process (the only one under pytest-xdist, where the lanes are workers) samples ``/proc`` every
:data:`INTERVAL` seconds from a thread and adds each process's CPU time since the previous sample to its
program's account. A process that lived less than a sample (a ``kubectl`` call) is missed, and the last
part of one that exited between samples: the table undercounts short processes, never overcounts. At the end
the table is printed and written to ``build/test-times/cpu.tsv``, which ``.ci/run`` prints again. What a
process is called is pure (:func:`program`), as is the table (:func:`cpu_table`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.timing import OUTPUT, tsv

INTERVAL = 2.0
SHOWN = 15
PROC = Path("/proc")


def program(argv: Sequence[str]) -> str:
    """What a process runs, by its command line: the binary's name, or a Python module or script's.

    ``python -m liqo.apps.manager`` is ``liqo.apps.manager``, ``python .venv/bin/pytest`` is ``pytest``, an
    xdist lane (``python -c ...``) is ``pytest lane``; kernel threads (no command line) are ``kernel``.
    """
    if not argv or not argv[0]:
        return "kernel"
    binary = os.path.basename(argv[0])
    if not binary.startswith("python"):
        return binary
    args = list(argv[1:])
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args.pop(0)  # interpreter options (-u, -B...)
    if len(args) >= 2 and args[0] == "-m":
        return args[1]
    if args and args[0] == "-c":
        # pytest-xdist's lanes are execnet gateways, which read their code from stdin
        return "pytest lane" if "sys.stdin.readline" in " ".join(args[1:2]) else "python -c"
    return os.path.basename(args[0]) if args else binary


def cpu_table(
    seconds: Mapping[str, float], *, wall: float, cores: int, shown: int = SHOWN
) -> list[tuple[str, str, str]]:
    """Rows (program, CPU-seconds, share of all CPU used) for the ``shown`` largest, the rest as one row, then
    the total and how busy the machine was (pure)."""
    total = sum(seconds.values()) or 1.0
    ranked = sorted(seconds.items(), key=lambda item: (-item[1], item[0]))
    rows = [(name, f"{cpu:.0f}", f"{cpu / total:.0%}") for name, cpu in ranked[:shown]]
    rest = sum(cpu for _, cpu in ranked[shown:])
    if rest:
        rows.append((f"({len(ranked) - shown} others)", f"{rest:.0f}", f"{rest / total:.0%}"))
    busy = total / (wall * cores) if wall > 0 else 0.0
    rows.append(("total", f"{total:.0f}", f"{busy:.0%} of {cores} cores over {wall:.0f} s"))
    return rows


def _processes(names: dict[tuple[str, str, str], str]) -> Iterator[tuple[tuple[str, str], str, float]]:
    """Every process now: its identity (pid, start time), its program, its CPU-seconds so far.

    A program is named again when its process runs another (``exec``: its ``comm`` changes), as the launcher
    of a real node's daemons does; the CPU it used before counts for the program it was.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 1 :].split()
            key = (entry.name, fields[19], comm)
            if key not in names:
                names[key] = program((entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        yield key[:2], names[key], (int(fields[11]) + int(fields[12])) / ticks


class CpuByProgram:
    """Samples ``/proc`` in a thread of the controller from session start to finish."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._names: dict[tuple[str, str, str], str] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-by-program", daemon=True)
        self._started = 0.0
        self._wall = 0.0

    def _take(self, *, count: bool) -> None:
        current: dict[tuple[str, str], float] = {}
        for key, name, cpu in _processes(self._names):
            current[key] = cpu
            if count:  # the first sample sets where each process stood; what ran before the run is not counted
                self.seconds[name] = self.seconds.get(name, 0.0) + cpu - self._last.get(key, 0.0)
        self._last = current
        self._names = {key: name for key, name in self._names.items() if key[:2] in current}

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._take(count=True)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._take(count=False)
        self._started = time.monotonic()
        self._thread.start()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._stop.set()
        self._thread.join()
        self._take(count=True)
        self._wall = time.monotonic() - self._started

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        rows = cpu_table(self.seconds, wall=self._wall, cores=os.cpu_count() or 1)
        terminalreporter.section("CPU by program (CPU-seconds, share)")
        for name, cpu, share in rows:
            terminalreporter.write_line(f"{cpu:>8}  {share:>5}  {name}")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        (OUTPUT / "cpu.tsv").write_text(tsv(iter([("program", "cpu_s", "share"), *rows])))


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None and PROC.is_dir():  # the controller, or a run without lanes
        config.pluginmanager.register(CpuByProgram(), "liqo-cpu-by-program")
