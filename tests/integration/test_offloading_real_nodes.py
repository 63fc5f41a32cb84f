"""A pod offloaded from home onto a provider's real node: a real container, managed with kubectl at home.

The home cluster (rome, fake nodes) peers with florence, whose only node is real. Every kubectl command
runs against rome; it reaches the container through rome's API server, the virtual kubelet, florence's API
server and florence's kubelet, containerd and runc.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from liqo.kube.resources import PODS
from liqo.local.realnodes import images
from liqo.local.spec import ClusterSpec
from tests.helpers import (
    LocalCluster,
    Offloaded,
    Site,
    install_liqo,
    offloaded_to,
    pod,
    purge,
    running_pods,
    start,
    unique,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

TOOLBOX = images.TOOLBOX_PINNED
SERVER = ["sh", "-c", "echo started; exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong'"]


@pytest.fixture(scope="module")
def florence() -> Iterator[Site]:
    local = start(ClusterSpec(name=unique("florence"), nodes=0, real_nodes=1, pod_cidr="10.246.0.0/16"))
    yield Site(local, install_liqo(local))
    purge(local)


@pytest.fixture(scope="module")
def rome(sites: dict[str, Site]) -> Site:
    return sites["rome"]


@pytest.fixture
async def worker(rome: Site, florence: Site) -> AsyncIterator[Offloaded]:
    """A namespace of rome offloaded to florence, holding pod ``worker`` (a TCP server) Running there."""
    async with offloaded_to(rome, florence, strategy="Remote", prefix="rn") as offloaded:
        container = {"name": "app", "image": TOOLBOX, "command": SERVER}
        async with rome.client() as home:
            await home.create(PODS, pod("worker", offloaded.namespace, containers=[container]))
            await running_pods(home, offloaded.namespace, 1)
        async with florence.client() as provider:
            (twin,) = await running_pods(provider, offloaded.twin, 1)
            assert twin["spec"]["nodeName"] == f"{florence.cluster.name}-real-1"
        yield offloaded


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    result = subprocess.run(
        [*cluster.kubectl(), *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


async def test_logs_exec_and_cp_from_home_reach_the_real_container(
    rome: Site, worker: Offloaded, tmp_path: Path
) -> None:
    home, ns = rome.cluster, worker.namespace
    assert "started" in kubectl(home, "logs", "-n", ns, "worker")
    assert kubectl(home, "exec", "-n", ns, "worker", "--", "cat", "/proc/1/cmdline").startswith("socat\0")
    # stdin's end crosses both API servers and the virtual kubelet: cat ends, so does kubectl.
    echoed = kubectl(home, "exec", "-i", "-n", ns, "worker", "--", "cat", stdin="through two clusters\n", timeout=30)
    assert echoed == "through two clusters\n"
    (tmp_path / "in.txt").write_text("copied across\n")
    kubectl(home, "cp", str(tmp_path / "in.txt"), f"{ns}/worker:/tmp/in.txt", timeout=30)
    kubectl(home, "cp", f"{ns}/worker:/tmp/in.txt", str(tmp_path / "out.txt"), timeout=30)
    assert (tmp_path / "out.txt").read_text() == "copied across\n"


async def test_port_forward_from_home_reaches_the_real_container(rome: Site, worker: Offloaded) -> None:
    argv = [*rome.cluster.kubectl(), "port-forward", "-n", worker.namespace, "worker", ":8080"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as forward:
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080"
            assert line.startswith("Forwarding from 127.0.0.1:"), line
            port = int(line.split(":")[1].split()[0])
            for _ in range(2):  # one connection after another over the same forward
                with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                    assert conn.recv(100) == b"pong\n"
        finally:
            forward.terminate()


async def test_kubectl_run_interactive_in_an_offloaded_namespace(rome: Site, worker: Offloaded) -> None:
    shell = kubectl(
        rome.cluster, "run", unique("it"), "-n", worker.namespace, f"--image={TOOLBOX}", "--restart=Never",
        "-i", "--rm", "--quiet", "--", "sh", "-c", "read line; echo got $line on $(hostname)",
        stdin="hello\n", timeout=120,
    )  # fmt: skip
    assert shell.startswith("got hello on ")
