"""The CPU table's words: what a process is called, and how the table adds up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.cpu_by_program import CpuByProgram, _processes, cpu_table, program


def test_a_process_is_named_by_its_binary_or_its_python_module_or_script() -> None:
    bin_dir = "/root/.cache/liqo/bin/k8s-v1.37.2-etcd-v3.6.16-kwok-v0.8.0"
    # The binary's directory names etcd and kwok: only the binary's own name counts.
    assert program([f"{bin_dir}/kube-controller-manager", "--kubeconfig=x"]) == "kube-controller-manager"
    assert program([f"{bin_dir}/etcd", "--name=rome"]) == "etcd"
    assert program(["/work/.venv/bin/python", "-m", "liqo.apps.manager", "--kubeconfig=x"]) == "liqo.apps.manager"
    assert program(["/usr/bin/python3", "-u", "-m", "liqo.apps.gateway"]) == "liqo.apps.gateway"
    assert program(["/work/.venv/bin/python", "/work/.venv/bin/pytest", "tests"]) == "pytest"
    assert program(["/work/.venv/bin/python", "/work/.venv/bin/liqoctl", "peer"]) == "liqoctl"
    assert program(["python", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) == "pytest lane"
    assert program(["python3", "-c", "print(1)"]) == "python -c"
    assert program([]) == "kernel"
    assert program([""]) == "kernel"


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.floats(min_value=0, max_value=1e5), max_size=30))
def test_the_table_shows_the_largest_and_adds_up_to_the_total(seconds: dict[str, float]) -> None:
    rows = cpu_table(seconds, wall=100.0, cores=2, shown=5)
    *programs, total = rows
    assert total[0] == "total"
    assert len(programs) <= 6
    assert [name for name, _, _ in programs[:5]] == [
        name for name, _ in sorted(seconds.items(), key=lambda item: (-item[1], item[0]))[:5]
    ]
    assert abs(sum(float(cpu) for _, cpu, _ in programs) - sum(seconds.values())) <= len(programs) * 0.5 + 1e-6


def test_a_sampler_counts_this_process_work_and_nothing_from_before() -> None:
    sampler = CpuByProgram()
    sampler._take(count=False)
    deadline = os.times().user + 0.3
    while os.times().user < deadline:
        pass  # 0.3 s of this process's CPU, between the two samples
    sampler._take(count=True)
    assert sum(sampler.seconds.values()) >= 0.2, sampler.seconds
    assert sum(sampler.seconds.values()) < 60, "what ran before the first sample is not counted"


def test_a_process_that_runs_another_program_is_named_again() -> None:
    ready = "import os; input(); os.execvp('sleep', ['sleep', '30'])"
    with subprocess.Popen([sys.executable, "-c", ready], stdin=subprocess.PIPE, text=True) as child:
        try:
            pid = str(child.pid)
            names: dict[tuple[str, str, str], str] = {}
            assert {name for (p, _), name, _ in _processes(names) if p == pid} == {"python -c"}
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
                time.sleep(0.01)  # polling the kernel's own record of the exec, not waiting for a guess
            assert {name for (p, _), name, _ in _processes(names) if p == pid} == {"sleep"}
        finally:
            child.kill()
