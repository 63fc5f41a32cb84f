"""``make bench-offload PODS=N``: a Deployment offloaded through liqo against the same Deployment made directly.

Two local clusters, rome (consumer) and milan (provider, sharing 100 % of its capacity so that the offer is
no limit; its pod CIDR apart from rome's, see :data:`MILAN_POD_CIDR`), liqo on both, rome peered with milan.
Each cluster is pinned to a core of its own
(``liqoctl local up --cpus``: rome to the first CPU this process may use, milan to the second) in *both*
runs. Why: an offloaded pod has two lifecycles (home and provider), and on shared cores the two clusters'
work would be added up against one cluster's work, a ratio of ~2 whatever liqo does; real consumers and
providers are separate machines. This process (the watcher that times the pods) is not pinned.

The two runs, ``--repeat`` times each (direct first, then offloaded), every median reported:

- direct (the baseline): the Deployment created on milan, until every pod is Ready there;
- offloaded: the Deployment created in rome in a namespace offloaded to milan (strategy Remote), until
  every *home* pod is Ready in rome — the pods went through rome's scheduler, the virtual kubelet, a
  ShadowPod, milan's manager, milan's scheduler and KWOK, and their status came back.

Every run starts from the same state: a fresh namespace (offloaded, for the offloaded run, before the clock
starts), and no pod left by an earlier run — after each run its namespace is deleted and the next run
waits until both clusters are back to the pods they had before the first run.

Per run: the rollout's seconds and per-pod startup latency (first seen → Ready, by a watcher on this
machine); the CPU-seconds of every process of both clusters (their supervisors and every supervised
component: control plane, KWOK, liqo's); the peak RSS (VmHWM, since the process started) of liqo's
processes; the API requests per pod by resource and verb, from each API server's
``apiserver_request_total`` (:mod:`benchmarks.apirequests`); and how long the clean-up after it took (the
namespace deleted, every pod gone from both clusters): liqo's teardown path at that scale; the next run waits
until neither API server has answered a workload write for 3 s (KWOK's deletions drain for minutes after the
pods are gone at 10 000 pods). Then two latency
runs of 100 pods each way, p50/p99 startup latency pooled over the repeats and the overhead (offloaded minus
direct): ``latency``, all 100 at once, and ``paced``, one more every :data:`LATENCY_PACE` seconds. Why both:
on one core per cluster a burst of 100 is a small throughput test, each pod's latency mostly its wait behind
the others; paced, below what either kind sustains, it is the time one pod takes through each path.

Milan's CPU ratio is printed twice: all of it, and all but liqo's processes. On a provider pinned to one
core the rollout's time follows its CPU, and the second figure is what its control plane (API server, etcd,
scheduler, controllers, KWOK) spends on the requests liqo makes: the ratio that a liqo costing no CPU of
its own would reach.

Printed first: every setting that bounds the rollouts (client QPS/burst of each component, KWOK's
``podPlayStageParallelism``, the API server's in-flight limits, the pinning). ``--json`` prints the report
as JSON. The last line is always ``offload_ratio=X``: offloaded seconds over direct seconds, medians.

``--no-token``: pods that mount no ServiceAccount token (``automountServiceAccountToken: false``), in both
runs. An offloaded pod that mounts one costs a TokenRequest at home and a Secret on the provider (its home
token, docs/offloading.md); a direct pod's token is requested by its kubelet, which KWOK does not do. The
difference between the two ratios is what the home token costs the provider.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import apirequests
from benchmarks.measure import RolloutResult, cpu_seconds, host_busy_seconds, install_and_peer, peak_rss_mib, rollout
from liqo.kube.client import MAX_CONNECTIONS, KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import NAMESPACES, PODS
from liqo.kube.waiting import poll_until
from liqo.localclusters import clusters, toolchain
from liqo.localclusters.layout import ClusterDir, read_json
from liqo.localclusters.spec import ClusterSpec, format_cpus
from liqo.offloading import operations as offloading

console = Console(stderr=True)
out = Console(width=150)
"""The report's console: wide enough for the request table when stdout is a file, not a terminal."""
MAX_NODE_PODS = 5000
MILAN_POD_CIDR = "10.245.0.0/16"
"""milan's pod CIDR, apart from rome's (10.244.0.0/16): the pods' IPs are then copied home as they are with
the network fabric's remapping. Overlapping CIDRs without the fabric (these clusters have no real node to
run a gateway) would add one ``PodIPNotReachable`` Warning Event per pod at home, a cost of a misconfigured
peering, not of offloading."""
LATENCY_PODS = 100
LATENCY_PACE = 0.2
"""Seconds between the paced latency run's pods: 5 pods/s, well below what either kind sustains (24-38 pods/s
at 1 000 pods here), so that each pod's startup is measured, not its wait behind the others."""
LATENCY_RUNS = {"latency": None, "paced": LATENCY_PACE}
"""The latency runs by name: their pods' pace (None: all at once)."""
SIDES = ("rome", "milan")
KINDS = ("direct", "offloaded")


