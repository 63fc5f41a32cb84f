"""The consumer's side of negotiation: decide on each offer, and turn an accepted one into a VirtualNode.

Keyed by the provider's cluster ID. The decision (:func:`liqo.sharing.acceptance.decide`) follows the
ForeignCluster's ``offerPolicy``; it is written to the offer's status, which the replicator carries back to
the provider. In ``Manual`` mode a human's verdict in that status is kept. An accepted offer becomes (and
its refreshes update) a VirtualNode, which the virtual kubelet turns into a Node. The offer's largest slots
go along unchanged: the virtual kubelet refuses pods none of them holds. An offer without them (a provider
that does not publish slots) gives a VirtualNode without them, which the virtual kubelet reads as "not
known" rather than as "nothing fits".
"""

from __future__ import annotations

import datetime
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ForeignClusters, peer_key
from liqo.api.offers import OfferPhase
from liqo.api.resources import RESOURCE_OFFERS, VIRTUAL_NODES
from liqo.api.storage import LABEL_PREFIX, storage_labels
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.errors import ConflictError
from liqo.kube.metrics import CacheGauge
from liqo.kube.resources import object_key, terminating
from liqo.sharing import metrics
from liqo.sharing.acceptance import decide


def virtual_node(offer: dict[str, Any], *, provider_id: str, foreign_cluster: str) -> dict[str, Any]:
    """The VirtualNode standing for an accepted offer (pure).

    Named after our ForeignCluster for the provider (:func:`liqo.api.names.virtual_node_name`), never after
    the name the provider gives itself in its offer: two providers may both say ``milan`` (or ``Milan``).
    Each StorageClass offered labels the node ``storage.liqo.io/<class>: "true"``, for pods to select and for
    the virtual kubelet to pick the class of a claim from; only the offer's storage list says so, never a label
    the provider puts in its offer.
    """
    spec = offer.get("spec") or {}
    provider_name = spec.get("providerClusterName") or provider_id
    slots = {"largestSlots": spec["largestSlots"]} if "largestSlots" in spec else {}
    return {
        "apiVersion": VIRTUAL_NODES.api_version,
        "kind": VIRTUAL_NODES.kind,
        "metadata": {
            "name": names.virtual_node_name(foreign_cluster),
            "namespace": names.tenant_namespace(provider_id),
            "labels": names.peer_labels(provider_id) | {names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE},
        },
        "spec": {
            "clusterID": provider_id,
            "clusterName": provider_name,
            "resources": spec.get("resources") or {},
            **slots,
            "labels": {k: v for k, v in (spec.get("labels") or {}).items() if not k.startswith(LABEL_PREFIX)}
            | storage_labels(spec.get("storage"))
            | {names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE, names.REMOTE_CLUSTER_ID: provider_id},
            "offer": offer["metadata"]["name"],
            "kubeconfigSecretRef": {"name": names.IDENTITY_SECRET},
        },
    }


class OfferAcceptance(Component):
    """Decides on offers and keeps one VirtualNode per accepted offer."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers) -> None:
        self._client = client
        self.offers = informers.informer(RESOURCE_OFFERS, label_selector=f"{names.REPLICATED}=true")
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.foreign_clusters = self._by_cluster_id.informer
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.controller: Controller[str] = Controller(name="offer-acceptance", reconcile=self.reconcile)
        self.controller.watch(self.offers, lambda ro: [ro["metadata"]["name"]])
        self.controller.watch(self.foreign_clusters, peer_key)
        self.controller.watch(self.virtual_nodes, lambda vn: [vn["spec"]["clusterID"]])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """What each provider offers this cluster, and what this cluster accepted (its VirtualNode)."""
        offers, virtual_nodes = self.offers.store, self.virtual_nodes.store
        return [
            CacheGauge(
                "liqo_consumer_offered_resources",
                "What a provider's ResourceOffer to this cluster holds (cpu in cores, memory in bytes, pods).",
                ("provider", "resource"),
                lambda: metrics.offers_received(offers.list()),
            ),
            CacheGauge(
                "liqo_consumer_accepted_resources",
                "What this cluster accepted of a provider's offer: its VirtualNode's resources.",
                ("provider", "resource"),
                lambda: metrics.virtual_node_resources(virtual_nodes.list()),
            ),
        ]

    async def reconcile(self, provider_id: str) -> None:
        """Decide on ``provider_id``'s offer and converge its VirtualNode."""
        namespace = names.tenant_namespace(provider_id)
        offer = self.offers.store.get(f"{namespace}/{provider_id}")
        fc = self._by_cluster_id.record_of(provider_id)
        wanted = fc is not None and fc["spec"].get("outgoingPeeringEnabled") == "Yes" and not terminating(fc)
        if offer is None or not wanted:
            await self._delete_virtual_nodes(namespace, keep=None)
            return
        assert fc is not None
        policy = fc["spec"].get("offerPolicy") or {}
        status = offer.get("status") or {}
        accepted = status.get("phase") == OfferPhase.ACCEPTED
        phase, reason = decide(offer["spec"], policy, now=None if accepted else datetime.datetime.now(datetime.UTC))
        if policy.get("mode") == "Manual" and status.get("phase") in (OfferPhase.ACCEPTED, OfferPhase.REFUSED):
            phase, reason = status["phase"], status.get("reason", "decided by hand")
        desired_node = (
            virtual_node(offer, provider_id=provider_id, foreign_cluster=fc["metadata"]["name"])
            if phase == OfferPhase.ACCEPTED
            else None
        )
        desired_status = {"phase": phase, "reason": reason} | (
            {"virtualNode": desired_node["metadata"]["name"]} if desired_node else {}
        )
        if status != desired_status:
            # Conditional on the version decided from: a human's verdict written since must not be undone.
            # On a conflict the newer version's watch event brings this key back, decided afresh.
            try:
                await self._client.apply_status(
                    RESOURCE_OFFERS,
                    name=provider_id,
                    namespace=namespace,
                    status=desired_status,
                    resource_version=offer["metadata"].get("resourceVersion"),
                )
            except ConflictError:
                return
        if desired_node is None:
            await self._delete_virtual_nodes(namespace, keep=None)
            return
        current = self.virtual_nodes.store.get(object_key(desired_node))
        if current is None or current.get("spec") != desired_node["spec"]:
            await self._client.apply(VIRTUAL_NODES, desired_node)
        await self._delete_virtual_nodes(namespace, keep=desired_node["metadata"]["name"])

    async def _delete_virtual_nodes(self, namespace: str, *, keep: str | None) -> None:
        for node in self.virtual_nodes.store.list():
            meta = node["metadata"]
            if meta.get("namespace") == namespace and meta["name"] != keep:
                await self._client.delete(VIRTUAL_NODES, meta["name"], namespace=namespace, missing_ok=True)
