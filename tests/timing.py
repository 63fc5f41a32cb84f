"""Where the suite's time goes: per module, the wall time and whether it was spent computing or waiting.

A pytest plugin (``tests/conftest.py`` loads it). The integration suite's time is mostly clusters starting,
peering and converging: a module that takes minutes with the cores idle waits on timers and deadlines (a
candidate for running beside others), one with the cores busy computes (a candidate for less work). So each
module records, from its first setup to its last teardown:

- ``wall``: seconds on the clock;
- ``own``: CPU-seconds of the test process and the processes it waited for (``liqoctl``, ``kubectl``);
- ``other``: CPU-seconds of the rest of the machine meanwhile (``/proc/stat``): the clusters the module
  started, which run detached from it, and whatever else runs (beside a serial run, little);
- ``busy``: ``(own + other) / (wall * cores)``: near 1, the module computed; near 0, it waited;
- ``fixtures``: seconds of the wall its tests spent in setup and teardown (clusters started, liqo installed,
  peerings made and undone) rather than in the tests themselves: the price of the module's environment.

At the end of the session the table (slowest first) and the slowest tests are printed and written to
``build/test-times/`` (``modules.tsv``, ``tests.tsv``), which ``.ci/run`` prints again as its last lines.
Under pytest-xdist each lane (worker) samples its own modules and leaves them in ``lane-<id>.json``; the
controller, which runs no test, reads them back for the table (a module's ``other`` then includes what the
other lanes did meanwhile). The arithmetic is pure (:func:`module_times`, :func:`format_modules`); the
plugin only reads clocks and files.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

OUTPUT = Path(os.environ.get("LIQO_TEST_TIMES") or Path(__file__).resolve().parents[1] / "build" / "test-times")
"""Where the tables go; ``scripts/test`` gives the unit tests a folder of their own when they run apart."""
SLOWEST = 20


@dataclass(frozen=True)
class Sample:
    """The clocks at one instant: wall seconds, this process's CPU-seconds, the machine's busy CPU-seconds."""

    wall: float
    own: float
    machine: float


@dataclass(frozen=True)
class ModuleTime:
    """One module's share of the run (see the module docstring for each figure)."""

    module: str
    tests: int
    wall: float
    own: float
    other: float
    busy: float
    fixtures: float = 0.0


def module_times(
    spans: Mapping[str, tuple[Sample, Sample]],
    tests: Mapping[str, int],
    *,
    cores: int,
    fixtures: Mapping[str, float] | None = None,
) -> list[ModuleTime]:
    """Each module's figures from its first and last sample, slowest first (pure)."""
    times = []
    for module, (start, end) in spans.items():
        wall = max(0.0, end.wall - start.wall)
        own = max(0.0, end.own - start.own)
        other = max(0.0, end.machine - start.machine - own)
        busy = (own + other) / (wall * cores) if wall > 0 else 0.0
        spent = (fixtures or {}).get(module, 0.0)
        times.append(ModuleTime(module, tests.get(module, 0), wall, own, other, min(busy, 1.0), spent))
    return sorted(times, key=lambda t: t.wall, reverse=True)


@dataclass(frozen=True)
class LaneTime:
    """One lane's share: how long it ran modules, and how long it sat idle before the last lane finished."""

    lane: str
    modules: int
    working: float
    idle_at_end: float


def lane_times(lanes: Mapping[str, Sequence[tuple[float, float]]]) -> list[LaneTime]:
    """Per lane (its modules' start and end wall clocks), the time it worked and waited for the others (pure).

    ``idle_at_end`` is what balancing the lanes could win back: a lane done early while another still runs.
    """
    ends = [end for spans in lanes.values() for _, end in spans]
    if not ends:
        return []
    finish = max(ends)
    return [
        LaneTime(lane, len(spans), sum(end - start for start, end in spans), finish - max(end for _, end in spans))
        for lane, spans in sorted(lanes.items())
        if spans
    ]


def format_modules(times: Sequence[ModuleTime]) -> list[str]:
    """The table as aligned lines, with a total (pure)."""
    width = max([len("module"), *(len(t.module) for t in times)])
    lines = [f"{'module':<{width}}  tests  wall s  own cpu s  other cpu s  busy  fixtures s"]
    for t in times:
        lines.append(
            f"{t.module:<{width}}  {t.tests:>5}  {t.wall:>6.0f}  {t.own:>9.0f}  {t.other:>11.0f}  {t.busy:>4.0%}"
            f"  {t.fixtures:>10.0f}"
        )
    total = (sum(t.tests for t in times), sum(t.wall for t in times), sum(t.own for t in times))
    other, fixtures = sum(t.other for t in times), sum(t.fixtures for t in times)
    figures = f"{total[0]:>5}  {total[1]:>6.0f}  {total[2]:>9.0f}  {other:>11.0f}  {'':>4}  {fixtures:>10.0f}"
    lines.append(f"{'total':<{width}}  {figures}")
    return lines