@dataclass
class Bench:
    """The two clusters: their names (rome first) and clients."""

    names: dict[str, str]
    clients: dict[str, KubeClient]
    baseline_pods: dict[str, int]
    token: bool = True
    """Whether the pods mount a ServiceAccount token (``--no-token``: they do not, in both runs)."""


@dataclass(frozen=True)
class Run:
    """What one rollout cost."""

    rollout: RolloutResult
    cpu: dict[str, float]
    """CPU-seconds by process (``rome/kube-apiserver``) during the rollout."""
    peak_rss_mib: dict[str, float]
    """liqo's processes' peak RSS so far, by process."""
    requests: dict[str, apirequests.Counts]
    """API requests per pod by cluster (``rome``, ``milan``)."""
    machine_busy_percent: float
    cleanup_seconds: float
    """From the namespace's deletion until it is gone and both clusters hold their starting pods again."""


# -- processes -----------------------------------------------------------------------------------------


def processes(bench: Bench) -> dict[str, int]:
    """Every process of both clusters (``rome/supervisor``, ``milan/kwok``...) by PID."""
    found: dict[str, int] = {}
    for side, name in bench.names.items():
        status = read_json(ClusterDir.named(name).status_file)
        found[f"{side}/supervisor"] = status["supervisor"]["pid"]
        for component, state in status["components"].items():
            if state.get("process"):
                found[f"{side}/{component}"] = state["process"]["pid"]
    return found


def cpu_snapshot(bench: Bench) -> dict[str, tuple[int, float]]:
    """Each process's PID and CPU-seconds so far."""
    return {label: (pid, cpu_seconds(pid)) for label, pid in processes(bench).items()}


def cpu_spent(before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]) -> dict[str, float]:
    """CPU-seconds between two snapshots (all of a process's life if it was restarted meanwhile)."""
    return {
        label: cpu - before[label][1] if label in before and before[label][0] == pid else cpu
        for label, (pid, cpu) in after.items()
    }


# -- settings ------------------------------------------------------------------------------------------


