"""Certificates signed by the cluster itself, through CertificateSigningRequests (``certificates.k8s.io/v1``).

Two parts of liqo need one. The provider's manager has its consumers' client certificates signed (signer
``kubernetes.io/kube-apiserver-client``; the consumer made the key and the request), and the virtual
kubelet, when it runs as a pod, its own serving certificate (signer ``kubernetes.io/kubelet-serving``,
which the API server trusts for kubelets; key and request made here). Neither holds a CA key:
kube-controller-manager signs what is approved, and ``expirationSeconds`` keeps it short-lived. Both
approve their own requests and delete them once the certificate is read: a request has no further use, and
renewals would pile them up.

Approval is the step to get right. The right to approve is granted per signer, not per request: whoever
may approve for a signer may approve *anyone's* request for it (the API server checks nothing else;
tests/integration/virtualkubelet/test_serving_cert.py shows it). So :meth:`CsrIssuer.sign` approves nothing but the
object its own create returned, and only once that object says it is ours: our user (the API server's
answer to a SelfSubjectReview) as the requester, our request, our signer. The approval is a PUT at that
object's resourceVersion, so a request changed in between is a conflict, never approved.

Pure parts — a request's key and PEM, the CSR object, the approval, reading the outcome, when to renew —
are kept apart from the I/O (:class:`CsrIssuer`, :func:`issue_kubelet_serving`, :func:`keep_renewed`);
the renewal loop takes its clock, its sleep and its randomness, so tests drive it without waiting.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from liqo.kube import pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, ConflictError, GoneError, KubeError, NotFoundError
from liqo.kube.kubeconfig import load_cert_chain
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.resources import CSRS

log = logging.getLogger(__name__)

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
CLIENT_USAGES = ("client auth", "digital signature")
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
KUBELET_SERVING_USAGES = ("digital signature", "key encipherment", "server auth")
"""kube-controller-manager's kubelet-serving signer fails any request with other usages."""
MIN_EXPIRATION_SECONDS = 600
"""The API server refuses ``expirationSeconds`` below 10 minutes."""
SIGNING_TIMEOUT = 30.0
"""How long an approved request may wait for its certificate: kube-controller-manager signs in milliseconds."""
RENEW_AFTER = 2 / 3
"""Renew once two thirds of a certificate's lifetime have passed: a third of it is left to retry in."""
RENEW_JITTER = 0.1
"""Up to this fraction of the lifetime earlier, at random, so that processes started together do not renew together."""
RETRY_BASE = 5.0
RETRY_MAX = 300.0
"""A failed renewal is retried after 5 s, doubling up to 5 min, while the current certificate is served."""
_SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_REFUSALS = {"Denied": "denied", "Failed": "not signed"}


class SigningError(Exception):
    """The cluster issued no certificate: the request was refused, failed, vanished, or was not ours to approve."""


# -- pure ---------------------------------------------------------------------------------------------


def make_request(
    *, common_name: str, organizations: Sequence[str] = (), ip_addresses: Sequence[str] = ()
) -> tuple[str, str]:
    """A fresh ECDSA P-256 key and a CSR for it, both PEM: subject ``O=<organizations>, CN=<common_name>``.

    Raises:
        ValueError: an address is not an IP address.
    """
    key = pki.new_key()
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        pki.subject(common_name=common_name, organizations=organizations)
    )
    sans = pki.alternative_names(ip_addresses=ip_addresses)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    request = builder.sign(key, hashes.SHA256())
    return pki.key_pem(key).decode(), request.public_bytes(serialization.Encoding.PEM).decode()


def kubelet_serving_request(*, node_name: str, ip_addresses: Sequence[str]) -> tuple[str, str]:
    """A key and a CSR the kubelet-serving signer accepts: ``O=system:nodes, CN=system:node:<node_name>``, IP SANs.

    The API server checks the address it dials against the IP SANs; the signer refuses a request without
    SANs, or whose subject is anything else.
    """
    return make_request(
        common_name=f"system:node:{node_name}", organizations=("system:nodes",), ip_addresses=ip_addresses
    )


