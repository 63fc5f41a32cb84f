"""The provider's authentication endpoint: consumers that prove who they are get an identity.

``GET /ids`` says who this cluster is (and its key's fingerprint), ``POST /nonce`` hands out a single-use
nonce, ``POST /identity`` turns a signed request with a CSR into a short-lived client certificate confined
to the consumer's tenant namespace (see docs/peering.md, "Authentication"); ``GET /healthz`` answers probes.

The order of the checks is the security of the endpoint. Everything that needs no API call comes first:
the message's shape, the CSR, the consumer's signature with the key it presents, the single-use nonce. Only
then does the endpoint look at what this cluster knows of the consumer (a
:class:`~liqo.api.provisioner.PeerRecord`): a refused consumer stays refused; a known consumer must present
the key pinned for its cluster ID and needs no token; an unknown one must also prove it holds the token,
which is read only then. The :class:`~liqo.api.provisioner.Provisioner` — the only code that creates
anything — runs last, and pins the key of a new consumer before it signs anything. A forged, replayed or
wrongly keyed request therefore costs the provider a signature check and creates nothing. Logs name the
peer and the outcome, never the token, a signature, a nonce or a certificate.

The provisioner is a Protocol (in :mod:`liqo.api.provisioner`, as sharing's policy gate implements it too)
so that the HTTP behaviour is tested with a fake over real sockets, and the Kubernetes side
(:mod:`liqo.peering.provisioning`) on a real cluster, each on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

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
    check_csr,
    parse_json,
    sign_answer,
    verify_request,
    verify_token,
)

log = logging.getLogger(__name__)


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


def auth_app(
    *,
    cluster_id: str,
    cluster_name: str,
    key: ClusterKey,
    network: ClusterNetwork,
    token_source: Callable[[], Awaitable[str]],
    provisioner: Provisioner,
    nonces: NonceStore,
) -> web.Application:
    """The authentication endpoint of cluster ``cluster_id``, ready for an ``AppRunner``.

    ``key`` signs the answers, which tell consumers this cluster's ``network``. ``token_source`` is called
    only for enrolments, so a rotated token takes effect at once.
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
        if needs_token:
            try:
                token = await token_source()
            except Exception:
                log.exception("cannot read this cluster's authentication token")
                token = ""
            if not token:
                log.error("no authentication token is configured: new consumers are refused")
                return _refuse(request, 503, "this cluster has no authentication token yet")
            if not verify_token(token, message):
                return _refuse(request, 401, "bad token signature: a wrong token (or none), or an altered request")
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
        except PeerDenied as exc:
            return _refuse(request, 403, f"{cluster_name} refuses {ask.cluster_name}: {exc.reason}")
        except ProvisioningError as exc:
            log.error("identity for %s (%s) failed: %s", ask.cluster_name, ask.cluster_id, exc)
            return _json({"reason": str(exc)}, status=500)
        except Exception:
            log.exception("identity for %s (%s) failed", ask.cluster_name, ask.cluster_id)
            return _json({"reason": "the provider failed to issue an identity (its logs say why)"}, status=500)
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
            "enrolled with the token" if needs_token else "known key",
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
