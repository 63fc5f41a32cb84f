"""The provisioner contract: what the authentication endpoint asks of whoever creates a consumer's identity.

The endpoint (:mod:`liqo.peering.authserver`) authenticates a consumer, then hands it to a
:class:`Provisioner`, the only code that creates anything for it: peering's own (:mod:`liqo.peering.provisioning`,
RBAC, ForeignCluster, a signed CSR) behind sharing's :class:`~liqo.sharing.gate.PolicyGate`, which refuses
the peers a SharingPolicy denies before anything is created. Capabilities do not import one another, so the
contract they share — the protocol, what it is handed (:class:`AuthenticatedConsumer`), what it returns
(:class:`Issued`, :class:`PeerRecord`) and the two errors the endpoint turns into answers (:class:`PeerDenied`,
:class:`ProvisioningError`) — lives here, below both; the manager (:mod:`liqo.apps.manager`) wires the chain.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Protocol

from liqo.api.networks import ClusterNetwork


@dataclass(frozen=True)
class AuthenticatedConsumer:
    """What the authentication endpoint has verified about a consumer, handed to the provisioner chain as one value.

    The endpoint, the policy gate and the provisioner all speak of this one consumer: passing it whole, rather
    than field by field, means a field added here reaches all three at once, and none of them can drop one on the way.
    """

    consumer_id: str
    """The cluster ID its signed request names (its CSR is checked to be for that ID alone)."""
    consumer_name: str
    """The name it claims: what its ForeignCluster is named after, never a basis for a decision."""
    auth_url: str | None
    """Where its own authentication endpoint is, if it told one."""
    csr_pem: str
    """Its CSR, re-encoded by the endpoint from what it checked."""
    key_fingerprint: str
    """The fingerprint of the cluster key that signed its request."""
    network: ClusterNetwork
    """Its network, as its signed request told it."""


@dataclass(frozen=True)
class Issued:
    """What the provisioner hands back: where the consumer reaches this cluster, and its certificate."""

    api_server_url: str
    ca_pem: str
    certificate_pem: str
    namespace: str
    expires_at: datetime.datetime


@dataclass(frozen=True)
class PeerRecord:
    """What this cluster knows of a consumer before it authenticates (its ForeignCluster here, if any)."""

    key_fingerprint: str | None
    """The key pinned for its cluster ID (None: none yet: the next consumer proving an enrolment token pins one)."""
    refused: bool
    """The admin refuses it (``incomingPeeringEnabled: No``): revoked, or never allowed."""
    announced: bool = False
    """Its key was pinned from what a discovery source heard (a record discovery made), not at an enrolment:
    it says who the cluster is, it admits no one. The consumer still proves a token, which enrols it."""


def admission(record: PeerRecord | None, *, consumer_id: str, key_fingerprint: str) -> tuple[bool, str | None]:
    """Whether the consumer needs the token, or why it is refused, from this cluster's record (pure).

    The endpoint judges the record it has cached; the provisioner judges the record again as it reads it
    before it pins anything, with the same words.

    Returns:
        ``(needs_token, refusal)``: a refusal is final for this request (403); otherwise the consumer must
        also prove the token unless its key is the one pinned for its cluster ID at an enrolment (a key
        pinned from an announcement refuses any other key, and admits the announcer only with a token).
    """
    if record is not None and record.refused:
        return False, (
            f"this cluster does not accept cluster {consumer_id} as a consumer (revoked, or incoming peering"
            " disabled by its admin)"
        )
    if record is not None and record.key_fingerprint:
        if record.key_fingerprint != key_fingerprint:
            return False, (
                f"another key is registered for cluster ID {consumer_id}: this request is not signed by it"
                " (if the cluster really changed its key, the provider's admin clears spec.keyFingerprint)"
            )
        return record.announced, None
    return True, None


class PeerDenied(Exception):
    """This provider refuses the consumer (revoked, another key, a policy): the answer is 403 with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProvisioningError(Exception):
    """Provisioning failed for a reason safe to tell the consumer (the answer is 500 with it)."""


class ProvisioningBusy(ProvisioningError):
    """Provisioning cannot happen yet, and will by itself (an earlier peering still being released).

    The answer is 503 with ``Retry-After``: the consumer asks again soon instead of as after a failure.
    """


class Provisioner(Protocol):
    """Knows the consumers, creates what an authenticated one needs and signs its CSR."""

    async def record(self, consumer_id: str) -> PeerRecord | None:
        """This cluster's record of ``consumer_id``; None if it has none."""
        ...

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        """Pin the consumer's key (unless pinned), ensure its tenant namespace, RBAC; sign the CSR; record its network.

        Leaves nothing behind when it fails.

        Raises:
            PeerDenied: the consumer is refused (a policy; or, found meanwhile, another key or a revocation).
            ProvisioningError: something failed that the consumer may be told about.
        """
        ...
