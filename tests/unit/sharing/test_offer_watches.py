"""The offer controller watches nodes and pods only while some consumer has a ResourceRequest here, and the
pods made for ShadowPods only once: through the ShadowPod controller's watch, which it shares."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from typing import Any, cast

from liqo.api import names
from liqo.api.identity import ClusterIdentity
from liqo.api.resources import RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs
from liqo.kube.resources import NODES, PODS, Resource
from liqo.offloading.shadowpods import ShadowPods
from liqo.sharing.offers import CAPACITY, OfferController
from tests.unit.helpers import Signal

LOCAL = ClusterIdentity(
    cluster_id="milan-id",
    cluster_name="milan",
    api_server_url="https://milan",
    auth_url="https://milan",
    cluster_labels={},
)


OFFLOADED = f"{PODS.plural}?{names.SHADOW_POD}"
"""The watch of the pods made for ShadowPods."""
OTHER_PODS = f"{PODS.plural}?!{names.SHADOW_POD}"
"""The watch of every other pod."""


def scope(resource: Resource, label_selector: str | None = None) -> str:
    return f"{resource.plural}?{label_selector}" if label_selector else resource.plural


class StreamingApi:
    """Lists nothing; each watch streams what the test pushes for its scope. Counts lists and open watches.

    A scope is a resource's plural, with ``?`` and the label selector if any (:data:`OFFLOADED`).
    """

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.lists: Counter[str] = Counter()
        self.open: Counter[str] = Counter()
        self.events: dict[str, asyncio.Queue[dict[str, Any]]] = defaultdict(asyncio.Queue)

    async def list_all(
        self, resource: Resource, *, label_selector: str | None = None, **_: Any
    ) -> tuple[list[Any], str]:
        self.lists[scope(resource, label_selector)] += 1
        self.signal.fire()
        return [], "1"

    async def watch(
        self, resource: Resource, *, label_selector: str | None = None, **_: Any
    ) -> AsyncIterator[dict[str, Any]]:
        watched = scope(resource, label_selector)
        self.open[watched] += 1
        self.signal.fire()
        try:
            while True:
                yield await self.events[watched].get()
        finally:
            self.open[watched] -= 1
            self.signal.fire()

    def push(self, watched: str, kind: str, obj: dict[str, Any]) -> None:
        self.events[watched].put_nowait({"type": kind, "object": obj})


def request(consumer: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_REQUESTS.api_version,
        "kind": RESOURCE_REQUESTS.kind,
        "metadata": {
            "name": consumer,
            "namespace": names.tenant_namespace(consumer),
            "uid": f"uid-{consumer}",
            "resourceVersion": version,
        },
        "spec": {},
    }


async def test_nodes_and_pods_are_watched_from_the_first_consumer_to_the_last() -> None:
    signal = Signal()
    api = StreamingApi(signal)
    informers = SharedInformers(cast(KubeClient, api))
    events = EventRecorder(client=cast(Any, api), component="test")
    offers = OfferController(client=cast(KubeClient, api), informers=informers, local=LOCAL, events=events)
    running = asyncio.create_task(informers.run())
    try:
        assert await informers.wait_synced(5)
        await signal.until(lambda: api.open[RESOURCE_REQUESTS.plural] == 1)
        # No consumer: neither listed nor watched.
        assert api.lists[OTHER_PODS] == api.lists[NODES.plural] == 0
        assert offers.capacity.get(CAPACITY) is None

        api.push(RESOURCE_REQUESTS.plural, "ADDED", request("rome", "2"))
        await signal.until(lambda: api.open[OTHER_PODS] == api.open[NODES.plural] == 1)
        capacity = offers.capacity.get(CAPACITY)
        assert capacity is not None
        assert capacity.synced

        # A second consumer shares the same watches; the first leaving keeps them.
        api.push(RESOURCE_REQUESTS.plural, "ADDED", request("naples", "3"))
        api.push(RESOURCE_REQUESTS.plural, "DELETED", request("rome", "4"))
        await signal.until(lambda: len(offers.requests.store) == 1)
        assert offers.capacity.get(CAPACITY) is capacity
        assert api.lists[OTHER_PODS] == 1

        # The last one gone: the watches stop.
        api.push(RESOURCE_REQUESTS.plural, "DELETED", request("naples", "5"))
        await signal.until(lambda: api.open[OTHER_PODS] == api.open[NODES.plural] == 0)
        assert offers.capacity.get(CAPACITY) is None
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await offers.close()


def pod(name: str, version: str, *, cpu: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "twin", "uid": f"uid-{name}", "resourceVersion": version},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }


async def test_pods_made_for_shadowpods_are_watched_once_and_counted_from_that_watch() -> None:
    signal = Signal()
    api = StreamingApi(signal)
    client = cast(KubeClient, api)
    informers = SharedInformers(client)
    offers = OfferController(
        client=client, informers=informers, local=LOCAL, events=EventRecorder(client=cast(Any, api), component="test")
    )
    shadow_pods = ShadowPods(
        client=client,
        informers=informers,
        events=EventRecorder(client=cast(Any, api), component="test"),
        local_id=LOCAL.cluster_id,
        select=lambda _policies, _consumer: cast(Any, None),
    )
    assert offers.offloaded is shadow_pods.pods
    progress = HandlerFuncs(
        add=lambda _o: signal.fire(), update=lambda _o, _n: signal.fire(), delete=lambda _o: signal.fire()
    )
    offers.offloaded.add_handler(progress)
    running = asyncio.create_task(informers.run())
    try:
        assert await informers.wait_synced(5)
        # One watch of them, before any consumer and whatever the consumers.
        await signal.until(lambda: api.open[OFFLOADED] == 1)
        api.push(OFFLOADED, "ADDED", pod("early", "2"))
        await signal.until(lambda: len(offers.offloaded.store) == 1)

        api.push(RESOURCE_REQUESTS.plural, "ADDED", request("rome", "3"))
        await signal.until(lambda: api.open[OTHER_PODS] == 1)
        capacity = offers.capacity.get(CAPACITY)
        assert capacity is not None
        capacity.pods.add_handler(progress)
        await signal.until(lambda: capacity.synced)
        assert len(capacity.ledger) == 1  # what the shared watch held when the ledger was made
        assert api.open[OFFLOADED] == 1

        api.push(OFFLOADED, "ADDED", pod("late", "4"))
        await signal.until(lambda: len(capacity.ledger) == 2)
        # A pod whose label moves it into the shared watch: added there, then deleted from the other one
        # (the two streams are not ordered with each other). It stays counted, once.
        api.push(OFFLOADED, "ADDED", pod("moved", "5"))
        await signal.until(lambda: len(capacity.ledger) == 3)
        api.push(OTHER_PODS, "ADDED", pod("moved", "4"))
        await signal.until(lambda: "twin/moved" in capacity.pods.store)
        api.push(OTHER_PODS, "DELETED", pod("moved", "5"))
        await signal.until(lambda: "twin/moved" not in capacity.pods.store)
        assert len(capacity.ledger) == 3
        assert capacity.ledger.free() == {}  # no node seen: nothing free, but the pods are counted
        api.push(OFFLOADED, "DELETED", pod("late", "6"))
        await signal.until(lambda: len(capacity.ledger) == 2)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await offers.close()
