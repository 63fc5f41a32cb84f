"""What a provider creates for an authenticated consumer, and how it gets the consumer's certificate signed.

The consumer's tenant namespace, a RoleBinding there giving its user the installed ClusterRole
``liqo-peer-tenant`` (touch ResourceRequests and NamespaceMaps, read ResourceOffers, nothing else), and a
ForeignCluster for the consumer if the admin has none yet. Everything is applied idempotently (a renewal
runs the same steps), labelled with the consumer's ID so that unpeer finds it.

Certificates are signed by the cluster itself through ``certificates.k8s.io/v1`` with the
``kubernetes.io/kube-apiserver-client`` signer: the provider never holds its CA key, the API server
trusts what comes out, and ``expirationSeconds`` makes the identity short-lived. The CSR object is deleted
once the certificate is read: it has no further use, and leaving it would accumulate one per renewal.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from cryptography import x509

from liqo.api import names
from liqo.api.resources import DISCOVERY, FOREIGN_CLUSTERS, OFFLOADING, SHARING
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, KubeError, NotFoundError
from liqo.kube.resources import CSRS, NAMESPACES, ROLE_BINDINGS
from liqo.peering.authserver import Issued, ProvisioningError
from liqo.peering.tenants import tenant_namespace_manifest

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kube-apiserver-client"
DEFAULT_IDENTITY_TTL = 7200
MIN_IDENTITY_TTL = 600
"""The API server refuses ``expirationSeconds`` below 10 minutes."""
CERTIFICATE_TIMEOUT = 30.0
_RBAC = "rbac.authorization.k8s.io"
_REFUSALS = {"Denied": "denied", "Failed": "not signed"}


def peer_rules() -> list[dict[str, Any]]:
    """What a consumer's user may do in its tenant namespace: ClusterRole ``liqo-peer-tenant``, bound there (pure).

    Requests read/write, offers read (and their status, to accept), NamespaceMaps read/write (their status
    read-only: it is this cluster's report).
    """
    return [
        {
            "apiGroups": [DISCOVERY],
            "resources": ["resourcerequests"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [DISCOVERY], "resources": ["resourcerequests/status"], "verbs": ["get"]},
        {"apiGroups": [SHARING], "resources": ["resourceoffers"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [SHARING], "resources": ["resourceoffers/status"], "verbs": ["get", "update", "patch"]},
        # The consumer declares its offloaded namespaces; only this cluster creates the twins and reports.
        {
            "apiGroups": [OFFLOADING],
            "resources": ["namespacemaps"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [OFFLOADING], "resources": ["namespacemaps/status"], "verbs": ["get"]},
    ]


def peer_role_binding(consumer_id: str) -> dict[str, Any]:
    """The binding of :func:`peer_rules` to the user ``liqo.io:peer:<consumer_id>`` in its tenant namespace (pure).

    A RoleBinding to an installed ClusterRole rather than a Role of our own: the manager then needs no right to
    write Roles, which would let it grant anything (docs/security.md, "The manager's rights").
    """
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": names.PEER_BINDING,
            "namespace": names.tenant_namespace(consumer_id),
            "labels": names.peer_labels(consumer_id),
        },
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": names.PEER_TENANT_ROLE},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": names.peer_user(consumer_id)}],
    }


def consumer_foreign_cluster(
    *, name: str, consumer_id: str, consumer_name: str, auth_url: str | None
) -> dict[str, Any]:
    """The ForeignCluster a provider creates for a new consumer (pure): incoming on demand, no outgoing."""
    spec: dict[str, Any] = {
        "clusterID": consumer_id,
        "clusterName": consumer_name,
        "incomingPeeringEnabled": "Auto",
        "outgoingPeeringEnabled": "No",
    }
    if auth_url:
        spec["authURL"] = auth_url
    return {
        "apiVersion": FOREIGN_CLUSTERS.api_version,
        "kind": FOREIGN_CLUSTERS.kind,
        "metadata": {"name": name, "labels": names.peer_labels(consumer_id)},
        "spec": spec,
    }


def csr_object(*, consumer_id: str, csr_pem: str, ttl: int) -> dict[str, Any]:
    """The CertificateSigningRequest asking the API server's client signer for a ``ttl``-second certificate."""
    return {
        "apiVersion": CSRS.api_version,
        "kind": CSRS.kind,
        "metadata": {"generateName": f"{names.PEER_BINDING}-", "labels": names.peer_labels(consumer_id)},
        "spec": {
            "request": base64.b64encode(csr_pem.encode()).decode(),
            "signerName": SIGNER,
            "expirationSeconds": ttl,
            "usages": ["client auth", "digital signature"],
        },
    }


def approved(csr: dict[str, Any], *, consumer_id: str) -> dict[str, Any]:
    """``csr`` with an ``Approved`` condition, for the ``approval`` subresource (pure)."""
    condition = {
        "type": "Approved",
        "status": "True",
        "reason": "LiqoPeerAuthenticated",
        "message": f"peer {consumer_id} proved it holds this cluster's liqo token",
    }
    status = csr.get("status") or {}
    return csr | {"status": status | {"conditions": [*(status.get("conditions") or []), condition]}}


def certificate_of(csr: dict[str, Any]) -> str | None:
    """The issued PEM certificate of ``csr``; None while pending.

    Raises:
        ProvisioningError: the request was denied or failed.
    """
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        verdict = _REFUSALS.get(condition.get("type"))
        if verdict and condition.get("status") == "True":
            detail = condition.get("message") or condition.get("reason") or ""
            raise ProvisioningError(f"the certificate signing request was {verdict}: {detail}")
    certificate = status.get("certificate")
    return base64.b64decode(certificate).decode() if certificate else None


class KubeProvisioner:
    """The real :class:`~liqo.peering.authserver.Provisioner`: RBAC, ForeignCluster and a signed CSR.

    ``api_server_url`` and ``ca_pem`` are this cluster's API server as its consumers reach and verify it.
    """

    def __init__(
        self,
        *,
        client: KubeClient,
        api_server_url: str,
        ca_pem: str,
        identity_ttl: int = DEFAULT_IDENTITY_TTL,
        certificate_timeout: float = CERTIFICATE_TIMEOUT,
    ) -> None:
        if identity_ttl < MIN_IDENTITY_TTL:
            raise ValueError(f"the identity TTL must be at least {MIN_IDENTITY_TTL} s, got {identity_ttl}")
        self._client = client
        self._api_server_url = api_server_url
        self._ca_pem = ca_pem
        self._ttl = identity_ttl
        self._certificate_timeout = certificate_timeout

    async def provision(self, *, consumer_id: str, consumer_name: str, auth_url: str | None, csr_pem: str) -> Issued:
        """Ensure the consumer's namespace, RBAC and ForeignCluster, then have its CSR signed."""
        namespace = names.tenant_namespace(consumer_id)
        tenant = await self._client.apply(NAMESPACES, tenant_namespace_manifest(consumer_id))
        if tenant["metadata"].get("deletionTimestamp"):
            # Nothing can be created in it until it is gone; the consumer's next attempt starts afresh.
            raise ProvisioningError(f"namespace {namespace} is being deleted (an unpeer); retry later")
        await self._client.apply(ROLE_BINDINGS, peer_role_binding(consumer_id))
        await self._ensure_foreign_cluster(consumer_id=consumer_id, consumer_name=consumer_name, auth_url=auth_url)
        certificate = await self._sign(consumer_id=consumer_id, csr_pem=csr_pem)
        expires_at = x509.load_pem_x509_certificate(certificate.encode()).not_valid_after_utc
        return Issued(
            api_server_url=self._api_server_url,
            ca_pem=self._ca_pem,
            certificate_pem=certificate,
            namespace=namespace,
            expires_at=expires_at,
        )

    async def _ensure_foreign_cluster(self, *, consumer_id: str, consumer_name: str, auth_url: str | None) -> None:
        """Create a ForeignCluster for the consumer unless one (whatever its name) has its cluster ID.

        An existing one is left alone: the admin may have set it up (for a peering the other way, say).
        """
        existing, _ = await self._client.list_all(FOREIGN_CLUSTERS)
        if any((fc.get("spec") or {}).get("clusterID") == consumer_id for fc in existing):
            return
        for name in names.foreign_cluster_names(cluster_id=consumer_id, cluster_name=consumer_name):
            manifest = consumer_foreign_cluster(
                name=name, consumer_id=consumer_id, consumer_name=consumer_name, auth_url=auth_url
            )
            try:
                await self._client.create(FOREIGN_CLUSTERS, manifest)
            except ConflictError:
                continue  # that name belongs to another peer (or a concurrent handshake created ours)
            log.info("created ForeignCluster %s for consumer %s", name, consumer_id)
            return
        # Every name was taken: by our own ForeignCluster if a concurrent handshake won the race.
        existing, _ = await self._client.list_all(FOREIGN_CLUSTERS)
        if not any((fc.get("spec") or {}).get("clusterID") == consumer_id for fc in existing):
            raise ProvisioningError(f"cannot create a ForeignCluster for {consumer_id}: its name is taken")

    async def _sign(self, *, consumer_id: str, csr_pem: str) -> str:
        """Create, approve and wait for a CSR; delete it whatever the outcome."""
        created = await self._client.create(CSRS, csr_object(consumer_id=consumer_id, csr_pem=csr_pem, ttl=self._ttl))
        name = created["metadata"]["name"]
        try:
            current = await self._client.replace(
                CSRS, approved(created, consumer_id=consumer_id), subresource="approval"
            )
            try:
                async with asyncio.timeout(self._certificate_timeout):
                    return await self._wait_for_certificate(current)
            except TimeoutError:
                raise ProvisioningError(
                    f"the API server signed no certificate within {self._certificate_timeout:.0f} s"
                    " (is kube-controller-manager's CSR signer running?)"
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
            async for event in self._client.watch(
                CSRS, resource_version=version, field_selector=f"metadata.name={name}", timeout_seconds=60
            ):
                if event["type"] in ("ADDED", "MODIFIED"):
                    certificate = certificate_of(event["object"])
                    if certificate:
                        return certificate
                elif event["type"] == "DELETED":
                    raise ProvisioningError(f"CertificateSigningRequest {name} was deleted before it was signed")
            # The server ended the watch: read the object afresh and watch on from its version.
            try:
                csr = await self._client.get(CSRS, name)
            except NotFoundError:
                raise ProvisioningError(f"CertificateSigningRequest {name} was deleted before it was signed") from None
