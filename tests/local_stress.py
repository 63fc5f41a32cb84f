"""Concurrent ``liqoctl local`` under load: two loops of up / peer / purge beside a continuous ``local list``.

Two users' terminals, or two test lanes, share one machine's clusters' root: ports, underlay slots, the
directory every command reads. Each loop brings up two clusters of its own, installs liqo on both, peers
them with ``liqoctl peer`` and purges them, again and again until the time is up; meanwhile ``local list``
runs without pause and must never fail. Everything goes through the command line, as a user's would.

Before each purge the loop notes what the cluster made on this machine — its processes (pid and start
time, from ``status.json``), and with real nodes their veths, cgroups, namespace mounts and nftables
table — and after it checks that each is gone; at the end nothing of the run may be left in the clusters'
root (no directory, no tombstone). Any failed command or leftover is a problem; the exit code is 1 if
there is one. Run by ``scripts/local-stress`` and by ``tests/integration/localclusters/test_concurrency.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from liqo.localclusters import clusters
from liqo.localclusters.layout import ClusterDir, clusters_root, read_json, read_record
from liqo.localclusters.processes import ProcessRef, is_alive
from liqo.localclusters.realnodes import host
from liqo.localclusters.realnodes.nodes import RealNode, real_nodes

LIQOCTL = str(Path(sys.executable).parent / "liqoctl")
COMMAND_DEADLINE = 600.0
"""One command's limit: ``up`` builds nothing here (the binaries are cached), peering waits on its own."""


