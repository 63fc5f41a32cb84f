"""The authentication protocol between peers, as pure functions: messages, signatures, nonces, CSRs.

Two secrets, two jobs (docs/security.md, "Peer authentication"):

- **the cluster keys** say *who* is talking. A consumer signs every identity request with its cluster key
  (:mod:`liqo.api.clusterkey`) and sends the public half; a provider signs its answer with its own, over the
  answer *plus the request's nonce*, so the answer is bound to that very request. Each side pins the other's
  key (ForeignCluster ``spec.keyFingerprint``): a provider refuses any other key claiming a consumer's
  cluster ID, a consumer refuses an answer from any other key than its provider's.
- **an enrolment token** says a consumer *may enrol*: a consumer the provider has no key for must also
  prove it holds a token the provider minted for it (:mod:`liqo.peering.tokens`), by a signature over the
  same message with the Ed25519 key the token is the seed of, whose public half it sends (``enrolmentKey``).
  The token never crosses the wire, and the provider keeps only that key's fingerprint, which enrols no one.
  Once enrolled a consumer renews with its cluster key alone, so a token is needed (and used up) once.

What is signed is the canonical JSON of the message (sorted keys, compact) without the signature fields.
Nonces are single use and short-lived: a recorded request cannot be sent again.

The CSR checks are the provider's last line of defence: the API server takes user and groups from the
certificate's CN and O, so a CSR asking for ``O=system:masters`` — or for another peer's CN — would turn a
token holder into a cluster admin or an impostor. Only ``CN=liqo.io:peer:<its own ID>``, nothing else, is
ever signed.

Both messages also carry their sender's network (pod and service CIDRs, :mod:`liqo.api.networks`): each side
records the other's on its ForeignCluster, so that addresses reflected between them can be translated. It is
signed with the rest, and parsed as the untrusted input it is: a malformed or implausible network makes the
message invalid (400, or a refused answer) before anything is created.

Nothing here does I/O, so the server and the client share it and the tests exercise it directly.
"""

from __future__ import annotations

import datetime
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from liqo.api import clusterkey, names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import NETWORK, ClusterNetwork, InvalidNetwork
from liqo.kube.csr import make_request
from liqo.kube.printable import describe, unprintable
from liqo.kube.timefmt import format_time, parse_time
from liqo.peering.tokens import enrolment_key

KEY_SIGNATURE = "keySignature"
"""In a request: the consumer's cluster-key signature."""
TOKEN_SIGNATURE = "tokenSignature"
"""In a request: the signature by the enrolment token's key (needed to enrol only)."""
ENROLMENT_KEY = "enrolmentKey"
"""In a request: the public half of the enrolment token's key (PEM), signed over like every other field."""
SIGNATURE = "signature"
"""In an answer: the provider's cluster-key signature over the answer and the request's nonce."""
_SIGNATURES = frozenset({KEY_SIGNATURE, TOKEN_SIGNATURE, SIGNATURE})
NONCE_TTL = 60.0
"""Seconds a nonce stays valid: a handshake takes milliseconds, a replay window should not."""
MAX_BODY = 64 * 1024
"""Largest request or answer accepted: a CSR and a certificate chain are a few KiB."""
MIN_RSA_BITS = 2048

