"""What the authentication endpoint knows of this cluster's consumers: caches of its own, in every replica.

Why caches: the endpoint answers anyone who reaches it. Looking up a consumer's ForeignCluster by cluster ID
with a list, or counting tenants with lists of RoleBindings and offers, made every request cost the API
server in proportion to the cluster — strangers' included, since any key signs its own request. Here they
are informers' caches: one list when the endpoint starts, a watch after, and a lookup is a dictionary read
(the ForeignClusters indexed by ``spec.clusterID``).

Why its own: every replica of the manager serves the endpoint, and the controllers' caches are the leader's
alone. Each cache keeps only what the endpoint reads (:mod:`liqo.kube.projection`).

A cache is a little behind the API server. What this replica writes for a consumer it enrols — the
ForeignCluster pinning its key, the RoleBinding that makes it a tenant — is awaited in the caches before the
consumer gets its answer (:meth:`AuthCaches.settled`), so the next request this replica serves (the
consumer's renewal, another's enrolment against the caps) is judged with it. The authoritative read is
provisioning's: it reads by name the consumer's ForeignCluster the cache names, and the one claimed on its
tenant namespace, before it makes or pins anything (:mod:`liqo.peering.records`).
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.discoverysources import admitting
from liqo.api.foreignclusters import ForeignClusters
from liqo.api.resources import DISCOVERY_SOURCES, RESOURCE_OFFERS
from liqo.kube.cache import Changes, SharedInformers
from liqo.kube.projection import keep
from liqo.kube.resources import ROLE_BINDINGS

SETTLE_TIMEOUT = 5.0
"""Seconds an enrolment's answer waits at most for the caches to show it (a watch delivers in milliseconds)."""


class AuthCaches:
    """ForeignClusters by cluster ID, tenants' RoleBindings, this cluster's offers, sources admitting consumers."""

    def __init__(self, informers: SharedInformers, *, local_id: str) -> None:
        self.local_id = local_id
        self._by_cluster_id = ForeignClusters.shared(
            informers,
            projection=keep("metadata", "spec.clusterID", "spec.keyFingerprint", "spec.incomingPeeringEnabled"),
        )
        self.foreign_clusters = self._by_cluster_id.informer
        # Named liqo-peer: a tenant's (and a twin's) binding only; the enrolment counts those in tenant namespaces.
        self.bindings = informers.informer(
            ROLE_BINDINGS, field_selector=f"metadata.name={names.PEER_BINDING}", projection=keep("metadata", "roleRef")
        )
        # Named after this cluster: its offers, one per consumer, in the consumers' tenant namespaces.
        self.offers = informers.informer(
            RESOURCE_OFFERS, field_selector=f"metadata.name={local_id}", projection=keep("metadata", "status.phase")
        )
        # The sources whose neighbours a provider's admin admits as consumers without a token (off by default).
        self.discovery_sources = informers.informer(
            DISCOVERY_SOURCES, projection=keep("metadata.name", "spec.admitConsumers")
        )
        self._changes = Changes(self.foreign_clusters, self.bindings)

    def admitting(self) -> frozenset[str]:
        """The DiscoverySources whose neighbours' records admit them without a token, as last seen."""
        return admitting(self.discovery_sources.store.list())

    def foreign_clusters_of(self, peer_id: str) -> list[dict[str, Any]]:
        """This cluster's ForeignClusters of ``peer_id`` as last seen, by name (one, unless the admin made two)."""
        return self._by_cluster_id.records_of(peer_id)

    def foreign_cluster(self, consumer_id: str) -> dict[str, Any] | None:
        """This cluster's ForeignCluster of ``consumer_id`` as last seen (the first by name, as provisioning's)."""
        return next(iter(self.foreign_clusters_of(consumer_id)), None)

    def foreign_cluster_named(self, name: str) -> dict[str, Any] | None:
        """ForeignCluster ``name`` as last seen, whoever's it is."""
        return self.foreign_clusters.store.get(name)

    def bindings_and_offers(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The tenants' RoleBindings and this cluster's offers, as last seen."""
        return self.bindings.store.list(), self.offers.store.list()

    def enrolled(self, consumer_id: str, *, key_fingerprint: str) -> bool:
        """Whether the caches show ``consumer_id`` enrolled: its key pinned by an enrolment, its tenant's RoleBinding.

        A pin discovery made is no enrolment's (:attr:`~liqo.api.provisioner.PeerRecord.announced`): the write
        that enrols on such a record also takes its source label away, and that is what is waited for.
        """
        fc = self.foreign_cluster(consumer_id)
        pinned = (
            fc is not None
            and (fc.get("spec") or {}).get("keyFingerprint") == key_fingerprint
            and names.DISCOVERED_BY not in (fc["metadata"].get("labels") or {})
        )
        return pinned and f"{names.tenant_namespace(consumer_id)}/{names.PEER_BINDING}" in self.bindings.store

    async def settled(self, consumer_id: str, *, key_fingerprint: str, timeout: float | None = None) -> bool:
        """Whether the caches show ``consumer_id`` enrolled within ``timeout`` seconds (:data:`SETTLE_TIMEOUT`)."""
        return await self._changes.until(
            lambda: self.enrolled(consumer_id, key_fingerprint=key_fingerprint),
            timeout=SETTLE_TIMEOUT if timeout is None else timeout,
        )
