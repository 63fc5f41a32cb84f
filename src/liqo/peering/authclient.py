"""The consumer's side of authentication: turn its cluster key (and, to enrol, the token) into an identity.

:func:`request_identity` makes a fresh key for the identity (it never leaves this process), asks for a
nonce, sends a request signed with the cluster key — and with the enrolment token's key when it has a
token — and accepts the answer only if it is signed by the provider's cluster key, the one whose fingerprint
this cluster was given out of band (``liqoctl peer`` reads it from the provider's identity, the out-of-band
command carries it), over the answer and *our* nonce.

Why the auth server's TLS certificate is not verified: it is typically self-signed or signed by the provider's
cluster CA, which the consumer does not know before this very handshake. Verifying it would add nothing: the
token never crosses the wire (only a signature by the key it is the seed of, and the token is 32 random bytes,
out of reach of an offline guess); the private keys never leave the consumer (the CSR and the request hold
public keys only); and the answer — API server URL, CA, certificate — is signed by the provider's pinned key,
bound to our nonce. A man in the middle, even one holding the token, can therefore neither obtain a usable
identity nor make us trust its own API server: it can only make the handshake fail. TLS still keeps the
exchange private. The API server itself is then reached with full verification against the CA received here.
"""

from __future__ import annotations

import base64
import datetime
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from liqo.api import clusterkey, names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.peering.authprotocol import (
    MAX_BODY,
    IdentityRequest,
    IdentityResponse,
    InvalidMessage,
    check_line,
    make_csr,
    parse_json,
    sign_request,
    verify_answer,
)

TIMEOUT = 60.0
"""Seconds for a whole handshake: the provider may wait up to 30 s for its API server to sign."""
_MAX_ANSWER = 4 * MAX_BODY


class AuthError(Exception):
    """The handshake failed; the message says why (and never contains the token)."""


class AuthUnreachable(AuthError):
    """The authentication endpoint could not be reached, or timed out."""


class AuthRejected(AuthError):
    """The provider answered with an error status (401 wrong token, 403 denied, 400 bad request...)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the provider refused ({status}): {reason}")
        self.status = status
        self.reason = reason


class ProviderBusy(AuthRejected):
    """The provider cannot answer right now (429 throttled, 503: starting, or releasing an earlier peering).

    Not a verdict on us: asked again after ``retry_after`` seconds, the provider's ``Retry-After``. A 429 or
    503 without one is a refusal like any other (a cap on consumers is 429 too, and lasts).
    """

    def __init__(self, status: int, reason: str, *, retry_after: float) -> None:
        super().__init__(status, reason)
        self.retry_after = retry_after


BUSY_STATUSES = frozenset({429, 503})
MAX_RETRY_AFTER = 300.0
"""A provider's ``Retry-After`` is followed up to this many seconds: it must not park a peering for days."""


def retry_after(header: str | None) -> float | None:
    """The seconds a ``Retry-After`` header in seconds asks for, within [1, :data:`MAX_RETRY_AFTER`] (pure).

    None when absent or not a number of seconds (the HTTP-date form is not used by liqo's auth server).
    """
    seconds = (header or "").strip()
    if not re.fullmatch(r"[0-9]{1,9}", seconds):  # ASCII digits only: str.isdigit takes '²'
        return None
    return min(max(1.0, float(seconds)), MAX_RETRY_AFTER)


class BadAnswer(AuthError):
    """The answer is malformed, or from another cluster than expected."""


class ProviderNotAuthenticated(BadAnswer):
    """The answer is not signed by the provider's pinned key: someone else answered."""


@dataclass(frozen=True)
class Identity:
    """A client identity on a provider's API server, confined to the consumer's tenant namespace there.

    ``provider_network`` is the network the provider told us, in its signed answer.
    """

    provider_id: str
    provider_name: str
    provider_network: ClusterNetwork
    consumer_id: str
    api_server_url: str
    ca_pem: str
    cert_pem: str
    key_pem: str = field(repr=False)
    namespace: str
    expires_at: datetime.datetime

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for this identity with embedded credentials (default namespace: the tenant's)."""

        def b64(text: str) -> str:
            return base64.b64encode(text.encode()).decode()

        cluster: dict[str, Any] = {"server": self.api_server_url}
        if self.ca_pem:
            cluster["certificate-authority-data"] = b64(self.ca_pem)
        user = names.peer_user(self.consumer_id)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.provider_id, "cluster": cluster}],
            "users": [
                {
                    "name": user,
                    "user": {"client-certificate-data": b64(self.cert_pem), "client-key-data": b64(self.key_pem)},
                }
            ],
            "contexts": [
                {
                    "name": self.provider_id,
                    "context": {"cluster": self.provider_id, "user": user, "namespace": self.namespace},
                }
            ],
            "current-context": self.provider_id,
        }