CLUSTER_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A cluster ID is the UID of its ``kube-system`` namespace: a lowercase UUID, never a name (a peer chooses
its name freely, so nothing that decides may ever match one)."""
_MAX_URL = 2048
_MAX_NONCE = 128


class InvalidMessage(ValueError):
    """A message (or the CSR in it) is malformed: the server answers 400, the client refuses the answer.

    Messages name the offending field, never echo the token or a signature.
    """


# -- signatures ------------------------------------------------------------------------------------------


def canonical(message: Mapping[str, Any], *, nonce: str = "") -> bytes:
    """The bytes that are signed: compact JSON with sorted keys, without the signature fields, then ``nonce``.

    Requests are signed without ``nonce`` (theirs is a field of the message); answers with the nonce of
    the request they answer, which binds the answer to that request.
    """
    body = {k: v for k, v in message.items() if k not in _SIGNATURES}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS) + nonce.encode()


class UnprovenToken(ValueError):
    """A request that must prove an enrolment token does not: the server answers 401 with the message."""


def enrolment_fingerprint(message: Mapping[str, Any]) -> str:
    """The fingerprint of the enrolment key that signed the request ``message`` (what names its token's Secret).

    Raises:
        UnprovenToken: the request carries no token signature, or one that is not its enrolment key's
            signature of the message (a value of any other type never is).
    """
    public_key, signature = message.get(ENROLMENT_KEY), message.get(TOKEN_SIGNATURE)
    if public_key is None and signature is None:
        raise UnprovenToken(
            "this cluster does not know your key, and enrolling needs a token (`liqoctl generate peer-command`"
            " on this cluster prints a command carrying one)"
        )
    if not isinstance(public_key, str) or not clusterkey.verify(public_key, canonical(message), signature):
        raise UnprovenToken("bad token signature: an altered request, or no valid enrolment key")
    return clusterkey.fingerprint(public_key)


def sign_request(message: Mapping[str, Any], *, key: ClusterKey, token: str | None) -> dict[str, Any]:
    """``message`` signed by the consumer's ``key`` and, when a token is known, by the token's key too.

    The token's public key joins the message first, so that both signatures cover it.
    """
    signed = dict(message)
    enrolment = enrolment_key(token) if token else None
    if enrolment is not None:
        signed[ENROLMENT_KEY] = enrolment.public_pem
    body = canonical(signed)
    signed[KEY_SIGNATURE] = key.sign(body)
    if enrolment is not None:
        signed[TOKEN_SIGNATURE] = enrolment.sign(body)
    return signed


def verify_request(message: Mapping[str, Any], *, public_key: str) -> bool:
    """Whether the request ``message`` is signed by the key it presents (``public_key``, already parsed)."""
    return clusterkey.verify(public_key, canonical(message), message.get(KEY_SIGNATURE))


def sign_answer(answer: Mapping[str, Any], *, key: ClusterKey, nonce: str) -> dict[str, Any]:
    """The provider's ``answer`` signed with its ``key``, bound to the request's ``nonce``."""
    return dict(answer) | {SIGNATURE: key.sign(canonical(answer, nonce=nonce))}


def verify_answer(answer: Mapping[str, Any], *, public_key: str, nonce: str) -> bool:
    """Whether ``answer`` is signed by ``public_key`` for the request of ``nonce``."""
    return clusterkey.verify(public_key, canonical(answer, nonce=nonce), answer.get(SIGNATURE))


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


def check_line(key: str, value: str) -> str:
    """``value`` of field ``key`` if it holds no unprintable character (a name, a URL: what logs and tables show).

    Raises:
        InvalidMessage: it does, naming the field and the first such character (never echoing the value).
    """
    char = unprintable(value)
    if char is not None:
        raise InvalidMessage(f"{key!r} must be printable text: it holds {describe(char)}")
    return value


def _line(message: Mapping[str, Any], key: str, *, max_length: int) -> str:
    return check_line(key, _string(message, key, max_length=max_length))


def check_cluster_id(cluster_id: str) -> str:
    """``cluster_id`` if it is a cluster ID: a lowercase UUID (which also keeps ``liqo-tenant-<ID>`` a DNS label)."""
    if not CLUSTER_ID.fullmatch(cluster_id):
        raise InvalidMessage("'clusterID' must be a cluster ID: the lowercase UUID of the cluster's kube-system")
    return cluster_id


def _public_key(message: Mapping[str, Any]) -> str:
    value = message.get("publicKey")
    try:
        clusterkey.load_public_key(value)
    except clusterkey.InvalidKey as exc:
        raise InvalidMessage(str(exc)) from exc
    assert isinstance(value, str)
    return value


def _check_url(key: str, url: str) -> str:
    # Both are HTTPS endpoints by design (and the ForeignCluster schema refuses any other authURL).
    if not url.startswith("https://"):
        raise InvalidMessage(f"{key!r} must be an https:// URL")
    return url


def _network(message: Mapping[str, Any]) -> ClusterNetwork:
    try:
        return ClusterNetwork.from_message(message.get(NETWORK))
    except InvalidNetwork as exc:
        raise InvalidMessage(str(exc)) from None


def _time(message: Mapping[str, Any], key: str) -> datetime.datetime:
    try:
        return parse_time(_string(message, key, max_length=64))
    except ValueError as exc:
        raise InvalidMessage(f"{key!r}: {exc}") from exc


@dataclass(frozen=True)
class IdentityRequest:
    """``POST /identity``: who the consumer is, its cluster key and network, the nonce it was given, its CSR (PEM)."""

    cluster_id: str
    cluster_name: str
    auth_url: str | None
    nonce: str
    csr: str
    public_key: str
    network: ClusterNetwork

    def to_message(self) -> dict[str, Any]:
        """The unsigned message (``authURL`` only when known)."""
        message = {
            "clusterID": self.cluster_id,
            "clusterName": self.cluster_name,
            "nonce": self.nonce,
            "csr": self.csr,
            "publicKey": self.public_key,
            NETWORK: self.network.to_message(),
        }
        return message | ({"authURL": self.auth_url} if self.auth_url else {})

    @property
    def key_fingerprint(self) -> str:
        """The fingerprint of the consumer's cluster key (valid: :meth:`from_message` checked the key)."""
        return clusterkey.fingerprint(self.public_key)

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> IdentityRequest:
        """Validate a request's fields (not its signature, not its CSR's contents)."""
        has_auth_url = message.get("authURL") is not None
        return cls(
            cluster_id=check_cluster_id(_string(message, "clusterID")),
            cluster_name=_line(message, "clusterName", max_length=names.MAX_CLUSTER_NAME),
            auth_url=_check_url("authURL", _line(message, "authURL", max_length=_MAX_URL)) if has_auth_url else None,
            nonce=_line(message, "nonce", max_length=_MAX_NONCE),
            csr=_string(message, "csr"),
            public_key=_public_key(message),
            network=_network(message),
        )


@dataclass(frozen=True)
class IdentityResponse:
    """The answer to ``POST /identity``: the provider, its key and network, where to reach it, the certificate."""

    cluster_id: str
    cluster_name: str
    api_server_url: str
    ca: str
    certificate: str
    namespace: str
    expires_at: datetime.datetime
    public_key: str
    network: ClusterNetwork

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
            "publicKey": self.public_key,
            NETWORK: self.network.to_message(),
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
            cluster_name=_line(message, "clusterName", max_length=names.MAX_CLUSTER_NAME),
            api_server_url=_check_url("apiServerURL", _line(message, "apiServerURL", max_length=_MAX_URL)),
            ca=ca,
            certificate=_string(message, "certificate"),
            namespace=_line(message, "namespace", max_length=63),
            expires_at=_time(message, "expiresAt"),
            public_key=_public_key(message),
            network=_network(message),
        )


# -- certificate signing requests ------------------------------------------------------------------------


def make_csr(cluster_id: str) -> tuple[str, str]:
    """A fresh ECDSA P-256 key and a CSR for ``CN=liqo.io:peer:<cluster_id>`` (no groups), both PEM."""
    return make_request(common_name=names.peer_user(cluster_id))


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
