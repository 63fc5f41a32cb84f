"""The provider's side of negotiation: turn each consumer's request into an offer, and enforce it.

Keyed by the consumer's cluster ID. The offer is recomputed from the real free capacity (nodes and pods
from the informers) and that consumer's SharingPolicy whenever either moves, and written only when it
changed by more than the policy's threshold or nears expiry — a busy cluster does not rewrite offers on
every pod —, or when its largest slots shrank (or grew beyond the threshold): those say what a single pod
can still get on one node, and the consumer relies on them to never send a pod no node can take. Once
the consumer accepts, a ResourceQuota holding the offered amounts goes into every namespace
this cluster hosts for it, so the consumer can never use more than it was offered.
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
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import NAMESPACES, NODES, PODS, RESOURCE_QUOTAS
from liqo.sharing.capacity import free_capacity, largest_slots
from liqo.sharing.policy import compute_offer, needs_refresh, offer_spec, select_policy

QUOTA = "liqo-offer"
CAPACITY_COALESCE_SECONDS = 1.0


def quota_manifest(*, namespace: str, consumer_id: str, resources: dict[str, str]) -> dict[str, Any]:
    """The ResourceQuota enforcing an accepted offer in one hosted namespace (pure)."""
    hard = {(name if name == "pods" else f"requests.{name}"): value for name, value in resources.items()}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA, "namespace": namespace, "labels": names.peer_labels(consumer_id)},
        "spec": {"hard": hard},
    }


def request_status(state: str, message: str = "") -> dict[str, Any]:
    """A ResourceRequest ``status`` (pure)."""
    return {"offerState": state, "message": message}


class OfferController:
    """Computes, refreshes and enforces the offer made to every consumer."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers, local: ClusterIdentity) -> None:
        self._client = client
        self._local = local
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.policies = informers.informer(SHARING_POLICIES)
        self.nodes = informers.informer(NODES)
        self.pods = informers.informer(PODS)
        self.hosted = informers.informer(NAMESPACES, label_selector=names.REMOTE_CLUSTER_ID)
        self.quotas = informers.informer(RESOURCE_QUOTAS, label_selector=names.REMOTE_CLUSTER_ID)
        self.controller: Controller[str] = Controller(name="offers", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.requests, self._consumer_of_request)
        self.controller.watch(self.offers, _tenant_peer)
        self.controller.watch(self.hosted, lambda ns: [(ns["metadata"].get("labels") or {})[names.REMOTE_CLUSTER_ID]])
        self.controller.watch(self.policies, lambda _obj: self.consumers())
        for informer in (self.nodes, self.pods):
            # Capacity moves with every pod: recomputing every offer (O(pods)) once per event would make a
            # rollout quadratic, so a burst is coalesced into one recomputation per second.
            self.controller.watch(informer, lambda _obj: self.consumers(), coalesce=CAPACITY_COALESCE_SECONDS)

    def consumers(self) -> list[str]:
        """Every consumer with a request here (capacity or policy changes concern them all)."""
        return [rr["metadata"]["name"] for rr in self.requests.store.list() if self._is_incoming(rr)]

    def _is_incoming(self, rr: dict[str, Any]) -> bool:
        return bool(rr["metadata"].get("namespace") == names.tenant_namespace(rr["metadata"]["name"]))

    def _consumer_of_request(self, rr: dict[str, Any]) -> list[str]:
        return [rr["metadata"]["name"]] if self._is_incoming(rr) else []

    async def reconcile(self, consumer_id: str) -> Result | None:
        """Converge the offer (and quota) for ``consumer_id``."""
        namespace = names.tenant_namespace(consumer_id)
        request = self.requests.store.get(f"{namespace}/{consumer_id}")
        offer: dict[str, Any] | None = self.offers.store.get(f"{namespace}/{self._local.cluster_id}")
        tenant = self.hosted.store.get(namespace)
        if tenant is None or tenant["metadata"].get("deletionTimestamp"):
            return None  # not provisioned yet, or being released: nothing can be written in it
        if request is None or request["metadata"].get("deletionTimestamp"):
            await self._withdraw(consumer_id, offer)
            return None
        policy = select_policy(self.policies.store.list(), peer_id=consumer_id)
        hosted = frozenset(
            ns["metadata"]["name"]
            for ns in self.hosted.store.list()
            if (ns["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID) == consumer_id
        )
        nodes, pods = self.nodes.store.list(), self.pods.store.list()
        free = free_capacity(nodes, pods, exclude_namespaces=hosted)
        resources = compute_offer(free, policy)
        if resources is None:
            await self._set_request_status(
                request, request_status("Denied", "the provider's sharing policy denies this peer")
            )
            await self._withdraw(consumer_id, offer)
            return None
        await self._set_request_status(request, request_status("Created"))
        slots = largest_slots(nodes, pods, offer=resources)
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
            offer = await self._client.apply(
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
        await self._enforce(consumer_id, offer, hosted=hosted)
        return Result(requeue_after=max(1.0, policy.offer_ttl_seconds / 3))

    async def _set_request_status(self, request: dict[str, Any], status: dict[str, Any]) -> None:
        if (request.get("status") or {}) != status:
            meta = request["metadata"]
            body = {
                "apiVersion": RESOURCE_REQUESTS.api_version,
                "kind": RESOURCE_REQUESTS.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": status,
            }
            await self._client.apply(RESOURCE_REQUESTS, body, subresource="status")

    async def _enforce(self, consumer_id: str, offer: dict[str, Any], *, hosted: frozenset[str]) -> None:
        accepted = (offer.get("status") or {}).get("phase") == "Accepted"
        resources = {k: str(v) for k, v in (offer.get("spec") or {}).get("resources", {}).items()}
        for namespace in hosted:
            current = self.quotas.store.get(f"{namespace}/{QUOTA}")
            if not accepted:
                if current is not None:
                    with contextlib.suppress(NotFoundError):
                        await self._client.delete(RESOURCE_QUOTAS, QUOTA, namespace=namespace)
                continue
            desired = quota_manifest(namespace=namespace, consumer_id=consumer_id, resources=resources)
            if current is None or current.get("spec") != desired["spec"]:
                await self._client.apply(RESOURCE_QUOTAS, desired)

    async def _withdraw(self, consumer_id: str, offer: dict[str, Any] | None) -> None:
        if offer is not None:
            with contextlib.suppress(NotFoundError):
                await self._client.delete(
                    RESOURCE_OFFERS, self._local.cluster_id, namespace=names.tenant_namespace(consumer_id)
                )
        for quota in self.quotas.store.list():
            if (quota["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID) == consumer_id:
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(RESOURCE_QUOTAS, QUOTA, namespace=quota["metadata"]["namespace"])


def _tenant_peer(obj: dict[str, Any]) -> list[str]:
    namespace = obj["metadata"].get("namespace") or ""
    return (
        [namespace.removeprefix(names.TENANT_NAMESPACE_PREFIX)]
        if namespace.startswith(names.TENANT_NAMESPACE_PREFIX)
        else []
    )
