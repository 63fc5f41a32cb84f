"""The provider's side of negotiation: turn each consumer's request into an offer, and enforce it.

Keyed by the consumer's cluster ID. The offer is recomputed from the real free capacity and that
consumer's SharingPolicy whenever either moves, and written when :func:`~liqo.sharing.policy.next_refresh`
says so: at once for a change beyond the policy's threshold, at a bounded rate for a smaller shrink, and
before it expires — a busy cluster does not rewrite offers (and wake every consumer) for each pod. Once
the consumer accepts, the offer is its budget: the ShadowPod controller (``liqo.offloading.shadowpods``)
runs its pods, in all its twins together, within it, and none while the offer is not accepted or gone.

Storage is offered per StorageClass, as the policy says, but only for classes that wait for a first consumer
(:func:`~liqo.sharing.policy.storage_left_out` says why, in a Warning Event ``StorageNotOffered`` on the policy).

Free capacity comes from every node and pod of the cluster, kept in a
:class:`~liqo.sharing.capacity.CapacityLedger` as their events arrive. Those watches are the largest this
controller has, and they serve consumers only: a cluster that only consumes (or is not peered at all)
would cache every one of its pods for nothing. So nodes and pods are watched only while at least one
consumer has a ResourceRequest here — started with the first, stopped (the ledger dropped) with the last.

The pods this cluster runs for consumers are the exception: the ShadowPod controller watches them anyway
(label ``liqo.io/shadow-pod``), for as long as the process runs, so the capacity watch leaves them out
(``!liqo.io/shadow-pod``) and the ledger takes them from that shared watch. Watching them twice cost every
offloaded pod's events a second trip through the API server and a second decode here, on the provider's
busiest path.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from liqo.api import names
from liqo.api.identity import ClusterIdentity
from liqo.api.offers import OfferState
from liqo.api.resources import RESOURCE_OFFERS, RESOURCE_REQUESTS, SHARING_POLICIES, WORKING_MODES
from liqo.api.workingmodes import NAME as WORKING_MODE
from liqo.api.workingmodes import tethered_to
from liqo.kube.cache import InformerGroup, SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.events import EventRecorder
from liqo.kube.following import Following
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.metrics import CacheGauge
from liqo.kube.projection import keep
from liqo.kube.resources import NAMESPACES, NODES, PODS, STORAGE_CLASSES, terminating
from liqo.sharing import metrics
from liqo.sharing.capacity import NODE_FIELDS, POD_FIELDS, CapacityLedger, largest_slots
from liqo.sharing.policy import (
    Policy,
    budgetable_storage,
    compute_offer,
    next_refresh,
    offer_spec,
    select_policy,
    storage_left_out,
    tethered_policy,
)

STORAGE_NOT_OFFERED = "StorageNotOffered"
"""The Warning Event on a SharingPolicy one of whose classes cannot be offered (:func:`storage_left_out` says why)."""
CAPACITY_COALESCE_SECONDS = 1.0
CAPACITY = "capacity"
"""The one member of the followed capacity watches (there is one set, for every consumer)."""


def request_status(state: OfferState, message: str = "") -> dict[str, Any]:
    """A ResourceRequest ``status`` (pure)."""
    return {"offerState": state, "message": message}


OFFLOADED = "offloaded"
"""The ledger's source for the pods of the shared ShadowPod-made pods watch (the others' is the default)."""


class _Capacity(InformerGroup):
    """Every node and pod of the cluster, accounted in a ledger as their events arrive.

    The pods made for ShadowPods come from ``offloaded``, a shared watch run by someone else: the group's own
    pod watch leaves them out. The ledger starts with what ``offloaded`` holds; its later events are the
    controller's to pass on (:meth:`OfferController._offloaded_event`).
    """

    def __init__(self, client: KubeClient, *, offloaded: Informer) -> None:
        self.ledger = ledger = CapacityLedger()
        self.nodes = Informer(client=client, resource=NODES, projection=NODE_FIELDS)
        self.pods = Informer(client=client, resource=PODS, label_selector=f"!{names.SHADOW_POD}", projection=POD_FIELDS)
        self.nodes.add_handler(
            HandlerFuncs(add=ledger.set_node, update=lambda _old, new: ledger.set_node(new), delete=ledger.remove_node)
        )
        self.pods.add_handler(
            HandlerFuncs(add=ledger.set_pod, update=lambda _old, new: ledger.set_pod(new), delete=ledger.remove_pod)
        )
        for pod in offloaded.store.list():
            ledger.set_pod(pod, source=OFFLOADED)
        super().__init__([self.nodes, self.pods], name="capacity", depends=[offloaded])


class OfferController(Component):
    """Computes and refreshes the offer made to every consumer."""

    def __init__(
        self, *, client: KubeClient, informers: SharedInformers, local: ClusterIdentity, events: EventRecorder
    ) -> None:
        self._client = client
        self._local = local
        self._events = events
        self._reported: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.policies = informers.informer(SHARING_POLICIES)
        self.capacity: Following[str, KubeClient, _Capacity] = Following(
            make=lambda _member, client: self._watch_capacity(client),
            on_synced=lambda _member, _group: self._enqueue_consumers(),
        )
        self.requests.add_handler(
            HandlerFuncs(add=self._follow, update=lambda _old, _new: self._follow(None), delete=self._follow)
        )
        self.hosted = informers.informer(NAMESPACES, label_selector=names.REMOTE_CLUSTER_ID)
        # The same watch as the ShadowPod controller's (SharedInformers gives both the one informer).
        self.offloaded = informers.informer(PODS, label_selector=names.SHADOW_POD, projection=POD_FIELDS)
        self.offloaded.add_handler(
            HandlerFuncs(
                add=self._offloaded_event,
                update=lambda _old, new: self._offloaded_event(new),
                delete=lambda pod: self._offloaded_event(pod, gone=True),
            )
        )
        self.controller: Controller[str] = Controller(name="offers", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.offloaded, lambda _obj: self.consumers(), coalesce=CAPACITY_COALESCE_SECONDS)
        self.controller.watch(self.requests, self._consumer_of_request)
        self.controller.watch(self.offers, names.tenant_peer)
        self.controller.watch(self.hosted, names.labelled_peer)
        self.controller.watch(self.policies, lambda _obj: self.consumers())
        self.working_modes = informers.informer(WORKING_MODES)
        self.controller.watch(self.working_modes, lambda _obj: self.consumers())
        self.storage_classes = informers.informer(
            STORAGE_CLASSES, projection=keep("metadata.name", "volumeBindingMode")
        )
        self.controller.watch(self.storage_classes, lambda _obj: self.consumers())

    def _offloaded_event(self, pod: dict[str, Any], *, gone: bool = False) -> None:
        """Account a pod of the shared watch in the running ledger (none while no consumer asks)."""
        capacity = self.capacity.get(CAPACITY)
        if capacity is None:
            return
        if gone:
            capacity.ledger.remove_pod(pod, source=OFFLOADED)
        else:
            capacity.ledger.set_pod(pod, source=OFFLOADED)

    def _watch_capacity(self, client: KubeClient) -> _Capacity:
        capacity = _Capacity(client, offloaded=self.offloaded)
        for informer in (capacity.nodes, capacity.pods):
            # Every pod event moves capacity: a burst is coalesced into one recomputation per second, each
            # O(nodes) (the ledger is kept per event), and writes follow the refresh rule, not the events.
            self.controller.watch(informer, lambda _obj: self.consumers(), coalesce=CAPACITY_COALESCE_SECONDS)
        return capacity

    def _follow(self, _request: dict[str, Any] | None) -> None:
        """Watch nodes and pods while some consumer has a request here, and only then."""
        self.capacity.follow({CAPACITY: self._client} if self.consumers() else {})

    def _enqueue_consumers(self) -> None:
        for consumer in self.consumers():
            self.controller.queue.add(consumer)

    async def close(self) -> None:
        """Stop the node and pod watches."""
        await self.capacity.close()

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
        if tethered_to(self.working_modes.store.get(WORKING_MODE)) == consumer_id:
            policy = tethered_policy(policy)
        classes = {sc["metadata"]["name"]: sc for sc in self.storage_classes.store.list()}
        await self._report_left_out(policy, storage_left_out(policy, classes))
        policy = budgetable_storage(policy, classes)
        hosted = frozenset(
            ns["metadata"]["name"] for ns in self.hosted.store.list() if names.labelled_peer_id(ns) == consumer_id
        )
        capacity = self.capacity.get(CAPACITY)
        if capacity is None or not capacity.synced:
            return None  # queued again once the nodes and pods are listed
        free = capacity.ledger.free(exclude_namespaces=hosted)
        resources = compute_offer(free, policy)
        if resources is None:
            await self._set_request_status(
                request, request_status(OfferState.DENIED, "the provider's sharing policy denies this peer")
            )
            await self._withdraw(consumer_id, offer)
            return None
        await self._set_request_status(request, request_status(OfferState.CREATED))
        slots = largest_slots(capacity.ledger.rooms().values(), offer=resources)
        now = datetime.datetime.now(datetime.UTC)
        due = next_refresh(None if offer is None else offer.get("spec"), resources, policy, new_slots=slots, now=now)
        if due > now:
            return Result(requeue_after=max(1.0, (due - now).total_seconds()))
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
        # Looked at again as the refreshed offer comes back from the watch; this is in case it does not.
        return Result(requeue_after=max(1.0, policy.offer_ttl_seconds / 3))

    async def _report_left_out(self, policy: Policy, left_out: Mapping[str, str]) -> None:
        """A Warning Event on the SharingPolicy for each of its classes left out of offers, once per change.

        Offers are reconciled at every capacity change: the recorder would aggregate the repeats, but each is
        still a write.
        """
        found = self.policies.store.get(policy.name) if policy.name else None
        if found is None:
            return
        memo = (found["metadata"].get("resourceVersion", ""), tuple(sorted(left_out.items())))
        if self._reported.get(policy.name) == memo:
            return
        self._reported[policy.name] = memo
        for name, why in sorted(left_out.items()):
            message = f"storage class {name} is not offered: {why}"
            await self._events.record(found, type="Warning", reason=STORAGE_NOT_OFFERED, message=message)

    async def _set_request_status(self, request: dict[str, Any], status: dict[str, Any]) -> None:
        if (request.get("status") or {}) != status:
            meta = request["metadata"]
            await self._client.apply_status(
                RESOURCE_REQUESTS, name=meta["name"], namespace=meta["namespace"], status=status
            )

    async def _withdraw(self, consumer_id: str, offer: dict[str, Any] | None) -> None:
        if offer is not None:
            await self._client.delete(
                RESOURCE_OFFERS, self._local.cluster_id, namespace=names.tenant_namespace(consumer_id), missing_ok=True
            )
