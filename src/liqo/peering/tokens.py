"""Enrolment tokens: one per consumer, single use, expiring; what a consumer the provider does not know must prove.

A token is 32 random bytes (base64url) that ``liqoctl generate peer-command`` mints and prints, and that the
consumer keeps in ``liqo-peer-token`` of its tenant namespace. It never crosses the wire: it is the seed of
an Ed25519 key (:func:`enrolment_key`), and the consumer sends that key's public half and its signature of
the request (:mod:`liqo.peering.authprotocol`). The provider stores only the public key's fingerprint — a
hash of a hash of the token — in a Secret of its own per token (:func:`token_secret`), named after that
fingerprint, so that:

- one request costs the provider one Secret read by name, whatever the token (never a list);
- reading the Secret (a backup, ``kubectl get -o yaml``) gives no one the power to enrol: a signature needs
  the token, and an HMAC would have needed the token itself stored;
- the Secret carries its expiry, and is deleted by the enrolment that uses it (a delete conditioned on its
  UID, so two racing enrolments cannot both use it) or, once expired, by the manager's collector.

Why one token per consumer rather than one per provider: every cluster ID enrolled gets a tenant namespace,
the default SharingPolicy's share, a budget and, once it accepts, a gateway — a shared token made every
holder of a peer command a factory of such identities (docs/security.md, "Peer authentication").

Pure: the Secret's reads and writes are :mod:`liqo.peering.enrolment`'s.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from liqo.api import names
from liqo.api.clusterkey import FINGERPRINT_PREFIX, ClusterKey
from liqo.kube.timefmt import format_time, parse_time

ENROLMENT_TOKEN = "liqo.io/enrolment-token"
"""Label (``"true"``) of every enrolment token's Secret in ``liqo``: what lists, revokes and collects them."""
SECRET_TYPE = "liqo.io/enrolment-token"
"""The Secrets' type: immutable, so a token's Secret cannot be turned into another kind of Secret or back."""
FINGERPRINT = "keyFingerprint"
"""The one data key of a token's Secret: the fingerprint of the token's public key."""
NAME_PREFIX = "liqo-enrolment-"
ID_LENGTH = 16
"""Hex digits of the fingerprint that name a token (64 bits: distinct among any number an admin mints)."""
_SEED_CONTEXT = b"liqo enrolment token\x00"
DEFAULT_VALIDITY = datetime.timedelta(hours=24)
"""A command handed out of band is used within the day, or asked for again."""
PEER_VALIDITY = datetime.timedelta(hours=1)
"""``liqoctl peer`` with both kubeconfigs uses its token at once; an hour lets a consumer whose manager is
down for a moment still enrol."""
MAX_VALIDITY = datetime.timedelta(days=30)
"""A credential that enrols anyone who holds it should not outlive the reason it was minted."""
_DURATION = re.compile(r"([1-9][0-9]{0,6})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
UNKNOWN_TOKEN = (
    "unknown enrolment token: already used, revoked, or never minted by this cluster (each peer command enrols"
    " one cluster: ask the provider's admin for a new `liqoctl generate peer-command`)"
)
"""Used, revoked and never minted look the same to the provider — the Secret is not there — hence one answer."""


def new_token() -> str:
    """32 random bytes, base64url: out of reach of any guess."""
    return secrets.token_urlsafe(32)


def enrolment_key(token: str) -> ClusterKey:
    """The Ed25519 key whose seed is ``token`` (hashed with a context: any string is a token, none a seed as is)."""
    seed = hashlib.sha256(_SEED_CONTEXT + token.encode()).digest()
    return ClusterKey(ed25519.Ed25519PrivateKey.from_private_bytes(seed))


def token_id(fingerprint: str) -> str:
    """The short name of the token whose public key has ``fingerprint`` (what operators list and revoke)."""
    return fingerprint.removeprefix(FINGERPRINT_PREFIX)[:ID_LENGTH]


def secret_name(token: str) -> str:
    """The provider's Secret of the token named ``token`` (an ID, as :func:`token_id` makes it)."""
    return f"{NAME_PREFIX}{token}"


def token_secret(*, fingerprint: str, expires_at: datetime.datetime) -> dict[str, Any]:
    """The provider's Secret for the token whose public key has ``fingerprint``, valid until ``expires_at`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(token_id(fingerprint)),
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, ENROLMENT_TOKEN: "true"},
            "annotations": {names.EXPIRES_AT: format_time(expires_at)},
        },
        "type": SECRET_TYPE,
        "stringData": {FINGERPRINT: fingerprint},
    }


@dataclass(frozen=True)
class EnrolmentToken:
    """A token as the provider's Secret records it (no secret in it: a fingerprint and dates)."""

    id: str
    fingerprint: str
    expires_at: datetime.datetime
    created_at: datetime.datetime | None
    uid: str
    """The Secret's: a use deletes exactly the Secret that was checked, never a namesake made since."""

    def expired(self, now: datetime.datetime) -> bool:
        """Whether the token is past its expiry at ``now``."""
        return now >= self.expires_at

    def to_report(self) -> dict[str, str | None]:
        """What ``liqoctl token list`` prints (no fingerprint needed: the ID is its prefix)."""
        created = format_time(self.created_at) if self.created_at else None
        return {"id": self.id, "expiresAt": format_time(self.expires_at), "createdAt": created}


def parse_token(secret: dict[str, Any] | None) -> EnrolmentToken | None:
    """The token a provider's Secret records; None if it is not one, or not whole (pure).

    Written by liqo only (namespace ``liqo``, where no peer writes), but read defensively: a Secret edited
    by hand into another shape enrols no one.
    """
    if not secret or secret.get("type") != SECRET_TYPE:
        return None
    meta = secret.get("metadata") or {}
    try:
        fingerprint = base64.b64decode((secret.get("data") or {}).get(FINGERPRINT) or "", validate=True).decode()
        expires_at = parse_time(str((meta.get("annotations") or {}).get(names.EXPIRES_AT)))
        created = meta.get("creationTimestamp")
        created_at = parse_time(created) if created else None
    except ValueError:
        return None
    if not fingerprint.startswith(FINGERPRINT_PREFIX) or meta.get("name") != secret_name(token_id(fingerprint)):
        return None
    return EnrolmentToken(
        id=token_id(fingerprint),
        fingerprint=fingerprint,
        expires_at=expires_at,
        created_at=created_at,
        uid=str(meta.get("uid") or ""),
    )


def token_refusal(token: EnrolmentToken | None, *, fingerprint: str, now: datetime.datetime) -> str | None:
    """Why the token whose public key has ``fingerprint`` enrols no one (None: it may enrol one cluster; pure).

    ``token`` is what the provider's Secret of that name records (:data:`UNKNOWN_TOKEN` when none, or another
    token's that shares its ID); an expired one says when it expired.
    """
    if token is None or token.fingerprint != fingerprint:
        return UNKNOWN_TOKEN
    if token.expired(now):
        return (
            f"the enrolment token expired at {format_time(token.expires_at)}: ask the provider's admin for a new"
            " `liqoctl generate peer-command`"
        )
    return None


def parse_validity(text: str) -> datetime.timedelta:
    """A token's validity from ``30m``, ``24h``, ``7d`` (seconds ``s``, minutes ``m``, hours ``h``, days ``d``).

    Raises:
        ValueError: not such a duration, or longer than :data:`MAX_VALIDITY`.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30m, 24h or 7d")
    validity = datetime.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    if validity > MAX_VALIDITY:
        raise ValueError(f"{text} is longer than {MAX_VALIDITY.days} days: a token should not outlive its purpose")
    return validity


def token_of(secret: dict[str, Any] | None) -> str | None:
    """The token a consumer's ``liqo-peer-token`` Secret holds."""
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data["token"]).decode() if data.get("token") else None
