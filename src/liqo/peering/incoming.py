"""The provider side of a peering ending: when a consumer withdraws its request, release what it had.

Keyed by the consumer's cluster ID. The first time the consumer's ResourceRequest shows up in its tenant
namespace, the namespace is annotated; when the request is gone while the annotation is there, the
consumer has unpeered: its RBAC and NamespaceMap go (the map's finalizer holds it until its twin
namespaces are deleted), and so do its tenant namespace (offers, replicas inside) and
ForeignCluster — unless this cluster also consumes from that peer, which keeps both. The annotation makes
the decision level-triggered: a restart in between changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_MAPS, RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import NAMESPACES, ROLE_BINDINGS, ROLES
from liqo.peering.outgoing import wants_outgoing

log = logging.getLogger(__name__)

REQUESTED = "liqo.io/incoming-requested"
PEER_ROLE = "liqo-peer"


class IncomingPeering:
    """Notices a consumer's request and releases everything of that consumer when it is withdrawn."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers) -> None:
        self._client = client
        self.namespaces = informers.informer(NAMESPACES, label_selector=f"{names.TENANT}=true")
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.foreign_clusters = informers.informer(FOREIGN_CLUSTERS)
        self.controller: Controller[str] = Controller(name="incoming-peering", reconcile=self.reconcile)
        self.controller.watch(self.namespaces, _peer_label)
        self.controller.watch(self.requests, lambda rr: [rr["metadata"]["name"]])

    async def reconcile(self, peer_id: str) -> None:
        """Mark a seen request, or release a withdrawn one."""
        namespace = names.tenant_namespace(peer_id)
        tenant = self.namespaces.store.get(namespace)
        if tenant is None or tenant["metadata"].get("deletionTimestamp"):
            return
        requested = REQUESTED in (tenant["metadata"].get("annotations") or {})
        if self.requests.store.get(f"{namespace}/{peer_id}") is not None:
            if not requested:
                await self._client.patch(NAMESPACES, namespace, {"metadata": {"annotations": {REQUESTED: "true"}}})
            return
        if requested:
            await self._release(peer_id)

    async def _release(self, peer_id: str) -> None:
        namespace = names.tenant_namespace(peer_id)
        log.info("peer %s withdrew its request: releasing its tenant namespace %s", peer_id, namespace)
        fc = next((f for f in self.foreign_clusters.store.list() if f["spec"].get("clusterID") == peer_id), None)
        if wants_outgoing(fc):
            # The namespace stays (for our own peering with them); what the consumer had in it goes. Its
            # NamespaceMap's finalizer holds it until the twin namespaces are deleted.
            for resource, name in ((NAMESPACE_MAPS, peer_id), (ROLE_BINDINGS, PEER_ROLE), (ROLES, PEER_ROLE)):
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(resource, name, namespace=namespace)
            await self._client.patch(NAMESPACES, namespace, {"metadata": {"annotations": {REQUESTED: None}}})
            return
        if fc is not None:
            with contextlib.suppress(NotFoundError):
                await self._client.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])
        with contextlib.suppress(NotFoundError):
            await self._client.delete(NAMESPACES, namespace)


def _peer_label(obj: dict[str, Any]) -> list[str]:
    peer = (obj["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID)
    return [peer] if peer else []
