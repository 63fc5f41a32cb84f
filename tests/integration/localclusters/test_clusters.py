"""Local clusters behave like real ones: workloads run, components are supervised, nothing strays."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import subprocess

import orjson

from benchmarks.measure import deployment
from liqo.kube.client import KubeClient
from liqo.kube.resources import CONFIGMAPS, DEPLOYMENTS, NODES, PODS
from liqo.localclusters import clusters
from liqo.localclusters.layout import Ports, port_is_free, read_json
from liqo.localclusters.processes import ProcessRef, is_alive, wait_gone
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import LocalCluster, eventually_sync, liqoctl_run, purge, start, unique
from tests.shared import eventually


def processes_of(cluster: LocalCluster) -> list[ProcessRef]:
    status = read_json(cluster.dir.status_file)
    refs = [ProcessRef.from_dict(status["supervisor"])]
    refs += [ProcessRef.from_dict(c["process"]) for c in status["components"].values()]
    return [ref for ref in refs if ref is not None]


async def test_deployment_becomes_running_pods_with_node_cidr_ips_and_logs(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    await kube.create(DEPLOYMENTS, deployment("web", namespace=namespace, replicas=5))

    async def five_running() -> bool:
        pods, _ = await kube.list_all(PODS, namespace=namespace, label_selector="app=web")
        return len(pods) == 5 and all(p["status"].get("phase") == "Running" for p in pods)

    await eventually(five_running, timeout=60, message="5 Running pods")
    nodes = {n["metadata"]["name"]: n for n in (await kube.list_all(NODES))[0]}
    pods, _ = await kube.list_all(PODS, namespace=namespace, label_selector="app=web")
    for pod in pods:
        node = nodes[pod["spec"]["nodeName"]]
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(node["spec"]["podCIDR"])
    assert len({p["status"]["podIP"] for p in pods}) == 5

    async def deployment_ready() -> bool:  # its status follows the pods' a moment later
        deploy = await kube.get(DEPLOYMENTS, "web", namespace=namespace)
        return bool(deploy["status"].get("readyReplicas") == 5)

    await eventually(deployment_ready, timeout=30, message="the Deployment reports 5 ready replicas")

    logs = await asyncio.to_thread(
        subprocess.run,
        [*cluster.kubectl(), "logs", "-n", namespace, pods[0]["metadata"]["name"]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert logs.returncode == 0, logs.stderr
    assert f"simulated container started on local cluster {cluster.name}" in logs.stdout


def test_up_is_idempotent_and_refuses_different_settings(cluster: LocalCluster) -> None:
    before = processes_of(cluster)
    again = liqoctl_run("local", "up", cluster.name, "--nodes", str(cluster.spec.nodes), timeout=300)
    assert again.returncode == 0, again.stderr
    assert processes_of(cluster) == before
    as_stored = liqoctl_run(
        "local", "up", cluster.name, timeout=300
    )  # made with --nodes 2: a flag left out means as stored
    assert as_stored.returncode == 0, as_stored.stderr
    assert processes_of(cluster) == before

    different = liqoctl_run("local", "up", cluster.name, "--nodes", str(cluster.spec.nodes + 1), timeout=300)
    assert different.returncode == 1
    assert "exists with other settings (nodes: 2 -> 3)" in different.stderr
    assert processes_of(cluster) == before


def test_list_and_env(cluster: LocalCluster) -> None:
    listed = liqoctl_run("local", "list", "-o", "json", timeout=300)
    assert listed.returncode == 0, listed.stderr
    mine = next(c for c in orjson.loads(listed.stdout) if c["name"] == cluster.name)
    assert mine["state"] == "Running"
    assert mine["nodes"] == f"{cluster.spec.nodes}/{cluster.spec.nodes}"
    assert mine["unhealthyComponents"] == []
    assert set(mine["components"]) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

    env = liqoctl_run("local", "env", cluster.name, timeout=300)
    assert f"export KUBECONFIG={cluster.kubeconfig}" in env.stdout
    shell = subprocess.run(
        ["bash", "-c", f"{env.stdout}\nkubectl get nodes -o name"], capture_output=True, text=True, check=False
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.count("node/") == cluster.spec.nodes


def test_crashed_component_is_reported_and_restarted(cluster: LocalCluster) -> None:
    status = read_json(cluster.dir.status_file)["components"]["kube-scheduler"]
    victim = ProcessRef.from_dict(status["process"])
    assert victim is not None
    restarts = status["restarts"]
    os.kill(victim.pid, signal.SIGKILL)

    def reported() -> bool:
        scheduler = clusters.info(cluster.name).components["kube-scheduler"]
        return bool(scheduler["restarts"] == restarts + 1 and scheduler["healthy"])

    eventually_sync(reported, timeout=30, message="scheduler restart reported and healthy again")
    last_exit = clusters.info(cluster.name).components["kube-scheduler"]["lastExit"]
    assert last_exit["reason"] == "killed by signal 9"
    assert not is_alive(victim)


def test_stopped_components_show_as_unhealthy_until_started(cluster: LocalCluster) -> None:
    clusters.set_components(cluster.name, ["kube-controller-manager", "kube-scheduler"], enabled=False)
    try:
        info = clusters.info(cluster.name)
        assert info.state == "Degraded"
        assert info.unhealthy == ["kube-controller-manager(stopped)", "kube-scheduler(stopped)"]
        assert info.components["kube-controller-manager"]["process"] is None
        clusters.set_components(cluster.name, ["kube-scheduler"], enabled=True)
        assert clusters.info(cluster.name).unhealthy == ["kube-controller-manager(stopped)"]
        assert clusters.up(cluster.spec).state == "Running"  # up brings every component back
    finally:
        clusters.set_components(cluster.name, ["kube-controller-manager", "kube-scheduler"], enabled=True)


def test_down_stops_exactly_its_processes_and_up_resumes_on_new_ports_when_taken() -> None:
    local = start(ClusterSpec(name=unique("t-down"), nodes=1))
    try:
        asyncio.run(_create_configmap(local, "survivor"))
        refs = processes_of(local)
        ports = Ports(**read_json(local.dir.cluster_file)["ports"])
        assert len(refs) == 6

        clusters.down(local.name)
        assert all(wait_gone(ref, timeout=1) for ref in refs)
        assert all(port_is_free(port) for port in ports.values())
        assert clusters.info(local.name).state == "Stopped"

        with socket.socket() as squatter:  # someone takes the API server's port meanwhile
            # As servers do (the API server too): the stopped API server's connections may linger in TIME_WAIT,
            # and a bind without it fails on them (a run saw EADDRINUSE here).
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", ports.apiserver))
            squatter.listen()
            clusters.up(local.spec)
        moved = Ports(**read_json(local.dir.cluster_file)["ports"])
        assert moved.apiserver != ports.apiserver
        assert moved.etcd_client == ports.etcd_client
        assert asyncio.run(_read_configmap(local, "survivor")) == {"kept": "yes"}
    finally:
        purge(local)
    assert not local.dir.root.exists()


def test_a_killed_supervisor_takes_its_components_along() -> None:
    local = start(ClusterSpec(name=unique("t-kill"), nodes=1))
    try:
        supervisor, *components = processes_of(local)
        os.kill(supervisor.pid, signal.SIGKILL)
        assert all(wait_gone(ref, timeout=10) for ref in components)
        assert clusters.info(local.name).state == "Crashed"
        clusters.up(local.spec)
        assert clusters.info(local.name).state == "Running"
    finally:
        purge(local)


def test_three_clusters_side_by_side_with_the_same_pod_cidr(cluster: LocalCluster) -> None:
    others = [ClusterSpec(name=unique(f"t-side{i}"), pod_cidr=cluster.spec.pod_cidr) for i in range(2)]
    started: list[LocalCluster] = []
    try:
        for spec in others:
            started.append(start(spec))
        infos = [clusters.info(name) for name in (cluster.name, *(s.name for s in others))]
        assert [i.state for i in infos] == ["Running"] * 3
        assert len({i.api_url for i in infos}) == 3
    finally:
        purge(*started)


async def _create_configmap(local: LocalCluster, name: str) -> None:
    async with local.client() as client:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"kept": "yes"}}
        await client.create(CONFIGMAPS, body, namespace="default")


async def _read_configmap(local: LocalCluster, name: str) -> dict[str, str]:
    async with local.client() as client:
        data: dict[str, str] = (await client.get(CONFIGMAPS, name, namespace="default"))["data"]
        return data
