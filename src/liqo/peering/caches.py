"""The caches the peering controllers share, and the lookups they all make over them."""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES
from liqo.kube.cache import SharedInformers
from liqo.kube.informer import Informer
from liqo.kube.resources import SECRETS

MANAGED = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"


class PeeringCaches:
    """ForeignClusters, liqo's Secrets, requests, offers, virtual nodes and network words, from shared informers."""

    def __init__(self, informers: SharedInformers) -> None:
        self.foreign_clusters = informers.informer(FOREIGN_CLUSTERS)
        self.secrets = informers.informer(SECRETS, label_selector=MANAGED)
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.networks = informers.informer(NETWORK_CONFIGS)

    def foreign_cluster(self, peer_id: str) -> dict[str, Any] | None:
        """The ForeignCluster of ``peer_id`` (found by ``spec.clusterID``, whatever its name)."""
        for fc in self.foreign_clusters.store.list():
            if fc["spec"].get("clusterID") == peer_id:
                return fc
        return None

    @staticmethod
    def in_tenant(informer: Informer, peer_id: str) -> list[dict[str, Any]]:
        """The objects of ``informer`` in ``peer_id``'s tenant namespace."""
        namespace = names.tenant_namespace(peer_id)
        return [obj for obj in informer.store.list() if obj["metadata"].get("namespace") == namespace]
