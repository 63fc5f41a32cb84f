"""The provider's authentication endpoint: consumers that prove who they are get an identity.

``GET /ids`` says who this cluster is (and its key's fingerprint), ``POST /nonce`` hands out a single-use
nonce, ``POST /identity`` turns a signed request with a CSR into a short-lived client certificate confined
to the consumer's tenant namespace (see docs/peering.md, "Authentication"); ``GET /healthz`` answers probes.

The order of the checks is the security of the endpoint. First the source: each address may make a burst
of requests to ``/nonce`` and ``/identity``, then a few a second (:class:`~liqo.kube.ratelimit.SourceLimiter`);
past that it is answered 429 with ``Retry-After`` before its request is even read. Then everything that needs
no API call: the message's shape (names must be printable: they reach logs), the CSR, the consumer's
signature with the key it presents, the single-use nonce. Only then does the endpoint look at what this
cluster knows of the consumer (a :class:`~liqo.api.provisioner.PeerRecord`), in caches of its own: a refused
consumer stays refused; a known consumer must present
the key pinned for its cluster ID and needs no token. An unknown one must also prove an enrolment token
(:mod:`liqo.peering.tokens`): its signature is checked first, then the one Secret of that token is read by
name — a wrong token costs that read, no more —, then the caps on tenants, and only then is the token used
up (:mod:`liqo.peering.enrolment`). The :class:`~liqo.api.provisioner.Provisioner` — the only code that
creates anything for the consumer — runs last, and pins the key of a new consumer before it signs anything;
if it fails, the token is recorded again. A forged, replayed or wrongly keyed request therefore costs the
provider a signature check and creates nothing. Logs name the peer and the outcome, never the token, a
signature, a nonce or a certificate.

Nothing a request does lists the cluster: what the endpoint knows of consumers (their ForeignClusters, who is
enrolled and who accepted an offer, the SharingPolicies) comes from informers it runs itself — every replica
serves the endpoint, leader or not — and until they have listed it answers 503 "retry later" rather than
guess. A request costs the API server at most the one token read, and then the writes that provisioning makes.

The provisioner is a Protocol (in :mod:`liqo.api.provisioner`, as sharing's policy gate implements it too)
so that the HTTP behaviour is tested with a fake over real sockets, and the Kubernetes side
(:mod:`liqo.peering.provisioning`) on a real cluster, each on its own.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from cryptography.hazmat.primitives import serialization

from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import (
    AuthenticatedConsumer,
    PeerDenied,
    Provisioner,
    ProvisioningBusy,
    ProvisioningError,
    admission,
)
from liqo.kube.ratelimit import SourceLimiter, check_bucket
from liqo.peering.authprotocol import (
    MAX_BODY,
    IdentityRequest,
    IdentityResponse,
    InvalidMessage,
    NonceStore,
    UnprovenToken,
    check_csr,
    enrolment_fingerprint,
    parse_json,
    sign_answer,
    verify_request,
)
from liqo.peering.enrolment import Refusal
from liqo.peering.tokens import UNKNOWN_TOKEN, EnrolmentToken, token_id, token_refusal

log = logging.getLogger(__name__)


class Enrolments(Protocol):
    """The tokens and caps an enrolment is checked against (:class:`~liqo.peering.enrolment.KubeEnrolments`)."""

    async def find(self, fingerprint: str) -> EnrolmentToken | None:
        """The token whose key has ``fingerprint``; None if there is none."""
        ...

    async def refusal(self) -> Refusal | None:
        """Why no new consumer may enrol now, or None."""
        ...

    async def consume(self, token: EnrolmentToken) -> bool:
        """Use ``token`` up; False if another enrolment did first."""
        ...

    async def restore(self, token: EnrolmentToken) -> None:
        """Record ``token`` again after a failed enrolment."""
        ...

    async def settle(self, consumer_id: str, *, key_fingerprint: str) -> None:
        """Return once what the endpoint reads counts ``consumer_id``, just enrolled with that key (or after a bound).

        So that this replica's next answer — the consumer's renewal, another's enrolment against the caps —
        is judged with it.
        """
        ...


class Caches(Protocol):
    """The informers the provisioner and enrolments read: run while the endpoint serves, listed once before use."""

    @property
    def has_synced(self) -> bool:
        """Whether every one has listed."""
        ...

    async def run(self) -> None:
        """Run them until cancelled."""
        ...


DEFAULT_BURST = 20
"""Requests one address may make at once: a handshake is two, a peer command tried a few times a handful."""
DEFAULT_RATE = 2.0
"""Requests a second one address may make, sustained: a consumer renews every 80 minutes."""


@dataclass(frozen=True)
class RateLimit:
    """What each source address may ask of ``/nonce`` and ``/identity``: ``burst`` at once, ``per_second`` after."""

    burst: int = DEFAULT_BURST
    per_second: float = DEFAULT_RATE

    def __post_init__(self) -> None:
        check_bucket(rate=self.per_second, burst=self.burst)

    def limiter(self) -> SourceLimiter:
        """A fresh limiter applying it, one bucket per source."""
        return SourceLimiter(rate=self.per_second, burst=self.burst)


LIMITED = frozenset({"/nonce", "/identity"})
"""The paths a source is limited on: those that cost the provider work (``/ids`` and ``/healthz`` are static)."""
_IPV6_SOURCE_PREFIX = 64


def source_of(remote: str | None) -> str:
    """The source a request is counted against: its peer's address; for IPv6, the /64 it is in (pure).

    A host is given a whole /64 and picks addresses in it at will: counted one by one, an IPv6 host would
    have as many buckets as it likes. An IPv4-mapped address is its IPv4 address; no address (a Unix socket)
    or an unparsable one is one source, ``unknown``.
    """
    try:
        address = ipaddress.ip_address((remote or "").split("%", 1)[0])
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, _IPV6_SOURCE_PREFIX), strict=False))
    return str(address)


def _json(body: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


BUSY_RETRY_AFTER = 2
"""Seconds a consumer is asked to wait on a 503 (what passes by itself): a namespace deletes in seconds."""


def _busy(reason: str) -> web.Response:
    """503 for what will pass by itself (starting, an API server hiccup, a release under way): retry soon."""
    response = _json({"reason": reason}, status=503)
    response.headers["Retry-After"] = str(BUSY_RETRY_AFTER)
    return response


def _refuse(request: web.Request, status: int, reason: str) -> web.Response:
    log.info("%s %s from %s refused (%d): %s", request.method, request.path, request.remote, status, reason)
    return _json({"reason": reason}, status=status)


NOT_SYNCED = "the provider is starting and has not loaded what it knows of its consumers yet; retry later"


def _throttle(limiter: SourceLimiter) -> Middleware:
    """The middleware answering 429 to a source past its rate on :data:`LIMITED` paths, before anything else."""

    @web.middleware
    async def throttle(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in LIMITED:
            return await handler(request)
        source = source_of(request.remote)
        verdict = limiter.admit(source)
        if verdict.admitted:
            return await handler(request)
        retry_after = max(1, math.ceil(verdict.wait))
        reason = (
            f"too many requests from {source}: at most {limiter.burst} at once and {limiter.rate:g} a second from"
            f" one address; retry in {retry_after} s"
        )
        # Once per flood, not once per request: a flood must not become one of the logs.
        (log.info if verdict.first_refusal else log.debug)("%s %s: %s", request.method, request.path, reason)
        response = _json({"reason": reason}, status=429)
        response.headers["Retry-After"] = str(retry_after)
        return response

    return throttle


def _failed(request: web.Request, exc: Exception, *, cluster_name: str, ask: IdentityRequest) -> web.Response:
    """The answer to a provisioning that raised ``exc``: the reason if it may be told, else a pointer to the logs."""
    if isinstance(exc, PeerDenied):
        return _refuse(request, 403, f"{cluster_name} refuses {ask.cluster_name}: {exc.reason}")
    if isinstance(exc, ProvisioningBusy):
        log.info("identity for %s (%s) not yet: %s", ask.cluster_name, ask.cluster_id, exc)
        return _busy(str(exc))
    if isinstance(exc, ProvisioningError):
        log.error("identity for %s (%s) failed: %s", ask.cluster_name, ask.cluster_id, exc)
        return _json({"reason": str(exc)}, status=500)
    log.error("identity for %s (%s) failed", ask.cluster_name, ask.cluster_id, exc_info=exc)
    return _json({"reason": "the provider failed to issue an identity (its logs say why)"}, status=500)


async def _enrol(
    request: web.Request, message: dict[str, Any], *, enrolments: Enrolments
) -> EnrolmentToken | web.Response:
    """The token this enrolment uses up, or the answer refusing it (nothing done but reads)."""
    try:
        fingerprint = enrolment_fingerprint(message)
    except UnprovenToken as exc:
        return _refuse(request, 401, str(exc))
    try:
        token = await enrolments.find(fingerprint)
    except Exception:
        log.exception("cannot read enrolment token %s", token_id(fingerprint))
        return _busy("the provider cannot check enrolment tokens right now; retry later")
    refusal = token_refusal(token, fingerprint=fingerprint, now=datetime.datetime.now(datetime.UTC))
    if refusal:
        return _refuse(request, 401, refusal)
    assert token is not None  # no refusal: it is the token
    try:
        full = await enrolments.refusal()
    except Exception:
        log.exception("cannot count this cluster's tenants")
        return _busy("the provider cannot count its consumers right now; retry later")
    if full is not None:
        return _refuse(request, full.status, full.reason)
    try:
        used = await enrolments.consume(token)
    except Exception:
        log.exception("cannot use up enrolment token %s", token.id)
        return _busy("the provider cannot check enrolment tokens right now; retry later")
    # Another enrolment with the same token got past the delete first.
    return token if used else _refuse(request, 401, UNKNOWN_TOKEN)


def _running(caches: Caches) -> Callable[[web.Application], AsyncIterator[None]]:
    """The cleanup context running ``caches`` for as long as the application runs."""

    async def running(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(caches.run(), name="authentication endpoint caches")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    return running


def auth_app(
    *,
    cluster_id: str,
    cluster_name: str,
    key: ClusterKey,
    network: ClusterNetwork,
    enrolments: Enrolments,
    provisioner: Provisioner,
    caches: Caches,
    nonces: NonceStore,
    limiter: SourceLimiter,
) -> web.Application:
    """The authentication endpoint of cluster ``cluster_id``, ready for an ``AppRunner``.

    ``key`` signs the answers, which tell consumers this cluster's ``network``. ``enrolments`` is asked
    only for consumers this cluster has no key for. ``caches`` — what ``provisioner`` and ``enrolments``
    read — run as long as the application does; ``limiter`` says how much each source may ask.
    """

    async def ids(_: web.Request) -> web.Response:
        return _json({"clusterID": cluster_id, "clusterName": cluster_name, "keyFingerprint": key.fingerprint})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def nonce(_: web.Request) -> web.Response:
        return _json({"nonce": nonces.issue(), "expiresIn": int(nonces.ttl)})

    async def identity(request: web.Request) -> web.Response:
        # 1. What needs no API call: shape, CSR, the consumer's signature, the nonce.
        try:
            message = parse_json(await request.read())
            ask = IdentityRequest.from_message(message)
        except web.HTTPRequestEntityTooLarge:
            return _refuse(request, 413, f"the body is larger than {MAX_BODY} bytes")
        except InvalidMessage as exc:
            return _refuse(request, 400, str(exc))
        try:
            csr = check_csr(ask.csr, cluster_id=ask.cluster_id)
        except InvalidMessage as exc:
            return _refuse(request, 400, str(exc))
        if not verify_request(message, public_key=ask.public_key):
            return _refuse(request, 401, "the request is not signed by the key it presents (or was altered)")
        # A replay has valid signatures: only the nonce tells it apart.
        if not nonces.consume(ask.nonce):
            return _refuse(request, 401, "unknown, expired or already used nonce")
        # 2. What this cluster knows of the consumer; the token only for a consumer it has no key for.
        if not caches.has_synced:
            return _busy(NOT_SYNCED)
        fingerprint = ask.key_fingerprint
        try:
            record = await provisioner.record(ask.cluster_id)
        except Exception:
            log.exception("cannot read this cluster's record of %s", ask.cluster_id)
            return _busy("the provider cannot check who you are right now; retry later")
        needs_token, refusal = admission(record, consumer_id=ask.cluster_id, key_fingerprint=fingerprint)
        if refusal:
            return _refuse(request, 403, refusal)
        ticket = None
        if needs_token:
            enrolled = await _enrol(request, message, enrolments=enrolments)
            if isinstance(enrolled, web.Response):
                return enrolled
            ticket = enrolled
        # 3. Provisioning: the only step that creates anything. The CSR goes on re-encoded from what was
        # checked: whatever else the PEM text held can never reach a parser that reads it differently.
        checked = csr.public_bytes(serialization.Encoding.PEM).decode()
        try:
            issued = await provisioner.provision(
                AuthenticatedConsumer(
                    consumer_id=ask.cluster_id,
                    consumer_name=ask.cluster_name,
                    auth_url=ask.auth_url,
                    csr_pem=checked,
                    key_fingerprint=fingerprint,
                    network=ask.network,
                )
            )
        except Exception as exc:
            if ticket is not None:
                # Nothing was made for the consumer: its token enrols it when it tries again.
                try:
                    await enrolments.restore(ticket)
                except Exception:
                    log.exception("could not record enrolment token %s again", ticket.id)
            return _failed(request, exc, cluster_name=cluster_name, ask=ask)
        if ticket is not None:
            await enrolments.settle(ask.cluster_id, key_fingerprint=fingerprint)
        answer = IdentityResponse(
            cluster_id=cluster_id,
            cluster_name=cluster_name,
            api_server_url=issued.api_server_url,
            ca=issued.ca_pem,
            certificate=issued.certificate_pem,
            namespace=issued.namespace,
            expires_at=issued.expires_at,
            public_key=key.public_pem,
            network=network,
        ).to_message()
        log.info(
            "identity issued to %s (%s, key %s, %s, network: %s) from %s: namespace %s, valid until %s",
            ask.cluster_name,
            ask.cluster_id,
            fingerprint,
            f"enrolled with token {ticket.id}" if ticket else "known key",
            ask.network,
            request.remote,
            issued.namespace,
            answer["expiresAt"],
        )
        return _json(sign_answer(answer, key=key, nonce=ask.nonce))

    app = web.Application(client_max_size=MAX_BODY, middlewares=[_throttle(limiter)])
    app.cleanup_ctx.append(_running(caches))
    app.router.add_get("/ids", ids)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/nonce", nonce)
    app.router.add_post("/identity", identity)
    return app
