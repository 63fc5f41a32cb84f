"""The provider side of a peering ending: release what a consumer had when it leaves, is refused, or never came.

Keyed by the consumer's cluster ID. The first time the consumer's ResourceRequest shows up in its tenant
namespace, the namespace is annotated; from then on the consumer is *engaged*. Its incoming side is
released — RBAC and NamespaceMap (the map's finalizer holds it until its twin namespaces are deleted), and
unless this cluster also consumes from that peer its tenant namespace (offers and replicas inside) and the
ForeignCluster this cluster made for it — when:

- an engaged consumer's request is gone: it unpeered (withdrawal). If this cluster still consumes from it,
  only the consumer's part goes and the namespace says the consumer *left*; once this cluster no longer
  consumes from it either (``outgoingPeeringEnabled: No`` with the record kept: ``liqoctl unpeer`` keeps it
  when it sees the peer's request, which may be the instant before the peer withdraws it), the rest goes too,
  at once, rather than waiting for a consumer that is not coming back;
- its ForeignCluster says ``incomingPeeringEnabled: No``: the admin revoked it. The ForeignCluster stays —
  it is the record that keeps the consumer refused, key pinned, until the admin allows it again;
- it never engaged: a tenant made for a handshake whose consumer never sent a request within
  :data:`ABANDONED_AFTER`. Without this, every token used would leave a tenant behind for good (and count
  against the cap on pending tenants, :mod:`liqo.peering.enrolment`).

When the record still carries our own side's finalizer (we consumed from that peer), only the record is
deleted: our outgoing teardown then withdraws our request from the peer and deletes the tenant namespace
itself, in that order, since our identity on the peer lives in that namespace until the peer has seen us go.

The decision is a pure function of the cached objects and the time (:func:`verdict`), so a restart in
between changes nothing.
"""

from __future__ import annotations

import datetime
import enum
import logging
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ForeignClusters, peer_key
from liqo.api.peerings import wants_outgoing
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_MAPS, NETWORK_CONFIGS, RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.finalizers import has_finalizer
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, ROLE_BINDINGS, terminating
from liqo.kube.timefmt import parse_time

log = logging.getLogger(__name__)

REQUESTED = "liqo.io/incoming-requested"
"""On a tenant namespace: :data:`ENGAGED` once the consumer's request showed up, :data:`LEFT` once it went while
this cluster still consumed from that peer."""
ENGAGED = "true"
LEFT = "left"
ABANDONED_AFTER = datetime.timedelta(minutes=10)
"""A consumer sends its request seconds after its handshake; one that has not after this never will."""


class Verdict(enum.Enum):
    """What to do about one consumer's incoming side."""

    NOTHING = "nothing"
    MARK_ENGAGED = "mark"
    RELEASE = "release"
    RELEASE_REFUSED = "release-refused"
    RELEASE_RECORD = "release-record"
    """Delete our record only: our own side's teardown (its finalizer holds the record) deletes the tenant
    namespace itself once the peer has seen our request withdrawn; our identity on the peer is in there until
    then, and deleting the namespace first would take it away before the peer knew we had left."""
    WAIT = "wait"
    """Not engaged yet: look again when it would count as abandoned."""


def refused(foreign_cluster: Obj | None) -> bool:
    """Whether the admin refuses this peer as a consumer (revoked, or incoming peering disabled)."""
    return bool(foreign_cluster and (foreign_cluster.get("spec") or {}).get("incomingPeeringEnabled") == "No")


def verdict(
    *,
    tenant: Obj | None,
    request: Obj | None,
    foreign_cluster: Obj | None,
    now: datetime.datetime,
    abandoned_after: datetime.timedelta = ABANDONED_AFTER,
) -> Verdict:
    """What to do about a consumer's incoming side, from what the caches hold (pure)."""
    if tenant is None or terminating(tenant):
        return Verdict.NOTHING
    mark = (tenant["metadata"].get("annotations") or {}).get(REQUESTED)
    engaged = mark == ENGAGED
    if refused(foreign_cluster):
        # With a peering of ours the other way, the namespace is ours too: release only the consumer's part.
        has_incoming = engaged or request is not None or not wants_outgoing(foreign_cluster)
        return Verdict.RELEASE_REFUSED if has_incoming else Verdict.NOTHING
    if request is not None:
        return Verdict.NOTHING if engaged else Verdict.MARK_ENGAGED
    if engaged:
        return _released(foreign_cluster)
    if wants_outgoing(foreign_cluster):
        return Verdict.NOTHING  # our own peering's namespace: the consumer side owns it
    if mark == LEFT:
        return _released(foreign_cluster)  # the consumer left while we consumed from it; now nothing keeps it
    created = tenant["metadata"].get("creationTimestamp")
    if created and now - parse_time(created) >= abandoned_after:
        return _released(foreign_cluster)
    return Verdict.WAIT


