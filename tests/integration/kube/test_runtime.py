"""The controller runtime against a real API server: informer, leader election, apply, events."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from liqo.kube.client import FIELD_MANAGER, KubeClient
from liqo.kube.errors import ConflictError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.resources import CONFIGMAPS, EVENTS, LEASES, PODS, object_key
from liqo.localclusters import clusters
from liqo.localclusters.layout import read_json
from tests.integration.helpers import LocalCluster, TcpProxy, compact_etcd, unique
from tests.shared import eventually

ELECTOR = Path(__file__).with_name("elector.py")


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


async def test_informer_keeps_every_update_across_an_apiserver_restart(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """Changes made while the informer is cut off and the API server restarts all reach its handlers."""
    names = [f"cm-{i}" for i in range(30)]
    for name in names:
        await kube.create(CONFIGMAPS, configmap(name, namespace, v="0"))
    api_port = read_json(cluster.dir.cluster_file)["ports"]["apiserver"]
    proxy = TcpProxy(api_port)
    port = await proxy.start()
    access = dataclasses.replace(kube.access, server=f"https://127.0.0.1:{port}")

    seen: dict[str, str] = {}
    deleted: list[str] = []
    handler = HandlerFuncs(
        add=lambda obj: seen.__setitem__(object_key(obj), obj["data"]["v"]),
        update=lambda _old, new: seen.__setitem__(object_key(new), new["data"]["v"]),
        delete=lambda obj: deleted.append(object_key(obj)),
    )
    async with KubeClient(access=access, name="via-proxy") as via_proxy:
        informer = Informer(
            client=via_proxy, resource=CONFIGMAPS, namespace=namespace, backoff_base=0.05, backoff_max=0.5
        )
        informer.add_handler(handler)
        task = asyncio.create_task(informer.run())
        try:
            assert await informer.wait_synced(30)
            for name in names:
                await kube.patch(CONFIGMAPS, name, {"data": {"v": "1"}}, namespace=namespace)
            await eventually(
                lambda: _true(all(seen.get(f"{namespace}/{n}") == "1" for n in names)),
                timeout=30,
                message="updates seen while connected",
            )

            await proxy.cut()
            for name in names[:20]:
                await kube.patch(CONFIGMAPS, name, {"data": {"v": "2"}}, namespace=namespace)
            for name in names[20:]:
                await kube.delete(CONFIGMAPS, name, namespace=namespace)
            await asyncio.to_thread(clusters.set_components, cluster.name, ["kube-apiserver"], enabled=False)
            await asyncio.to_thread(clusters.set_components, cluster.name, ["kube-apiserver"], enabled=True)
            created = [f"new-{i}" for i in range(10)]
            for name in created:
                await kube.create(CONFIGMAPS, configmap(name, namespace, v="0"))
            for name in names[:20]:
                await kube.patch(CONFIGMAPS, name, {"data": {"v": "3"}}, namespace=namespace)
            # What a long outage does: etcd compacts the history the informer would resume from. The API
            # server keeps no watch cache here (whose restart would lose that history too), so compact it.
            await compact_etcd(cluster)
            await proxy.start()

            items, _ = await kube.list_all(CONFIGMAPS, namespace=namespace)
            truth = {object_key(o): o["metadata"]["resourceVersion"] for o in items}

            async def converged() -> bool:
                cached = {object_key(o): o["metadata"]["resourceVersion"] for o in informer.store.list()}
                return cached == truth

            await eventually(converged, timeout=60, message="informer cache equals the server's state")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await proxy.cut()

    survivors = {f"{namespace}/{n}" for n in names[:20]}
    assert {k for k, v in seen.items() if v == "3"} == survivors
    assert {k: seen[k] for k in (f"{namespace}/{n}" for n in created)} == dict.fromkeys(
        (f"{namespace}/{n}" for n in created), "0"
    )
    assert sorted(deleted) == sorted(f"{namespace}/{n}" for n in names[20:])
    assert informer.relists_on_gone >= 1, "the compaction should have made the informer's resourceVersion too old"


async def _true(value: bool) -> bool:
    return value


class Candidate:
    """An elector subprocess and the lines it printed."""

    def __init__(self, cluster: LocalCluster, namespace: str, lease: str, identity: str) -> None:
        self.identity = identity
        self.process = subprocess.Popen(
            [sys.executable, str(ELECTOR), str(cluster.kubeconfig), namespace, lease, identity],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    async def printed(self, word: str, *, timeout: float) -> float:
        await eventually(lambda: _true(f"{word} {self.identity}" in self.lines), timeout=timeout, message=word)
        return time.monotonic()

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        await asyncio.to_thread(self.process.wait)
        await self._reader


@contextlib.asynccontextmanager
async def leader_and_follower(cluster: LocalCluster, namespace: str) -> AsyncIterator[tuple[Candidate, Candidate, str]]:
    """Two candidates for a new lease: ``first`` leads, ``second`` campaigns."""
    lease = unique("lease")
    first = Candidate(cluster, namespace, lease, "first")
    second: Candidate | None = None
    try:
        await first.printed("LEADING", timeout=20)
        second = Candidate(cluster, namespace, lease, "second")
        await second.printed("READY", timeout=20)
        yield first, second, lease
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def test_leader_election_hands_over_when_the_leader_dies(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    async with leader_and_follower(cluster, namespace) as (first, second, lease):
        record = await kube.get(LEASES, lease, namespace=namespace)
        assert record["spec"]["holderIdentity"] == "first"

        first.process.kill()  # SIGKILL: no release, the lease must expire
        killed_at = time.monotonic()
        took_over_at = await second.printed("LEADING", timeout=20)
        record = await kube.get(LEASES, lease, namespace=namespace)
        assert record["spec"]["holderIdentity"] == "second"
        assert record["spec"]["leaseTransitions"] >= 1
        assert took_over_at - killed_at < 10


async def test_leader_release_on_shutdown_hands_over_at_once(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    async with leader_and_follower(cluster, namespace) as (first, second, lease):
        first.process.terminate()
        await first.printed("RELEASED", timeout=10)
        await second.printed("LEADING", timeout=5)
        record = await kube.get(LEASES, lease, namespace=namespace)
        assert record["spec"]["holderIdentity"] == "second"


async def test_apply_is_idempotent_and_takes_back_its_fields(kube: KubeClient, namespace: str) -> None:
    desired = configmap("applied", namespace, owner="liqo")
    first = await kube.apply(CONFIGMAPS, desired)
    second = await kube.apply(CONFIGMAPS, desired)
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert {m["manager"] for m in second["metadata"]["managedFields"]} == {FIELD_MANAGER}

    await kube.patch(CONFIGMAPS, "applied", {"data": {"owner": "someone-else"}}, namespace=namespace)
    restored = await kube.apply(CONFIGMAPS, desired)
    assert restored["data"] == {"owner": "liqo"}


async def test_a_status_apply_over_a_stale_version_is_refused_and_changes_nothing(
    kube: KubeClient, namespace: str
) -> None:
    """What keeps a controller deciding from a lagging cache from undoing a write made since (a human's)."""
    gated = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated", "namespace": namespace},
        "spec": {"schedulingGates": [{"name": "liqo.io/test"}], "containers": [{"name": "c", "image": "x"}]},
    }
    seen = await kube.create(PODS, gated)

    def condition(status: str) -> dict[str, Any]:
        return {"conditions": [{"type": "liqo.io/Decided", "status": status}]}

    await kube.patch(PODS, "gated", {"status": condition("True")}, namespace=namespace, subresource="status")
    stale = seen["metadata"]["resourceVersion"]
    with pytest.raises(ConflictError):
        await kube.apply_status(
            PODS, name="gated", namespace=namespace, status=condition("False"), resource_version=stale
        )
    current = await kube.get(PODS, "gated", namespace=namespace)
    decided = [c for c in current["status"]["conditions"] if c["type"] == "liqo.io/Decided"]
    assert [c["status"] for c in decided] == ["True"]
    await kube.apply_status(
        PODS,
        name="gated",
        namespace=namespace,
        status=condition("False"),
        resource_version=current["metadata"]["resourceVersion"],
    )


async def test_event_recorder_aggregates_repeats_on_the_api_server(kube: KubeClient, namespace: str) -> None:
    target = await kube.create(CONFIGMAPS, configmap("observed", namespace, v="0"))
    recorder = EventRecorder(client=kube, component="liqo-test", host="here")
    for _ in range(3):
        await recorder.record(target, type="Warning", reason="Tested", message="something happened")
    await recorder.record(target, type="Normal", reason="Other", message="another thing")

    events, _ = await kube.list_all(EVENTS, namespace=namespace, field_selector="involvedObject.name=observed")
    by_reason = {e["reason"]: e for e in events}
    assert set(by_reason) == {"Tested", "Other"}
    assert by_reason["Tested"]["count"] == 3
    assert by_reason["Tested"]["involvedObject"]["uid"] == target["metadata"]["uid"]
    assert by_reason["Tested"]["source"]["component"] == "liqo-test"
