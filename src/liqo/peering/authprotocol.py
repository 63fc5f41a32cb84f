"""The authentication protocol between peers, as pure functions: messages, signatures, nonces, CSRs.

A consumer proves it knows the provider's token without sending it: every request carries an HMAC-SHA256
keyed with the token over the canonical JSON of the message (sorted keys, compact, ``signature`` left
out). The provider answers with an HMAC over its answer *plus the request's nonce*, so the consumer knows
both that the answer comes from whoever holds the token and that it answers its own request, not an older
one replayed at it. Nonces are single use and short-lived: a recorded request cannot be sent again.

The CSR checks are the provider's last line of defence: the API server takes user and groups from the
certificate's CN and O, so a CSR asking for ``O=system:masters`` — or for another peer's CN — would turn a
token holder into a cluster admin or an impostor. Only ``CN=liqo.io:peer:<its own ID>``, nothing else, is
ever signed.

Nothing here does I/O, so the server and the client share it and the tests exercise it directly.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from liqo.api import names

SIGNATURE = "signature"
"""The key of the signature in every signed message; it is never part of what is signed."""
NONCE_TTL = 60.0
"""Seconds a nonce stays valid: a handshake takes milliseconds, a replay window should not."""
MAX_BODY = 64 * 1024
"""Largest request or answer accepted: a CSR and a certificate chain are a few KiB."""
MIN_RSA_BITS = 2048

_MAX_CLUSTER_ID = 63 - len(names.TENANT_NAMESPACE_PREFIX)
"""The tenant namespace ``liqo-tenant-<ID>`` must remain a valid namespace name (a DNS label)."""
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MAX_NAME = 253
_MAX_URL = 2048
_MAX_NONCE = 128


class InvalidMessage(ValueError):
    """A message (or the CSR in it) is malformed: the server answers 400, the client refuses the answer.

    Messages name the offending field, never echo the token or a signature.
    """


# -- signatures ------------------------------------------------------------------------------------------


def canonical(message: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: compact JSON with sorted keys, without the ``signature`` key."""
    return orjson.dumps({k: v for k, v in message.items() if k != SIGNATURE}, option=orjson.OPT_SORT_KEYS)