def _released(foreign_cluster: Obj | None) -> Verdict:
    """A release; of the record alone while our own side's teardown is still to run (its finalizer; pure).

    While we consume from the peer the release is of the consumer's part only (:meth:`IncomingPeering._release`).
    """
    ours = foreign_cluster is not None and has_finalizer(foreign_cluster, finalizer=names.FINALIZER)
    if foreign_cluster is None or not ours or wants_outgoing(foreign_cluster):
        return Verdict.RELEASE
    return Verdict.NOTHING if terminating(foreign_cluster) else Verdict.RELEASE_RECORD


class IncomingPeering(Component):
    """Notices a consumer's request; releases everything of a consumer that left, is refused, or never came."""

    def __init__(
        self, *, client: KubeClient, informers: SharedInformers, abandoned_after: datetime.timedelta = ABANDONED_AFTER
    ) -> None:
        self._client = client
        self._abandoned_after = abandoned_after
        self.namespaces = informers.informer(NAMESPACES, label_selector=f"{names.TENANT}=true")
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.foreign_clusters = self._by_cluster_id.informer
        self.controller: Controller[str] = Controller(name="incoming-peering", reconcile=self.reconcile)
        self.controller.watch(self.namespaces, names.labelled_peer)
        self.controller.watch(self.requests, lambda rr: [rr["metadata"]["name"]])
        self.controller.watch(self.foreign_clusters, peer_key)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def _foreign_cluster(self, peer_id: str) -> Obj | None:
        return self._by_cluster_id.record_of(peer_id)

    async def reconcile(self, peer_id: str) -> Result | None:
        """Mark a seen request, or release a consumer that left, is refused or never came."""
        namespace = names.tenant_namespace(peer_id)
        tenant = self.namespaces.store.get(namespace)
        fc = self._foreign_cluster(peer_id)
        now = datetime.datetime.now(datetime.UTC)
        decision = verdict(
            tenant=tenant,
            request=self.requests.store.get(f"{namespace}/{peer_id}"),
            foreign_cluster=fc,
            now=now,
            abandoned_after=self._abandoned_after,
        )
        if decision is Verdict.MARK_ENGAGED:
            await self._client.patch(NAMESPACES, namespace, {"metadata": {"annotations": {REQUESTED: ENGAGED}}})
        elif decision is Verdict.RELEASE_RECORD and fc is not None:
            log.info("consumer %s left: deleting our record of it, whose teardown releases the tenant", peer_id)
            await self._client.delete(
                FOREIGN_CLUSTERS, fc["metadata"]["name"], uid=fc["metadata"].get("uid"), missing_ok=True
            )
        elif decision in (Verdict.RELEASE, Verdict.RELEASE_REFUSED):
            await self._release(peer_id, fc, keep_record=decision is Verdict.RELEASE_REFUSED)
        elif decision is Verdict.WAIT and tenant is not None:
            created = parse_time(tenant["metadata"]["creationTimestamp"])
            return Result(requeue_after=max(1.0, (created + self._abandoned_after - now).total_seconds()))
        return None

    async def _release(self, peer_id: str, fc: Obj | None, *, keep_record: bool) -> None:
        namespace = names.tenant_namespace(peer_id)
        why = "is refused" if keep_record else "left (or never sent a request)"
        log.info("consumer %s %s: releasing its tenant namespace %s", peer_id, why, namespace)
        if wants_outgoing(fc):
            # The namespace stays (for our own peering with them); what the consumer had in it goes. Its
            # NamespaceMap's finalizer holds it until the twin namespaces are deleted.
            for resource, name in (
                (NAMESPACE_MAPS, peer_id),
                (ROLE_BINDINGS, names.PEER_BINDING),
                (RESOURCE_REQUESTS, peer_id),
                (NETWORK_CONFIGS, peer_id),  # its network word (ours goes with our gateway: liqo.network)
            ):
                await self._client.delete(resource, name, namespace=namespace, missing_ok=True)
            # Left, not forgotten: once we stop consuming from it too, the tenant goes at once (verdict).
            await self._client.patch(NAMESPACES, namespace, {"metadata": {"annotations": {REQUESTED: LEFT}}})
            return
        if fc is not None and not keep_record:
            await self._client.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"], missing_ok=True)
        await self._client.delete(NAMESPACES, namespace, missing_ok=True)
