"""Writes per offloaded pod, counted from watches: what ``docs/offloading.md`` ("Writes per offloaded pod") says.

rome offloads a 20-replica Deployment to milan. After rome's scheduler binds a pod to the virtual node, only
rome's virtual kubelet writes that pod (its status): every resourceVersion a watch on the home pods sees from
then until the pod is Ready is one write of ours. On milan, the ShadowPod is written by its creation alone
(the finalizer comes with it, a pod that fits gets no status). The pods mount no ServiceAccount token, so no
pod-token Secret is made for them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from liqo.api import names
from liqo.api.resources import SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, PODS, SECRETS, Resource
from tests.integration.helpers import Offloaded, deployment
from tests.shared import eventually

REPLICAS = 20


@asynccontextmanager
async def watching(
    client: KubeClient, resource: Resource, namespace: str, *, on_update: Callable[[Obj, Obj], None]
) -> AsyncIterator[Informer]:
    """An informer on ``resource`` in ``namespace`` calling ``on_update``, for the duration."""
    informer = Informer(client=client, resource=resource, namespace=namespace, label_selector="app=burst")
    informer.add_handler(HandlerFuncs(update=on_update))
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_synced(10)
        yield informer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _ready(pod: Obj) -> bool:
    return (_condition(pod, "Ready") or {}).get("status") == "True"


async def test_one_status_write_per_offloaded_pod_and_no_token_secret_without_a_token(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    status_writes: Counter[str] = Counter()
    """Home pod → its updates once bound to the virtual node (every one is the virtual kubelet's)."""
    scheduled: dict[str, Obj] = {}
    """Home pod → the PodScheduled condition rome's scheduler set when binding it."""
    shadow_updates: Counter[str] = Counter()

    def home_update(old: Obj, new: Obj) -> None:
        name = new["metadata"]["name"]
        if new["metadata"].get("deletionTimestamp"):
            return
        if not old["spec"].get("nodeName"):
            if new["spec"].get("nodeName") and (bound := _condition(new, "PodScheduled")) is not None:
                scheduled[name] = bound
            return
        status_writes[name] += 1

    def shadow_update(_old: Obj, new: Obj) -> None:
        if not new["metadata"].get("deletionTimestamp"):
            shadow_updates[new["metadata"]["name"]] += 1

    async with (
        watching(rome, PODS, home, on_update=home_update) as home_pods,
        watching(milan, SHADOW_PODS, twin, on_update=shadow_update),
    ):
        burst = deployment("burst", home, replicas=REPLICAS, cpu="10m", automountServiceAccountToken=False)
        await rome.create(DEPLOYMENTS, burst)

        async def all_ready() -> bool:
            pods = home_pods.store.list()
            return len(pods) == REPLICAS and all(_ready(p) for p in pods)

        await eventually(all_ready, timeout=120, message=f"{REPLICAS} offloaded pods Ready at home")
        pods = home_pods.store.list()

    names_ = sorted(p["metadata"]["name"] for p in pods)
    assert all(p["spec"]["nodeName"] == offloaded.node for p in pods)
    # One status write per pod, the one that made it Running and Ready (none carrying only the host IP).
    assert dict(status_writes) == dict.fromkeys(names_, 1), dict(status_writes)
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["hostIP"]
        # rome's scheduler's PodScheduled is never overwritten by milan's.
        assert _condition(pod, "PodScheduled") == scheduled[pod["metadata"]["name"]]
    # Each ShadowPod was written once, by its creation: no finalizer added later, no status.
    assert not shadow_updates, dict(shadow_updates)
    shadows, _ = await milan.list_all(SHADOW_PODS, namespace=twin)
    assert sorted(s["metadata"]["name"] for s in shadows) == names_
    # automountServiceAccountToken: false → no token to carry, no pod-token Secret.
    tokens, _ = await milan.list_all(SECRETS, namespace=twin, label_selector=f"{names.POD_TOKEN}=true")
    assert tokens == []
