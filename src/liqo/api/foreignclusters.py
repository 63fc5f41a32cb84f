"""The ForeignCluster: its condition words, and how one is found from the cluster ID it is about.

One controller writes the conditions (``peering.status``); ``liqoctl`` (``peer``, ``info``, ``status``), the
installer's uninstall check and the metrics read them, and the CRD lists the types and statuses. Spelt once
here, so a reader and the writer cannot drift apart, and ``kubectl get fc -o yaml`` shows what the docs list.

A ForeignCluster's name is a hint chosen by whoever made it; what it is about is ``spec.clusterID``. Every
controller that starts from a peer's cluster ID asks :class:`ForeignClusters` (one index per process, kept by
the shared informer) or, over a list it read, :func:`record_of`: one rule for which record stands for a peer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from liqo.api.networks import ClusterNetwork, valid_network
from liqo.api.resources import FOREIGN_CLUSTERS
from liqo.kube.cache import Derived, Index, SharedInformers
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.projection import Projection

M = TypeVar("M", bound=Mapping[str, Any])


class ConditionType(StrEnum):
    """One aspect of a peering, one condition each."""

    AUTHENTICATION = "AuthenticationStatus"
    OUTGOING = "OutgoingPeering"
    INCOMING = "IncomingPeering"
    API_SERVER = "APIServerStatus"
    NETWORK = "NetworkStatus"


class ConditionStatus(StrEnum):
    """Where that aspect stands."""

    NONE = "None"
    PENDING = "Pending"
    ESTABLISHED = "Established"
    DENIED = "Denied"
    ERROR = "Error"


class Reason(StrEnum):
    """Why, in one word (a condition's ``reason``; the gateway's tunnel reasons pass through as it wrote them)."""

    # AuthenticationStatus
    MISSING_CREDENTIALS = "MissingCredentials"
    PROVIDER_BUSY = "ProviderBusy"
    REFUSED = "Refused"
    PROVIDER_NOT_AUTHENTICATED = "ProviderNotAuthenticated"
    HANDSHAKE_FAILED = "HandshakeFailed"
    IDENTITY_ISSUED = "IdentityIssued"
    IDENTITY_VALID = "IdentityValid"
    AUTHENTICATING = "Authenticating"
    PEER_AUTHENTICATED = "PeerAuthenticated"
    NOT_PEERED = "NotPeered"
    # OutgoingPeering (also the offer's phases Refused and ManualActionRequired, as the consumer decided)
    DISABLED = "Disabled"
    OFFER_ACCEPTED = "OfferAccepted"
    REQUEST_DENIED = "RequestDenied"
    OFFER_RECEIVED = "OfferReceived"
    WAITING_FOR_OFFER = "WaitingForOffer"
    WAITING_FOR_IDENTITY = "WaitingForIdentity"
    # IncomingPeering
    NO_REQUEST = "NoRequest"
    POLICY_DENIED = "PolicyDenied"
    OFFER_PENDING = "OfferPending"
    COMPUTING_OFFER = "ComputingOffer"
    # APIServerStatus
    NO_IDENTITY = "NoIdentity"
    NOT_PROBED_YET = "NotProbedYet"
    API_SERVER_READY = "APIServerReady"
    FORBIDDEN = "Forbidden"
    UNREACHABLE = "Unreachable"
    # NetworkStatus
    GATEWAY_STARTING = "GatewayStarting"
    DIRECT_ROUTING = "DirectRouting"
    """Neither cluster's pod CIDR overlaps the other's pod or service CIDR: addresses pass unchanged."""
    CIDR_OVERLAP = "CIDROverlap"
    """A pod CIDR overlaps the other cluster's pod or service CIDR: those addresses cannot be given to the reader."""
    NETWORK_UNKNOWN = "NetworkUnknown"
    """The peer has not told its network yet (a peering made before networks were exchanged, or no handshake)."""


def cluster_id(foreign_cluster: Mapping[str, Any]) -> str:
    """The cluster ID a ForeignCluster is about, its ``spec.clusterID``: the one reading of it (pure).

    The schema requires it; "" for an object that is no ForeignCluster (never equal to a peer's ID).
    """
    found = (foreign_cluster.get("spec") or {}).get("clusterID")
    return found if isinstance(found, str) else ""


def records_of(foreign_clusters: Iterable[M], peer_id: str) -> list[M]:
    """The ForeignClusters about ``peer_id``, the one that stands for it first: the smallest name (pure).

    Normally one; two only when someone (an admin, an old writer) made another under a name of their own.
    """
    return sorted((fc for fc in foreign_clusters if cluster_id(fc) == peer_id), key=lambda fc: fc["metadata"]["name"])


def record_of(foreign_clusters: Iterable[M], peer_id: str) -> M | None:
    """The ForeignCluster that stands for ``peer_id`` among ``foreign_clusters``, if any (pure)."""
    found = records_of(foreign_clusters, peer_id)
    return found[0] if found else None


def named(foreign_clusters: Iterable[M], name: str) -> M | None:
    """The ForeignCluster a person means by ``name``: its own name, its cluster ID or its cluster name (pure)."""
    for fc in foreign_clusters:
        if name in (fc["metadata"]["name"], cluster_id(fc), (fc.get("spec") or {}).get("clusterName")):
            return fc
    return None


class ForeignClusters:
    """A process's ForeignClusters, found by the cluster ID they are about without a scan of the cache."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._by_cluster_id = Index(informer, by=cluster_id)
        self._networks: Derived[str, ClusterNetwork | None] = Derived()

    @classmethod
    def shared(cls, informers: SharedInformers, *, projection: Projection | None = None) -> ForeignClusters:
        """The process's one view (one informer, one index), whichever controller asks first."""
        informer = informers.informer(FOREIGN_CLUSTERS, projection=projection)
        return informers.view("foreign clusters by cluster ID", lambda: cls(informer))

    def records_of(self, peer_id: str) -> list[Obj]:
        """The cached ForeignClusters about ``peer_id``, in :func:`records_of`'s order."""
        found = (self.informer.store.get(key) for key in sorted(self._by_cluster_id.keys(peer_id)))
        return [fc for fc in found if fc is not None]

    def record_of(self, peer_id: str) -> Obj | None:
        """The cached ForeignCluster that stands for ``peer_id`` (as :func:`record_of` picks it), if any."""
        found = self.records_of(peer_id)
        return found[0] if found else None

    def network_of(self, peer_id: str) -> ClusterNetwork | None:
        """The network ``peer_id`` told at its latest handshake, as its record keeps it (:func:`valid_network`).

        Parsed again only when the record changes: asked at every reconcile and for every remote pod status
        that carries an IP, validating the CIDRs each time was 4% of the virtual kubelet's CPU in a rollout.
        """
        found = self.record_of(peer_id)
        if found is None:
            return None
        return self._networks.get(peer_id, [found], lambda: valid_network(found))


def peer_key(foreign_cluster: Mapping[str, Any]) -> list[str]:
    """A watch's mapping of a ForeignCluster event: the cluster ID it is about, the key to queue (pure)."""
    found = cluster_id(foreign_cluster)
    return [found] if found else []
