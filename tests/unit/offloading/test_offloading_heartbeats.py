"""Heartbeats: a silent consumer's reflected endpoints turn not-ready, judged on our clock, by our labels."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.offloading.heartbeats import Heartbeats, consumer_of_twin, not_ready, silent_for


def endpoint(*, ready: bool, terminating: bool = False) -> Obj:
    return {"addresses": ["10.244.0.5"], "conditions": {"ready": ready, "serving": ready, "terminating": terminating}}


def reflected_slice(*endpoints: Obj, namespace: str = "demo-rome") -> Obj:
    labels = {names.SLICE_MANAGED_BY: names.REFLECTION_MANAGER}
    meta = {"name": "web-abcde", "namespace": namespace, "labels": labels, "resourceVersion": "7"}
    return {"metadata": meta, "addressType": "IPv4", "endpoints": list(endpoints)}


def twin(name: str, consumer: str) -> Obj:
    labels = {names.REMOTE_CLUSTER_ID: consumer, names.ORIGIN_NAMESPACE: "demo"}
    return {"metadata": {"name": name, "labels": labels}}


def test_not_ready_darkens_every_endpoint_and_keeps_the_rest() -> None:
    patch = not_ready(reflected_slice(endpoint(ready=True), endpoint(ready=False, terminating=True)))
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "7"}  # against the slice as judged
    assert [e["conditions"] for e in patch["endpoints"]] == [
        {"ready": False, "serving": False, "terminating": False},
        {"ready": False, "serving": False, "terminating": True},
    ]
    assert all(e["addresses"] == ["10.244.0.5"] for e in patch["endpoints"])
    assert not_ready(reflected_slice(endpoint(ready=False))) is None  # nothing to do: no write


def test_the_consumer_is_the_one_our_labels_name() -> None:
    assert names.tenant_peer_id(f"{names.TENANT_NAMESPACE_PREFIX}rome-id") == "rome-id"
    assert names.tenant_peer_id("default") is None
    assert consumer_of_twin(twin("demo-rome", "rome-id")) == "rome-id"
    # A namespace without our twin label is nobody's twin, whatever else it says.
    assert consumer_of_twin({"metadata": {"name": "x", "labels": {names.REMOTE_CLUSTER_ID: "rome-id"}}}) is None
    assert consumer_of_twin(None) is None


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_silence_is_never_negative_and_unknown_is_no_silence(seen: float, now: float) -> None:
    assert silent_for(seen, now=now) >= 0
    assert silent_for(None, now=now) == 0


class Recorder:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, Obj]] = []

    async def patch(self, resource: Any, name: str, patch: Obj, *, namespace: str, **_: Any) -> Obj:
        self.patches.append((namespace, name, patch))
        return {}


def seed(heartbeats: Heartbeats, *objects: tuple[Any, Obj]) -> None:
    """Put objects in the informers' caches as a list would, without an API."""
    for informer, obj in objects:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        informer._cache[key] = obj


async def test_endpoints_go_dark_only_after_the_heartbeat_is_silent_for_its_duration() -> None:
    now = [1000.0]
    api = Recorder()
    heartbeats = Heartbeats(
        client=cast(KubeClient, api), informers=SharedInformers(cast(KubeClient, api)), clock=lambda: now[0]
    )
    lease = {"metadata": {"name": names.CONSUMER_HEARTBEAT, "namespace": "liqo-tenant-rome-id", "resourceVersion": "1"}}
    seed(
        heartbeats,
        (heartbeats.namespaces, twin("demo-rome", "rome-id")),
        (heartbeats.namespaces, twin("demo-naples", "naples-id")),
        (heartbeats.slices, reflected_slice(endpoint(ready=True))),
        (heartbeats.slices, reflected_slice(endpoint(ready=True), namespace="demo-naples")),
    )
    assert await heartbeats.reconcile("rome-id") is None  # never heard: nothing to judge by
    heartbeats._beat(lease)
    result = await heartbeats.reconcile("rome-id")
    assert result is not None
    assert result.requeue_after == 40.0
    now[0] += 39
    heartbeats._beat(lease)
    assert not api.patches
    now[0] += 2
    await heartbeats.reconcile("rome-id")
    assert [(ns, name) for ns, name, _ in api.patches] == [("demo-rome", "web-abcde")]  # naples' untouched
    heartbeats._beat(lease | {"metadata": lease["metadata"] | {"resourceVersion": "2"}})
    api.patches.clear()
    await heartbeats.reconcile("rome-id")
    assert not api.patches  # renewed: judged afresh
