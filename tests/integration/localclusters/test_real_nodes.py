"""Real nodes in local clusters: pods really run, talk to each other, and leave nothing behind.

Every check goes through the real kubelet, containerd, runc and kube-proxy of a node in its own
namespaces: processes are looked for in the node's cgroup, packets cross its bridge, teardown is checked
against the kernel's own lists (mounts, links, cgroups, nftables tables).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from liqo.api import volumes as volume_protocol
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    SERVICES,
)
from liqo.localclusters import clusters
from liqo.localclusters.layout import read_json
from liqo.localclusters.processes import ProcessRef, is_alive
from liqo.localclusters.realnodes import host, images, volumes
from liqo.localclusters.realnodes.nodes import CGROUP_PARENT, SYSCTLS_KUBELET_WANTS, RealNode, real_nodes
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    LocalCluster,
    deployment,
    eventually_sync,
    kubectl,
    port_forward,
    purge,
    running_pods,
    start,
    stopped,
    unique,
)
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

TOOLBOX = images.TOOLBOX_PINNED
NODE_STORAGE = "4Gi"
"""What each node of the module's cluster holds for volumes: small enough for a claim to outgrow it."""


def host_sysctls() -> dict[str, str]:
    return {key: Path("/proc/sys", key).read_text().strip() for key in SYSCTLS_KUBELET_WANTS}


@pytest.fixture(scope="module")
def sysctls_before() -> dict[str, str]:
    return host_sysctls()


@pytest.fixture(scope="module")
def real(sysctls_before: dict[str, str]) -> Iterator[LocalCluster]:
    local = start(ClusterSpec(name=unique("real"), nodes=0, real_nodes=2, node_storage=NODE_STORAGE))
    yield local
    purge(local)


@pytest.fixture
async def real_kube(real: LocalCluster) -> Any:
    async with real.client() as client:
        yield client


@pytest.fixture
async def ns(real_kube: KubeClient) -> Any:
    name = unique("rn")
    await real_kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await real_kube.delete(NAMESPACES, name)


def tool_deployment(name: str, namespace: str, *, replicas: int, command: list[str], spread: bool = False) -> Obj:
    container = {"name": "main", "image": TOOLBOX, "command": command}
    # One replica per node: traffic between them crosses from one node to another.
    apart = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": name}}}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}
    extra: dict[str, Any] = {"affinity": affinity} if spread else {}
    return deployment(
        name, namespace, replicas=replicas, containers=[container], terminationGracePeriodSeconds=1, **extra
    )


def real_nodes_of(cluster: LocalCluster) -> list[RealNode]:
    stored = read_json(cluster.dir.cluster_file)
    return real_nodes(
        cluster=cluster.name,
        count=cluster.spec.real_nodes,
        underlay=int(stored["underlay"]),
        cluster_root=cluster.dir.root,
    )


def node_pids(cluster: LocalCluster) -> set[int]:
    pids: set[int] = set()
    for index in range(1, cluster.spec.real_nodes + 1):
        pids |= host.cgroup_pids(f"/{CGROUP_PARENT}/{cluster.name}-real-{index}")
    return pids


async def test_a_deployment_of_the_tool_image_really_runs(real: LocalCluster, real_kube: KubeClient, ns: str) -> None:
    await real_kube.create(DEPLOYMENTS, tool_deployment("sleeper", ns, replicas=2, command=["sleep", "3600"]))
    pods = await running_pods(real_kube, ns, 2)
    assert {pod["spec"]["nodeName"] for pod in pods} <= {f"{real.name}-real-1", f"{real.name}-real-2"}
    name = pods[0]["metadata"]["name"]
    cmdline = kubectl(real, "exec", "-n", ns, name, "--", "cat", "/proc/1/cmdline")
    assert cmdline.split("\0")[:2] == ["sleep", "3600"]
    # The container's process is a process of this machine, in the node's cgroup.
    sleepers = [pid for pid in node_pids(real) if _cmdline(pid) == b"sleep\x003600\x00"]
    assert len(sleepers) == 2


