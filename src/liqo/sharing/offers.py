"""The provider's side of negotiation: turn each consumer's request into an offer, and enforce it.

Keyed by the consumer's cluster ID. The offer is recomputed from the real free capacity (nodes and pods
from the informers) and that consumer's SharingPolicy whenever either moves, and written only when it
changed by more than the policy's threshold or nears expiry — a busy cluster does not rewrite offers on
every pod —, or when its largest slots shrank (or grew beyond the threshold): those say what a single pod
can still get on one node, and the consumer relies on them to never send a pod no node can take. Once
the consumer accepts, the offer is its budget: the ShadowPod controller (``liqo.offloading.shadowpods``)
runs its pods, in all its twins together, within it, and none while the offer is not accepted or gone.
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

from liqo.api import names
from liqo.api.identity import ClusterIdentity
from liqo.api.resources import RESOURCE_OFFERS, RESOURCE_REQUESTS, SHARING_POLICIES
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import NotFoundError
from liqo.kube.informer import HandlerFuncs
from liqo.kube.metrics import CacheGauge
from liqo.kube.resources import NAMESPACES, NODES, PODS, terminating
from liqo.sharing import metrics
from liqo.sharing.capacity import NODE_FIELDS, POD_FIELDS, RequestsMemo, free_capacity, largest_slots
from liqo.sharing.policy import compute_offer, needs_refresh, offer_spec, select_policy

CAPACITY_COALESCE_SECONDS = 1.0


def request_status(state: str, message: str = "") -> dict[str, Any]:
    """A ResourceRequest ``status`` (pure)."""
    return {"offerState": state, "message": message}


class OfferController(Component):
    """Computes and refreshes the offer made to every consumer."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers, local: ClusterIdentity) -> None:
        self._client = client
        self._local = local
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.policies = informers.informer(SHARING_POLICIES)
        self.nodes = informers.informer(NODES, projection=NODE_FIELDS)
        self.pods = informers.informer(PODS, projection=POD_FIELDS)
        self._requests = RequestsMemo()
        self.pods.add_handler(HandlerFuncs(delete=self._requests.forget))
        self.hosted = informers.informer(NAMESPACES, label_selector=names.REMOTE_CLUSTER_ID)
        self.controller: Controller[str] = Controller(name="offers", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.requests, self._consumer_of_request)
        self.controller.watch(self.offers, names.tenant_peer)
        self.controller.watch(self.hosted, lambda ns: [(ns["metadata"].get("labels") or {})[names.REMOTE_CLUSTER_ID]])
        self.controller.watch(self.policies, lambda _obj: self.consumers())
        for informer in (self.nodes, self.pods):
            # Capacity moves with every pod: recomputing every offer (O(pods)) once per event would make a
            # rollout quadratic, so a burst is coalesced into one recomputation per second.
            self.controller.watch(informer, lambda _obj: self.consumers(), coalesce=CAPACITY_COALESCE_SECONDS)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """What this cluster offers each consumer, and what they accepted."""
        offers, local_id = self.offers.store, self._local.cluster_id
        return [
            CacheGauge(
                "liqo_provider_offered_resources",
                "What this cluster's ResourceOffer to a consumer holds (cpu in cores, memory in bytes, pods).",
                ("consumer", "resource"),
                lambda: metrics.offers_made(offers.list(), local_id=local_id),
            ),
            CacheGauge(
                "liqo_provider_accepted_resources",
                "What a consumer accepted of this cluster's offer: its budget here.",
                ("consumer", "resource"),
                lambda: metrics.offers_made(offers.list(), local_id=local_id, accepted_only=True),
            ),
        ]

    def consumers(self) -> list[str]:
        """Every consumer with a request here (capacity or policy changes concern them all)."""
        return [rr["metadata"]["name"] for rr in self.requests.store.list() if self._is_incoming(rr)]

    def _is_incoming(self, rr: dict[str, Any]) -> bool:
        return bool(rr["metadata"].get("namespace") == names.tenant_namespace(rr["metadata"]["name"]))

    def _consumer_of_request(self, rr: dict[str, Any]) -> list[str]:
        return [rr["metadata"]["name"]] if self._is_incoming(rr) else []

    async def reconcile(self, consumer_id: str) -> Result | None:
        """Converge the offer for ``consumer_id``."""
        namespace = names.tenant_namespace(consumer_id)
        request = self.requests.store.get(f"{namespace}/{consumer_id}")
        offer: dict[str, Any] | None = self.offers.store.get(f"{namespace}/{self._local.cluster_id}")
        tenant = self.hosted.store.get(namespace)
        if tenant is None or terminating(tenant):
            return None  # not provisioned yet, or being released: nothing can be written in it
        if request is None or terminating(request):
            await self._withdraw(consumer_id, offer)
            return None
        policy = select_policy(self.policies.store.list(), peer_id=consumer_id)
        hosted = frozenset(
            ns["metadata"]["name"]
            for ns in self.hosted.store.list()
            if (ns["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID) == consumer_id
        )
        nodes, pods = self.nodes.store.list(), self.pods.store.list()
        free = free_capacity(nodes, pods, exclude_namespaces=hosted, requests=self._requests)
        resources = compute_offer(free, policy)
        if resources is None:
            await self._set_request_status(
                request, request_status("Denied", "the provider's sharing policy denies this peer")
            )
            await self._withdraw(consumer_id, offer)
            return None
        await self._set_request_status(request, request_status("Created"))
        slots = largest_slots(nodes, pods, offer=resources, requests=self._requests)
        now = datetime.datetime.now(datetime.UTC)
        if offer is None or needs_refresh(offer.get("spec"), resources, policy, new_slots=slots, now=now):
            spec = offer_spec(
                provider_id=self._local.cluster_id,
                provider_name=self._local.cluster_name,
                resources=resources,
                slots=slots,
                policy=policy,
                now=now,
            )
            await self._client.apply(
                RESOURCE_OFFERS,
                {
                    "apiVersion": RESOURCE_OFFERS.api_version,
                    "kind": RESOURCE_OFFERS.kind,
                    "metadata": {
                        "name": self._local.cluster_id,
                        "namespace": namespace,
                        "labels": names.peer_labels(consumer_id),
                    },
                    "spec": spec,
                },
            )
        return Result(requeue_after=max(1.0, policy.offer_ttl_seconds / 3))

    async def _set_request_status(self, request: dict[str, Any], status: dict[str, Any]) -> None:
        if (request.get("status") or {}) != status:
            meta = request["metadata"]
            await self._client.apply_status(
                RESOURCE_REQUESTS, name=meta["name"], namespace=meta["namespace"], status=status
            )

    async def _withdraw(self, consumer_id: str, offer: dict[str, Any] | None) -> None:
        if offer is not None:
            with contextlib.suppress(NotFoundError):
                await self._client.delete(
                    RESOURCE_OFFERS, self._local.cluster_id, namespace=names.tenant_namespace(consumer_id)
                )
