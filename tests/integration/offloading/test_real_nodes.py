"""A pod offloaded from home onto a provider's real node: a real container, managed with kubectl at home.

The home cluster (rome, fake nodes) peers with florence, whose only node is real. Every kubectl command
runs against rome; it reaches the container through rome's API server, the virtual kubelet, florence's API
server and florence's kubelet, containerd and runc.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from liqo.kube.resources import PODS
from liqo.localclusters.realnodes import images
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    LocalCluster,
    Site,
    kubectl,
    offloaded_to,
    pod,
    port_forward,
    purge,
    running_pods,
    start_sites,
    unique,
)
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

TOOLBOX = images.TOOLBOX_PINNED
SERVER = ["sh", "-c", "echo started; exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong'"]


def kubectl_run(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl against ``cluster``, its failure kept (``kubectl`` asserts success)."""
    return subprocess.run([*cluster.kubectl(), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def home_and_florence() -> Iterator[dict[str, Site]]:
    """rome (fake nodes) and florence (one real node), started and installed together.

    Not the shared ``sites``: this module runs in the lane of clusters with real nodes, which holds no
    family, and milan would idle through it.
    """
    made = start_sites(
        {
            "rome": ClusterSpec(name=unique("rome"), nodes=1, node_cpu="4", node_memory="8Gi"),
            "florence": ClusterSpec(name=unique("florence"), nodes=0, real_nodes=1, pod_cidr="10.246.0.0/16"),
        }
    )
    yield made
    purge(*(site.cluster for site in made.values()))


@pytest.fixture(scope="module")
def rome_site(home_and_florence: dict[str, Site]) -> Site:
    return home_and_florence["rome"]


@pytest.fixture(scope="module")
def florence(home_and_florence: dict[str, Site]) -> Site:
    return home_and_florence["florence"]


async def test_a_pod_offloaded_to_a_real_node_answers_kubectl_at_home(
    rome_site: Site, florence: Site, tmp_path: Path
) -> None:
    async with offloaded_to(rome_site, florence, strategy="Remote", prefix="rn") as offloaded:
        home, ns = rome_site.cluster, offloaded.namespace
        container = {"name": "app", "image": TOOLBOX, "command": SERVER}
        async with rome_site.client() as consumer:
            await consumer.create(PODS, pod("worker", ns, containers=[container]))
            await running_pods(consumer, ns, 1)
        async with florence.client() as provider:
            (twin,) = await running_pods(provider, offloaded.twin, 1)
            assert twin["spec"]["nodeName"] == f"{florence.cluster.name}-real-1"

        assert "started" in kubectl(home, "logs", "-n", ns, "worker")
        assert kubectl(home, "exec", "-n", ns, "worker", "--", "cat", "/proc/1/cmdline").startswith("socat\0")
        # stdin's end crosses both API servers and the virtual kubelet: cat ends, so does kubectl.
        echoed = kubectl(home, "exec", "-i", "-n", ns, "worker", "--", "cat", stdin="across\n", timeout=30)
        assert echoed == "across\n"
        (tmp_path / "in.txt").write_text("copied across\n")
        kubectl(home, "cp", str(tmp_path / "in.txt"), f"{ns}/worker:/tmp/in.txt", timeout=30)
        kubectl(home, "cp", f"{ns}/worker:/tmp/in.txt", str(tmp_path / "out.txt"), timeout=30)
        assert (tmp_path / "out.txt").read_text() == "copied across\n"

        with port_forward(home, ns, "worker", 8080) as port:
            for _ in range(2):  # one connection after another over the same forward
                with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                    assert conn.recv(100) == b"pong\n"

        # kubectl run -it: the pod is created, scheduled on the virtual node, attached to through it.
        shell = kubectl(
            home, "run", "shell", "-n", ns, f"--image={TOOLBOX}", "--restart=Never", "-i", "--rm", "--quiet",
            "--", "sh", "-c", "read line; echo got $line on $(hostname)", stdin="hello\n", timeout=120,
        )  # fmt: skip
        assert shell.startswith("got hello on shell")

        # An image no registry has: florence's kubelet refuses exec and attach ("container not found") behind
        # florence's API server; kubectl at home is told which container and why, not an empty error.
        unpullable = {"name": "app", "image": "registry.liqo.invalid/nowhere:1", "command": SERVER}
        async with rome_site.client() as consumer:
            await consumer.create(PODS, pod("unpulled", ns, containers=[unpullable]))
        async with florence.client() as provider:

            async def waiting() -> bool:
                found = await provider.get_or_none(PODS, "unpulled", namespace=offloaded.twin)
                statuses = ((found or {}).get("status") or {}).get("containerStatuses") or []
                return bool(statuses and "waiting" in statuses[0].get("state", {}))

            await eventually(waiting, timeout=60, message="florence's pod unpulled waiting for its image")
        for verb in (["exec", "unpulled", "--", "true"], ["attach", "unpulled"]):
            refused = kubectl_run(home, verb[0], "-n", ns, *verb[1:])
            assert refused.returncode != 0
            assert 'container "app" is waiting to start on the provider' in refused.stderr, refused.stderr
