"""ForeignCluster status: one writer that summarises every other controller's work as conditions.

Several controllers act on a peering (handshake, replication, offers, virtual nodes); if each wrote its own
condition, server-side apply under one field manager would have them erase each other's. Instead this
controller reads the caches and the in-memory observations and derives the whole status with a pure
function (:func:`peer_status`), applied to the ``status`` subresource. It also probes the provider's API
server through the identity, at most every few seconds, since no object records that.

``NetworkStatus`` says how pods of the two clusters reach each other. With the network fabric on both
sides (a gateway per peer, :mod:`liqo.network`; both NetworkConfigs here), it is our gateway's connection
check, as written in the status of our
NetworkConfig for the peer: ``Established`` while probes through the tunnel are answered (with the latency
and where we see the peer's pods), ``Pending`` while connecting, ``Error`` when they are lost. Without it
(either install without the fabric), it says whether addresses can pass as they are, from this cluster's
network and the one the peer told at its latest handshake (``spec.network``): both ways, since a Service of
either may be reflected to the other (:func:`liqo.api.networks.conflict`); an overlap is an ``Error`` —
addresses would silently mean a pod of the reader's own — and its first sighting a Warning Event; an
unknown network is ``Pending``, never a guess.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any

from liqo.api import names
from liqo.api.discoverysources import heard_by, heard_ids, said_of
from liqo.api.foreignclusters import ConditionStatus as Status
from liqo.api.foreignclusters import ConditionType, Reason, cluster_id, peer_key
from liqo.api.networkconfigs import ConnectionState
from liqo.api.networks import UNKNOWN_HINT, ClusterNetwork, InvalidNetwork, conflict, recorded_network
from liqo.api.offers import OfferPhase, OfferState
from liqo.api.peerings import wants_outgoing
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_REQUESTS
from liqo.api.workingmodes import TETHERED
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, KubeError
from liqo.kube.metrics import CacheGauge
from liqo.kube.resources import terminating
from liqo.kube.timefmt import format_micro_time, format_time
from liqo.peering import metrics
from liqo.peering.consumerside import ConsumerLoop, ConsumerSide
from liqo.peering.identities import expires_at
from liqo.peering.observations import Observation

PROBE_INTERVAL = 10.0


@dataclass(frozen=True)
class PeerState:
    """What the caches and observations say about one peer (the input of :func:`peer_status`)."""

    foreign_cluster: dict[str, Any]
    local_id: str
    local_name: str
    local_network: ClusterNetwork
    identity: dict[str, Any] | None
    our_request: dict[str, Any] | None
    their_offer: dict[str, Any] | None
    virtual_nodes: list[dict[str, Any]]
    their_request: dict[str, Any] | None
    our_offer: dict[str, Any] | None
    authentication: Observation | None
    api_server: Observation | None
    api_server_url: str | None
    network_config: dict[str, Any] | None = None
    """Our NetworkConfig for the peer (the fabric's word and its gateway's verdict); None without a fabric."""
    peer_network_config: dict[str, Any] | None = None
    """The peer's NetworkConfig; None while it runs no fabric (then no gateway connects either side)."""
    heard_by: list[dict[str, str]] = field(default_factory=list)
    """The discovery sources hearing the peer now (:func:`liqo.api.discoverysources.heard_by`)."""


