"""Several ``liqoctl local`` processes on one clusters' root, as real processes (no cluster is started).

Allocation and purge touch only files, so real concurrency needs no Kubernetes: forked processes allocate
and purge clusters' records in a temporary ``LIQO_HOME`` while others read them.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pytest

from liqo.localclusters import clusters, layout
from liqo.localclusters.layout import ClusterDir, locked, records, remove_cluster
from liqo.localclusters.spec import ClusterSpec

FORK = multiprocessing.get_context("fork")  # children inherit the test's LIQO_HOME and monkeypatches
DEADLINE = 60.0
LIQO_PORTS = {"auth": 0, "kubelet": 0, "webhook": 0, "metrics": 0, "kubeletMetrics": 0}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LIQO_HOME", str(tmp_path))
    return tmp_path / "local"


@pytest.fixture
def same_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process is offered the same ports in the same order: only the allocation lock keeps them apart."""

    def candidates() -> Iterator[int]:
        return itertools.count(20000)

    monkeypatch.setattr(layout, "kernel_ports", candidates)
    monkeypatch.setattr(clusters, "kernel_ports", candidates)


def run_all(*targets: Callable[[], None]) -> None:
    """Run each target in its own process; fail with the first child's traceback."""
    errors = FORK.Queue()

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException:
            errors.put(traceback.format_exc())
            raise

    children = [FORK.Process(target=guarded, args=(target,)) for target in targets]
    for child in children:
        child.start()
    for child in children:
        child.join(DEADLINE)
    assert errors.empty(), errors.get()
    assert [child.exitcode for child in children] == [0] * len(children)


def test_processes_allocating_at_once_never_choose_the_same_port_or_underlay_slot(
    home: Path, same_candidates: None
) -> None:
    start: Barrier = FORK.Barrier(3)

    def allocator(process: int) -> Callable[[], None]:
        def allocate() -> None:
            start.wait(DEADLINE)
            for index in range(15):
                spec = ClusterSpec(name=f"p{process}-{index}", nodes=0, real_nodes=1)
                clusters.allocate(spec, bin_dir=home, node_bin_dir=home)
                clusters.reserve_ports(spec.name, LIQO_PORTS)

        return allocate

    run_all(*(allocator(process) for process in range(3)))
    recorded = records(home)
    assert len(recorded) == 45
    ports = [port for record in recorded.values() for key in ("ports", "liqoPorts") for port in record[key].values()]
    assert len(ports) == 45 * 12
    assert len(set(ports)) == len(ports)
    slots = [record["underlay"] for record in recorded.values()]
    assert sorted(slots) == list(range(1, 46))


def test_liqo_ports_are_kept_by_a_second_install_unless_another_cluster_recorded_them(home: Path) -> None:
    for name in ("rome", "milan"):
        clusters.allocate(ClusterSpec(name=name), bin_dir=home, node_bin_dir=None)
    first = clusters.reserve_ports("rome", LIQO_PORTS)
    assert clusters.reserve_ports("rome", first) == first
    milan = records(home)["milan"]
    layout.write_json(ClusterDir.named("milan").cluster_file, milan | {"liqoPorts": {"auth": first["auth"]}})
    again = clusters.reserve_ports("rome", first)
    assert again["auth"] != first["auth"]
    assert {k: v for k, v in again.items() if k != "auth"} == {k: v for k, v in first.items() if k != "auth"}
    assert records(home)["rome"]["liqoPorts"] == again


def test_readers_of_every_cluster_never_fail_while_clusters_are_purged(home: Path) -> None:
    done: Event = FORK.Event()
    seen: Event = FORK.Event()

    def churn() -> None:
        try:
            for index in range(40):
                spec = ClusterSpec(name=f"churn-{index}")
                clusters.allocate(spec, bin_dir=home, node_bin_dir=None)
                logs = ClusterDir.named(spec.name).logs
                logs.mkdir()
                for file in range(200):  # a purge that takes a while, as a real cluster's does
                    (logs / f"{file}.log").write_text("log")
                clusters.down(spec.name, purge=True)
        finally:
            done.set()

    def read() -> None:
        while not done.is_set():
            for info in clusters.listing():
                assert info.state == "Stopped"
                seen.set()
            clusters.find_by_server("https://127.0.0.1:1")
            for record in records(home).values():
                assert record["spec"]["name"].startswith("churn-")

    run_all(churn, read, read)
    assert seen.is_set(), "the readers never overlapped a cluster's life: the test proved nothing"
    assert [p.name for p in home.iterdir() if p.name.startswith(".removing-") or not p.name.startswith(".")] == []


WAITER = """
import os, sys
from pathlib import Path
from liqo.localclusters.layout import locked
lock = Path(sys.argv[1])
with locked(lock):
    print(os.stat(lock).st_ino)
"""


def test_a_lock_whose_directory_is_purged_while_waited_on_is_taken_on_the_new_file(home: Path) -> None:
    lock = home / "rome" / ".lock"
    with locked(lock):
        old = os.stat(lock).st_ino
        # Not forked: a forked child would share this process's open lock file, and so its lock.
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(lock)], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + DEADLINE
        while not any(line.split()[1] == "->" and line.endswith(f":{old} 0 EOF") for line in _locks()):
            assert time.monotonic() < deadline, "the waiter never waited on the lock"
            time.sleep(0.01)  # between two looks at /proc/locks, until the deadline
        remove_cluster(ClusterDir(home / "rome"))
    out, _ = waiter.communicate(timeout=DEADLINE)
    # Had it kept the lock of the purged file, the directory would be gone and its stat would fail: the lock
    # it holds is on the file at the path (the inode number may be the old one's again: that one was freed).
    assert waiter.returncode == 0
    assert int(out) == os.stat(lock).st_ino


def _locks() -> list[str]:
    return Path("/proc/locks").read_text().splitlines()
