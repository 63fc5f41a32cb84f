"""Offloaded pods end to end: rome's scheduler binds them to the virtual node, they run in milan.

Everything is real: rome and milan are local clusters with liqo installed (manager and virtual kubelet as
supervised processes), the pod webhook is called by rome's API server, ShadowPods are turned into pods by
milan's manager, and ``kubectl logs`` goes through rome's API server to the virtual kubelet's kubelet API.
"""

from __future__ import annotations

import asyncio
import subprocess

from liqo.api import names
from liqo.api.resources import RESOURCE_OFFERS, SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, EVENTS, LEASES, NODES, PODS
from tests.integration.helpers import Offloaded, Site, deployment, pod, running, running_pods
from tests.shared import eventually


async def test_the_virtual_node_stands_for_the_offer(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    node = await rome.get(NODES, offloaded.node)
    labels = node["metadata"]["labels"]
    assert labels[names.VIRTUAL_NODE_TYPE] == names.VIRTUAL_NODE
    assert labels[names.REMOTE_CLUSTER_ID] == sites["milan"].cluster_id
    assert {"key": names.VIRTUAL_NODE_TAINT, "value": "true", "effect": "NoExecute"} in node["spec"]["taints"]
    offer = await rome.get(
        RESOURCE_OFFERS, sites["milan"].cluster_id, namespace=names.tenant_namespace(sites["milan"].cluster_id)
    )
    assert node["status"]["capacity"]["cpu"] == str(offer["spec"]["resources"]["cpu"])
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    first = (await rome.get(LEASES, offloaded.node, namespace="kube-node-lease"))["spec"]["renewTime"]

    async def renewed() -> bool:
        lease = await rome.get(LEASES, offloaded.node, namespace="kube-node-lease")
        return bool(lease["spec"]["renewTime"] != first)

    await eventually(renewed, timeout=25, message="the node's lease renewed")


async def test_a_deployment_runs_in_milan_and_shows_at_home(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(DEPLOYMENTS, deployment("web", offloaded.namespace, replicas=3))
    home = await running_pods(rome, offloaded.namespace, 3)
    remote = {p["metadata"]["name"]: p for p in await running_pods(milan, offloaded.twin, 3)}
    for home_pod in home:
        assert home_pod["spec"]["nodeName"] == offloaded.node
        twin = remote[home_pod["metadata"]["name"]]  # same name, in the twin namespace
        assert twin["metadata"]["annotations"][names.HOME_POD_UID] == home_pod["metadata"]["uid"]
        assert twin["spec"]["nodeName"] != offloaded.node  # milan's scheduler placed it on a real node
        assert home_pod["status"]["podIP"] == twin["status"]["podIP"]
        assert home_pod["status"]["containerStatuses"][0]["ready"] is True
        ready = {c["type"]: c["status"] for c in home_pod["status"]["conditions"]}
        assert ready["Ready"] == ready["PodScheduled"] == "True"
    shadows, _ = await milan.list_all(SHADOW_PODS, namespace=offloaded.twin)
    assert sorted(s["metadata"]["name"] for s in shadows) == sorted(remote)
    assert all(names.FINALIZER in s["metadata"]["finalizers"] for s in shadows)  # milan deletes the pod first
    assert not any((s.get("status") or {}).get("phase") == "Refused" for s in shadows)

    # kubectl logs at home, through rome's API server and the virtual kubelet, from milan's pod.
    name = home[0]["metadata"]["name"]
    command = [*sites["rome"].cluster.kubectl(), "logs", "-n", offloaded.namespace, name]
    logs = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30, check=False)
    assert logs.returncode == 0, logs.stderr
    assert "simulated container started" in logs.stdout
    tail = await asyncio.to_thread(
        subprocess.run, [*command, "--tail=1"], capture_output=True, text=True, timeout=30, check=False
    )
    assert tail.stdout.strip().splitlines() == logs.stdout.strip().splitlines()[-1:]
    previous = await asyncio.to_thread(
        subprocess.run, [*command, "--previous"], capture_output=True, text=True, timeout=30, check=False
    )
    assert previous.returncode != 0
    assert "the provider answered" in previous.stderr  # milan has no previous container: its error, passed on
    # -f streams: the lines arrive and the stream stays open until we stop it.
    follow = await asyncio.create_subprocess_exec(*command, "-f", stdout=asyncio.subprocess.PIPE)
    try:
        assert follow.stdout is not None
        async with asyncio.timeout(20):
            first = await follow.stdout.readline()
        assert b"simulated container started" in first
        assert follow.returncode is None
    finally:
        follow.kill()
        await follow.wait()

    # Scale down: the home pods go, and so do their ShadowPods and pods in milan.
    await rome.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 1}}, namespace=offloaded.namespace)
    await running_pods(milan, offloaded.twin, 1)

    async def one_shadow() -> bool:
        return len((await milan.list_all(SHADOW_PODS, namespace=offloaded.twin))[0]) == 1

    await eventually(one_shadow, timeout=30, message="one ShadowPod left after scaling down")