def _condition(kind: ConditionType, status: Status, reason: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _phase(obj: dict[str, Any] | None, field: str) -> str | None:
    return ((obj or {}).get("status") or {}).get(field)


def peer_status(state: PeerState, *, now: datetime.datetime) -> dict[str, Any]:
    """The ForeignCluster ``status`` for ``state`` (pure); transition times carry over when unchanged."""
    peer_id = cluster_id(state.foreign_cluster)
    outgoing = wants_outgoing(state.foreign_cluster)
    conditions = [
        _authentication(state, outgoing=outgoing),
        _outgoing(state, outgoing=outgoing),
        _incoming(state),
        _api_server(state, outgoing=outgoing),
        _network(state),
    ]
    previous = {c["type"]: c for c in (state.foreign_cluster.get("status") or {}).get("conditions") or []}
    stamp = format_time(now)
    for condition in conditions:
        before = previous.get(condition["type"])
        same = before is not None and before.get("status") == condition["status"]
        condition["lastTransitionTime"] = before.get("lastTransitionTime", stamp) if same and before else stamp
    status: dict[str, Any] = {
        "conditions": conditions,
        "tenantNamespace": {"local": names.tenant_namespace(peer_id)},
    }
    if state.heard_by:
        status["discovery"] = state.heard_by
    if ((state.their_offer or {}).get("spec") or {}).get(TETHERED) is True:
        status["tethered"] = True
    if outgoing:
        status["tenantNamespace"]["remote"] = names.tenant_namespace(state.local_id)
        if state.api_server_url:
            status["apiServerURL"] = state.api_server_url
        expiry = expires_at(state.identity)
        if expiry:
            status["identity"] = {"expiresAt": expiry}
    return status


AUTHENTICATION_SEVERITY: dict[str, Status] = {
    Reason.MISSING_CREDENTIALS: Status.PENDING,
    Reason.PROVIDER_BUSY: Status.PENDING,
    Reason.REFUSED: Status.DENIED,
}
"""A failed handshake's reason → AuthenticationStatus, any other an Error. Missing credentials are usually
about to arrive (the token follows the ForeignCluster), a busy provider answers in seconds (an unpeer still
releasing); a refusal is the provider's answer, which stays until someone acts."""


def _authentication(state: PeerState, *, outgoing: bool) -> dict[str, str]:
    kind = ConditionType.AUTHENTICATION
    if outgoing:
        if state.authentication is not None and not state.authentication.ok:
            severity = AUTHENTICATION_SEVERITY.get(state.authentication.reason, Status.ERROR)
            condition = _condition(kind, severity, state.authentication.reason, state.authentication.message)
            if state.authentication.at is not None:
                # When the handshake was tried: tells `liqoctl peer` a verdict on its request from an older one.
                # To the microsecond: a refusal and the request after it often fall in the same second.
                condition["lastProbeTime"] = format_micro_time(state.authentication.at)
            return condition
        if state.identity is not None:
            return _condition(
                kind, Status.ESTABLISHED, Reason.IDENTITY_VALID, f"identity valid until {expires_at(state.identity)}"
            )
        return _condition(kind, Status.PENDING, Reason.AUTHENTICATING)
    if state.their_request is not None:
        return _condition(
            kind, Status.ESTABLISHED, Reason.PEER_AUTHENTICATED, "the peer holds an identity on this cluster"
        )
    return _condition(kind, Status.NONE, Reason.NOT_PEERED)


def _outgoing(state: PeerState, *, outgoing: bool) -> dict[str, str]:
    kind = ConditionType.OUTGOING
    if not outgoing:
        return _condition(kind, Status.NONE, Reason.DISABLED)
    if state.virtual_nodes:
        return _condition(
            kind,
            Status.ESTABLISHED,
            Reason.OFFER_ACCEPTED,
            f"virtual node {state.virtual_nodes[0]['metadata']['name']}",
        )
    phase = _phase(state.their_offer, "phase")
    if phase in (OfferPhase.REFUSED, OfferPhase.MANUAL_ACTION_REQUIRED):
        reason = ((state.their_offer or {}).get("status") or {}).get("reason", "")
        return _condition(kind, Status.DENIED if phase == OfferPhase.REFUSED else Status.PENDING, phase, reason)
    if _phase(state.our_request, "offerState") == OfferState.DENIED:
        return _condition(
            kind, Status.DENIED, Reason.REQUEST_DENIED, (state.our_request or {}).get("status", {}).get("message", "")
        )
    if state.their_offer is not None:
        return _condition(kind, Status.PENDING, Reason.OFFER_RECEIVED)
    return _condition(kind, Status.PENDING, Reason.WAITING_FOR_OFFER if state.identity else Reason.WAITING_FOR_IDENTITY)


def _incoming(state: PeerState) -> dict[str, str]:
    kind = ConditionType.INCOMING
    if state.their_request is None:
        return _condition(kind, Status.NONE, Reason.NO_REQUEST)
    if _phase(state.their_request, "offerState") == OfferState.DENIED:
        message = (state.their_request.get("status") or {}).get("message", "")
        return _condition(kind, Status.DENIED, Reason.POLICY_DENIED, message)
    if _phase(state.our_offer, "phase") == OfferPhase.ACCEPTED:
        return _condition(kind, Status.ESTABLISHED, Reason.OFFER_ACCEPTED)
    return _condition(kind, Status.PENDING, Reason.OFFER_PENDING if state.our_offer else Reason.COMPUTING_OFFER)


TUNNEL_STATUS = {
    ConnectionState.CONNECTED: Status.ESTABLISHED,
    ConnectionState.CONNECTING: Status.PENDING,
    ConnectionState.ERROR: Status.ERROR,
}
"""A gateway's connection state → the NetworkStatus condition's status."""


def _tunnel(config: dict[str, Any]) -> dict[str, str]:
    """NetworkStatus from our gateway's connection check."""
    spec, connection = config.get("spec") or {}, (config.get("status") or {}).get("connection") or {}
    state = connection.get("state")
    if state not in TUNNEL_STATUS:
        return _condition(
            ConditionType.NETWORK, Status.PENDING, Reason.GATEWAY_STARTING, "the gateway has not reported yet"
        )
    message = connection.get("message", "")
    if state == ConnectionState.CONNECTED:
        message = (
            f"{message}; round trip {connection.get('latency', '?')}; its pods are at {spec.get('remappedPodCIDR')}"
        )
    return _condition(ConditionType.NETWORK, TUNNEL_STATUS[state], connection.get("reason") or state, message)


def _network(state: PeerState) -> dict[str, str]:
    """How addresses pass between the peer and us: the tunnel's state, else unchanged, not at all, or unknown."""
    if state.network_config is not None and state.peer_network_config is not None:
        return _tunnel(state.network_config)
    peer_name = state.foreign_cluster["metadata"]["name"]
    try:
        peer = recorded_network(state.foreign_cluster)
    except InvalidNetwork as exc:
        message = f"{exc}: the next handshake records it again"
        return _condition(ConditionType.NETWORK, Status.PENDING, Reason.NETWORK_UNKNOWN, message)
    if peer is None:
        message = f"the network of {peer_name} is not known yet: {UNKNOWN_HINT}"
        return _condition(ConditionType.NETWORK, Status.PENDING, Reason.NETWORK_UNKNOWN, message)
    ours = state.local_network
    theirs_here = conflict(owner=peer, reader=ours, owner_name=peer_name)
    ours_there = conflict(owner=ours, reader=peer, owner_name=state.local_name, reader_name=peer_name)
    overlaps = [reason for reason in (theirs_here, ours_there) if reason]
    if overlaps:
        return _condition(ConditionType.NETWORK, Status.ERROR, Reason.CIDR_OVERLAP, "; ".join(overlaps))
    return _condition(
        ConditionType.NETWORK,
        Status.ESTABLISHED,
        Reason.DIRECT_ROUTING,
        f"pod CIDRs do not overlap: addresses pass unchanged ({peer_name}: {peer}; ours: {ours})",
    )


def overlap_first_seen(before: dict[str, Any] | None, after: dict[str, Any]) -> str | None:
    """The message of a CIDR overlap ``after`` reports and ``before`` (the status it replaces) did not (pure).

    What a Warning Event is recorded for: once per overlap, not once per reconcile, and not again after a
    restart (the previous status is the ForeignCluster's).
    """

    def overlap(status: dict[str, Any] | None) -> str | None:
        for condition in (status or {}).get("conditions") or []:
            if condition.get("type") == ConditionType.NETWORK and condition.get("reason") == Reason.CIDR_OVERLAP:
                return str(condition.get("message", ""))
        return None

    now = overlap(after)
    return now if now is not None and now != overlap(before) else None


def _api_server(state: PeerState, *, outgoing: bool) -> dict[str, str]:
    kind = ConditionType.API_SERVER
    if not outgoing or state.identity is None:
        return _condition(kind, Status.NONE, Reason.NO_IDENTITY)
    if state.api_server is None:
        return _condition(kind, Status.PENDING, Reason.NOT_PROBED_YET)
    if state.api_server.ok:
        return _condition(kind, Status.ESTABLISHED, state.api_server.reason)
    return _condition(kind, Status.ERROR, state.api_server.reason, state.api_server.message)


def hearing_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a source's table changed in what records' status says of it (not at every announcement)."""
    return said_of(old) != said_of(new)


class ForeignClusterStatus(ConsumerLoop):
    """Writes every ForeignCluster's status from the caches."""

    def __init__(self, side: ConsumerSide) -> None:
        super().__init__(side)
        self._probed: dict[str, float] = {}
        self.controller: Controller[str] = Controller(name="foreigncluster-status", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.foreign_clusters, peer_key)
        for informer in (*self.caches.secrets, self.requests, self.offers, self.virtual_nodes, self.networks):
            self.controller.watch(informer, names.tenant_peer)
        self.controller.watch(self.caches.discovery_sources, self._heard_in, changed=hearing_changed)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """Peers per condition and status, and every peer's name."""
        foreign_clusters = self.caches.foreign_clusters.store
        return [
            CacheGauge(
                "liqo_peers",
                "ForeignClusters whose condition of this type has this status.",
                ("condition", "status"),
                lambda: metrics.peers_by_condition(foreign_clusters.list()),
            ),
            CacheGauge(
                "liqo_peer_info",
                "1 per peer: its cluster ID (the peer, consumer and provider labels) and its ForeignCluster's name.",
                ("peer", "name"),
                lambda: metrics.peer_info(foreign_clusters.list()),
            ),
        ]

    def _heard_in(self, source: dict[str, Any]) -> set[str]:
        """The peers whose ``status.discovery`` ``source`` may change: those it lists, those said to be in it."""
        name = source["metadata"]["name"]
        said = {
            peer
            for fc in self.foreign_clusters.store.list()
            for peer in peer_key(fc)
            if any(entry.get("source") == name for entry in (fc.get("status") or {}).get("discovery") or ())
        }
        return heard_ids(source) | said

    async def reconcile(self, peer_id: str) -> Result | None:
        """Recompute and apply the status of ``peer_id``'s ForeignCluster."""
        fc = self.caches.foreign_cluster(peer_id)
        if fc is None or terminating(fc):
            return None
        outgoing = wants_outgoing(fc)
        if outgoing:
            await self._probe(peer_id)
        now = datetime.datetime.now(datetime.UTC)
        namespace = names.tenant_namespace(peer_id)
        state = PeerState(
            foreign_cluster=fc,
            local_id=self._local.cluster_id,
            local_name=self._local.cluster_name,
            local_network=self._network,
            identity=self.caches.identity(peer_id),
            our_request=self.requests.store.get(f"{namespace}/{self._local.cluster_id}"),
            their_offer=self.offers.store.get(f"{namespace}/{peer_id}"),
            virtual_nodes=self.caches.in_tenant(self.virtual_nodes, peer_id),
            their_request=self.requests.store.get(f"{namespace}/{peer_id}"),
            our_offer=self.offers.store.get(f"{namespace}/{self._local.cluster_id}"),
            authentication=self._observations.authentication.get(peer_id),
            api_server=self._observations.api_server.get(peer_id),
            api_server_url=peer.server if (peer := self._peers.get(peer_id)) else None,
            network_config=self.networks.store.get(f"{namespace}/{self._local.cluster_id}"),
            peer_network_config=self.networks.store.get(f"{namespace}/{peer_id}"),
            heard_by=heard_by(self.caches.discovery_sources.store.list(), peer_id, now=now),
        )
        status = peer_status(state, now=now)
        if status != fc.get("status"):
            await self._client.apply_status(FOREIGN_CLUSTERS, name=fc["metadata"]["name"], status=status)
            overlap = overlap_first_seen(fc.get("status"), status)
            if overlap is not None:
                await self._events.record(fc, type="Warning", reason=Reason.CIDR_OVERLAP, message=overlap)
        return Result(requeue_after=PROBE_INTERVAL) if outgoing else None

    async def _probe(self, peer_id: str) -> None:
        """Ask the provider for something our identity must be allowed: its health, and our rights there.

        Listing our ResourceRequests in our tenant namespace there needs the identity to be valid and its
        RoleBinding to exist: a provider that revoked us answers 401 or 403, and the handshake this then
        triggers (:class:`~liqo.peering.outgoing.OutgoingPeering`) learns the provider's reason.
        """
        client = self._peers.get(peer_id)
        if client is None:
            self._observations.report(self._observations.api_server, peer_id, None)
            return
        now = time.monotonic()
        if now - self._probed.get(peer_id, 0.0) < PROBE_INTERVAL / 2:
            return
        self._probed[peer_id] = now
        try:
            await client.list(RESOURCE_REQUESTS, namespace=names.tenant_namespace(self._local.cluster_id), limit=1)
        except ApiError as exc:
            if exc.status in (401, 403):
                message = f"the provider no longer grants this cluster's identity its rights ({exc.status}): revoked?"
                observation = Observation(False, Reason.FORBIDDEN, message)
            else:
                observation = Observation(False, Reason.UNREACHABLE, str(exc)[:300])
        except KubeError as exc:
            observation = Observation(False, Reason.UNREACHABLE, str(exc)[:300])
        else:
            observation = Observation(True, Reason.API_SERVER_READY)
        self._observations.report(self._observations.api_server, peer_id, observation)
