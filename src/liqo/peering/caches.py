"""The caches the peering controllers share, and the lookups they all make over them.

Peering's Secrets are watched by name (the identity, the provider's token) and always read at their one
place, the peer's tenant namespace: peers write Secrets of any name and labels in their twins here, and
the reflected copies of their own Secrets carry liqo's labels, so a label says nothing about who wrote a
Secret (:mod:`liqo.api.peers`). Watching by name also keeps those copies, and their data, out of this cache.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ForeignClusters
from liqo.api.resources import DISCOVERY_SOURCES, NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES
from liqo.kube.cache import SharedInformers
from liqo.kube.informer import Informer
from liqo.kube.resources import SECRETS

MANAGED = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"


class PeeringCaches:
    """ForeignClusters, liqo's Secrets, requests, offers, virtual nodes, network words and discovery sources, shared."""

    def __init__(self, informers: SharedInformers) -> None:
        self.by_cluster_id = ForeignClusters.shared(informers)
        self.foreign_clusters = self.by_cluster_id.informer
        self.identities = _peering_secrets(informers, names.IDENTITY_SECRET)
        self.peer_tokens = _peering_secrets(informers, names.PEER_TOKEN_SECRET)
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.networks = informers.informer(NETWORK_CONFIGS)
        self.discovery_sources = informers.informer(DISCOVERY_SOURCES)

    @property
    def secrets(self) -> tuple[Informer, Informer]:
        """The informers of peering's Secrets."""
        return self.identities, self.peer_tokens

    def identity(self, peer_id: str) -> dict[str, Any] | None:
        """The identity this cluster holds on provider ``peer_id``."""
        return self.identities.store.get(f"{names.tenant_namespace(peer_id)}/{names.IDENTITY_SECRET}")

    def peer_token(self, peer_id: str) -> dict[str, Any] | None:
        """The token provider ``peer_id`` gave us (``liqoctl peer`` wrote it)."""
        return self.peer_tokens.store.get(f"{names.tenant_namespace(peer_id)}/{names.PEER_TOKEN_SECRET}")

    def foreign_cluster(self, peer_id: str) -> dict[str, Any] | None:
        """The ForeignCluster of ``peer_id`` (found by ``spec.clusterID``, whatever its name)."""
        return self.by_cluster_id.record_of(peer_id)

    @staticmethod
    def in_tenant(informer: Informer, peer_id: str) -> list[dict[str, Any]]:
        """The objects of ``informer`` in ``peer_id``'s tenant namespace."""
        namespace = names.tenant_namespace(peer_id)
        return [obj for obj in informer.store.list() if obj["metadata"].get("namespace") == namespace]


def _peering_secrets(informers: SharedInformers, name: str) -> Informer:
    return informers.informer(SECRETS, label_selector=MANAGED, field_selector=f"metadata.name={name}")