def _flag(argv: list[str], name: str, default: str) -> str:
    return next((arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}=")), default)


def cluster_settings(name: str) -> dict[str, str]:
    """What bounds one cluster's rollouts, read from what its supervisor runs (not from our defaults)."""
    cluster = ClusterDir.named(name)
    argv = {item["name"]: item["argv"] for item in read_json(cluster.components_file)}
    scheduler = yaml.safe_load(Path(_flag(argv["kube-scheduler"], "config", "")).read_text())["clientConnection"]
    kwok = yaml.safe_load_all(Path(_flag(argv["kwok"], "config", "")).read_text())
    options: dict[str, Any] = next(
        (doc["options"] for doc in kwok if doc and doc.get("kind") == "KwokConfiguration"), {}
    )
    controller_manager = argv["kube-controller-manager"]
    apiserver = argv["kube-apiserver"]
    liqo = f"none (≤ {MAX_CONNECTIONS} connections)"
    return {
        "cpus": ClusterSpec.from_dict(read_json(cluster.cluster_file)["spec"]).cpus or "not pinned",
        "kube-apiserver in-flight (read/mutating)": (
            f"{_flag(apiserver, 'max-requests-inflight', '400 (default)')}/"
            f"{_flag(apiserver, 'max-mutating-requests-inflight', '200 (default)')}"
        ),
        "kube-controller-manager QPS/burst": (
            f"{_flag(controller_manager, 'kube-api-qps', '20 (default)')}/"
            f"{_flag(controller_manager, 'kube-api-burst', '30 (default)')}"
        ),
        "kube-scheduler QPS/burst": f"{scheduler.get('qps', '50 (default)')}/{scheduler.get('burst', '100 (default)')}",
        "kwok QPS/burst": "none (its client has no rate limiter)",
        "kwok podPlayStageParallelism": str(options.get("podPlayStageParallelism", "4 (default)")),
        "liqo manager QPS/burst": liqo,
        "liqo virtual kubelet QPS/burst": liqo,
    }


# -- runs ----------------------------------------------------------------------------------------------


async def pod_count(client: KubeClient) -> int:
    """Pods in the whole cluster."""
    pods, _ = await client.list_all(PODS)
    return len(pods)


async def metrics(client: KubeClient) -> apirequests.Counts:
    """The API server's request counters now."""
    return apirequests.request_counts((await client.request_bytes("GET", "/metrics")).decode())


async def measured(bench: Bench, kind: str, *, namespace: str, pods: int, pace: float | None = None) -> Run:
    """One rollout of ``pods`` pods (``kind`` direct on milan, or offloaded from rome), then a clean slate.

    ``pace``: one more pod every ``pace`` seconds instead of all at once (:func:`benchmarks.measure.rollout`).
    """
    home = bench.clients["milan" if kind == "direct" else "rome"]
    if kind == "offloaded":  # a fresh offloaded namespace, ready before the clock starts
        await home.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        await offloading.offload(home, namespace, pod_offloading_strategy="Remote")
        await offloading.wait_offloaded(home, namespace, timeout=120)
    requests_before = {side: await metrics(client) for side, client in bench.clients.items()}
    cpu_before, busy_before = cpu_snapshot(bench), host_busy_seconds()
    result = await rollout(
        home, namespace=namespace, replicas=pods, create_namespace=kind == "direct", pace=pace, token=bench.token
    )
    cpu_after, busy_after = cpu_snapshot(bench), host_busy_seconds()
    requests = {
        side: apirequests.per_pod(apirequests.delta(requests_before[side], await metrics(client)), pods=pods)
        for side, client in bench.clients.items()
    }
    liqo = {label: peak_rss_mib(pid) for label, (pid, _) in cpu_after.items() if label.split("/")[1].startswith("liqo")}
    busy = 100 * (busy_after - busy_before) / result.seconds / (os.cpu_count() or 1)
    cleanup = await clean(bench, home, namespace=namespace, pods=pods)
    return Run(result, cpu_spent(cpu_before, cpu_after), liqo, requests, round(busy, 1), round(cleanup, 1))


async def clean(bench: Bench, home: KubeClient, *, namespace: str, pods: int) -> float:
    """Delete a run's namespace; wait until it is gone and both clusters hold the pods they held at first.

    Returns the seconds that took.
    """
    started = time.monotonic()
    await home.delete(NAMESPACES, namespace)

    async def gone() -> bool:
        try:
            await home.get(NAMESPACES, namespace)
        except NotFoundError:
            counts = {side: await pod_count(client) for side, client in bench.clients.items()}
            return counts == bench.baseline_pods
        return False

    await poll_until(gone, timeout=300 + pods / 5, message=f"namespace {namespace} and its pods gone", interval=1.0)
    seconds = time.monotonic() - started
    await settled(bench)
    return seconds


async def settled(bench: Bench, *, quiet: float = 3.0) -> None:
    """Wait until neither API server has answered a workload write for ``quiet`` seconds.

    See :func:`benchmarks.apirequests.workload_writes`: nothing of a run's clean-up is left to count against
    the next run.
    """
    last: list[float] = []

    async def quiet_now() -> bool:
        now = [apirequests.workload_writes(await metrics(client)) for client in bench.clients.values()]
        same = now == last
        last[:] = now
        return same

    await poll_until(quiet_now, timeout=900, message="both clusters done with the clean-up's writes", interval=quiet)


async def measure(bench: Bench, *, pods: int, repeat: int) -> dict[str, list[Run]]:
    """Both kinds, ``repeat`` times each, and the latency runs; every run from the same state."""
    runs: dict[str, list[Run]] = {kind: [] for kind in (*KINDS, *(f"{r}-{k}" for r in LATENCY_RUNS for k in KINDS))}
    for index in range(repeat):
        for kind in KINDS:
            run = await measured(bench, kind, namespace=f"bench-{kind}-{index}", pods=pods)
            runs[kind].append(run)
            console.print(
                f"[{index + 1}/{repeat}] {kind}: {pods} pods Ready in {run.rollout.seconds:.2f} s, "
                f"machine busy {run.machine_busy_percent:.0f} %; its namespace deleted in {run.cleanup_seconds:.0f} s"
            )
        for name, pace in LATENCY_RUNS.items():
            for kind in KINDS:
                run = await measured(
                    bench, kind, namespace=f"bench-{name}-{kind}-{index}", pods=LATENCY_PODS, pace=pace
                )
                runs[f"{name}-{kind}"].append(run)
                console.print(f"[{index + 1}/{repeat}] {name}, {kind}: p99 {run.rollout.percentile(99):.3f} s")
    return runs


# -- the report ----------------------------------------------------------------------------------------


def _pooled(runs: list[Run]) -> RolloutResult:
    """Every run's latencies as one sample (the latency run's percentiles need more than 100)."""
    latencies = [latency for run in runs for latency in run.rollout.latencies]
    return RolloutResult(len(latencies), sum(run.rollout.seconds for run in runs), latencies)


def _keyed(counts: apirequests.Counts) -> dict[str, float]:
    return {f"{resource} {verb}": round(value, 3) for (resource, verb), value in sorted(counts.items())}


def _latency(runs: dict[str, list[Run]], *, name: str, pace: float | None) -> dict[str, Any]:
    """A latency run's pooled percentiles each way, and the overhead (offloaded minus direct)."""
    pooled = {kind: _pooled(runs[f"{name}-{kind}"]) for kind in KINDS}
    percentiles = {kind: {f"p{q}": pooled[kind].percentile(q) for q in (50, 99)} for kind in KINDS}
    return {
        "pods": LATENCY_PODS,
        "pace_seconds": pace,
        **percentiles,
        "overhead": {q: percentiles["offloaded"][q] - percentiles["direct"][q] for q in ("p50", "p99")},
    }


def side_cpu(cpu_seconds: dict[str, float], *, side: str, liqo: bool = True) -> float:
    """CPU-seconds of one side's processes (``liqo=False``: all but liqo's own) from ``side/process`` labels."""
    return sum(
        seconds
        for label, seconds in cpu_seconds.items()
        if label.startswith(side + "/") and (liqo or not label.split("/", 1)[1].startswith("liqo"))
    )


def provider_cpu_ratio(offloaded: dict[str, float], direct: dict[str, float]) -> dict[str, float]:
    """Milan's CPU-seconds offloaded over direct: all of it, and all but liqo's processes.

    The second is what the control plane (API server, etcd, scheduler, controllers, KWOK) spends on what
    liqo asks of it: the ratio a liqo costing no CPU of its own would reach on a provider that is CPU-bound.
    """
    return {
        "all": side_cpu(offloaded, side="milan") / side_cpu(direct, side="milan"),
        "without_liqo": side_cpu(offloaded, side="milan", liqo=False) / side_cpu(direct, side="milan", liqo=False),
    }


def report(settings: dict[str, Any], runs: dict[str, list[Run]], *, pods: int) -> dict[str, Any]:
    """Medians over the repeats, and every run's figures."""
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        mine = runs[kind]
        requests = {side: apirequests.median_counts([run.requests[side] for run in mine]) for side in SIDES}
        labels = sorted({label for run in mine for label in run.cpu})
        kinds[kind] = {
            "seconds": statistics.median(run.rollout.seconds for run in mine),
            "seconds_runs": [round(run.rollout.seconds, 3) for run in mine],
            "pods_per_second": statistics.median(run.rollout.pods_per_second for run in mine),
            "startup_p50": statistics.median(run.rollout.percentile(50) for run in mine),
            "startup_p99": statistics.median(run.rollout.percentile(99) for run in mine),
            "machine_busy_percent_runs": [run.machine_busy_percent for run in mine],
            "cleanup_seconds_runs": [run.cleanup_seconds for run in mine],
            "cpu_seconds": {label: statistics.median(run.cpu.get(label, 0.0) for run in mine) for label in labels},
            "liqo_peak_rss_mib": {
                label: max(run.peak_rss_mib[label] for run in mine if label in run.peak_rss_mib)
                for label in sorted({label for run in mine for label in run.peak_rss_mib})
            },
            "requests_per_pod": {side: _keyed(requests[side]) for side in SIDES},
            "writes_per_pod": {side: apirequests.writes(requests[side]) for side in SIDES},
        }
    return {
        "settings": settings,
        "pods": pods,
        "repeat": len(runs["direct"]),
        **kinds,
        **{name: _latency(runs, name=name, pace=pace) for name, pace in LATENCY_RUNS.items()},
        "provider_cpu_ratio": provider_cpu_ratio(kinds["offloaded"]["cpu_seconds"], kinds["direct"]["cpu_seconds"]),
        "offload_ratio": kinds["offloaded"]["seconds"] / kinds["direct"]["seconds"],
    }


def print_report(result: dict[str, Any]) -> None:
    """The report as tables (the caller prints the ratio line)."""
    settings = result["settings"]
    shown = Table(title="settings")
    shown.add_column("setting")
    for side in SIDES:
        shown.add_column(f"{side} ({settings['roles'][side]})")
    for key in settings["rome"]:
        shown.add_row(key, *(settings[side][key] for side in SIDES))
    out.print(shown)
    token = "a ServiceAccount token" if settings["pods_mount_a_token"] else "no token (--no-token)"
    out.print(f"milan: {settings['milan_nodes']}; {settings['machine']}; the pods mount {token}")

    rollouts = Table(title=f"bench-offload: {result['pods']} pods, median of {result['repeat']}")
    for column in ("metric", "offloaded (rome → milan)", "direct on milan", "ratio"):
        rollouts.add_column(column, justify="right")
    offloaded, direct = result["offloaded"], result["direct"]
    for label, key in (
        (f"{result['pods']} pods Ready (s)", "seconds"),
        ("pods/s", "pods_per_second"),
        ("pod startup p50 (s)", "startup_p50"),
        ("pod startup p99 (s)", "startup_p99"),
    ):
        mine, theirs = offloaded[key], direct[key]
        rollouts.add_row(label, f"{mine:.2f}", f"{theirs:.2f}", f"{mine / theirs:.2f}" if theirs else "-")
    out.print(rollouts)
    for kind in ("offloaded", "direct"):
        busy = result[kind]["machine_busy_percent_runs"]
        out.print(
            f"{kind} runs: {result[kind]['seconds_runs']} s, the machine (all of it) busy {busy} %, "
            f"namespace deleted in {result[kind]['cleanup_seconds_runs']} s"
        )

    cpu = Table(title="CPU-seconds per process during the rollout (median)")
    for column in ("process", "offloaded", "direct"):
        cpu.add_column(column, justify="right")
    for label in sorted(set(offloaded["cpu_seconds"]) | set(direct["cpu_seconds"])):
        cpu.add_row(label, *(f"{result[kind]['cpu_seconds'].get(label, 0.0):.2f}" for kind in ("offloaded", "direct")))
    for side in SIDES:
        cpu.add_row(
            f"{side}, all",
            *(f"{side_cpu(result[kind]['cpu_seconds'], side=side):.2f}" for kind in ("offloaded", "direct")),
        )
    out.print(cpu)
    ratio = result["provider_cpu_ratio"]
    out.print(
        f"milan's CPU, offloaded over direct: {ratio['all']:.2f}; all but liqo's processes: "
        f"{ratio['without_liqo']:.2f} (what its control plane spends on what liqo asks of it)"
    )
    rss = ", ".join(f"{label} {mib:.0f}" for label, mib in offloaded["liqo_peak_rss_mib"].items())
    out.print(f"liqo's processes, peak RSS (MiB): {rss}")

    columns = {
        f"{kind}: {side}": {
            tuple(key.split(" ", 1)): value for key, value in result[kind]["requests_per_pod"][side].items()
        }
        for kind in ("offloaded", "direct")
        for side in SIDES
    }
    requests = Table(title="API requests per pod (apiserver_request_total, median)")
    for column in ("resource", "verb", *columns):
        requests.add_column(column, justify="left" if column in ("resource", "verb") else "right")
    for row in apirequests.table(columns):
        requests.add_row(*row)
    out.print(requests)
    writes = {kind: result[kind]["writes_per_pod"] for kind in ("offloaded", "direct")}
    out.print(f"writes per pod: {json.dumps(writes)}")

    for name in LATENCY_RUNS:
        latency = result[name]
        how = "all at once" if latency["pace_seconds"] is None else f"one every {latency['pace_seconds']} s"
        out.print(
            f"{name} run ({latency['pods']} pods, {how}): startup p50 {latency['offloaded']['p50']:.3f} s offloaded, "
            f"{latency['direct']['p50']:.3f} s direct (overhead {latency['overhead']['p50']:+.3f} s); "
            f"p99 {latency['offloaded']['p99']:.3f} s / {latency['direct']['p99']:.3f} s "
            f"(overhead {latency['overhead']['p99']:+.3f} s)"
        )


# -- main ----------------------------------------------------------------------------------------------


def specs(args: argparse.Namespace, *, suffix: str) -> tuple[ClusterSpec, ClusterSpec, str]:
    """rome and milan pinned to a CPU each; milan big enough for one run's pods; a line on milan's nodes."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        sys.exit(f"bench-offload pins each cluster to a CPU of its own: it needs 2, this process may use {available}")
    node_pods = min(max(args.pods, LATENCY_PODS) + 10, MAX_NODE_PODS)
    nodes = max(args.nodes, math.ceil(1.1 * args.pods / node_pods))
    rome = ClusterSpec(name=f"{args.prefix}-{suffix}-rome", nodes=1, cpus=format_cpus({available[0]}))
    milan = ClusterSpec(
        name=f"{args.prefix}-{suffix}-milan",
        nodes=nodes,
        node_cpu="64",
        node_memory="256Gi",
        node_pods=node_pods,
        cpus=format_cpus({available[1]}),
        pod_cidr=MILAN_POD_CIDR,
    )
    return rome, milan, f"{nodes} KWOK nodes of {node_pods} pods"


async def main_async(
    args: argparse.Namespace, rome: ClusterSpec, milan: ClusterSpec
) -> tuple[dict[str, Any], dict[str, list[Run]]]:
    """Install, peer, measure (the clusters are made and deleted by the caller)."""
    names = {"rome": rome.name, "milan": milan.name}
    async with (
        KubeClient.from_kubeconfig(ClusterDir.named(rome.name).kubeconfig) as rome_client,
        KubeClient.from_kubeconfig(ClusterDir.named(milan.name).kubeconfig) as milan_client,
    ):
        await install_and_peer(rome_client, milan_client, progress=console.print)
        clients = {"rome": rome_client, "milan": milan_client}
        baseline = {side: await pod_count(client) for side, client in clients.items()}
        bench = Bench(names, clients, baseline, token=not args.no_token)
        runs = await measure(bench, pods=args.pods, repeat=args.repeat)
    settings: dict[str, Any] = {side: cluster_settings(name) for side, name in names.items()}
    return settings | {"roles": {"rome": "consumer", "milan": "provider"}}, runs


def main() -> None:
    """Set up, run, print the report and the ratio line, tear down."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=3, help="milan's KWOK nodes (at least)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind (medians are reported)")
    parser.add_argument("--prefix", default="bench-offload", help="name prefix of the clusters made")
    parser.add_argument("--keep", action="store_true", help="keep the two clusters afterwards")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="pods that mount no ServiceAccount token, in both runs (what the home token's Secret costs)",
    )
    args = parser.parse_args()
    toolchain.ensure_binaries(progress=console.print)
    rome, milan, milan_nodes = specs(args, suffix=os.urandom(2).hex())
    try:
        for spec in (rome, milan):
            console.print(f"starting {spec.name} pinned to CPU {spec.cpus}")
            clusters.up(spec, progress=console.print)
        settings, runs = asyncio.run(main_async(args, rome, milan))
    finally:
        if not args.keep:
            for spec in (rome, milan):
                if spec.name in clusters.names():
                    clusters.down(spec.name, purge=True)
    settings |= {
        "milan_nodes": milan_nodes,
        "machine": f"{os.cpu_count()} CPUs",
        "pods_mount_a_token": not args.no_token,
    }
    result = report(settings, runs, pods=args.pods)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    print(f"offload_ratio={result['offload_ratio']:.2f}")


if __name__ == "__main__":
    main()
