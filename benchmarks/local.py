"""``make bench-local``: our local clusters against kwokctl's, on the same Kubernetes binaries.

Two figures, each measured for both in one run:
- cluster start: from the command to a usable cluster (API ready, every node Ready, the ``default``
  ServiceAccount present so pods can be created);
- a ``--pods``-replica Deployment (default 1000) until every pod is Ready: pods/s and p50/p99 per-pod
  startup latency.

The baseline is kwokctl v0.8.0 with its binary runtime and ``--disable-qps-limits``, built from its Go
module like our binaries. This path (a Deployment on a local cluster) is also the baseline every later
offloading benchmark compares against.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import RolloutResult, rollout
from liqo.kube.client import KubeClient
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.resources import NODES, SERVICE_ACCOUNTS
from liqo.localclusters import clusters, toolchain
from liqo.localclusters.spec import ClusterSpec

console = Console()


def kwokctl_binary() -> Path:
    """kwokctl, built from its Go module into the cache if missing."""
    target = toolchain.cache_root() / "bench-bin" / f"kwokctl-v{toolchain.KWOK_VERSION}"
    if not target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            console.print("building kwokctl (baseline) from its Go module...")
            env = os.environ | {"GOBIN": tmp, "CGO_ENABLED": "0"}
            module = f"sigs.k8s.io/kwok/cmd/kwokctl@v{toolchain.KWOK_VERSION}"
            subprocess.run(["go", "install", "-trimpath", "-ldflags=-s -w", module], env=env, check=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(Path(tmp) / "kwokctl", target)
    return target


async def usable(kubeconfig: Path, *, nodes: int, timeout: float = 300) -> None:
    """Wait until ``nodes`` nodes are Ready and the default ServiceAccount exists."""
    deadline = time.monotonic() + timeout
    async with KubeClient.from_kubeconfig(kubeconfig) as client:
        while True:
            try:
                items, _ = await client.list_all(NODES)
                ready = sum(
                    any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", [])
                    )
                    for n in items
                )
                await client.get(SERVICE_ACCOUNTS, "default", namespace="default")
                if ready >= nodes:
                    return
            except (KubeError, NotFoundError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kubeconfig}: not usable after {timeout}s")
            await asyncio.sleep(0.05)  # polling a condition, with a deadline


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action()`` took."""
    started = time.monotonic()
    action()
    return time.monotonic() - started


async def deploy(kubeconfig: Path, pods: int) -> RolloutResult:
    """Roll out a ``pods``-replica Deployment on the cluster of ``kubeconfig``."""
    async with KubeClient.from_kubeconfig(kubeconfig) as client:
        return await rollout(client, namespace="bench", replicas=pods)


def ours(*, nodes: int, pods: int) -> tuple[float, RolloutResult]:
    """Start time and rollout on a liqo local cluster (deleted afterwards)."""
    spec = ClusterSpec(name=f"bench-{os.getpid()}", nodes=nodes, node_pods=max(110, -(-pods // nodes) + 10))
    try:
        start = timed(lambda: clusters.up(spec))
        kubeconfig = clusters.info(spec.name).kubeconfig
        asyncio.run(usable(Path(kubeconfig), nodes=nodes))
        return start, asyncio.run(deploy(Path(kubeconfig), pods))
    finally:
        clusters.down(spec.name, purge=True)


def kwokctl(*, nodes: int, pods: int) -> tuple[float, RolloutResult]:
    """Start time and rollout on a kwokctl cluster (deleted afterwards)."""
    binary = kwokctl_binary()
    bins = toolchain.bin_dir()
    with tempfile.TemporaryDirectory(prefix="bench-kwokctl-") as tmp:
        work = Path(tmp)
        config = work / "kwokctl.yaml"
        config.write_text(
            "kind: KwokctlConfiguration\napiVersion: config.kwok.x-k8s.io/v1alpha1\noptions:\n"
            f"  runtime: binary\n  bindAddress: 127.0.0.1\n  kubeVersion: v{toolchain.KUBERNETES_VERSION}\n"
            f"  kubeApiserverBinary: {bins / 'kube-apiserver'}\n"
            f"  kubeControllerManagerBinary: {bins / 'kube-controller-manager'}\n"
            f"  kubeSchedulerBinary: {bins / 'kube-scheduler'}\n  kubectlBinary: {bins / 'kubectl'}\n"
            f"  kwokControllerBinary: {bins / 'kwok'}\n  etcdBinary: {bins / 'etcd'}\n"
        )
        kubeconfig = work / "kubeconfig"
        env = os.environ | {"KWOK_WORKDIR": str(work / "kwok"), "PATH": f"{bins}:{os.environ['PATH']}"}
        name = f"bench-{os.getpid()}"

        def run(*args: str) -> None:
            subprocess.run(
                [str(binary), "--name", name, "--config", str(config), *args],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        def start() -> None:
            run("create", "cluster", "--kubeconfig", str(kubeconfig), "--disable-qps-limits", "--wait", "5m")
            run("scale", "node", "--replicas", str(nodes))
            asyncio.run(usable(kubeconfig, nodes=nodes))

        try:
            started = timed(start)
            return started, asyncio.run(deploy(kubeconfig, pods))
        finally:
            run("delete", "cluster")


def main() -> None:
    """Run both, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=10)
    args = parser.parse_args()
    toolchain.ensure_binaries(progress=console.print)
    console.print(f"ours: local cluster with {args.nodes} nodes, Deployment of {args.pods} replicas")
    our_start, our_rollout = ours(nodes=args.nodes, pods=args.pods)
    console.print(f"baseline: kwokctl v{toolchain.KWOK_VERSION}, same binaries, same workload")
    base_start, base_rollout = kwokctl(nodes=args.nodes, pods=args.pods)

    table = Table(
        title=f"bench-local: {args.nodes} nodes, {args.pods} pods (Kubernetes v{toolchain.KUBERNETES_VERSION})"
    )
    for column in ("metric", "liqo local", "kwokctl", "ratio (liqo/kwokctl)"):
        table.add_column(column, justify="right")
    rows = [
        ("cluster start to usable (s)", our_start, base_start),
        (f"{args.pods} pods Ready (s)", our_rollout.seconds, base_rollout.seconds),
        ("pods/s", our_rollout.pods_per_second, base_rollout.pods_per_second),
        ("pod startup p50 (s)", our_rollout.percentile(50), base_rollout.percentile(50)),
        ("pod startup p99 (s)", our_rollout.percentile(99), base_rollout.percentile(99)),
    ]
    for label, mine, theirs in rows:
        table.add_row(label, f"{mine:.2f}", f"{theirs:.2f}", f"{mine / theirs:.2f}" if theirs else "-")
    console.print(table)


if __name__ == "__main__":
    main()
