"""A pinned cluster's real node gets the CPUs as its cgroup's cpuset; its daemons' cgroup inherits them."""

from __future__ import annotations

from pathlib import Path

from liqo.localclusters.realnodes import host


def test_a_pinned_node_cgroup_restricts_its_cpuset_and_its_children_copy_it(tmp_path: Path) -> None:
    hierarchy = tmp_path / "cpuset"
    hierarchy.mkdir()
    (hierarchy / "cpuset.cpus").write_text("0-1\n")
    (hierarchy / "cpuset.mems").write_text("0\n")

    host._make_cgroup(hierarchy, "/liqo/rome-real-1", cpus="1")
    host._make_cgroup(hierarchy, "/liqo/rome-real-1/daemons")

    assert (hierarchy / "liqo" / "cpuset.cpus").read_text() == "0-1\n"  # shared by every cluster: untouched
    assert (hierarchy / "liqo" / "rome-real-1" / "cpuset.cpus").read_text() == "1"
    assert (hierarchy / "liqo" / "rome-real-1" / "daemons" / "cpuset.cpus").read_text() == "1"
    assert (hierarchy / "liqo" / "rome-real-1" / "daemons" / "cpuset.mems").read_text() == "0\n"


def test_a_hierarchy_without_cpusets_is_left_as_it_is(tmp_path: Path) -> None:
    host._make_cgroup(tmp_path, "/liqo/rome-real-1", cpus="1")  # e.g. the memory hierarchy
    assert not (tmp_path / "liqo" / "rome-real-1" / "cpuset.cpus").exists()
