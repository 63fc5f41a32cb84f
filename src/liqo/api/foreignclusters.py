"""The ForeignCluster's words: its condition types, their statuses, and the reasons this cluster writes.

One controller writes them (``peering.status``); ``liqoctl`` (``peer``, ``info``, ``status``), the installer's
uninstall check and the metrics read them, and the CRD lists the types and statuses. Spelt once here, so a
reader and the writer cannot drift apart, and ``kubectl get fc -o yaml`` shows what the docs list.
"""

from __future__ import annotations

from enum import StrEnum


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