@dataclass
class Report:
    """What a run did and what went wrong (shared by the loops' threads)."""

    rounds: dict[str, int] = field(default_factory=dict)
    lists: int = 0
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)
        print(f"PROBLEM: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Traces:
    """What one cluster made on this machine, to be gone once it is purged."""

    name: str
    processes: list[ProcessRef]
    nodes: list[RealNode]

    @classmethod
    def of(cls, name: str) -> Traces:
        cluster = ClusterDir.named(name)
        try:
            status = read_json(cluster.status_file)
        except FileNotFoundError:
            status = {}
        refs = [status.get("supervisor"), *(c.get("process") for c in status.get("components", {}).values())]
        record = read_record(cluster) or {}
        nodes = (
            real_nodes(
                cluster=name,
                count=int(record["spec"]["real_nodes"]),
                underlay=int(record["underlay"]),
                cluster_root=cluster.root,
            )
            if record.get("underlay")
            else []
        )
        return cls(name, [ref for ref in map(ProcessRef.from_dict, refs) if ref is not None], nodes)

    def left(self) -> list[str]:
        """Whatever of the cluster is still on this machine."""
        root = ClusterDir.named(self.name).root
        left = [f"directory {root}"] * root.exists()
        left += [f"tombstone {p}" for p in root.parent.glob(f".removing-{self.name}-*")]
        left += [f"process {ref.pid}" for ref in self.processes if is_alive(ref)]
        left += [f"veth {node.veth}" for node in self.nodes if Path("/sys/class/net", node.veth).exists()]
        left += [f"cgroup {node.cgroup}" for node in self.nodes if _cgroup_exists(node)]
        left += [f"mount {point}" for point in host.mounts_under(root.parent) if _of(root, Path(point))]
        if self.nodes and _nft_table_exists(host.nat_table(self.name)):
            left.append(f"nftables table {host.nat_table(self.name)}")
        return left


def _of(root: Path, path: Path) -> bool:
    """Whether ``path`` is in the cluster's directory ``root`` or in a tombstone of it."""
    if not path.is_relative_to(root.parent) or path == root.parent:
        return False
    top = path.relative_to(root.parent).parts[0]
    return top == root.name or top.startswith(f".removing-{root.name}-")


def _cgroup_exists(node: RealNode) -> bool:
    return any((hierarchy / node.cgroup.strip("/")).exists() for hierarchy in host.hierarchies())


def _nft_table_exists(table: str) -> bool:
    return subprocess.run(["nft", "list", "table", "ip", table], capture_output=True, check=False).returncode == 0


def liqoctl(report: Report, *args: str, log: bool = True) -> str | None:
    """Run a liqoctl command; its output, or None and a problem if it failed (or ran past its deadline)."""
    started = time.monotonic()
    try:
        result = subprocess.run([LIQOCTL, *args], capture_output=True, text=True, timeout=COMMAND_DEADLINE, check=False)
    except subprocess.TimeoutExpired:
        report.problem(f"`liqoctl {' '.join(args)}` still running after {COMMAND_DEADLINE:.0f}s")
        return None
    if result.returncode != 0:
        report.problem(f"`liqoctl {' '.join(args)}` exited {result.returncode}: {result.stderr.strip()[-2000:]}")
        return None
    if log:
        print(f"{time.monotonic() - started:6.1f}s liqoctl {' '.join(args)}", flush=True)
    return result.stdout


def kubeconfig(name: str) -> str:
    return f"--kubeconfig={ClusterDir.named(name).kubeconfig}"


def peer_round(report: Report, *, consumer: str, provider: str, provider_flags: list[str]) -> None:
    """Up both, install liqo on both, peer them; then purge both and check that nothing of them is left."""
    try:
        if all(
            liqoctl(report, *command) is not None
            for command in (
                ("local", "up", consumer, "--nodes", "1"),
                ("local", "up", provider, *provider_flags),
                ("install", kubeconfig(consumer)),
                ("install", kubeconfig(provider)),
            )
        ):
            liqoctl(
                report, "peer", kubeconfig(consumer), f"--remote-kubeconfig={ClusterDir.named(provider).kubeconfig}"
            )
    finally:
        for name in (consumer, provider):
            traces = Traces.of(name)
            if read_record(ClusterDir.named(name)) is not None:
                liqoctl(report, "local", "down", name, "--purge")
            for thing in traces.left():
                report.problem(f"{name} purged, but its {thing} is left")


def peer_loop(report: Report, *, loop: str, deadline: float, provider_flags: list[str]) -> None:
    """Rounds until the deadline (the last one finishes), each on names never used before."""
    index = 0
    while time.monotonic() < deadline:
        peer_round(
            report,
            consumer=f"{loop}-{index}-a",
            provider=f"{loop}-{index}-b",
            provider_flags=provider_flags,
        )
        index += 1
        with report.lock:
            report.rounds[loop] = index


def list_loop(report: Report, *, stop: threading.Event, through_cli: bool) -> None:
    """``local list`` without pause: it must succeed, whatever is being made or purged meanwhile.

    Through the CLI (``liqoctl local list -o json``) as a user's terminal would, or in this process (the same
    ``clusters.listing`` the command calls): each CLI call spends ~2 CPU-seconds importing liqoctl, so a loop
    of them takes a core of its own, which the suite's lanes need more than these extra reads.
    """
    while not stop.is_set():
        if through_cli:
            listed = liqoctl(report, "local", "list", "-o", "json", log=False)
        else:
            try:
                listed = json.dumps([found.to_dict() for found in clusters.listing()])
            except Exception as exc:  # what the CLI would have printed as its error
                report.problem(f"listing the clusters failed: {type(exc).__name__}: {exc}")
                listed = None
        if listed is None:
            continue
        try:
            json.loads(listed)
        except ValueError:
            report.problem(f"`liqoctl local list -o json` printed no JSON: {listed[:500]}")
        with report.lock:
            report.lists += 1


def run(*, minutes: float, prefix: str, real_node: bool, list_through_cli: bool = True) -> Report:
    """Two peer loops (the second's provider with a real node if ``real_node``) beside a list loop."""
    report = Report()
    deadline = time.monotonic() + minutes * 60
    stop = threading.Event()
    loops = {
        f"{prefix}-k": ["--nodes", "1"],
        f"{prefix}-r": ["--nodes", "0", "--real-nodes", "1"] if real_node else ["--nodes", "1"],
    }
    lister = threading.Thread(
        target=list_loop, kwargs={"report": report, "stop": stop, "through_cli": list_through_cli}, daemon=True
    )
    lister.start()
    workers = [
        threading.Thread(
            target=peer_loop, kwargs={"report": report, "loop": loop, "deadline": deadline, "provider_flags": flags}
        )
        for loop, flags in loops.items()
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    lister.join()
    for path in sorted(clusters_root().glob(f"{prefix}-*")) + sorted(clusters_root().glob(f".removing-{prefix}-*")):
        report.problem(f"{path} is left after the run")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="local-stress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="start rounds for this long (default 10)")
    parser.add_argument("--prefix", default=f"s{os.getpid() % 100000}", help="cluster names start with it")
    parser.add_argument(
        "--real-node",
        action=argparse.BooleanOptionalAction,
        default=os.geteuid() == 0,
        help="the second loop's provider has a real node (default: when run as root)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = run(minutes=args.minutes, prefix=args.prefix, real_node=args.real_node)
    rounds = ", ".join(f"{loop}: {count}" for loop, count in sorted(report.rounds.items()))
    print(
        f"local-stress: {time.monotonic() - started:.0f}s, rounds {rounds or 'none'}, {report.lists} lists, "
        f"{len(report.problems)} problem(s)"
    )
    for problem in report.problems:
        print(f"  {problem}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
