"""liqo as pods from its own image, installed with Helm and with liqoctl, on local clusters with a real node.

lisbon (the provider) is installed with ``helm install`` from the values ``liqoctl install --dry-run -o
values`` prints; porto (the consumer) with ``liqoctl install``. Both run the manager (two replicas) and the
virtual kubelet as pods on their real node, from the image every real node holds. Everything crosses real
API servers, real kubelets and containers, and the node ports the values route the API servers through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.components import MANAGER, NETWORK_AGENT, VIRTUAL_KUBELET
from liqo.api.identity import read_identity
from liqo.install import chart
from liqo.install.installer import rolled_out
from liqo.kube.client import KubeClient
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.resources import CRDS, DEPLOYMENTS, LEASES, NAMESPACES, PODS
from liqo.localclusters.launch import local_image
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering
from tests.integration.helpers import (
    LocalCluster,
    Site,
    deployment,
    helm_binary,
    kubectl,
    liqoctl,
    liqoctl_run,
    pod,
    pod_state,
    purge,
    running,
    running_pods,
    site_of,
    together,
    unique,
)
from tests.integration.metrics import in_pods, total
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
]

CHART = Path(__file__).resolve().parents[3] / "charts" / "liqo"
TOOLBOX = "localhost/liqo/toolbox:1"
WEB = {
    "name": "web",
    "image": TOOLBOX,
    "command": ["sh", "-c", "echo serving; exec httpd -f -p 8080 -h /tmp"],
    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
}


def helm(cluster: LocalCluster, *args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [helm_binary(), *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result.stdout


def values_file(cluster: LocalCluster, path: Path) -> Path:
    """What ``liqoctl install`` would install on ``cluster``, as a values file for Helm."""
    path.write_text(liqoctl(cluster, "install", "--dry-run", "-o", "values"))
    return path


async def wait_installed(cluster: LocalCluster) -> str:
    """The cluster ID once the manager's pods made the identity."""
    async with cluster.client() as client:

        async def available() -> bool:
            try:
                manager = await client.get(DEPLOYMENTS, MANAGER, namespace=names.LIQO_NAMESPACE)
            except NotFoundError:
                return False
            return rolled_out(manager)

        await eventually(available, timeout=120, message="the manager Deployment is available", every=0.5)
        found: dict[str, str] = {}

        async def identity() -> bool:
            made = await read_identity(client)
            if made is not None:
                found["id"] = made.cluster_id
            return made is not None

        await eventually(identity, timeout=60, message="the manager made the identity", every=0.2)
        return found["id"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    """lisbon and porto, started and installed together (each mostly waits on its real node)."""
    values = tmp_path_factory.mktemp("lisbon") / "values.yaml"
    lisbon = ClusterSpec(name=unique("lisbon"), nodes=0, real_nodes=1, pod_cidr="10.247.0.0/16")
    porto = ClusterSpec(name=unique("porto"), nodes=0, real_nodes=1, pod_cidr="10.248.0.0/16")
    made = together(
        {
            "lisbon": partial(site_of, lisbon, install=partial(helm_install, values=values)),
            "porto": partial(site_of, porto, install=liqoctl_install),
        }
    )
    yield made
    purge(*(site.cluster for site in made.values()))


def helm_install(local: LocalCluster, *, values: Path) -> str:
    """``helm install`` with the values ``liqoctl install --dry-run -o values`` prints; the cluster ID."""
    values_file(local, values)
    helm(local, "install", "liqo", str(CHART), "--namespace", "liqo", "--create-namespace", "-f", str(values))
    return asyncio.run(wait_installed(local))


def liqoctl_install(local: LocalCluster) -> str:
    liqoctl(local, "install")
    return asyncio.run(wait_installed(local))


@pytest.fixture(scope="module")
def lisbon(installed: dict[str, Site]) -> Site:
    """The provider: liqo installed by ``helm install``."""
    return installed["lisbon"]


@pytest.fixture(scope="module")
def porto(installed: dict[str, Site]) -> Site:
    """The consumer: liqo installed by ``liqoctl install``."""
    return installed["porto"]


@pytest.fixture(scope="module")
def offloaded_ns(porto: Site, lisbon: Site) -> str:
    """porto peered with lisbon, and a namespace of porto offloaded there (strategy Remote)."""

    async def setup() -> str:
        async with porto.client() as consumer, lisbon.client() as provider:
            await peering.peer(consumer, provider, timeout=60)
            namespace = unique("pods")
            await consumer.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            await offloading.offload(consumer, namespace, pod_offloading_strategy="Remote")
            await offloading.wait_offloaded(consumer, namespace, timeout=60)
            return namespace

    return asyncio.run(setup())


def twin(namespace: str, porto: Site) -> str:
    return names.twin_namespace(namespace, home_cluster_id=porto.cluster_id)


async def liqo_pods(client: KubeClient) -> list[dict[str, Any]]:
    """liqo's own pods (the install's workloads; not the gateways the manager makes per peer)."""
    pods = (await client.list_all(PODS, namespace=names.LIQO_NAMESPACE))[0]
    return [p for p in pods if "app.kubernetes.io/name" in (p["metadata"].get("labels") or {})]


async def test_both_installs_run_liqo_as_pods_from_the_local_image_as_a_non_root_user(
    lisbon: Site, porto: Site
) -> None:
    for site in (lisbon, porto):
        async with site.client() as client:
            pods = await liqo_pods(client)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        assert sorted(p["metadata"]["labels"]["app.kubernetes.io/name"] for p in running) == [
            MANAGER,
            MANAGER,
            NETWORK_AGENT,
            VIRTUAL_KUBELET,
        ]
        for p in running:
            assert p["spec"]["nodeName"] == f"{site.cluster.name}-real-1"
            assert p["spec"]["containers"][0]["image"] == local_image()
            name = p["metadata"]["name"]
            # The manager and the virtual kubelet as uid 65532 with no capability; the node agent as root with
            # NET_ADMIN alone (bit 12 of the effective set).
            expected = "0 0x1000" if name.startswith(NETWORK_AGENT) else "65532 0x0"
            probe = (
                "import os; caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0];"
                " print(os.getuid(), hex(int(caps, 16)))"
            )
            assert kubectl(site.cluster, "-n", "liqo", "exec", name, "--", "python3", "-c", probe) == expected + "\n"


async def test_helm_template_renders_what_liqoctl_install_dry_run_prints(lisbon: Site, tmp_path: Path) -> None:
    values = values_file(lisbon.cluster, tmp_path / "values.yaml")
    # Without a cluster Helm's capabilities do not list MutatingAdmissionPolicy; lisbon's API server serves it
    # (what `helm install` sees), and liqoctl asked it.
    served = "--api-versions=admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
    by_helm = yaml.safe_load_all(
        helm(
            lisbon.cluster,
            *("template", "liqo", str(CHART), "--namespace", "liqo", "--include-crds", "-f", str(values), served),
        )
    )
    by_liqoctl = yaml.safe_load_all(liqoctl(lisbon.cluster, "install", "--dry-run"))

    def keyed(items: Any) -> dict[tuple[str, str], Any]:
        return {(i["kind"], i["metadata"]["name"]): i for i in items if i and i["kind"] != "Namespace"}

    helm_items, liqoctl_items = keyed(by_helm), keyed(by_liqoctl)
    assert sorted(helm_items) == sorted(liqoctl_items)
    for key, item in liqoctl_items.items():
        assert helm_items[key] == item, key


async def test_the_peers_offload_a_deployment_onto_the_providers_real_node(
    porto: Site, lisbon: Site, offloaded_ns: str, tmp_path: Path
) -> None:
    async with porto.client() as consumer, lisbon.client() as provider:
        await consumer.create(DEPLOYMENTS, deployment("web", offloaded_ns, replicas=3, containers=[WEB]))
        await running_pods(consumer, offloaded_ns, 3)
        remote = await running_pods(provider, twin(offloaded_ns, porto), 3)
        assert {p["spec"]["nodeName"] for p in remote} == {f"{lisbon.cluster.name}-real-1"}
        home = (await consumer.list_all(PODS, namespace=offloaded_ns))[0][0]["metadata"]["name"]
    # kubectl at home reaches the container through the virtual kubelet's pod and the provider's kubelet.
    assert "serving" in kubectl(porto.cluster, "logs", "-n", offloaded_ns, home)
    assert kubectl(porto.cluster, "exec", "-n", offloaded_ns, home, "--", "sh", "-c", "echo $((6 * 7))") == "42\n"
    # The virtual kubelet's pod counts them in /metrics (scraped from inside its pod: pod IPs are not routed here).
    assert total(in_pods(porto.cluster, VIRTUAL_KUBELET), "liqo_offloaded_pods", phase="Running") >= 3


def manager_pid(pod_name: str) -> int:
    """The host PID of the manager process in pod ``pod_name`` (containers see their pod's name as hostname)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"liqo.apps.manager" in cmdline and f"HOSTNAME={pod_name}".encode() in environ:
            return int(proc.name)
    raise AssertionError(f"no manager process of pod {pod_name}")


async def holder(client: KubeClient) -> str:
    lease = await client.get(LEASES, MANAGER, namespace=names.LIQO_NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


async def test_the_leader_killed_mid_burst_hands_over_and_loses_no_pod(
    porto: Site, lisbon: Site, offloaded_ns: str
) -> None:
    replicas = 30
    async with porto.client() as consumer, lisbon.client() as provider:
        leader = await holder(provider)
        pod_name = leader.rsplit("-", 2)[0]
        burst = deployment("burst", offloaded_ns, replicas=replicas, containers=[WEB], terminationGracePeriodSeconds=1)
        await consumer.create(DEPLOYMENTS, burst)
        try:

            async def burst_started() -> bool:
                remote_ns = twin(offloaded_ns, porto)
                pods = (await provider.list_all(PODS, namespace=remote_ns, label_selector="app=burst"))[0]
                return len(pods) >= 3

            await eventually(burst_started, timeout=60, message="the provider started creating the burst's pods")
            killed = time.monotonic()
            os.kill(manager_pid(pod_name), signal.SIGKILL)
            handed: dict[str, float] = {}

            async def new_leader() -> bool:
                now = await holder(provider)
                if now and now != leader:
                    handed["after"] = time.monotonic() - killed
                return "after" in handed

            await eventually(new_leader, timeout=40, message="another manager took the Lease", every=0.1)
            print(f"hand-over after the leader's SIGKILL: {handed['after']:.1f} s")  # the figure for the note
            assert handed["after"] <= 15 + 2 * 2  # the Lease's duration, and a retry period either side
            # 30 containers started on one real node beside a loaded suite: a minute is not always enough.
            await running_pods(consumer, offloaded_ns, replicas + 3, timeout=120)  # web's 3 and the burst's
            remote = (await provider.list_all(PODS, namespace=twin(offloaded_ns, porto), label_selector="app=burst"))[0]
            assert len(remote) == replicas, "no duplicate and no lost pod on the provider"
        finally:  # the next test counts pods: a failure here must not fail it too
            with contextlib.suppress(NotFoundError):
                await consumer.delete(DEPLOYMENTS, "burst", namespace=offloaded_ns)
            await gone_at_both_ends(consumer, provider, offloaded_ns, twin(offloaded_ns, porto), prefix="burst-")


async def gone_at_both_ends(consumer: KubeClient, provider: KubeClient, home: str, remote: str, *, prefix: str) -> None:
    """Wait until no pod named ``prefix``… is left at home or in the provider: the next test counts pods."""

    left: list[str] = []

    async def none_left() -> bool:
        left.clear()
        for client, namespace in ((consumer, home), (provider, remote)):
            for p in (await client.list_all(PODS, namespace=namespace))[0]:
                if p["metadata"]["name"].startswith(prefix):
                    finalizers = ",".join(p["metadata"].get("finalizers") or []) or "none"
                    left.append(f"{client.name}/{p['metadata']['name']} {pod_state(p)} finalizers={finalizers}")
        return not left

    def what_is_left() -> str:
        return f"the pods {prefix}* gone at both ends; {len(left)} left: " + "; ".join(left[:8])

    await eventually(none_left, timeout=120, message=what_is_left)


async def test_a_rolling_update_of_the_manager_refuses_no_pod(porto: Site, lisbon: Site, offloaded_ns: str) -> None:
    async with porto.client() as consumer, lisbon.client() as provider:
        kubectl(porto.cluster, "-n", "liqo", "rollout", "restart", f"deployment/{MANAGER}")
        created, refused = 0, []
        deadline = time.monotonic() + 180
        try:
            # A pod every 0.2 s, however long the rollout takes (a wait's backoff would thin them out as it goes).
            while not rolled_out(await consumer.get(DEPLOYMENTS, MANAGER, namespace=names.LIQO_NAMESPACE)):
                assert time.monotonic() < deadline, "the manager rolled out within 180 s"
                name = f"during-{created}"
                try:
                    # httpd as PID 1 ignores SIGTERM: a short grace, so that they are gone before the next test.
                    spec = pod(name, offloaded_ns, containers=[WEB], terminationGracePeriodSeconds=1)
                    await consumer.create(PODS, spec)
                except KubeError as exc:
                    refused.append(f"{name}: {exc}")
                created += 1
                await asyncio.sleep(0.2)  # the pace of the pods created, not a wait on anything
            assert created > 10
            assert not refused
        finally:  # the next test counts pods: a failure here must not fail it too
            for index in range(created):
                await consumer.delete(PODS, f"during-{index}", namespace=offloaded_ns, missing_ok=True)
            await gone_at_both_ends(consumer, provider, offloaded_ns, twin(offloaded_ns, porto), prefix="during-")


async def test_an_install_whose_image_cannot_be_pulled_says_why_and_the_next_install_restores_liqo(
    porto: Site, lisbon: Site, offloaded_ns: str
) -> None:
    async with porto.client() as consumer, lisbon.client() as provider:
        before = await read_identity(consumer)
        started = time.monotonic()
        failed = liqoctl_run(
            "install", f"--kubeconfig={porto.cluster.kubeconfig}", "--image=localhost/liqo/absent:0", "--timeout=20"
        )
        said = " ".join(failed.stderr.split())
        assert failed.returncode == 1, said
        # Named: the Deployment, its pod, the container and the kubelet's reason, as kubectl describe would.
        assert f"the {MANAGER} Deployment did not roll out (waited 20s): pod {MANAGER}-" in said
        assert 'container "manager" waiting: ' in said
        assert "ErrImagePull" in said or "ImagePullBackOff" in said
        assert f"kubectl -n liqo describe deployment {MANAGER}" in said
        assert time.monotonic() - started < 60
        # The managers of the previous install still serve (a rolling update replaces none before its successor
        # is ready): pods are still placed on the virtual node.
        await consumer.create(
            PODS, pod("while-broken", offloaded_ns, containers=[WEB], terminationGracePeriodSeconds=1)
        )
        liqoctl(porto.cluster, "install")
        assert rolled_out(await consumer.get(DEPLOYMENTS, MANAGER, namespace=names.LIQO_NAMESPACE))
        assert await read_identity(consumer) == before

        async def runs() -> bool:
            return running(await consumer.get(PODS, "while-broken", namespace=offloaded_ns))

        await eventually(runs, timeout=60, message="the pod created while the install was broken runs", every=0.5)
        await consumer.delete(PODS, "while-broken", namespace=offloaded_ns)
        await gone_at_both_ends(consumer, provider, offloaded_ns, twin(offloaded_ns, porto), prefix="while-broken")


def chart_version(directory: Path, version: str, *, grace: int) -> Path:
    """A copy of the chart as another version, whose pods differ (so an upgrade replaces every one)."""
    shutil.copytree(CHART, directory)
    chart.write(directory, chart_version=version)
    for template in ("manager.yaml", "virtual-kubelet.yaml"):
        path = directory / "templates" / template
        path.write_text(
            path.read_text().replace("terminationGracePeriodSeconds: 30", f"terminationGracePeriodSeconds: {grace}")
        )
    return directory


async def test_helm_upgrade_from_the_previous_version_keeps_peers_and_offloaded_pods(
    porto: Site, lisbon: Site, offloaded_ns: str, tmp_path: Path
) -> None:
    values = values_file(lisbon.cluster, tmp_path / "values.yaml")
    async with porto.client() as consumer, lisbon.client() as provider:
        before = {p["metadata"]["uid"] for p in await running_pods(provider, twin(offloaded_ns, porto), 3)}
        previous = chart_version(tmp_path / "previous", "0.0.9", grace=29)
        # Back to the previous version first (what a cluster upgrading from it runs), then up to this one.
        helm(lisbon.cluster, "upgrade", "liqo", str(previous), "--namespace", "liqo", "-f", str(values))
        await wait_rolled_out(provider)
        helm(lisbon.cluster, "upgrade", "liqo", str(CHART), "--namespace", "liqo", "-f", str(values))
        await wait_rolled_out(provider)
        history = helm(lisbon.cluster, "history", "liqo", "--namespace", "liqo", "-o", "yaml")
        assert [r["chart"] for r in yaml.safe_load(history)][-2:] == ["liqo-0.0.9", f"liqo-{version('liqo')}"]
        # The peering never broke and the provider's pods were never replaced.
        info = await peering.info(consumer)
        assert not peering.problems(info), info
        after = {p["metadata"]["uid"] for p in await running_pods(provider, twin(offloaded_ns, porto), 3)}
        assert after == before
        await running_pods(consumer, offloaded_ns, 3)


async def wait_rolled_out(client: KubeClient) -> None:
    for name in (MANAGER, VIRTUAL_KUBELET):

        async def done(name: str = name) -> bool:
            return rolled_out(await client.get(DEPLOYMENTS, name, namespace=names.LIQO_NAMESPACE))

        await eventually(done, timeout=180, message=f"{name} rolled out", every=0.5)


async def test_zz_unpeered_helm_uninstall_leaves_what_it_promises_and_a_reinstall_is_the_same_cluster(
    porto: Site, lisbon: Site, offloaded_ns: str, tmp_path: Path
) -> None:
    async with porto.client() as consumer, lisbon.client() as provider:
        await offloading.unoffload(consumer, offloaded_ns, timeout=120)
        await peering.unpeer(consumer, lisbon.cluster_id, timeout=120)
        before = await read_identity(provider)
        assert before is not None
        helm(lisbon.cluster, "uninstall", "liqo", "--namespace", "liqo", "--wait")
        # Gone: every workload, Service, RBAC object and webhook of the chart.
        for resource, name, namespace in (
            (DEPLOYMENTS, MANAGER, names.LIQO_NAMESPACE),
            (DEPLOYMENTS, VIRTUAL_KUBELET, names.LIQO_NAMESPACE),
        ):
            with pytest.raises(NotFoundError):
                await provider.get(resource, name, namespace=namespace)
        assert not await liqo_pods_running(provider)
        # Kept, as Helm promises for crds/ and as docs/operations.md says: CRDs, the identity and the key.
        await provider.get(CRDS, f"foreignclusters.{liqo_resources.DISCOVERY}")
        kept = await read_identity(provider)
        assert kept == before
        values = values_file(lisbon.cluster, tmp_path / "values.yaml")
        helm(lisbon.cluster, "install", "liqo", str(CHART), "--namespace", "liqo", "-f", str(values))
        assert await wait_installed(lisbon.cluster) == lisbon.cluster_id
        again = await read_identity(provider)
        assert again is not None
        assert again.key_fingerprint == before.key_fingerprint


async def liqo_pods_running(client: KubeClient) -> list[str]:
    return [p["metadata"]["name"] for p in await liqo_pods(client) if not p["metadata"].get("deletionTimestamp")]
