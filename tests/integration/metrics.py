"""What a component of a local cluster serves on ``/metrics``: its samples, by name and labels.

A supervised process serves them on a loopback port of this machine; a pod on its own address, which is not
routed here, so they are read from inside the pod.
"""

from __future__ import annotations

import json

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from liqo.api.components import METRICS_PORT
from liqo.install.installer import InstallOptions
from liqo.localclusters.launch import HostProcesses, host_processes
from tests.integration.helpers import LocalCluster, Site, kubectl

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def ports(site: Site) -> HostProcesses:
    """The loopback ports the installer chose for the site's supervised processes."""
    return host_processes(site.cluster.name, InstallOptions())


async def scrape(session: aiohttp.ClientSession, port: int) -> Samples:
    """Every sample served on ``port``."""
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        assert response.status == 200
        return parsed(await response.text())


def in_pods(cluster: LocalCluster, deployment: str) -> Samples:
    """What the running pods of ``deployment`` (in namespace liqo) serve, summed as a query over them would.

    Every pod: of replicas under leader election, only the leader's controllers count anything.
    """
    spec = json.loads(kubectl(cluster, "-n", "liqo", "get", "deployment", deployment, "-o", "json"))
    selector = ",".join(f"{k}={v}" for k, v in spec["spec"]["selector"]["matchLabels"].items())
    pods = kubectl(
        cluster, "-n", "liqo", "get", "pods", "-l", selector, "--field-selector=status.phase=Running", "-o", "name"
    ).split()
    read = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/metrics').read().decode())"
    summed: Samples = {}
    for pod in pods:
        for key, sample in parsed(kubectl(cluster, "-n", "liqo", "exec", pod, "--", "python3", "-c", read)).items():
            summed[key] = summed.get(key, 0.0) + sample
    return summed


def parsed(text: str) -> Samples:
    """The samples of a ``/metrics`` answer."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample of ``name`` with exactly ``labels``; None if there is none."""
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` that carry ``labels`` (and any others)."""
    wanted = labels.items()
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)
