"""``make bench-offload PODS=N``: a Deployment offloaded through liqo against the same Deployment made directly.

One run, two local clusters (rome consumer, milan provider, liqo on both, milan sharing 100 % of its
capacity so that the offer is no limit). Measured:

- baseline: the Deployment created directly on milan, until every pod is Ready there;
- ours: the Deployment created in rome in a namespace offloaded to milan (strategy Remote), until every
  *home* pod is Ready in rome — the pods went through rome's scheduler, the virtual kubelet, a ShadowPod,
  milan's manager, milan's scheduler and KWOK, and their status came back;
- for both, p50/p99 per-pod startup latency (first seen → Ready, by a watcher on this machine);
- peak RSS (VmHWM) and CPU-seconds spent during the offloaded rollout by rome's virtual kubelet and manager
  and milan's manager.

The baseline runs first on a fresh milan; the offloaded run then shares milan with the baseline's pods
(still there), which is the harder case for us.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import RolloutResult, install_and_peer, rollout
from liqo.install import manifests
from liqo.kube.client import KubeClient
from liqo.kube.resources import NAMESPACES
from liqo.local import clusters, toolchain
from liqo.local.layout import ClusterDir, read_json
from liqo.local.spec import ClusterSpec
from liqo.offloading import operations as offloading

console = Console()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_NODE_PODS = 5000


@dataclass(frozen=True)
class Usage:
    """One process's peak RSS and CPU time so far."""

    peak_rss_mib: float
    cpu_seconds: float


def usage(cluster: str, component: str) -> Usage:
    """Peak RSS and CPU-seconds of a supervised component, from /proc."""
    pid = read_json(ClusterDir.named(cluster).status_file)["components"][component]["process"]["pid"]
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return Usage(peak_kib / 1024, cpu)


async def prepare(rome: KubeClient, milan: KubeClient) -> None:
    """liqo on both, milan sharing everything, rome peered and namespace ``bench-offloaded`` offloaded."""
    await install_and_peer(rome, milan, progress=console.print)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-offloaded"}}
    await rome.create(NAMESPACES, namespace)
    await offloading.offload(rome, "bench-offloaded", pod_offloading_strategy="Remote")
    await offloading.wait_offloaded(rome, "bench-offloaded", timeout=120)


async def measure(rome_name: str, milan_name: str, pods: int) -> tuple[RolloutResult, RolloutResult, dict[str, Usage]]:
    """Prepare, then the direct rollout on milan, then the offloaded one from rome (with process usage)."""
    async with (
        KubeClient.from_kubeconfig(ClusterDir.named(rome_name).kubeconfig) as rome,
        KubeClient.from_kubeconfig(ClusterDir.named(milan_name).kubeconfig) as milan,
    ):
        await prepare(rome, milan)
        console.print(f"baseline: {pods} replicas created directly on milan")
        direct = await rollout(milan, namespace="bench-direct", replicas=pods)
        components = {
            "rome virtual kubelet": (rome_name, manifests.VIRTUAL_KUBELET),
            "rome manager": (rome_name, manifests.MANAGER),
            "milan manager": (milan_name, manifests.MANAGER),
        }
        before = {label: usage(*where) for label, where in components.items()}
        console.print(f"ours: {pods} replicas created in rome, namespace offloaded to milan")
        offloaded = await rollout(rome, namespace="bench-offloaded", replicas=pods, create_namespace=False)
        after = {label: usage(*where) for label, where in components.items()}
        spent = {
            label: Usage(after[label].peak_rss_mib, after[label].cpu_seconds - before[label].cpu_seconds)
            for label in components
        }
        return direct, offloaded, spent


def main() -> None:
    """Set up, run both, print the table, tear down."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the two clusters afterwards")
    args = parser.parse_args()
    toolchain.ensure_binaries(progress=console.print)
    suffix = os.getpid()
    # Room for both runs on milan (the baseline's pods stay): twice the pods, plus some, over the nodes.
    node_pods = min(args.pods + 10, MAX_NODE_PODS)
    nodes = max(args.nodes, math.ceil(2.2 * args.pods / node_pods))
    rome = ClusterSpec(name=f"bench-rome-{suffix}", nodes=1)
    milan = ClusterSpec(
        name=f"bench-milan-{suffix}", nodes=nodes, node_cpu="64", node_memory="256Gi", node_pods=node_pods
    )
    try:
        for spec in (rome, milan):
            clusters.up(spec, progress=console.print)
        direct, offloaded, spent = asyncio.run(measure(rome.name, milan.name, args.pods))
    finally:
        if not args.keep:
            for spec in (rome, milan):
                clusters.down(spec.name, purge=True)

    table = Table(title=f"bench-offload: {args.pods} pods, milan with {nodes} nodes")
    for column in ("metric", "offloaded (rome → milan)", "direct on milan", "ratio"):
        table.add_column(column, justify="right")
    rows = [
        (f"{args.pods} pods Ready (s)", offloaded.seconds, direct.seconds),
        ("pods/s", offloaded.pods_per_second, direct.pods_per_second),
        ("pod startup p50 (s)", offloaded.percentile(50), direct.percentile(50)),
        ("pod startup p99 (s)", offloaded.percentile(99), direct.percentile(99)),
    ]
    for label, mine, theirs in rows:
        table.add_row(label, f"{mine:.2f}", f"{theirs:.2f}", f"{mine / theirs:.2f}" if theirs else "-")
    console.print(table)
    resources = Table(title="liqo processes during the offloaded rollout")
    for column in ("process", "peak RSS (MiB)", "CPU-seconds"):
        resources.add_column(column, justify="right")
    for label, used in spent.items():
        resources.add_row(label, f"{used.peak_rss_mib:.0f}", f"{used.cpu_seconds:.1f}")
    console.print(resources)


if __name__ == "__main__":
    main()
