"""``make bench-pods``: liqo as pods — install time, memory at idle and during an offload, leader hand-over.

Two local clusters with one real node each (liqo as pods from the image, as ``liqoctl install`` puts it
there); the consumer offloads a ``--pods``-replica Deployment (default 100) to the provider. Printed:

- ``liqoctl install`` wall time on each cluster (until the manager made the identity);
- the resident memory (RSS) of every liqo process — two manager replicas and the virtual kubelet on each
  side — when idle after peering, and its peak while the burst runs (sampled every 0.2 s from ``/proc`` of
  this machine, where the containers' processes are);
- the time from SIGKILL of the provider's leading manager to another replica holding the Lease.

Memory is read for processes, not cgroups: the nodes' cgroups are v1 here and the figure that matters to a
``resources.limits.memory`` is the process's RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from liqo.api import names
from liqo.api.components import MANAGER
from liqo.api.resources import SHARING_POLICIES
from liqo.kube.client import KubeClient
from liqo.kube.resources import DEPLOYMENTS, LEASES, NAMESPACES, PODS
from liqo.kube.waiting import poll_until
from liqo.localclusters import clusters
from liqo.localclusters.layout import ClusterDir
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering

console = Console()
WEB = {
    "name": "web",
    "image": "localhost/liqo/toolbox:1",
    "command": ["sh", "-c", "exec httpd -f -p 8080 -h /tmp"],
    "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
}


def liqo_processes(pod_names: set[str]) -> dict[str, int]:
    """Host PIDs of liqo's processes, by pod name (containers see their pod's name as hostname)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"liqo.apps." not in (proc / "cmdline").read_bytes():
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for name in pod_names:
            if f"HOSTNAME={name}".encode() in environ:
                found[name] = int(proc.name)
    return found


def rss_mib(pid: int) -> float:
    """A process's resident memory, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def liqo_pods(client: KubeClient) -> set[str]:
    """liqo's Running pods on a cluster."""
    pods, _ = await client.list_all(PODS, namespace=names.LIQO_NAMESPACE)
    return {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}


def install(name: str) -> float:
    """``liqoctl install`` on local cluster ``name``; its wall time."""
    kubeconfig = ClusterDir.named(name).kubeconfig
    started = time.monotonic()
    liqoctl = str(Path(sys.executable).parent / "liqoctl")
    subprocess.run([liqoctl, "install", f"--kubeconfig={kubeconfig}"], check=True, capture_output=True)
    return time.monotonic() - started


async def run(pods: int) -> None:
    """Both clusters, the measurements, the table; the clusters are deleted whatever happens."""
    suffix = os.urandom(2).hex()
    consumer_name, provider_name = f"bench-home-{suffix}", f"bench-far-{suffix}"
    table = Table(title=f"liqo as pods: {pods}-pod offload")
    try:
        for name, cidr in ((consumer_name, "10.250.0.0/16"), (provider_name, "10.251.0.0/16")):
            await asyncio.to_thread(clusters.up, ClusterSpec(name=name, nodes=0, real_nodes=1, pod_cidr=cidr))
        times = {name: await asyncio.to_thread(install, name) for name in (consumer_name, provider_name)}
        console.print(f"liqoctl install: {', '.join(f'{n} {t:.1f} s' for n, t in times.items())}")
        home = KubeClient.from_kubeconfig(ClusterDir.named(consumer_name).kubeconfig)
        far = KubeClient.from_kubeconfig(ClusterDir.named(provider_name).kubeconfig)
        async with home as consumer, far as provider:
            # All of the real node (110 pods): half, the default, would not hold the burst.
            policy = {"apiVersion": "sharing.liqo.io/v1alpha1", "kind": "SharingPolicy", "metadata": {"name": "all"}}
            await provider.create(SHARING_POLICIES, policy | {"spec": {"action": "Share", "percentage": 100}})
            await peering.peer(consumer, provider, timeout=60)
            namespace = "bench"
            await consumer.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            await offloading.offload(consumer, namespace, pod_offloading_strategy="Remote")
            await offloading.wait_offloaded(consumer, namespace, timeout=60)
            sides = {"consumer": consumer, "provider": provider}
            processes = {side: liqo_processes(await liqo_pods(client)) for side, client in sides.items()}
            idle = {(side, pod): rss_mib(pid) for side, procs in processes.items() for pod, pid in procs.items()}
            peak, burst = await _burst(consumer, namespace, pods=pods, processes=processes, idle=idle)
            table.add_column("side")
            table.add_column("pod")
            table.add_column("RSS idle (MiB)", justify="right")
            table.add_column(f"RSS peak during {pods} pods (MiB)", justify="right")
            for side, pod in sorted(idle):
                table.add_row(side, pod, f"{idle[side, pod]:.0f}", f"{peak[side, pod]:.0f}")
            console.print(table)
            console.print(f"{pods} offloaded pods Ready at home in {burst:.1f} s")
            lease = await provider.get(LEASES, MANAGER, namespace=names.LIQO_NAMESPACE)
            leader = lease["spec"]["holderIdentity"]
            killed = time.monotonic()
            os.kill(processes["provider"][leader.rsplit("-", 2)[0]], signal.SIGKILL)
            await poll_until(
                lambda: _holder_changed(provider, leader), timeout=60, interval=0.1, message="no hand-over"
            )
            console.print(f"hand-over after SIGKILL of the leading manager: {time.monotonic() - killed:.1f} s")
    finally:
        for name in (consumer_name, provider_name):
            if name in clusters.names():
                await asyncio.to_thread(clusters.down, name, purge=True)


async def _burst(
    consumer: KubeClient,
    namespace: str,
    *,
    pods: int,
    processes: dict[str, dict[str, int]],
    idle: dict[tuple[str, str], float],
) -> tuple[dict[tuple[str, str], float], float]:
    """Offload a Deployment of ``pods`` replicas; every process's peak RSS until all are Ready, and the time."""
    peak = dict(idle)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burst", "namespace": namespace},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": "burst"}},
            "template": {"metadata": {"labels": {"app": "burst"}}, "spec": {"containers": [WEB]}},
        },
    }
    started = time.monotonic()
    await consumer.create(DEPLOYMENTS, deployment)
    while True:
        for side, procs in processes.items():
            for pod, pid in procs.items():
                peak[side, pod] = max(peak[side, pod], rss_mib(pid))
        status = (await consumer.get(DEPLOYMENTS, "burst", namespace=namespace)).get("status") or {}
        if status.get("readyReplicas") == pods:
            return peak, time.monotonic() - started
        if time.monotonic() - started > 600:
            raise TimeoutError(f"{status.get('readyReplicas')} of {pods} pods ready after 600 s")
        await asyncio.sleep(0.2)  # the sampling period


async def _holder_changed(client: KubeClient, leader: str) -> bool:
    lease = await client.get(LEASES, MANAGER, namespace=names.LIQO_NAMESPACE)
    return bool(lease["spec"].get("holderIdentity") != leader)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=100)
    asyncio.run(run(parser.parse_args().pods))


if __name__ == "__main__":
    main()
