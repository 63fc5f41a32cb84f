"""The offer controller watches nodes and pods only while some consumer has a ResourceRequest here."""

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
from liqo.kube.resources import NODES, PODS, Resource
from liqo.sharing.offers import CAPACITY, OfferController
from tests.helpers import Signal

LOCAL = ClusterIdentity(
    cluster_id="milan-id",
    cluster_name="milan",
    api_server_url="https://milan",
    auth_url="https://milan",
    cluster_labels={},
)


class StreamingApi:
    """Lists nothing; each watch streams what the test pushes for its resource. Counts lists and open watches."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.lists: Counter[str] = Counter()
        self.open: Counter[str] = Counter()
        self.events: dict[str, asyncio.Queue[dict[str, Any]]] = defaultdict(asyncio.Queue)

    async def list_all(self, resource: Resource, **_: Any) -> tuple[list[Any], str]:
        self.lists[resource.plural] += 1
        self.signal.fire()
        return [], "1"

    async def watch(self, resource: Resource, **_: Any) -> AsyncIterator[dict[str, Any]]:
        self.open[resource.plural] += 1
        self.signal.fire()
        try:
            while True:
                yield await self.events[resource.plural].get()
        finally:
            self.open[resource.plural] -= 1
            self.signal.fire()

    def push(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        self.events[resource.plural].put_nowait({"type": kind, "object": obj})


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
    offers = OfferController(client=cast(KubeClient, api), informers=informers, local=LOCAL)
    running = asyncio.create_task(informers.run())
    try:
        assert await informers.wait_synced(5)
        await signal.until(lambda: api.open[RESOURCE_REQUESTS.plural] == 1)
        # No consumer: neither listed nor watched.
        assert api.lists[PODS.plural] == api.lists[NODES.plural] == 0
        assert offers.capacity.get(CAPACITY) is None

        api.push(RESOURCE_REQUESTS, "ADDED", request("rome", "2"))
        await signal.until(lambda: api.open[PODS.plural] == api.open[NODES.plural] == 1)
        capacity = offers.capacity.get(CAPACITY)
        assert capacity is not None
        assert capacity.synced

        # A second consumer shares the same watches; the first leaving keeps them.
        api.push(RESOURCE_REQUESTS, "ADDED", request("naples", "3"))
        api.push(RESOURCE_REQUESTS, "DELETED", request("rome", "4"))
        await signal.until(lambda: len(offers.requests.store) == 1)
        assert offers.capacity.get(CAPACITY) is capacity
        assert api.lists[PODS.plural] == 1

        # The last one gone: the watches stop.
        api.push(RESOURCE_REQUESTS, "DELETED", request("naples", "5"))
        await signal.until(lambda: api.open[PODS.plural] == api.open[NODES.plural] == 0)
        assert offers.capacity.get(CAPACITY) is None
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await offers.close()
