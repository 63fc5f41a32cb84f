"""The provider's authentication endpoint: consumers that prove they hold the token get an identity.

``GET /ids`` says who this cluster is, ``POST /nonce`` hands out a single-use nonce, ``POST /identity``
turns a signed request with a CSR into a short-lived client certificate confined to the consumer's tenant
namespace (see docs/peering.md, "Authentication"); ``GET /healthz`` answers probes.

The order of the checks is the security of the endpoint: the signature and the nonce are verified before
anything else is looked at closely, and the :class:`Provisioner` — the only code that creates anything —
runs last. A wrong token, a replay or a tampered field therefore costs the provider one HMAC and creates
nothing. Logs name the peer and the outcome, never the token, a signature, a nonce or a certificate.

The provisioner is a Protocol so that the HTTP behaviour is tested with a fake over real sockets, and the
Kubernetes side (:mod:`liqo.peering.provisioning`) on a real cluster, each on its own.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from liqo.peering.authprotocol import (
    MAX_BODY,
    SIGNATURE,
    IdentityRequest,
    IdentityResponse,
    InvalidMessage,
    NonceStore,
    check_csr,
    parse_json,
    sign,
    verify,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Issued:
    """What the provisioner hands back: where the consumer reaches this cluster, and its certificate."""

    api_server_url: str
    ca_pem: str
    certificate_pem: str
    namespace: str
    expires_at: datetime.datetime


class PeerDenied(Exception):
    """This provider refuses the consumer (a SharingPolicy denies it): the answer is 403 with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProvisioningError(Exception):
    """Provisioning failed for a reason safe to tell the consumer (the answer is 500 with it)."""


class Provisioner(Protocol):
    """Creates what an authenticated consumer needs and signs its CSR."""

    async def provision(self, *, consumer_id: str, consumer_name: str, auth_url: str | None, csr_pem: str) -> Issued:
        """Ensure the consumer's tenant namespace, RBAC and ForeignCluster; sign the CSR.

        Raises:
            PeerDenied: a policy refuses this consumer.
            ProvisioningError: something failed that the consumer may be told about.
        """
        ...


def _json(body: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _refuse(request: web.Request, status: int, reason: str) -> web.Response:
    log.info("%s %s from %s refused (%d): %s", request.method, request.path, request.remote, status, reason)
    return _json({"reason": reason}, status=status)


def auth_app(
    *,
    cluster_id: str,
    cluster_name: str,
    token_source: Callable[[], Awaitable[str]],
    provisioner: Provisioner,
    nonces: NonceStore,
) -> web.Application:
    """The authentication endpoint of cluster ``cluster_id``, ready for an ``AppRunner``.

    ``token_source`` is called for every identity request, so a rotated token takes effect at once.
    """

    async def ids(_: web.Request) -> web.Response:
        return _json({"clusterID": cluster_id, "clusterName": cluster_name})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def nonce(_: web.Request) -> web.Response:
        return _json({"nonce": nonces.issue(), "expiresIn": int(nonces.ttl)})

    async def identity(request: web.Request) -> web.Response:
        try:
            message = parse_json(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return _refuse(request, 413, f"the body is larger than {MAX_BODY} bytes")
        except InvalidMessage as exc:
            return _refuse(request, 400, str(exc))
        try:
            token = await token_source()
        except Exception:
            log.exception("cannot read this cluster's authentication token")
            token = ""
        if not token:
            log.error("no authentication token is configured: every identity request is refused")
            return _refuse(request, 503, "this cluster has no authentication token yet")
        if SIGNATURE not in message:
            return _refuse(request, 401, "the request is not signed")
        if not verify(token, message, message[SIGNATURE]):
            return _refuse(request, 401, "bad signature: a wrong token, or an altered request")
        try:
            ask = IdentityRequest.from_message(message)
        except InvalidMessage as exc:
            return _refuse(request, 400, str(exc))
        # A replay has a valid signature: only the nonce tells it apart.
        if not nonces.consume(ask.nonce):
            return _refuse(request, 401, "unknown, expired or already used nonce")
        try:
            csr = check_csr(ask.csr, cluster_id=ask.cluster_id)
        except InvalidMessage as exc:
            return _refuse(request, 400, str(exc))
        # The CSR goes on re-encoded from what was checked: whatever else the PEM text held (more blocks,
        # other headers) can never reach a parser that reads it differently.
        checked = csr.public_bytes(serialization.Encoding.PEM).decode()
        try:
            issued = await provisioner.provision(
                consumer_id=ask.cluster_id, consumer_name=ask.cluster_name, auth_url=ask.auth_url, csr_pem=checked
            )
        except PeerDenied as exc:
            return _refuse(request, 403, f"{cluster_name} does not share with {ask.cluster_name}: {exc.reason}")
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
        ).to_message()
        answer[SIGNATURE] = sign(token, answer, nonce=ask.nonce)
        log.info(
            "identity issued to %s (%s) from %s: namespace %s, valid until %s",
            ask.cluster_name,
            ask.cluster_id,
            request.remote,
            issued.namespace,
            answer["expiresAt"],
        )
        return _json(answer)

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_get("/ids", ids)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/nonce", nonce)
    app.router.add_post("/identity", identity)
    return app