async def test_a_pod_deleted_in_milan_comes_back_while_its_shadow_exists(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    created = await rome.create(PODS, pod("solo", offloaded.namespace))
    [first] = await running_pods(milan, offloaded.twin, 1)
    await milan.delete(PODS, "solo", namespace=offloaded.twin)

    async def replaced() -> bool:
        try:
            again = await milan.get(PODS, "solo", namespace=offloaded.twin)
        except NotFoundError:
            return False
        return again["metadata"]["uid"] != first["metadata"]["uid"] and running(again)

    await eventually(replaced, timeout=30, message="milan re-created the pod from its ShadowPod")
    await running_pods(rome, offloaded.namespace, 1)
    home = await rome.get(PODS, "solo", namespace=offloaded.namespace)
    assert home["metadata"]["uid"] == created["metadata"]["uid"]  # the home pod never went away

    # The provider dropping the ShadowPod itself releases the home pod (its controller, if any, replaces it).
    await milan.delete(SHADOW_PODS, "solo", namespace=offloaded.twin)

    async def home_gone() -> bool:
        try:
            await rome.get(PODS, "solo", namespace=offloaded.namespace)
        except NotFoundError:
            return True
        return False

    await eventually(home_gone, timeout=30, message="the home pod deleted once milan dropped its ShadowPod")


async def test_deleting_at_home_passes_the_grace_period_to_milan(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(PODS, pod("graceful", offloaded.namespace))
    await running_pods(milan, offloaded.twin, 1)
    seen: list[Obj] = []
    watcher = Informer(client=milan, resource=PODS, namespace=offloaded.twin)
    record = seen.append
    watcher.add_handler(HandlerFuncs(add=record, update=lambda _old, new: record(new), delete=record))
    task = asyncio.create_task(watcher.run())
    try:
        await watcher.wait_synced(10)
        await rome.delete(PODS, "graceful", namespace=offloaded.namespace, grace_period_seconds=7)

        async def gone_everywhere() -> bool:
            for client, namespace in ((rome, offloaded.namespace), (milan, offloaded.twin)):
                try:
                    await client.get(PODS, "graceful", namespace=namespace)
                except NotFoundError:
                    continue
                return False
            return True

        await eventually(gone_everywhere, timeout=30, message="the pod deleted at home and in milan")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # The first deletion milan saw carries the home grace period (KWOK then finishes it with grace 0).
    graces = [p["metadata"].get("deletionGracePeriodSeconds") for p in seen if p["metadata"].get("deletionTimestamp")]
    assert graces[0] == 7


async def test_pods_milan_refuses_stay_pending_with_its_reason(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(PODS, pod("host-net", offloaded.namespace, hostNetwork=True))

    async def refused() -> bool:
        home = await rome.get(PODS, "host-net", namespace=offloaded.namespace)
        conditions = {c["type"]: c for c in (home.get("status") or {}).get("conditions") or []}
        ready = conditions.get("Ready") or {}
        return ready.get("reason") == "ProviderRefused" and "hostNetwork pods are refused" in ready.get("message", "")

    await eventually(refused, timeout=30, message="the home pod Pending with milan's refusal")
    home = await rome.get(PODS, "host-net", namespace=offloaded.namespace)
    assert home["status"]["phase"] == "Pending"

    async def told() -> bool:  # the Event follows the status write: wait for it, as a user watching would
        events, _ = await rome.list_all(EVENTS, namespace=offloaded.namespace)
        return any(e["reason"] == "ProviderRefused" and e["involvedObject"]["name"] == "host-net" for e in events)

    await eventually(told, timeout=10, message="a ProviderRefused Event on the home pod")
    assert not (await milan.list_all(PODS, namespace=offloaded.twin))[0]  # nothing ran there

    # Larger than the whole offer: rome's scheduler keeps it Pending and says why.
    await rome.create(
        PODS,
        pod(
            "huge",
            offloaded.namespace,
            containers=[{"name": "a", "image": "x", "resources": {"requests": {"cpu": "999"}}}],
        ),
    )

    async def unschedulable() -> bool:
        huge = await rome.get(PODS, "huge", namespace=offloaded.namespace)
        conditions = {c["type"]: c for c in (huge.get("status") or {}).get("conditions") or []}
        scheduled = conditions.get("PodScheduled") or {}
        return scheduled.get("reason") == "Unschedulable" and "Insufficient cpu" in scheduled.get("message", "")

    await eventually(unschedulable, timeout=30, message="a pod larger than the offer Pending as Unschedulable")


async def test_kubectl_exec_reaches_the_remote_pod(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    await rome.create(PODS, pod("shell", offloaded.namespace))
    await running_pods(rome, offloaded.namespace, 1)
    exec_ = [*sites["rome"].cluster.kubectl(), "exec", "-n", offloaded.namespace, "shell", "--"]

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*exec_, *command], capture_output=True, text=True, timeout=30, check=False)

    # milan's KWOK runs exec commands on this machine, in milan's directory: where the output comes from.
    where = await asyncio.to_thread(run, "pwd")
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(sites["milan"].cluster.dir.root / "exec")
    # A failing command: the answer at home is the very one milan gives when asked directly.
    failing = ("sh", "-c", "echo to-stderr >&2; exit 3")
    home = await asyncio.to_thread(run, *failing)
    direct = [*sites["milan"].cluster.kubectl(), "exec", "-n", offloaded.twin, "shell", "--", *failing]
    there = await asyncio.to_thread(subprocess.run, direct, capture_output=True, text=True, timeout=30, check=False)
    assert home.returncode == there.returncode != 0
    assert "to-stderr" in home.stderr
    assert "exit status 3" in home.stderr
