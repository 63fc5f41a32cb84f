"""Measurements shared by the benchmarks: how fast a Deployment's pods become Ready.

Latencies are taken by a watcher on this machine, with a monotonic clock: a pod's startup latency is the
time from the watch event that first shows it to the one that shows it Ready. API timestamps have
one-second resolution, too coarse for pods that start in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liqo.api.resources import SHARING_POLICIES
from liqo.install.installer import InstallOptions, install
from liqo.kube.client import KubeClient
from liqo.kube.errors import UnreachableError
from liqo.kube.resources import DEPLOYMENTS, NAMESPACES, PODS
from liqo.localclusters.launch import detect
from liqo.peering import operations

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class RolloutResult:
    """How a Deployment's rollout went."""

    pods: int
    seconds: float
    latencies: list[float]

    @property
    def pods_per_second(self) -> float:
        """Ready pods per second over the whole rollout."""
        return self.pods / self.seconds

    def percentile(self, q: float) -> float:
        """A per-pod startup latency percentile (0-100), in seconds."""
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else 0.0
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(q) - 1]


def deployment(name: str, *, namespace: str, replicas: int, token: bool = True) -> dict[str, Any]:
    """A Deployment of ``replicas`` small pods; ``token=False``: pods that mount no ServiceAccount token."""
    labels = {"app": name}
    no_token = {} if token else {"automountServiceAccountToken": False}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}
                    ],
                    **no_token,
                },
            },
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


async def _scale_up(client: KubeClient, *, namespace: str, replicas: int, pace: float) -> None:
    """Raise the Deployment's replicas by one every ``pace`` seconds, from 1 to ``replicas``.

    The sleep here is the load's schedule, not a wait for a condition: pods arrive at a steady rate.
    """
    for count in range(2, replicas + 1):
        await asyncio.sleep(pace)
        await client.patch(DEPLOYMENTS, "bench", {"spec": {"replicas": count}}, namespace=namespace)


async def rollout(
    client: KubeClient,
    *,
    namespace: str,
    replicas: int,
    timeout: float = 1800,
    create_namespace: bool = True,
    pace: float | None = None,
    token: bool = True,
) -> RolloutResult:
    """Create a Deployment (and its namespace, unless it exists); measure until ``replicas`` pods are Ready.

    All its replicas at once (a burst: the latencies then include each pod's wait behind the others), or
    with ``pace``, one more replica every ``pace`` seconds (each pod's own startup, with no queue to wait in
    as long as the pace is below what the clusters sustain). ``token``: see :func:`deployment`.
    """
    if create_namespace:
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    _, version = await client.list_all(PODS, namespace=namespace)
    first_seen: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    started = time.monotonic()
    await client.create(
        DEPLOYMENTS, deployment("bench", namespace=namespace, replicas=1 if pace else replicas, token=token)
    )
    scaling = (
        asyncio.create_task(_scale_up(client, namespace=namespace, replicas=replicas, pace=pace)) if pace else None
    )
    try:
        await _until_ready(
            client,
            namespace=namespace,
            replicas=replicas,
            timeout=timeout,
            version=version,
            first_seen=first_seen,
            ready_at=ready_at,
        )
    finally:
        if scaling is not None:
            scaling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scaling
    seconds = max(ready_at.values()) - started
    return RolloutResult(replicas, seconds, [ready_at[n] - first_seen[n] for n in ready_at])


async def _until_ready(
    client: KubeClient,
    *,
    namespace: str,
    replicas: int,
    timeout: float,
    version: str,
    first_seen: dict[str, float],
    ready_at: dict[str, float],
) -> None:
    """Watch the namespace's pods until ``replicas`` are Ready, noting when each was first seen and Ready."""
    async with asyncio.timeout(timeout):
        while len(ready_at) < replicas:
            try:
                async for event in client.watch(PODS, namespace=namespace, resource_version=version):
                    pod = event["object"]
                    version = pod["metadata"]["resourceVersion"]
                    if event["type"] not in ("ADDED", "MODIFIED"):
                        continue
                    name = pod["metadata"]["name"]
                    now = time.monotonic()
                    first_seen.setdefault(name, now)
                    if name not in ready_at and _ready(pod):
                        ready_at[name] = now
                        if len(ready_at) >= replicas:
                            break
            except UnreachableError:
                continue


async def install_and_peer(consumer: KubeClient, provider: KubeClient, *, progress: Callable[[str], None]) -> None:
    """liqo on both clusters, the provider sharing all it has (the offer is no limit), the consumer peered."""
    for client in (consumer, provider):
        await install(client, InstallOptions(), progress=progress, launch=detect(client.server))
    policy = {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": "bench-share-all"},
        "spec": {"action": "Share", "percentage": 100},
    }
    await provider.apply(SHARING_POLICIES, policy)
    await operations.peer(consumer, provider, timeout=60)


# -- processes -----------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """A process's user + system time so far (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_mib(pid: int) -> float:
    """A process's peak resident memory (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def host_busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy (not idle, not waiting for I/O), all CPUs."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / CLOCK_TICKS
