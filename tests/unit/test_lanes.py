"""The order the lanes take modules in (tests/lanes.py): longest first, the unmeasured before all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.lanes import REAL_NODE_LANE, SECONDS, SHARED, family_rank, module_order, read_seconds, unit_of


def test_the_longest_module_goes_first_and_an_unmeasured_one_before_it() -> None:
    seconds = {"a.py": 10.0, "stress.py": 229.0, "b.py": 40.0}
    assert module_order(["a.py", "stress.py", "new.py", "b.py"], seconds, {}) == ["new.py", "stress.py", "b.py", "a.py"]


def test_a_shared_familys_modules_go_before_the_next_family_and_the_rest() -> None:
    seconds = {"short_sites.py": 10.0, "long_alone.py": 300.0, "cluster.py": 50.0, "long_sites.py": 200.0}
    ranks = {"short_sites.py": 0, "long_sites.py": 0, "cluster.py": 1}
    assert module_order(list(seconds), seconds, ranks) == [
        "long_alone.py",  # the longest module of no family opens the first family's turn
        "long_sites.py",
        "short_sites.py",
        "cluster.py",
    ]
    assert family_rank(["rome", "sites", "cluster"]) == SHARED.index("sites")
    assert family_rank(["peer_cluster", "kube"]) == SHARED.index("peer_cluster")
    assert family_rank(["tmp_path"]) == len(SHARED)


def test_the_table_is_read_by_its_column_names_and_bad_rows_are_skipped() -> None:
    table = "module\ttests\twall_s\tbusy\nx.py\t3\t12.5\t0.9\nbroken\ny.py\t1\tn/a\t0.1\n"
    assert read_seconds(table) == {"x.py": 12.5}
    assert read_seconds("seconds\ttest\n1.0\tx.py::t\n") == {}
    assert read_seconds("") == {}


def test_the_committed_table_names_modules_that_exist() -> None:
    """A renamed module would silently lose its place: the table is kept in step with the files."""
    root = SECONDS.parent.parent
    missing = [module for module in read_seconds(SECONDS.read_text()) if not (root / module).exists()]
    assert missing == []


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0, 1e4)), st.permutations("abcdefgh"))
def test_the_order_keeps_every_module_once(seconds: dict[str, float], modules: list[str]) -> None:
    ranks = {m: (0, 1, len(SHARED))[ord(m) % 3] for m in modules}  # two shared families and no family
    ordered = module_order(modules, seconds, ranks)
    assert sorted(ordered) == sorted(modules)
    families = [ranks[m] for m in ordered if ranks[m] < len(SHARED)]
    assert families == sorted(families)  # each family's modules together, in the families' order
    for rank in set(ranks.values()):
        measured = [seconds[m] for m in ordered if m in seconds and ranks[m] == rank]
        assert measured == sorted(measured, reverse=True)


def test_the_longest_modules_of_no_family_open_the_families_turns_and_the_rest_follow() -> None:
    seconds = {"pods.py": 400.0, "check.py": 350.0, "stress.py": 300.0, "unit.py": 5.0, "s1.py": 100.0}
    seconds |= {"s2.py": 90.0, "c1.py": 60.0}
    ranks = {"s1.py": 0, "s2.py": 0, "c1.py": 1}
    assert module_order(list(seconds), seconds, ranks) == [
        "pods.py",
        "s1.py",
        "s2.py",
        "check.py",
        "c1.py",
        "stress.py",
        "unit.py",
    ]


def test_every_module_starting_real_nodes_is_one_unit_and_any_other_its_own() -> None:
    heavy = "start_sites({n: ClusterSpec(name=n, nodes=0, real_nodes=1) for n in names})"
    assert unit_of("tests/integration/a.py", heavy) == unit_of(
        "tests/integration/b.py", "liqoctl local up x --real-nodes 2"
    )
    assert unit_of("tests/integration/a.py", heavy) == REAL_NODE_LANE
    assert unit_of("tests/integration/c.py", "ClusterSpec(name=n, nodes=2, real_nodes=0)") == "tests/integration/c.py"


def test_the_one_lane_modules_come_before_all_longest_first() -> None:
    seconds = {"fam.py": 50.0, "real_a.py": 100.0, "real_b.py": 300.0, "solo.py": 400.0}
    ranks = {"fam.py": 0}
    order = module_order(list(seconds), seconds, ranks, one_lane={"real_a.py", "real_b.py"})
    assert order[:2] == ["real_b.py", "real_a.py"]
    assert order[2:] == ["solo.py", "fam.py"]  # then as before: the family's turn opened by the longest of the rest
