"""``liqoctl local up --cpus``: every process of the cluster runs on those CPUs, restarted ones too."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from liqo.localclusters.layout import ClusterDir, read_json
from liqo.localclusters.processes import ProcessRef, wait_gone
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import LocalCluster, eventually_sync, liqoctl_run, purge, unique


def allowed_cpus(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


def processes(cluster_dir: ClusterDir) -> dict[str, ProcessRef]:
    status = read_json(cluster_dir.status_file)
    refs = {"supervisor": ProcessRef.from_dict(status["supervisor"])}
    refs |= {name: ProcessRef.from_dict(c["process"]) for name, c in status["components"].items()}
    return {name: ref for name, ref in refs.items() if ref is not None}


def test_a_pinned_cluster_runs_every_process_on_its_cpus() -> None:
    cpu = str(max(os.sched_getaffinity(0)))
    name = unique("t-cpus")
    local = LocalCluster(ClusterSpec(name=name, cpus=cpu))
    try:
        up = liqoctl_run("local", "up", name, "--cpus", cpu, timeout=300)
        assert up.returncode == 0, up.stderr
        assert f"pinned to CPUs {cpu}" in up.stdout
        listed = liqoctl_run("local", "list", "-o", "json", timeout=300)
        assert f'"cpus": "{cpu}"' in listed.stdout

        refs = processes(local.dir)
        assert len(refs) == 6
        assert {name: allowed_cpus(ref.pid) for name, ref in refs.items()} == dict.fromkeys(refs, cpu)

        os.kill(refs["kwok"].pid, signal.SIGKILL)  # a restarted component is pinned as well
        assert wait_gone(refs["kwok"], timeout=10)
        seen: list[ProcessRef | None] = []

        def restarted() -> bool:  # one read: the supervisor drops the dead kwok from its record before adding the new
            seen[:] = [processes(local.dir).get("kwok")]
            return seen[0] is not None and seen[0] != refs["kwok"]

        eventually_sync(restarted, timeout=30, message="kwok restarted")
        assert seen[0] is not None
        assert allowed_cpus(seen[0].pid) == cpu

        unavailable = liqoctl_run("local", "up", unique("t-cpus"), "--cpus", str(os.cpu_count() or 1), timeout=300)
        assert unavailable.returncode == 1
        assert "not available here" in unavailable.stderr
    finally:
        purge(local)
