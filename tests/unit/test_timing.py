"""The suite's time table (tests/timing.py): the arithmetic that says whether a module waited or computed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.timing import LaneTime, ModuleTime, Sample, format_modules, lane_times, module_times, tsv


def test_a_module_that_waited_is_idle_and_one_that_computed_is_busy() -> None:
    spans = {
        "waits.py": (Sample(0, 0, 100), Sample(100, 2, 110)),  # 100 s, 2 s own, 8 s of clusters, 2 cores
        "computes.py": (Sample(100, 2, 110), Sample(110, 12, 120)),  # 10 s, 10 s own, nothing else
    }
    waits, computes = module_times(spans, {"waits.py": 3, "computes.py": 1}, cores=2, fixtures={"waits.py": 60})
    assert waits == ModuleTime("waits.py", 3, 100, 2, 8, 0.05, fixtures=60)
    assert computes == ModuleTime("computes.py", 1, 10, 10, 0, 0.5, fixtures=0)
    assert format_modules([waits, computes])[-1].split() == ["total", "4", "110", "12", "8", "60"]


samples = st.builds(
    Sample,
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
)


@given(spans=st.dictionaries(st.text(min_size=1, max_size=20), st.tuples(samples, samples), max_size=5))
def test_figures_are_never_negative_busy_at_most_one_slowest_first(spans: dict[str, tuple[Sample, Sample]]) -> None:
    times = module_times(spans, {}, cores=2)
    assert all(t.wall >= 0 and t.own >= 0 and t.other >= 0 and 0 <= t.busy <= 1 for t in times)
    assert [t.wall for t in times] == sorted((t.wall for t in times), reverse=True)
    lines = format_modules(times)
    assert len(lines) == len(times) + 2
    assert lines[-1].startswith("total")


def test_tsv_is_one_line_per_row() -> None:
    assert tsv(iter([("a", 1), ("b", 2.5)])) == "a\t1\nb\t2.5\n"


def test_a_lane_done_early_is_idle_until_the_last_one_finishes() -> None:
    lanes = {"gw0": [(0.0, 100.0), (100.0, 400.0)], "gw1": [(0.0, 250.0)], "gw2": []}
    assert lane_times(lanes) == [LaneTime("gw0", 2, 400, 0), LaneTime("gw1", 1, 250, 150)]
    assert lane_times({}) == []