def _session(timeout: float) -> aiohttp.ClientSession:
    # ssl=False: see the module docstring; the answer's signature is what authenticates the provider.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=False), timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10)
    )


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """One request; its decoded JSON object, or the matching :class:`AuthError`."""
    data = None if body is None else orjson.dumps(body)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    try:
        async with session.request(method, url, data=data, headers=headers, allow_redirects=False) as response:
            status = response.status
            wait = retry_after(response.headers.get("Retry-After"))
            raw = b""
            while chunk := await response.content.read(_MAX_ANSWER + 1 - len(raw)):
                raw += chunk
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise AuthUnreachable(f"cannot reach {url}: {exc or type(exc).__name__}") from exc
    if len(raw) > _MAX_ANSWER:
        raise BadAnswer(f"{url} answered more than {_MAX_ANSWER} bytes")
    if status >= 300:
        try:
            reason = str(parse_json(raw).get("reason") or "")
        except InvalidMessage:
            reason = raw.decode("utf-8", "replace")[:200]
        if status in BUSY_STATUSES and wait is not None:
            raise ProviderBusy(status, reason or f"HTTP {status}", retry_after=wait)
        raise AuthRejected(status, reason or f"HTTP {status}")
    try:
        return parse_json(raw)
    except InvalidMessage as exc:
        raise BadAnswer(f"{url}: {exc}") from exc


def _url(auth_url: str, path: str) -> str:
    return auth_url.rstrip("/") + path


@dataclass(frozen=True)
class Ids:
    """What an endpoint says it is: unauthenticated, so a hint for early, clear errors only."""

    cluster_id: str
    cluster_name: str
    key_fingerprint: str


async def fetch_ids(auth_url: str, *, timeout: float = 10.0) -> Ids:
    """The cluster ID, name and key fingerprint the endpoint claims."""
    async with _session(timeout) as session:
        answer = await _call(session, "GET", _url(auth_url, "/ids"))
    fields = [answer.get(k) for k in ("clusterID", "clusterName", "keyFingerprint")]
    if not all(isinstance(f, str) for f in fields) or not fields[0]:
        raise BadAnswer(f"{auth_url}/ids: 'clusterID', 'clusterName' and 'keyFingerprint' must be strings")
    try:
        check_line("clusterName", fields[1])
    except InvalidMessage as exc:
        raise BadAnswer(f"{auth_url}/ids: {exc}") from None
    return Ids(*fields)


async def request_identity(
    *,
    auth_url: str,
    key: ClusterKey,
    token: str | None,
    consumer_id: str,
    consumer_name: str,
    consumer_network: ClusterNetwork,
    consumer_auth_url: str | None = None,
    expected_provider_id: str,
    expected_fingerprint: str,
    timeout: float = TIMEOUT,
) -> Identity:
    """Run the handshake with the provider at ``auth_url`` and return the identity it issued.

    ``key`` is this cluster's key; ``token`` the provider's, needed only until the provider knows our key.
    ``consumer_network`` is ours, told to the provider; its own comes back in :attr:`Identity.provider_network`.

    Raises:
        AuthUnreachable: the endpoint cannot be reached.
        AuthRejected: the provider said no (401: wrong token or signature; 403: refused; 400: bad request).
        ProviderNotAuthenticated: the answer is not signed by the key of ``expected_fingerprint``.
        BadAnswer: the answer is malformed (its network included), or comes from a cluster other than
            ``expected_provider_id``.
    """
    key_pem, csr_pem = make_csr(consumer_id)
    async with _session(timeout) as session:
        nonce = (await _call(session, "POST", _url(auth_url, "/nonce"))).get("nonce")
        if not isinstance(nonce, str) or not nonce:
            raise BadAnswer(f"{auth_url}/nonce: no nonce in the answer")
        message = IdentityRequest(
            cluster_id=consumer_id,
            cluster_name=consumer_name,
            auth_url=consumer_auth_url,
            nonce=nonce,
            csr=csr_pem,
            public_key=key.public_pem,
            network=consumer_network,
        ).to_message()
        answer = await _call(session, "POST", _url(auth_url, "/identity"), sign_request(message, key=key, token=token))
    try:
        response = IdentityResponse.from_message(answer)
    except InvalidMessage as exc:
        raise BadAnswer(f"{auth_url}: {exc}") from exc
    presented = clusterkey.fingerprint(response.public_key)
    if presented != expected_fingerprint:
        raise ProviderNotAuthenticated(
            f"{auth_url} answered with key {presented}, not the provider's {expected_fingerprint}: refused"
        )
    if not verify_answer(answer, public_key=response.public_key, nonce=nonce):
        raise ProviderNotAuthenticated(f"{auth_url}: the answer is not signed by the provider's key (altered?)")
    if response.cluster_id != expected_provider_id:
        raise BadAnswer(f"{auth_url} is cluster {response.cluster_id}, not the expected {expected_provider_id}")
    _check_certificate(response.certificate, key_pem=key_pem)
    return Identity(
        provider_id=response.cluster_id,
        provider_name=response.cluster_name,
        provider_network=response.network,
        consumer_id=consumer_id,
        api_server_url=response.api_server_url,
        ca_pem=response.ca,
        cert_pem=response.certificate,
        key_pem=key_pem,
        namespace=response.namespace,
        expires_at=response.expires_at,
    )


def _check_certificate(cert_pem: str, *, key_pem: str) -> None:
    """Refuse a certificate that is not for our key: the kubeconfig would fail later, less clearly."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except ValueError as exc:
        raise BadAnswer("the issued certificate is not a PEM certificate") from exc
    ours = serialization.load_pem_private_key(key_pem.encode(), password=None).public_key()
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, public) != ours.public_bytes(
        serialization.Encoding.DER, public
    ):
        raise BadAnswer("the issued certificate is not for the key we sent")