def sign(token: str, message: Mapping[str, Any], *, nonce: str = "") -> str:
    """HMAC-SHA256 keyed with ``token`` over ``canonical(message) + nonce``, base64-encoded.

    Requests are signed without ``nonce`` (theirs is a field of the message); answers with the nonce of
    the request they answer, which binds the answer to that request.
    """
    mac = hmac.new(token.encode(), canonical(message) + nonce.encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def verify(token: str, message: Mapping[str, Any], signature: object, *, nonce: str = "") -> bool:
    """Whether ``signature`` is :func:`sign`'s signature of ``message`` (a non-string never is)."""
    if not isinstance(signature, str):
        return False
    # compare_digest on bytes: constant time, and no TypeError on non-ASCII input.
    return hmac.compare_digest(sign(token, message, nonce=nonce).encode(), signature.encode())


# -- nonces ----------------------------------------------------------------------------------------------


class NonceStore:
    """Nonces issued by this server, each valid once and for ``ttl`` seconds.

    The store is bounded: when full, the oldest nonce is forgotten (its client gets a 401 and retries).
    A flood of ``/nonce`` calls can therefore only make handshakes retry, never grow memory.
    """

    def __init__(
        self, *, ttl: float = NONCE_TTL, max_size: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self._max_size = max_size
        self._clock = clock
        # Insertion order is expiry order (one TTL, a monotonic clock): the oldest are always first.
        self._expiry: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def issue(self) -> str:
        """A fresh random nonce."""
        now = self._clock()
        self._purge(now)
        while len(self._expiry) >= self._max_size:
            del self._expiry[next(iter(self._expiry))]
        nonce = secrets.token_urlsafe(32)
        self._expiry[nonce] = now + self.ttl
        return nonce

    def consume(self, nonce: str) -> bool:
        """Use ``nonce`` up: true only the first time, and only before it expires."""
        now = self._clock()
        self._purge(now)
        expiry = self._expiry.pop(nonce, None)
        return expiry is not None and now < expiry

    def _purge(self, now: float) -> None:
        while self._expiry:
            oldest = next(iter(self._expiry))
            if self._expiry[oldest] > now:
                return
            del self._expiry[oldest]


# -- messages --------------------------------------------------------------------------------------------


def parse_json(body: bytes) -> dict[str, Any]:
    """A JSON object from a request or answer body."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidMessage("the body is not valid JSON") from exc
    if not isinstance(decoded, dict):
        raise InvalidMessage("the body must be a JSON object")
    return decoded


def _string(message: Mapping[str, Any], key: str, *, max_length: int = MAX_BODY) -> str:
    value = message.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidMessage(f"{key!r} must be a non-empty string")
    if len(value) > max_length:
        raise InvalidMessage(f"{key!r} is longer than {max_length} characters")
    return value


def check_cluster_id(cluster_id: str) -> str:
    """``cluster_id`` if it can name a tenant namespace (a DNS label once prefixed)."""
    if len(cluster_id) > _MAX_CLUSTER_ID or not _DNS_LABEL.fullmatch(cluster_id):
        raise InvalidMessage(
            f"'clusterID' must be a lowercase DNS label of at most {_MAX_CLUSTER_ID} characters (a UUID)"
        )
    return cluster_id


def _check_url(key: str, url: str) -> str:
    # Both are HTTPS endpoints by design (and the ForeignCluster schema refuses any other authURL).
    if not url.startswith("https://"):
        raise InvalidMessage(f"{key!r} must be an https:// URL")
    return url


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC, to the second (``2026-01-02T03:04:05Z``)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime.datetime:
    """An RFC 3339 time, as an aware UTC datetime."""
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidMessage(f"{value!r} is not an RFC 3339 time") from exc
    if moment.tzinfo is None:
        raise InvalidMessage(f"{value!r} has no time zone")
    return moment.astimezone(datetime.UTC)


@dataclass(frozen=True)
class IdentityRequest:
    """``POST /identity``: who the consumer is, the nonce it was given, and its CSR (PEM)."""

    cluster_id: str
    cluster_name: str
    auth_url: str | None
    nonce: str
    csr: str

    def to_message(self) -> dict[str, Any]:
        """The unsigned message (``authURL`` only when known)."""
        message = {"clusterID": self.cluster_id, "clusterName": self.cluster_name, "nonce": self.nonce, "csr": self.csr}
        return message | ({"authURL": self.auth_url} if self.auth_url else {})

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> IdentityRequest:
        """Validate a request's fields (not its signature, not its CSR's contents)."""
        has_auth_url = message.get("authURL") is not None
        return cls(
            cluster_id=check_cluster_id(_string(message, "clusterID")),
            cluster_name=_string(message, "clusterName", max_length=_MAX_NAME),
            auth_url=_check_url("authURL", _string(message, "authURL", max_length=_MAX_URL)) if has_auth_url else None,
            nonce=_string(message, "nonce", max_length=_MAX_NONCE),
            csr=_string(message, "csr"),
        )


@dataclass(frozen=True)
class IdentityResponse:
    """The answer to ``POST /identity``: the provider, where to reach it, and the signed certificate."""

    cluster_id: str
    cluster_name: str
    api_server_url: str
    ca: str
    certificate: str
    namespace: str
    expires_at: datetime.datetime

    def to_message(self) -> dict[str, Any]:
        """The unsigned message."""
        return {
            "clusterID": self.cluster_id,
            "clusterName": self.cluster_name,
            "apiServerURL": self.api_server_url,
            "ca": self.ca,
            "certificate": self.certificate,
            "namespace": self.namespace,
            "expiresAt": format_time(self.expires_at),
        }

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> IdentityResponse:
        """Validate an answer's fields (not its signature).

        ``ca`` may be empty: a provider whose API server has a publicly trusted certificate sends none.
        """
        ca = message.get("ca")
        if not isinstance(ca, str):
            raise InvalidMessage("'ca' must be a string")
        return cls(
            cluster_id=_string(message, "clusterID"),
            cluster_name=_string(message, "clusterName", max_length=_MAX_NAME),
            api_server_url=_check_url("apiServerURL", _string(message, "apiServerURL", max_length=_MAX_URL)),
            ca=ca,
            certificate=_string(message, "certificate"),
            namespace=_string(message, "namespace", max_length=63),
            expires_at=parse_time(_string(message, "expiresAt", max_length=64)),
        )


# -- certificate signing requests ------------------------------------------------------------------------


def make_csr(cluster_id: str) -> tuple[str, str]:
    """A fresh ECDSA P-256 key and a CSR for ``CN=liqo.io:peer:<cluster_id>`` (no groups), both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names.peer_user(cluster_id))])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem.decode(), csr.public_bytes(serialization.Encoding.PEM).decode()


def check_csr(csr_pem: str, *, cluster_id: str) -> x509.CertificateSigningRequest:
    """The CSR, if it is one this provider may sign for peer ``cluster_id``.

    Raises:
        InvalidMessage: it does not parse, its signature is wrong, its subject is anything but exactly
            ``CN=liqo.io:peer:<cluster_id>`` (an O would add Kubernetes groups), or its key is weak.
    """
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError as exc:
        raise InvalidMessage("'csr' is not a PEM certificate signing request") from exc
    if not csr.is_signature_valid:
        raise InvalidMessage("the CSR's signature is not valid")
    expected = names.peer_user(cluster_id)
    attributes = [(attribute.oid, attribute.value) for attribute in csr.subject]
    if attributes != [(NameOID.COMMON_NAME, expected)] or len(csr.subject.rdns) != 1:
        raise InvalidMessage(f"the CSR's subject must be exactly CN={expected} (no organisation, nothing else)")
    key = csr.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise InvalidMessage("an ECDSA CSR key must be on curve P-256")
    elif isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise InvalidMessage(f"an RSA CSR key must have at least {MIN_RSA_BITS} bits")
    else:
        raise InvalidMessage("the CSR key must be ECDSA P-256 or RSA")
    return csr
