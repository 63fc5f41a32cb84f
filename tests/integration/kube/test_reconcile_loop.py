"""The runtime's parts together, across two clusters: informers on both feed one queue, workers apply."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import NotFoundError
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.resources import CONFIGMAPS, NAMESPACES, object_key, split_key
from tests.integration.helpers import LocalCluster, unique
from tests.shared import eventually


def mirror_of(source: dict[str, Any], *, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": source["metadata"]["name"], "namespace": namespace, "labels": {"mirrored": "yes"}},
        "data": source.get("data") or {},
    }


async def test_a_burst_in_one_cluster_is_mirrored_into_another(
    kube: KubeClient, namespace: str, peer_cluster: LocalCluster
) -> None:
    """The shape of every reflector to come: watch both sides, reconcile one key at a time, apply."""
    async with peer_cluster.client() as peer:
        await _mirror_burst(kube, namespace, peer)


async def _mirror_burst(kube: KubeClient, namespace: str, peer: KubeClient) -> None:
    target = unique("t-mirror")
    await peer.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}})
    sources = Informer(client=kube, resource=CONFIGMAPS, namespace=namespace, label_selector="mirror=yes")
    mirrors = Informer(client=peer, resource=CONFIGMAPS, namespace=target)

    async def reconcile(name: str) -> Result:
        source = sources.store.get(f"{namespace}/{name}")
        if source is None:
            if mirrors.store.get(f"{target}/{name}") is not None:
                with contextlib.suppress(NotFoundError):
                    await peer.delete(CONFIGMAPS, name, namespace=target)
            return Result()
        desired = mirror_of(source, namespace=target)
        current = mirrors.store.get(f"{target}/{name}")
        if current is None or current.get("data") != desired["data"]:
            await peer.apply(CONFIGMAPS, desired)
        return Result()

    controller: Controller[str] = Controller(name="mirror", reconcile=reconcile, workers=4)

    def enqueue(obj: dict[str, Any]) -> None:
        controller.queue.add(split_key(object_key(obj))[1])

    for informer in (sources, mirrors):
        informer.add_handler(HandlerFuncs(add=enqueue, update=lambda _old, new: enqueue(new), delete=enqueue))
    tasks = [asyncio.create_task(t.run()) for t in (sources, mirrors)]
    assert await sources.wait_synced(30)
    assert await mirrors.wait_synced(30)
    tasks.append(asyncio.create_task(controller.run()))
    try:
        names = [f"cm-{i}" for i in range(150)]
        for name in names:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"mirror": "yes"}}}
            await kube.create(CONFIGMAPS, body | {"data": {"v": "0"}}, namespace=namespace)
        for name in names[:100]:
            await kube.patch(CONFIGMAPS, name, {"data": {"v": "1"}}, namespace=namespace)
        for name in names[100:]:
            await kube.delete(CONFIGMAPS, name, namespace=namespace)
        unrelated = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-mirrored"}}
        await kube.create(CONFIGMAPS, unrelated, namespace=namespace)

        async def converged() -> bool:
            items, _ = await peer.list_all(CONFIGMAPS, namespace=target, label_selector="mirrored=yes")
            return {o["metadata"]["name"]: o["data"]["v"] for o in items} == dict.fromkeys(names[:100], "1")

        await eventually(converged, timeout=60, message="mirrors equal the 100 surviving sources, updated")
        assert controller.errors == 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await peer.delete(NAMESPACES, target)
