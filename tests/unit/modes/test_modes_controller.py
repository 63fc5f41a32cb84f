"""The working-mode controller against the in-memory API: a tether made and ended, step by step, as the API sees it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_OFFLOADINGS, RESOURCE_OFFERS, WORKING_MODES
from liqo.api.workingmodes import ACCEPTS_TETHERING, NAME
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import run_components
from liqo.kube.errors import ApiError
from liqo.kube.events import EventRecorder
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, NODES, PODS
from liqo.modes.controller import WorkingModes
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi

ENTERPRISE = str(uuid.UUID(int=7))
TENANT = names.tenant_namespace(ENTERPRISE)
VIRTUAL_NODE = "liqo-enterprise"


def _pod(name: str, *, node: str, owned: bool = True) -> Obj:
    owners = [{"kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}] if owned else []
    return {
        "metadata": {"name": name, "namespace": "default", "ownerReferences": owners},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def _working_mode(spec: dict[str, Any], *, generation: int) -> Obj:
    return {"metadata": {"name": NAME, "generation": generation}, "spec": spec}


def _ask(api: FakeApi, spec: dict[str, Any], *, generation: int) -> None:
    """A new spec, the status kept (as the API server does on a write of the spec)."""
    stored = api.stored(WORKING_MODES, NAME) or {}
    api.put(WORKING_MODES, _working_mode(spec, generation=generation) | {"status": stored.get("status") or {}})


def _api() -> FakeApi:
    established = [
        {"type": "OutgoingPeering", "status": "Established"},
        {"type": "IncomingPeering", "status": "Established"},
    ]
    return FakeApi(
        (
            FOREIGN_CLUSTERS,
            {
                "metadata": {"name": "enterprise"},
                "spec": {"clusterID": ENTERPRISE},
                "status": {"conditions": established},
            },
        ),
        (RESOURCE_OFFERS, {"metadata": {"name": ENTERPRISE, "namespace": TENANT}, "spec": {ACCEPTS_TETHERING: True}}),
        (NAMESPACES, {"metadata": {"name": "default"}}),
        (NAMESPACES, {"metadata": {"name": "kube-system"}}),
        (NAMESPACES, {"metadata": {"name": TENANT}}),
        (
            NODES,
            {
                "metadata": {
                    "name": VIRTUAL_NODE,
                    "labels": names.peer_labels(ENTERPRISE) | {names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE},
                }
            },
        ),
        (NODES, {"metadata": {"name": "laptop"}}),
        (PODS, _pod("web-1-a", node="laptop")),
        (PODS, _pod("web-1-b", node="laptop")),
        (PODS, _pod("lonely", node="laptop", owned=False)),
    )


async def offloadings_made_ready(api: FakeApi) -> None:
    """What the offloading controller does, as far as the switch sees it: each NamespaceOffloading Ready."""
    while True:
        for (plural, _, _), obj in list(api.objects.items()):
            if plural == NAMESPACE_OFFLOADINGS.plural and (obj.get("status") or {}).get("offloadingPhase") != "Ready":
                api.put(NAMESPACE_OFFLOADINGS, obj | {"status": {"offloadingPhase": "Ready"}})
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(api: FakeApi) -> AsyncIterator[WorkingModes]:
    client = cast(KubeClient, api)
    informers = SharedInformers(client)
    modes = WorkingModes(client=client, informers=informers, events=EventRecorder(client=client, component="test"))
    tasks = [
        asyncio.create_task(run_components([modes], informers=informers)),
        asyncio.create_task(offloadings_made_ready(api)),
    ]
    try:
        yield modes
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _phase(api: FakeApi) -> str | None:
    stored = api.stored(WORKING_MODES, NAME) or {}
    return (stored.get("status") or {}).get("phase")


async def test_a_tether_offloads_the_users_namespaces_moves_controlled_pods_and_its_end_brings_them_back() -> None:
    api = _api()
    api.put(WORKING_MODES, _working_mode({"mode": "Tethered", "peer": ENTERPRISE}, generation=1))
    async with running(api):

        async def tethered() -> bool:
            return _phase(api) == "Tethered"

        await eventually(tethered, timeout=10, message=lambda: f"tethered: {api.stored(WORKING_MODES, NAME)}")
        offloading = api.stored(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace="default")
        assert offloading is not None
        assert offloading["spec"]["podOffloadingStrategy"] == "Remote"
        assert offloading["spec"]["clusterSelector"] == {names.REMOTE_CLUSTER_ID: ENTERPRISE}
        assert api.stored(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace="kube-system") is None
        assert api.stored(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=TENANT) is None
        assert sorted(str(c.name) for c in api.called("evict")) == ["web-1-a", "web-1-b"]  # not the pod no one owns
        status = (api.stored(WORKING_MODES, NAME) or {})["status"]
        assert status["offloaded"] == ["default"]
        assert status["conditions"][0]["status"] == "True"

        # The ReplicaSet made them again; the placement sent them to the enterprise's virtual node.
        api.put(PODS, _pod("web-1-c", node=VIRTUAL_NODE))
        _ask(api, {"mode": "Autonomous"}, generation=2)

        async def autonomous() -> bool:
            return _phase(api) == "Autonomous"

        await eventually(autonomous, timeout=10, message=lambda: f"autonomous: {api.stored(WORKING_MODES, NAME)}")
        assert api.stored(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace="default") is None
        patched = [c.body for c in api.called("patch", NAMESPACE_OFFLOADINGS)]
        assert patched == [{"spec": {"podOffloadingStrategy": "Local"}}]
        assert "web-1-c" in [c.name for c in api.called("evict")]


async def test_a_budget_refusing_an_eviction_holds_the_switch_until_it_allows_it() -> None:
    api = _api()
    api.refuse("evict", PODS, ApiError(429, "TooManyRequests", "Cannot evict pod: disruption budget"), name="web-1-a")
    api.put(WORKING_MODES, _working_mode({"mode": "Tethered", "peer": ENTERPRISE}, generation=1))
    async with running(api):

        async def tried() -> bool:
            return any(c.name == "web-1-a" for c in api.called("evict"))

        await eventually(tried, timeout=10, message="an eviction tried")
        assert _phase(api) == "Tethering"
        api.allow("evict", PODS, name="web-1-a")

        async def tethered() -> bool:
            return _phase(api) == "Tethered"

        await eventually(tethered, timeout=20, message="tethered once the budget allows it")


@pytest.mark.parametrize("spec", [{"mode": "Tethered", "peer": str(uuid.UUID(int=8))}])
async def test_a_tether_to_no_peer_is_refused_in_the_status_and_changes_nothing(spec: dict[str, Any]) -> None:
    api = _api()
    api.put(WORKING_MODES, _working_mode(spec, generation=1))
    async with running(api):

        async def refused() -> bool:
            stored = api.stored(WORKING_MODES, NAME) or {}
            conditions = (stored.get("status") or {}).get("conditions") or []
            return bool(conditions) and conditions[0]["reason"] == "NotAPeer"

        await eventually(refused, timeout=10, message=lambda: f"refused: {api.stored(WORKING_MODES, NAME)}")
        assert not api.called("apply", NAMESPACE_OFFLOADINGS)
        assert not api.called("evict")


async def test_a_tether_whose_working_mode_is_deleted_is_undone_all_the_same() -> None:
    api = _api()
    api.put(WORKING_MODES, _working_mode({"mode": "Tethered", "peer": ENTERPRISE}, generation=1))
    async with running(api):

        async def tethered() -> bool:
            return _phase(api) == "Tethered"

        await eventually(tethered, timeout=10, message="tethered")
        api.remove(WORKING_MODES, NAME)

        async def undone() -> bool:
            return api.stored(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace="default") is None

        await eventually(undone, timeout=10, message="the tether's offloading deleted")
