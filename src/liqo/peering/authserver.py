"""The provider's authentication endpoint: consumers that prove who they are get an identity.

``GET /ids`` says who this cluster is (and its key's fingerprint), ``POST /nonce`` hands out a single-use
nonce, ``POST /identity`` turns a signed request with a CSR into a short-lived client certificate confined
to the consumer's tenant namespace (see docs/peering.md, "Authentication"); ``GET /healthz`` answers probes.

The order of the checks is the security of the endpoint. Everything that needs no API call comes first:
the message's shape, the CSR, the consumer's signature with the key it presents, the single-use nonce. Only
then does the endpoint look at what this cluster knows of the consumer (a
:class:`~liqo.api.provisioner.PeerRecord`): a refused consumer stays refused; a known consumer must present
the key pinned for its cluster ID and needs no token. An unknown one must also prove an enrolment token
(:mod:`liqo.peering.tokens`): its signature is checked first, then the one Secret of that token is read by
name — a wrong token costs that read, no more —, then the caps on tenants, and only then is the token used
up (:mod:`liqo.peering.enrolment`). The :class:`~liqo.api.provisioner.Provisioner` — the only code that
creates anything for the consumer — runs last, and pins the key of a new consumer before it signs anything;
if it fails, the token is recorded again. A forged, replayed or wrongly keyed request therefore costs the
provider a signature check and creates nothing. Logs name the peer and the outcome, never the token, a
signature, a nonce or a certificate.

The provisioner is a Protocol (in :mod:`liqo.api.provisioner`, as sharing's policy gate implements it too)
so that the HTTP behaviour is tested with a fake over real sockets, and the Kubernetes side
(:mod:`liqo.peering.provisioning`) on a real cluster, each on its own.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Protocol

import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import PeerDenied, PeerRecord, Provisioner, ProvisioningError
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


def admission(record: PeerRecord | None, *, consumer_id: str, key_fingerprint: str) -> tuple[bool, str | None]:
    """Whether the consumer needs the token, or why it is refused, from this cluster's record (pure).

    Returns:
        ``(needs_token, refusal)``: a refusal is final for this request (403); otherwise the consumer must
        also prove the token unless its key is the one pinned for its cluster ID.
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
        return False, None
    return True, None


def _json(body: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _refuse(request: web.Request, status: int, reason: str) -> web.Response:
    log.info("%s %s from %s refused (%d): %s", request.method, request.path, request.remote, status, reason)
    return _json({"reason": reason}, status=status)


def _failed(request: web.Request, exc: Exception, *, cluster_name: str, ask: IdentityRequest) -> web.Response:
    """The answer to a provisioning that raised ``exc``: the reason if it may be told, else a pointer to the logs."""
    if isinstance(exc, PeerDenied):
        return _refuse(request, 403, f"{cluster_name} refuses {ask.cluster_name}: {exc.reason}")
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
        return _json({"reason": "the provider cannot check enrolment tokens right now; retry later"}, status=503)
    refusal = token_refusal(token, fingerprint=fingerprint, now=datetime.datetime.now(datetime.UTC))
    if refusal:
        return _refuse(request, 401, refusal)
    assert token is not None  # no refusal: it is the token
    try:
        full = await enrolments.refusal()
    except Exception:
        log.exception("cannot count this cluster's tenants")
        return _json({"reason": "the provider cannot count its consumers right now; retry later"}, status=503)
    if full is not None:
        return _refuse(request, full.status, full.reason)
    try:
        used = await enrolments.consume(token)
    except Exception:
        log.exception("cannot use up enrolment token %s", token.id)
        return _json({"reason": "the provider cannot check enrolment tokens right now; retry later"}, status=503)
    # Another enrolment with the same token got past the delete first.
    return token if used else _refuse(request, 401, UNKNOWN_TOKEN)


def auth_app(
    *,
    cluster_id: str,
    cluster_name: str,
    key: ClusterKey,
    network: ClusterNetwork,
    enrolments: Enrolments,
    provisioner: Provisioner,
    nonces: NonceStore,
) -> web.Application:
    """The authentication endpoint of cluster ``cluster_id``, ready for an ``AppRunner``.

    ``key`` signs the answers, which tell consumers this cluster's ``network``. ``enrolments`` is asked
    only for consumers this cluster has no key for.
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
        fingerprint = ask.key_fingerprint
        try:
            record = await provisioner.record(ask.cluster_id)
        except Exception:
            log.exception("cannot read this cluster's record of %s", ask.cluster_id)
            return _json({"reason": "the provider cannot check who you are right now; retry later"}, status=503)
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
                consumer_id=ask.cluster_id,
                consumer_name=ask.cluster_name,
                auth_url=ask.auth_url,
                csr_pem=checked,
                key_fingerprint=fingerprint,
                network=ask.network,
            )
        except Exception as exc:
            if ticket is not None:
                # Nothing was made for the consumer: its token enrols it when it tries again.
                try:
                    await enrolments.restore(ticket)
                except Exception:
                    log.exception("could not record enrolment token %s again", ticket.id)
            return _failed(request, exc, cluster_name=cluster_name, ask=ask)
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

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_get("/ids", ids)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/nonce", nonce)
    app.router.add_post("/identity", identity)
    return app
