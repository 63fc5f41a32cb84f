"""``make bench-services PODS=N``: how fast endpoints cross clusters, against a cluster's own EndpointSlice controller.

One run, two local clusters with pod CIDRs apart (rome 10.244.0.0/16 consumer, milan 10.245.0.0/16
provider, liqo on both, milan sharing 100 %), a namespace of rome offloaded to milan with LocalAndRemote, one
Service over two Deployments of N/2 pods each: one pinned to rome's node, one to milan's virtual node.
Watchers on this machine (monotonic clock) note when each pod turns Ready and when its address first shows
up ready in an EndpointSlice of the Service, on each side. Measured:

- provider → home: a pod Ready on milan → its endpoint ready in rome's slices (the pod reflector's status
  back-flow, then rome's EndpointSlice controller);
- home → provider: a pod Ready in rome → its endpoint ready in the twin on milan (rome's EndpointSlice
  controller, then our reflected slice);
- baseline, same run: a pod Ready in rome → its endpoint ready in rome's own slices (the controller alone);
- a change of the Service at home (its port) → the copy on milan saying so, five times.

The ratios divide by the baseline. The last line, ``endpoint_p99_s=X``, is the worse p99 of the two
cross-cluster directions (the goal: under one second).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import install_and_peer
from liqo.api import names
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError, UnreachableError
from liqo.kube.resources import DEPLOYMENTS, ENDPOINT_SLICES, NAMESPACES, PODS, SERVICES, Resource
from liqo.localclusters import clusters, toolchain
from liqo.localclusters.layout import ClusterDir
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading

console = Console()
NAMESPACE = "bench-services"
SERVICE = "bench"
Obj = dict[str, Any]


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def deployment(name: str, *, replicas: int, node_selector: dict[str, str]) -> Obj:
    """``replicas`` small pods labelled for the Service, pinned by ``node_selector``."""
    labels = {"app": SERVICE, "half": name}
    container = {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": node_selector, "containers": [container]},
            },
        },
    }


def service(port: int) -> Obj:
    """The Service over both halves, on ``port``."""
    spec = {"selector": {"app": SERVICE}, "ports": [{"name": "http", "port": port, "targetPort": 8080}]}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE}, "spec": spec}


async def follow(
    client: KubeClient, resource: Resource, namespace: str, seen: Callable[[Obj, float], None], stop: asyncio.Event
) -> None:
    """Call ``seen(obj, now)`` for every object ``resource`` in ``namespace`` shows, until ``stop``."""
    items, version = await client.list_all(resource, namespace=namespace)
    for obj in items:
        seen(obj, time.monotonic())
    while not stop.is_set():
        try:
            async for event in client.watch(resource, namespace=namespace, resource_version=version):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    seen(obj, time.monotonic())
                if stop.is_set():
                    return
        except UnreachableError:
            continue


class Clock:
    """When each pod turned Ready (by IP), and when each address first showed up ready in a slice."""

    def __init__(self) -> None:
        self.pod_ready: dict[str, float] = {}
        self.endpoint_ready: dict[str, float] = {}

    def pod(self, pod: Obj, now: float) -> None:
        """Note when ``pod`` is first seen Ready with an IP."""
        ip = (pod.get("status") or {}).get("podIP")
        if ip and _ready(pod):
            self.pod_ready.setdefault(ip, now)

    def endpoint_slice(self, endpoint_slice: Obj, now: float) -> None:
        """Note when each address of the Service's ``endpoint_slice`` is first seen ready."""
        if (endpoint_slice["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != SERVICE:
            return
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready"):
                for address in endpoint.get("addresses") or []:
                    self.endpoint_ready.setdefault(address, now)


def lags(pods: Clock, endpoints: Clock, ips: set[str]) -> list[float]:
    """Pod Ready (on one side) → endpoint ready (on one side), for every IP both saw."""
    return [endpoints.endpoint_ready[ip] - pods.pod_ready[ip] for ip in ips if ip in endpoints.endpoint_ready]


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile of ``values`` (NaN for none)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def prepare(rome: KubeClient, milan: KubeClient) -> str:
    """liqo on both, milan sharing everything, rome peered, the namespace offloaded; the twin's name."""
    await install_and_peer(rome, milan, progress=console.print)
    await rome.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    await offloading.offload(rome, NAMESPACE, pod_offloading_strategy="LocalAndRemote")
    status = await offloading.wait_offloaded(rome, NAMESPACE, timeout=120)
    return str(status["status"]["remoteNamespaceName"])


async def service_changes(rome: KubeClient, milan: KubeClient, twin: str, times: int) -> list[float]:
    """Change the Service's port at home ``times`` times; seconds until the copy on milan says so, each."""
    found = []
    for attempt in range(times):
        port = 9000 + attempt
        started = time.monotonic()
        patch = {"spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080}]}}
        await rome.patch(SERVICES, SERVICE, patch, namespace=NAMESPACE)
        while True:
            try:
                copy = await milan.get(SERVICES, SERVICE, namespace=twin)
                if copy["spec"]["ports"][0]["port"] == port:
                    break
            except NotFoundError:
                pass
            await asyncio.sleep(0.01)  # polling the answer, not synchronising the system under test
        found.append(time.monotonic() - started)
    return found


async def measure(rome_name: str, milan_name: str, pods: int) -> dict[str, list[float]]:
    """Prepare, roll both halves out behind the Service, then change the Service; the samples per path."""
    async with (
        KubeClient.from_kubeconfig(ClusterDir.named(rome_name).kubeconfig) as rome,
        KubeClient.from_kubeconfig(ClusterDir.named(milan_name).kubeconfig) as milan,
    ):
        twin = await prepare(rome, milan)
        home_pods, home_slices, milan_pods, milan_slices = Clock(), Clock(), Clock(), Clock()
        stop = asyncio.Event()
        watchers = [
            asyncio.create_task(follow(rome, PODS, NAMESPACE, home_pods.pod, stop)),
            asyncio.create_task(follow(rome, ENDPOINT_SLICES, NAMESPACE, home_slices.endpoint_slice, stop)),
            asyncio.create_task(follow(milan, PODS, twin, milan_pods.pod, stop)),
            asyncio.create_task(follow(milan, ENDPOINT_SLICES, twin, milan_slices.endpoint_slice, stop)),
        ]
        half = pods // 2
        await rome.create(SERVICES, service(80))
        node = f"{rome_name}-node-1"
        pinned = {"kubernetes.io/hostname": node}
        await rome.create(DEPLOYMENTS, deployment("home", replicas=half, node_selector=pinned))
        virtual = {names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE}
        await rome.create(DEPLOYMENTS, deployment("remote", replicas=pods - half, node_selector=virtual))
        console.print(f"{half} pods at rome, {pods - half} on milan, one Service; waiting for every endpoint")
        async with asyncio.timeout(1800):
            while True:
                remote_ips = set(milan_pods.pod_ready)
                at_home = {ip for ip in home_pods.pod_ready if ip not in remote_ips}
                done = (
                    len(remote_ips) >= pods - half
                    and len(at_home) >= half
                    and remote_ips <= set(home_slices.endpoint_ready)
                    and at_home <= set(milan_slices.endpoint_ready)
                    and at_home <= set(home_slices.endpoint_ready)
                )
                if done:
                    break
                await asyncio.sleep(0.2)  # polling the watchers' tallies, not synchronising the system
        changes = await service_changes(rome, milan, twin, times=5)
        stop.set()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        return {
            "provider → home": lags(milan_pods, home_slices, remote_ips),
            "home → provider": lags(home_pods, milan_slices, at_home),
            "baseline (home → home)": lags(home_pods, home_slices, at_home),
            "Service change home → provider": changes,
        }


def main() -> None:
    """Set up, measure, print the table and the final line, tear down."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the two clusters afterwards")
    args = parser.parse_args()
    toolchain.ensure_binaries(progress=console.print)
    suffix = os.getpid()
    rome = ClusterSpec(
        name=f"bench-srome-{suffix}", nodes=1, node_pods=args.pods + 10, node_cpu="64", node_memory="256Gi"
    )
    milan = ClusterSpec(
        name=f"bench-smilan-{suffix}",
        nodes=2,
        node_pods=args.pods,
        node_cpu="64",
        node_memory="256Gi",
        pod_cidr="10.245.0.0/16",
    )
    try:
        for spec in (rome, milan):
            clusters.up(spec, progress=console.print)
        results = asyncio.run(measure(rome.name, milan.name, args.pods))
    finally:
        if not args.keep:
            for spec in (rome, milan):
                clusters.down(spec.name, purge=True)
    baseline = results["baseline (home → home)"]
    table = Table(title=f"bench-services: {args.pods} endpoints, one Service over rome and milan")
    for column in ("path", "samples", "p50 (s)", "p99 (s)", "p99 / baseline p99"):
        table.add_column(column, justify="right")
    for label, values in results.items():
        ratio = percentile(values, 99) / percentile(baseline, 99) if baseline else float("nan")
        p50, p99 = percentile(values, 50), percentile(values, 99)
        table.add_row(label, str(len(values)), f"{p50:.3f}", f"{p99:.3f}", f"{ratio:.2f}")
    console.print(table)
    worst = max(percentile(results["provider → home"], 99), percentile(results["home → provider"], 99))
    print(f"endpoint_p99_s={worst:.3f}")


if __name__ == "__main__":
    main()