def tsv(rows: Iterator[Sequence[object]]) -> str:
    """Rows as tab-separated lines (pure)."""
    return "".join("\t".join(str(cell) for cell in row) + "\n" for row in rows)


def _machine_busy_seconds() -> float:
    """CPU-seconds the whole machine spent not idle since boot (0 where ``/proc/stat`` is missing)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    jiffies = [int(f) for f in fields]
    idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0)  # idle + iowait
    return (sum(jiffies[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is counted in user already


def _sample() -> Sample:
    own = sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    return Sample(time.monotonic(), own, _machine_busy_seconds())


class Timing:
    """Samples each module's first setup and last teardown; reports at the end of the session."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[Sample, Sample]] = {}
        self.tests: dict[str, int] = {}
        self.durations: list[tuple[float, str]] = []
        self.fixtures: dict[str, float] = {}
        self.lanes: dict[str, list[tuple[float, float]]] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        module = item.nodeid.split("::", 1)[0]
        if module not in self.spans:
            now = _sample()
            self.spans[module] = (now, now)
        self.tests[module] = self.tests.get(module, 0) + 1

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        module = item.nodeid.split("::", 1)[0]
        if module not in self.spans:  # another plugin's setup hook ended the setup before ours ran
            return
        start, _ = self.spans[module]
        self.spans[module] = (start, _sample())  # after the module fixtures' teardown when it is the last test

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when in ("setup", "teardown"):  # under lanes, reports reach the controller: it sums them
            module = report.nodeid.split("::", 1)[0]
            self.fixtures[module] = self.fixtures.get(module, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.durations.append((report.duration, report.nodeid))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if _lane(session.config) is None:  # the controller, or a run without lanes: no stale lane files
            for stale in OUTPUT.glob("lane-*.json"):
                stale.unlink(missing_ok=True)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        lane = _lane(session.config)
        if lane is not None and self.spans:
            OUTPUT.mkdir(parents=True, exist_ok=True)
            spans = {
                module: [vars(start), vars(end), self.tests[module]] for module, (start, end) in self.spans.items()
            }
            (OUTPUT / f"lane-{lane}.json").write_text(json.dumps(spans))

    def _lanes(self) -> None:
        """Add the modules the lanes sampled (under xdist the controller itself samples none)."""
        for path in sorted(OUTPUT.glob("lane-*.json")):
            lane = path.stem.removeprefix("lane-")
            for module, (start, end, tests) in json.loads(path.read_text()).items():
                self.spans[module] = (Sample(**start), Sample(**end))
                self.tests[module] = tests
                self.lanes.setdefault(lane, []).append((start["wall"], end["wall"]))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if _lane(terminalreporter.config) is not None:
            return
        self._lanes()
        if not self.spans:
            return
        times = module_times(self.spans, self.tests, cores=os.cpu_count() or 1, fixtures=self.fixtures)
        slowest = sorted(self.durations, reverse=True)[:SLOWEST]
        terminalreporter.section("time per module (slowest first)")
        for line in format_modules(times):
            terminalreporter.write_line(line)
        if self.lanes:
            terminalreporter.section("lanes (working s, idle s while another lane still ran)")
            for lane in lane_times(self.lanes):
                figures = f"{lane.modules:>3} modules  {lane.working:>6.0f} working  {lane.idle_at_end:>5.0f} idle"
                terminalreporter.write_line(f"{lane.lane:>6}  {figures}")
        terminalreporter.section(f"the {SLOWEST} slowest tests (call, s)")
        for seconds, nodeid in slowest:
            terminalreporter.write_line(f"{seconds:8.1f}  {nodeid}")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        header: list[Sequence[object]] = [
            ("module", "tests", "wall_s", "own_cpu_s", "other_cpu_s", "busy", "fixtures_s")
        ]
        rows: list[Sequence[object]] = [
            (t.module, t.tests, f"{t.wall:.1f}", f"{t.own:.1f}", f"{t.other:.1f}", f"{t.busy:.2f}", f"{t.fixtures:.1f}")
            for t in times
        ]
        (OUTPUT / "modules.tsv").write_text(tsv(iter(header + rows)))
        lines: list[Sequence[object]] = [("seconds", "test"), *((f"{s:.1f}", n) for s, n in slowest)]
        (OUTPUT / "tests.tsv").write_text(tsv(iter(lines)))


def _lane(config: pytest.Config) -> str | None:
    """This process's xdist worker id (``gw0``...), None in the controller or a run without lanes."""
    workerinput: dict[str, str] | None = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Timing(), "liqo-timing")