async def test_pods_reach_each_other_a_service_and_their_api_server(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    server = ["socat", "TCP-LISTEN:8080,fork,reuseaddr", "SYSTEM:echo hello from $HOSTNAME"]
    await real_kube.create(DEPLOYMENTS, tool_deployment("echo", ns, replicas=2, command=server, spread=True))
    await real_kube.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo", "namespace": ns},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    servers = await running_pods(real_kube, ns, 2)
    assert len({server["spec"]["nodeName"] for server in servers}) == 2
    # A client made after the Service: it gets the Service's environment variables.
    await real_kube.create(DEPLOYMENTS, tool_deployment("client", ns, replicas=1, command=["sleep", "3600"]))
    pods = await running_pods(real_kube, ns, 3)
    client = next(p for p in pods if p["metadata"]["labels"]["app"] == "client")["metadata"]["name"]

    def in_client(script: str) -> str:
        return kubectl(real, "exec", "-n", ns, client, "--", "sh", "-c", script)

    for server_pod in servers:
        answer = in_client(f"nc -w 3 {server_pod['status']['podIP']} 8080 </dev/null")
        assert answer.strip() == f"hello from {server_pod['metadata']['name']}"
    assert in_client("ping -c 1 -W 3 " + servers[0]["status"]["podIP"] + " >/dev/null && echo ok").strip() == "ok"
    assert in_client("echo $ECHO_SERVICE_HOST:$ECHO_SERVICE_PORT").strip().endswith(":80")
    names = {p["metadata"]["name"] for p in servers}
    seen: set[str] = set()

    async def both_backends_answer() -> bool:
        seen.add(
            in_client("nc -w 3 $ECHO_SERVICE_HOST $ECHO_SERVICE_PORT </dev/null").strip().removeprefix("hello from ")
        )
        return seen == names

    await eventually(both_backends_answer, timeout=60, message=f"the Service reached only {seen}")
    version = in_client("curl -sk https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version")
    assert orjson.loads(version)["gitVersion"].startswith("v1.")


async def test_logs_exec_cp_attach_and_port_forward(
    real: LocalCluster, real_kube: KubeClient, ns: str, tmp_path: Path
) -> None:
    server = ["sh", "-c", "echo started; exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong'"]
    await real_kube.create(DEPLOYMENTS, tool_deployment("streams", ns, replicas=1, command=server))
    name = (await running_pods(real_kube, ns, 1))[0]["metadata"]["name"]
    assert "started" in kubectl(real, "logs", "-n", ns, name)
    # stdin's end reaches the process: cat ends, so does kubectl.
    assert (
        kubectl(real, "exec", "-i", "-n", ns, name, "--", "cat", stdin="through stdin\n", timeout=30)
        == "through stdin\n"
    )
    (tmp_path / "in.txt").write_text("copied in\n")
    kubectl(real, "cp", str(tmp_path / "in.txt"), f"{ns}/{name}:/tmp/in.txt", timeout=30)
    kubectl(real, "cp", f"{ns}/{name}:/tmp/in.txt", str(tmp_path / "out.txt"), timeout=30)
    assert (tmp_path / "out.txt").read_text() == "copied in\n"
    shell = kubectl(
        real, "run", unique("it"), "-n", ns, f"--image={TOOLBOX}", "--restart=Never", "-i", "--rm", "--quiet",
        "--", "sh", "-c", "read line; echo got $line", stdin="hello\n", timeout=90,
    )  # fmt: skip
    assert shell.strip() == "got hello"
    with port_forward(real, ns, name, 8080) as local_port, socket.create_connection(("127.0.0.1", local_port)) as conn:
        assert conn.recv(100) == b"pong\n"


CLAIM_AND_WRITER = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {size}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {pod}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    command: [sh, -c, "[ -f /data/first ] || hostname > /data/first; exec sleep 3600"]
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]
"""
"""A claim of the default class (none named) and a pod that writes its own name once on the volume."""


async def test_a_claim_of_the_default_class_holds_data_across_pods_and_goes_with_its_claim(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    kubectl(real, "apply", "-n", ns, "-f", "-", stdin=CLAIM_AND_WRITER.format(size="1Gi", pod="first", image=TOOLBOX))
    [first] = await running_pods(real_kube, ns, 1)
    claim = await real_kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace=ns)
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == volumes.STORAGE_CLASS
    volume = await real_kube.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
    node = first["spec"]["nodeName"]
    assert volume_protocol.node_of(volume) == node, "the volume is on the node where its first pod runs"
    assert kubectl(real, "exec", "-n", ns, "first", "--", "cat", "/data/first").strip() == "first"
    [real_node] = [n for n in real_nodes_of(real) if n.name == node]
    directory = real_node.inside(volume["spec"]["local"]["path"])
    assert (directory / "first").read_text().strip() == "first", "the data is on the node's own disk"

    kubectl(real, "delete", "pod", "-n", ns, "first", "--wait=true", timeout=60)
    kubectl(real, "apply", "-n", ns, "-f", "-", stdin=CLAIM_AND_WRITER.format(size="1Gi", pod="second", image=TOOLBOX))
    [second] = await running_pods(real_kube, ns, 1)
    assert second["spec"]["nodeName"] == node, "a pod of the claim follows its data"
    assert kubectl(real, "exec", "-n", ns, "second", "--", "cat", "/data/first").strip() == "first"

    kubectl(real, "delete", "pod", "-n", ns, "second", "--wait=true", timeout=60)
    kubectl(real, "delete", "pvc", "-n", ns, "data", "--wait=true", timeout=60)

    async def gone() -> bool:
        return await real_kube.get_or_none(PERSISTENT_VOLUMES, volume["metadata"]["name"]) is None

    await eventually(gone, timeout=60, message="the released volume is deleted")
    assert not directory.exists(), "its data went with it"


async def test_a_claim_made_while_the_provisioner_is_down_gets_its_volume_when_it_is_back(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    async with stopped(real, "volume-provisioner"):
        kubectl(
            real, "apply", "-n", ns, "-f", "-", stdin=CLAIM_AND_WRITER.format(size="1Gi", pod="late", image=TOOLBOX)
        )

        async def node_chosen() -> bool:
            claim = await real_kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace=ns)
            return volume_protocol.SELECTED_NODE in (claim["metadata"].get("annotations") or {})

        await eventually(node_chosen, timeout=60, message="the scheduler picks a node and waits for the volume")
        assert (await real_kube.get(PODS, "late", namespace=ns))["status"]["phase"] == "Pending"
    await running_pods(real_kube, ns, 1, timeout=90)
    assert kubectl(real, "exec", "-n", ns, "late", "--", "cat", "/data/first").strip() == "late"


async def test_a_claim_larger_than_any_node_holds_waits_with_the_reason_and_makes_nothing(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    kubectl(real, "apply", "-n", ns, "-f", "-", stdin=CLAIM_AND_WRITER.format(size="5Gi", pod="big", image=TOOLBOX))
    reasons: list[str] = []

    async def refused() -> bool:
        events = (await real_kube.list(EVENTS, namespace=ns, field_selector="involvedObject.name=data"))["items"]
        reasons[:] = [e["message"] for e in events if e["reason"] == "NodeStorageFull"]
        return bool(reasons)

    # Refused by the node the scheduler chose, which is then asked again: by score, not necessarily the other
    # node next (it knows no capacity: the class is not CSI), so "both refused" may take minutes.
    await eventually(refused, timeout=60, message="the claim refused by the node the scheduler chose")
    assert {m.split()[1] for m in reasons} <= {n.name for n in real_nodes_of(real)}, reasons
    assert all(f"of {NODE_STORAGE} left" in m and "asks 5Gi" in m for m in reasons), reasons
    pod = await real_kube.get(PODS, "big", namespace=ns)
    assert pod["status"]["phase"] == "Pending"
    claim = await real_kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace=ns)
    assert claim["status"]["phase"] == "Pending"
    volumes_now, _ = await real_kube.list_all(PERSISTENT_VOLUMES)
    assert [v for v in volumes_now if (v["spec"].get("claimRef") or {}).get("namespace") == ns] == []


async def test_load_image_makes_an_archive_runnable_even_with_pull_policy_always(
    real: LocalCluster, real_kube: KubeClient, ns: str, tmp_path: Path
) -> None:
    short = unique("img")  # a Docker Hub name: docker.io/library/<short>:latest
    with tarfile.open(images.pause_archive()) as source:
        index = orjson.loads(source.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest_digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = orjson.loads(source.extractfile(f"blobs/sha256/{manifest_digest}").read())  # type: ignore[union-attr]
        layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
        source.extract(f"blobs/sha256/{layer}", tmp_path, filter="data")
    archive = tmp_path / "image.tar"
    full = f"docker.io/library/{short}:latest"
    images.write_archive(layer=tmp_path / "blobs" / "sha256" / layer, entrypoint=["/pause"], names=[full], out=archive)
    assert clusters.load_image(real.name, archive) == [full]
    # Always: the kubelet pulls, and the cluster's registry answers for Docker Hub.
    container = {"name": "main", "image": short, "imagePullPolicy": "Always"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loaded", "namespace": ns},
           "spec": {"containers": [container]}}  # fmt: skip
    await real_kube.create(PODS, pod)
    await running_pods(real_kube, ns, 1)


def test_the_plainest_deployment_of_the_tool_image_runs(real: LocalCluster, ns: str) -> None:
    # No tag: ":latest", pulled every time (imagePullPolicy Always), from the cluster's registry.
    kubectl(real, "create", "deployment", "tools", "-n", ns, "--image=localhost/liqo/toolbox", "--", "sleep", "3600")
    kubectl(real, "rollout", "status", "-n", ns, "deployment/tools", "--timeout=60s")


def test_two_clusters_with_the_same_pod_cidr_run_side_by_side_and_leave_nothing(
    real: LocalCluster, sysctls_before: dict[str, str]
) -> None:
    other = start(ClusterSpec(name=unique("real"), nodes=1, real_nodes=1))
    try:
        assert other.spec.pod_cidr == real.spec.pod_cidr
        for local in (real, other):
            kubectl(local, "run", "side", f"--image={TOOLBOX}", "--restart=Never",
                    "--overrides", '{"spec": {"nodeSelector": {"type": "real"}}}', "--", "sleep", "3600")  # fmt: skip
        for local in (real, other):
            kubectl(local, "wait", "pod/side", "--for=condition=Ready", "--timeout=60s")
        assert node_pids(other)
        stored = read_json(other.dir.cluster_file)
        underlay = stored["underlay"]
        supervisor = ProcessRef.from_dict(read_json(other.dir.status_file)["supervisor"])
        assert supervisor is not None
        # A supervisor killed outright: containerd & co. die with it, the shims and containers do not.
        os.kill(supervisor.pid, signal.SIGKILL)
        eventually_sync(lambda: not is_alive(supervisor), timeout=10, message="supervisor alive")
        assert node_pids(other), "containers outlive a killed supervisor: down must find them"
        clusters.down(other.name)
        assert_no_leftovers(other, underlay=underlay)
    finally:
        purge(other)
    assert_no_leftovers(other, underlay=underlay)
    assert kubectl(real, "get", "pod", "side", "-o", "jsonpath={.status.phase}") == "Running"
    kubectl(real, "delete", "pod", "side", "--wait=false")
    assert host_sysctls() == sysctls_before


def assert_no_leftovers(cluster: LocalCluster, *, underlay: int) -> None:
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}/{cluster.name}-real-*")]
    assert not cgroups, f"cgroups left: {cgroups}"
    assert not host.cgroup_pids(f"/{CGROUP_PARENT}/{cluster.name}-real-1")
    assert not host.mounts_under(cluster.dir.root), "mounts left"
    links = [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(f"lq{underlay}n")]
    assert not links, f"links left: {links}"
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    assert host.nat_table(cluster.name) not in tables
    processes = [
        pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
        if _cmdline_mentions(pid, str(cluster.dir.root))
    ]  # fmt: skip
    assert not processes, f"processes left: {processes}"


def _cmdline_mentions(pid: int, text: str) -> bool:
    return text.encode() in _cmdline(pid)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_kubelet_leaves_the_host_sysctls_as_they_were(real: LocalCluster, sysctls_before: dict[str, str]) -> None:
    differ = [key for key, wanted in SYSCTLS_KUBELET_WANTS.items() if sysctls_before[key] != wanted]
    if not differ:
        pytest.skip("this machine already has every value the kubelet wants: nothing to protect")
    assert host_sysctls() == sysctls_before