def csr_object(
    *,
    csr_pem: str,
    signer: str,
    usages: Sequence[str],
    expiration_seconds: int,
    generate_name: str,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The CertificateSigningRequest asking ``signer`` for a certificate valid ``expiration_seconds``."""
    return {
        "apiVersion": CSRS.api_version,
        "kind": CSRS.kind,
        "metadata": {"generateName": generate_name, "labels": dict(labels)},
        "spec": {
            "request": base64.b64encode(csr_pem.encode()).decode(),
            "signerName": signer,
            "expirationSeconds": expiration_seconds,
            "usages": list(usages),
        },
    }


def not_ours(created: Mapping[str, Any], *, asked: Mapping[str, Any], username: str) -> str | None:
    """Why the request the API server stored, ``created``, is not the one we ``asked`` for as ``username``.

    None when it is: same request, same signer, and the API server recorded ``username`` as the requester.
    """
    spec, wanted = created.get("spec") or {}, asked["spec"]
    if spec.get("username") != username:
        return f"requested by {spec.get('username')!r}, not by us ({username!r})"
    for field in ("request", "signerName"):
        if spec.get(field) != wanted[field]:
            return f"its {field} is not the one we sent"
    return None


def approved(csr: dict[str, Any], *, reason: str, message: str) -> dict[str, Any]:
    """``csr`` with an ``Approved`` condition, for the ``approval`` subresource."""
    condition = {"type": "Approved", "status": "True", "reason": reason, "message": message}
    status = csr.get("status") or {}
    return csr | {"status": status | {"conditions": [*(status.get("conditions") or []), condition]}}


def certificate_of(csr: Mapping[str, Any]) -> str | None:
    """The issued PEM certificate of ``csr``; None while pending.

    Raises:
        SigningError: the request was denied, or the signer failed it.
    """
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        verdict = _REFUSALS.get(condition.get("type"))
        if verdict and condition.get("status") == "True":
            detail = condition.get("message") or condition.get("reason") or ""
            name = (csr.get("metadata") or {}).get("name", "")
            raise SigningError(f"CertificateSigningRequest {name} was {verdict}: {detail}")
    certificate = status.get("certificate")
    return base64.b64decode(certificate).decode() if certificate else None


@dataclass(frozen=True)
class CertifiedKey:
    """A certificate (PEM, leaf first) and its private key (PEM), with the certificate's validity."""

    cert: str
    key: str
    not_before: datetime.datetime
    not_after: datetime.datetime

    @classmethod
    def from_pem(cls, *, cert: str, key: str) -> CertifiedKey:
        """Read ``cert``'s validity, checking that it certifies ``key``.

        Raises:
            SigningError: the certificate is for another key (or is no certificate).
        """
        try:
            leaf = x509.load_pem_x509_certificate(cert.encode())
        except ValueError as exc:
            raise SigningError(f"the issued certificate does not parse: {exc}") from None
        private = serialization.load_pem_private_key(key.encode(), password=None)
        if _spki(leaf.public_key()) != _spki(private.public_key()):
            raise SigningError("the issued certificate is for another key than the one we asked for")
        return cls(cert=cert, key=key, not_before=leaf.not_valid_before_utc, not_after=leaf.not_valid_after_utc)

    def load_into(self, context: ssl.SSLContext) -> None:
        """Make ``context`` present this pair, from its next handshake on.

        A listener keeps its context: OpenSSL copies the context's certificate into each new connection, so
        the connections open already keep the old one and every later one gets this one (tests/unit/kube/
        test_csr.py shows it). :meth:`from_pem` checked that key and certificate match, so the context is
        never left with a certificate whose key it lacks.
        """
        load_cert_chain(context, self.cert, self.key)


def _spki(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def renewal_time(
    *, not_before: datetime.datetime, not_after: datetime.datetime, draw: float = 0.0
) -> datetime.datetime:
    """When to renew a certificate valid from ``not_before`` to ``not_after``.

    At :data:`RENEW_AFTER` of its lifetime, earlier by up to :data:`RENEW_JITTER` of it as ``draw`` goes
    from 0 to 1 (a random number, from the caller).
    """
    return not_before + (not_after - not_before) * (RENEW_AFTER - RENEW_JITTER * draw)


# -- I/O ----------------------------------------------------------------------------------------------


class CsrIssuer:
    """Has the cluster sign certificates for the user of ``client``: create, check it is ours, approve, wait, delete."""

    def __init__(self, *, client: KubeClient, timeout: float = SIGNING_TIMEOUT) -> None:
        self._client = client
        self._timeout = timeout
        self._username: str | None = None

    async def username(self) -> str:
        """Who the API server says we are (one SelfSubjectReview, then remembered)."""
        if self._username is None:
            review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            answer = await self._client.request("POST", _SELF_SUBJECT_REVIEWS, body=review)
            self._username = str(answer["status"]["userInfo"]["username"])
        return self._username

    async def sign(self, manifest: dict[str, Any], *, reason: str, message: str) -> str:
        """Create the CertificateSigningRequest ``manifest``, approve it, return its certificate (PEM).

        The request is deleted whatever the outcome.

        Raises:
            SigningError: it was not ours to approve, was changed before the approval, denied, failed,
                deleted, or not signed in time (the message names it and what to check).
            KubeError: the API server refused or could not be reached.
        """
        username = await self.username()
        created = await self._client.create(CSRS, manifest)
        name = created["metadata"]["name"]
        try:
            why = not_ours(created, asked=manifest, username=username)
            if why:
                raise SigningError(f"CertificateSigningRequest {name} is not the one we made ({why}): not approved")
            try:
                current = await self._client.replace(
                    CSRS, approved(created, reason=reason, message=message), subresource="approval"
                )
            except ConflictError:
                raise SigningError(
                    f"CertificateSigningRequest {name} changed between its creation and our approval: not approved"
                ) from None
            try:
                async with asyncio.timeout(self._timeout):
                    return await self._wait_for_certificate(current)
            except TimeoutError:
                signer = manifest["spec"]["signerName"]
                raise SigningError(
                    f"CertificateSigningRequest {name} was approved but the cluster signed no certificate within"
                    f" {self._timeout:.0f} s: check that kube-controller-manager is running with a signing CA for"
                    f" {signer} (--cluster-signing-cert-file and --cluster-signing-key-file) and what its log says"
                    f" about {name} (after an API server outage it resumes signing up to a minute later)"
                ) from None
        finally:
            try:
                await self._client.delete(CSRS, name)
            except NotFoundError:
                pass
            except KubeError as exc:
                log.warning("could not delete CertificateSigningRequest %s: %s", name, exc)

    async def _wait_for_certificate(self, csr: dict[str, Any]) -> str:
        """Watch ``csr`` until it carries a certificate (the caller bounds the wait)."""
        name = csr["metadata"]["name"]
        while True:
            certificate = certificate_of(csr)
            if certificate:
                return certificate
            version = csr["metadata"]["resourceVersion"]
            try:
                async for event in self._client.watch(
                    CSRS, resource_version=version, field_selector=f"metadata.name={name}", timeout_seconds=60
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        certificate = certificate_of(event["object"])
                        if certificate:
                            return certificate
                    elif event["type"] == "DELETED":
                        raise SigningError(f"CertificateSigningRequest {name} was deleted before it was signed")
            except ApiError as exc:
                # The server ended the watch with an error of its own: 410 (the version compacted), or a 5xx
                # (an API server without a watch cache answers 500 "PrevKv=nil" when etcd compacted under it).
                if not isinstance(exc, GoneError) and exc.status < 500:
                    raise
                log.info("watch of CertificateSigningRequest %s ended (%s): reading it afresh", name, exc)
            # The server ended the watch: read the object afresh and watch on from its version.
            try:
                csr = await self._client.get(CSRS, name)
            except NotFoundError:
                raise SigningError(f"CertificateSigningRequest {name} was deleted before it was signed") from None


async def issue_kubelet_serving(
    issuer: CsrIssuer,
    *,
    node_name: str,
    ip_addresses: Sequence[str],
    expiration_seconds: int,
    generate_name: str,
    labels: Mapping[str, str],
) -> CertifiedKey:
    """A fresh key and a kubelet serving certificate for it, valid ``expiration_seconds``, from the cluster's signer.

    Raises:
        SigningError: see :meth:`CsrIssuer.sign`.
        KubeError: the API server refused or could not be reached.
    """
    key, request = kubelet_serving_request(node_name=node_name, ip_addresses=ip_addresses)
    manifest = csr_object(
        csr_pem=request,
        signer=KUBELET_SERVING_SIGNER,
        usages=KUBELET_SERVING_USAGES,
        expiration_seconds=expiration_seconds,
        generate_name=generate_name,
        labels=labels,
    )
    cert = await issuer.sign(
        manifest,
        reason="RequesterApproved",
        message=f"serving certificate of {node_name} at {', '.join(ip_addresses)}, approved by its own requester",
    )
    return CertifiedKey.from_pem(cert=cert, key=key)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def keep_renewed(
    obtain: Callable[[], Awaitable[CertifiedKey]],
    *,
    current: CertifiedKey,
    install: Callable[[CertifiedKey], None],
    now: Callable[[], datetime.datetime] = _now,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    draw: Callable[[], float] = random.random,
) -> NoReturn:
    """Renew ``current`` before it expires, and each pair after it, handing every new pair to ``install``.

    Runs until cancelled. A failed renewal is retried after :data:`RETRY_BASE` seconds, doubling up to
    :data:`RETRY_MAX`, while ``current`` stays installed (an error is logged once it has expired: the API
    server then refuses it).
    """
    retries = ItemExponentialFailureRateLimiter(base_delay=RETRY_BASE, max_delay=RETRY_MAX)
    due = renewal_time(not_before=current.not_before, not_after=current.not_after, draw=draw())
    while True:
        wait = (due - now()).total_seconds()
        if wait > 0:
            await sleep(wait)
        try:
            renewed = await obtain()
        except (SigningError, KubeError) as exc:
            delay = retries.when(None)
            expired = now() >= current.not_after
            log.log(
                logging.ERROR if expired else logging.WARNING,
                "could not renew the certificate (valid until %s%s): %s; retrying in %.0f s",
                current.not_after.isoformat(),
                ", expired" if expired else "",
                exc,
                delay,
            )
            due = now() + datetime.timedelta(seconds=delay)
            continue
        retries.forget(None)
        install(renewed)
        log.info("renewed the certificate: valid until %s", renewed.not_after.isoformat())
        current = renewed
        due = renewal_time(not_before=current.not_before, not_after=current.not_after, draw=draw())
