"""What a provider creates for an authenticated consumer, and how it gets the consumer's certificate signed.

First the consumer's tenant namespace, then its record: its ForeignCluster here, the one there is (the
admin's, or our own peering with it) or one made under the name claimed on that namespace, never a second
one for one cluster ID nor one beside a record being deleted (:mod:`liqo.peering.records`: ``liqoctl peer``
may be declaring our peering with that very cluster at the same moment). Which ForeignCluster is the
consumer's comes from the endpoint's cache (:class:`~liqo.peering.authcaches.AuthCaches`, indexed by cluster
ID: never a list of them all), and the records the decision rests on — the one the cache names, the one
claimed on the namespace, which a cache a little behind may not show yet — are read again by name. The record
holds the fingerprint of the consumer's cluster key: the first consumer to prove a token for a cluster ID pins
its key there (a create, or an update conditioned on the resourceVersion, so two racing claimants cannot both
win); from then on only that key speaks for that cluster ID. Then the tenant namespace's quota of object counts
(:mod:`liqo.api.bounds`: how many requests, maps, NetworkConfigs and Leases the consumer may make there), and a
RoleBinding there giving its user the installed ClusterRole ``liqo-peer-tenant`` (touch ResourceRequests and
NamespaceMaps, read ResourceOffers, nothing else). Everything is idempotent (a renewal runs the same steps) and
labelled with the consumer's ID so that unpeer finds it; and an attempt that fails removes what it created
itself — the record it made, the pin it set, the namespace it made — so a failed handshake leaves nothing behind.

The consumer's network, from its signed request, is recorded on its ForeignCluster (``spec.network``): in the
record a new consumer's ForeignCluster is created with, or patched into an existing one once its certificate
is signed — the last step, so that a failed attempt changed nothing. It is written with a merge patch, not
server-side apply, so that a later ``liqoctl peer`` applying the ForeignCluster's spec (which has no network)
cannot take it away.

Certificates are signed by the cluster itself through ``certificates.k8s.io/v1`` with the
``kubernetes.io/kube-apiserver-client`` signer (:mod:`liqo.kube.csr`: created, checked to be ours,
approved, awaited, deleted): the provider never holds its CA key, the API server trusts what comes out, and
``expirationSeconds`` makes the identity short-lived.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Protocol

from cryptography import x509

from liqo.api import names
from liqo.api.bounds import DEFAULT_TENANT_QUOTA, object_quota
from liqo.api.networks import NETWORK, network_patch
from liqo.api.provisioner import (
    AuthenticatedConsumer,
    Issued,
    PeerDenied,
    PeerRecord,
    ProvisioningBusy,
    ProvisioningError,
    admission,
)
from liqo.api.resources import DISCOVERY, FOREIGN_CLUSTERS, NETWORKING, OFFLOADING, SHARING
from liqo.kube import csr
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, KubeError, NotFoundError
from liqo.kube.resources import NAMESPACES, RESOURCE_QUOTAS, ROLE_BINDINGS, terminating
from liqo.peering import records
from liqo.peering.tenants import tenant_namespace_manifest

log = logging.getLogger(__name__)

DEFAULT_IDENTITY_TTL = 7200
_PIN_ATTEMPTS = 5
_RBAC = "rbac.authorization.k8s.io"


def peer_rules() -> list[dict[str, Any]]:
    """What a consumer's user may do in its tenant namespace: ClusterRole ``liqo-peer-tenant``, bound there (pure).

    Requests read/write, offers read (and their status, to accept), NamespaceMaps read/write (their status
    read-only: it is this cluster's report), NetworkConfigs (its own word only, by admission policy), its
    heartbeat Lease.
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
        # Its network word, and this cluster's (read); the policy liqo-peer-network-configs lets it write
        # only the one named after itself, and its status never (it is this cluster's gateway's report).
        {
            "apiGroups": [NETWORKING],
            "resources": ["networkconfigs"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        # Its virtual kubelet's heartbeat (liqo.offloading.heartbeats); a create cannot be limited by name.
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [names.CONSUMER_HEARTBEAT],
            "verbs": ["get", "update", "patch"],
        },
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


def consumer_foreign_cluster(*, name: str, consumer: AuthenticatedConsumer) -> dict[str, Any]:
    """The ForeignCluster a provider creates for a new consumer (pure): incoming on demand, no outgoing, its key.

    It records the consumer's network as the consumer told it (its CSR has no place here).
    """
    spec: dict[str, Any] = {
        "clusterID": consumer.consumer_id,
        "clusterName": consumer.consumer_name,
        "incomingPeeringEnabled": "Auto",
        "outgoingPeeringEnabled": "No",
        "keyFingerprint": consumer.key_fingerprint,
        NETWORK: consumer.network.to_message(),
    }
    if consumer.auth_url:
        spec["authURL"] = consumer.auth_url
    return {
        "apiVersion": FOREIGN_CLUSTERS.api_version,
        "kind": FOREIGN_CLUSTERS.kind,
        "metadata": {"name": name, "labels": names.peer_labels(consumer.consumer_id)},
        "spec": spec,
    }


def record_of(foreign_cluster: dict[str, Any], *, admitting: frozenset[str] = frozenset()) -> PeerRecord:
    """What a ForeignCluster says of a consumer: its pinned key, whether it is refused, whose pin it is (pure).

    A record discovery made pins what was announced; it admits its cluster only if its source is among
    ``admitting`` (the provider's opt-in, ``spec.admitConsumers``), or once an enrolment made it a peering's.
    """
    spec = foreign_cluster.get("spec") or {}
    source = discovered_by(foreign_cluster)
    return PeerRecord(
        key_fingerprint=spec.get("keyFingerprint") or None,
        refused=spec.get("incomingPeeringEnabled") == "No",
        announced=source is not None and source not in admitting,
    )


def discovered_by(foreign_cluster: dict[str, Any]) -> str | None:
    """The DiscoverySource that made this record, while no enrolment has made it a peering's."""
    return (foreign_cluster["metadata"].get("labels") or {}).get(names.DISCOVERED_BY)


def enrolment_patches(fc: dict[str, Any], *, key_fingerprint: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The merge patches that enrol a consumer on its record, and that undo it (pure).

    The key is pinned; a record discovery made stops being discovery's (its label goes): from now on its pin
    is an enrolment's, and discovery no longer ages the record out. Undone, both come back as they were.
    """
    source = discovered_by(fc)
    pin: dict[str, Any] = {"metadata": {}, "spec": {"keyFingerprint": key_fingerprint}}
    unpin: dict[str, Any] = {"metadata": {}, "spec": {"keyFingerprint": (fc.get("spec") or {}).get("keyFingerprint")}}
    if source is not None:
        pin["metadata"]["labels"] = {names.DISCOVERED_BY: None}
        unpin["metadata"]["labels"] = {names.DISCOVERED_BY: source}
    return pin, unpin


def _conditioned(patch: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """``patch`` applying only to the object as ``meta`` was read (a conflict if it changed since)."""
    return patch | {"metadata": patch["metadata"] | {"resourceVersion": meta["resourceVersion"]}}


def csr_object(*, consumer_id: str, csr_pem: str, ttl: int) -> dict[str, Any]:
    """The CertificateSigningRequest asking the API server's client signer for a ``ttl``-second certificate."""
    return csr.csr_object(
        csr_pem=csr_pem,
        signer=csr.CLIENT_SIGNER,
        usages=csr.CLIENT_USAGES,
        expiration_seconds=ttl,
        generate_name=f"{names.PEER_BINDING}-",
        labels=names.peer_labels(consumer_id),
    )


class Records(records.Seen, Protocol):
    """Where the provisioner finds a consumer's ForeignCluster (:class:`~liqo.peering.authcaches.AuthCaches`)."""

    def foreign_cluster(self, consumer_id: str) -> dict[str, Any] | None:
        """The ForeignCluster of ``consumer_id`` as last seen; None if there was none."""
        ...

    def admitting(self) -> frozenset[str]:
        """The DiscoverySources whose neighbours' records admit them without a token."""
        ...


class KubeProvisioner:
    """The real :class:`~liqo.api.provisioner.Provisioner`: RBAC, ForeignCluster and a signed CSR.

    ``api_server_url`` and ``ca_pem`` are this cluster's API server as its consumers reach and verify it;
    ``records`` where it looks a consumer's ForeignCluster up.
    """

    def __init__(
        self,
        *,
        client: KubeClient,
        records: Records,
        api_server_url: str,
        ca_pem: str,
        identity_ttl: int = DEFAULT_IDENTITY_TTL,
        tenant_quota: Mapping[str, int] = DEFAULT_TENANT_QUOTA,
        certificate_timeout: float = csr.SIGNING_TIMEOUT,
    ) -> None:
        if identity_ttl < csr.MIN_EXPIRATION_SECONDS:
            raise ValueError(f"the identity TTL must be at least {csr.MIN_EXPIRATION_SECONDS} s, got {identity_ttl}")
        self._client = client
        self._records = records
        self._issuer = csr.CsrIssuer(client=client, timeout=certificate_timeout)
        self._api_server_url = api_server_url
        self._ca_pem = ca_pem
        self._ttl = identity_ttl
        self._tenant_quota = dict(tenant_quota)

    async def record(self, consumer_id: str) -> PeerRecord | None:
        """This cluster's record of ``consumer_id``: its ForeignCluster as last seen, if there is one (no API call)."""
        fc = self._records.foreign_cluster(consumer_id)
        return record_of(fc, admitting=self._records.admitting()) if fc is not None else None

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        """Pin the consumer's key, ensure its namespace and RBAC, have its CSR signed, record its network.

        Undoes what it created on failure.
        """
        undo: list[Callable[[], Awaitable[Any]]] = []
        try:
            namespace = await self._tenant(consumer.consumer_id, undo=undo)
            record = await self._pin(consumer, undo=undo)
            # Bounded before the consumer gets any right there: no moment when it writes unbounded.
            quota = object_quota(namespace=namespace, peer_id=consumer.consumer_id, hard=self._tenant_quota)
            await self._client.apply(RESOURCE_QUOTAS, quota)
            await self._client.apply(ROLE_BINDINGS, peer_role_binding(consumer.consumer_id))
            certificate = await self._sign(consumer_id=consumer.consumer_id, csr_pem=consumer.csr_pem)
            patch = network_patch(record, consumer.network)
            if patch is not None:
                await self._client.patch(FOREIGN_CLUSTERS, record["metadata"]["name"], patch)
                log.info("recorded the network of consumer %s: %s", consumer.consumer_id, consumer.network)
        except Exception:
            for step in reversed(undo):
                try:
                    await step()
                except NotFoundError:
                    pass
                except KubeError as exc:
                    log.warning("could not undo a failed provisioning of %s: %s", consumer.consumer_id, exc)
            raise
        expires_at = x509.load_pem_x509_certificate(certificate.encode()).not_valid_after_utc
        return Issued(
            api_server_url=self._api_server_url,
            ca_pem=self._ca_pem,
            certificate_pem=certificate,
            namespace=namespace,
            expires_at=expires_at,
        )

    async def _pin(
        self, consumer: AuthenticatedConsumer, *, undo: list[Callable[[], Awaitable[Any]]]
    ) -> dict[str, Any]:
        """Make the consumer's ForeignCluster hold its key, or refuse; register how to undo what was done.

        An existing ForeignCluster is the admin's (or a peering the other way): only its empty
        ``keyFingerprint`` is filled in, conditioned on its resourceVersion. Without one, one is made under the
        name claimed on the tenant namespace (:func:`liqo.peering.records.ensure_record`); a record being
        deleted is waited for (a retryable error). Returns the ForeignCluster.
        """
        consumer_id, key_fingerprint = consumer.consumer_id, consumer.key_fingerprint
        for _ in range(_PIN_ATTEMPTS):
            try:
                fc, made = await records.ensure_record(
                    self._client,
                    peer_id=consumer_id,
                    candidates=names.foreign_cluster_names(cluster_id=consumer_id, cluster_name=consumer.consumer_name),
                    manifest=lambda name: consumer_foreign_cluster(name=name, consumer=consumer),
                    seen=self._records,
                )
            except records.RecordBusy as exc:
                raise ProvisioningBusy(str(exc)) from None
            except records.RecordError as exc:
                raise ProvisioningError(str(exc)) from None
            if made:
                meta = fc["metadata"]
                log.info(
                    "created ForeignCluster %s for consumer %s (key %s)", meta["name"], consumer_id, key_fingerprint
                )
                undo.append(partial(self._client.delete, FOREIGN_CLUSTERS, meta["name"], uid=meta["uid"]))
                return fc
            record = record_of(fc, admitting=self._records.admitting())
            needs_token, refusal = admission(record, consumer_id=consumer_id, key_fingerprint=key_fingerprint)
            if refusal:
                raise PeerDenied(refusal)
            if not needs_token and discovered_by(fc) is None:
                return fc  # its key, pinned at an enrolment already
            meta = fc["metadata"]
            pin, unpin = enrolment_patches(fc, key_fingerprint=key_fingerprint)
            try:
                pinned = await self._client.patch(FOREIGN_CLUSTERS, meta["name"], _conditioned(pin, meta))
            except ConflictError:
                continue  # changed meanwhile: read it again
            log.info(
                "pinned the key %s of consumer %s on ForeignCluster %s", key_fingerprint, consumer_id, meta["name"]
            )
            undo.append(
                partial(self._client.patch, FOREIGN_CLUSTERS, meta["name"], _conditioned(unpin, pinned["metadata"]))
            )
            return pinned
        raise ProvisioningBusy(f"the record of cluster {consumer_id} kept changing while registering its key; retry")

    async def _tenant(self, consumer_id: str, *, undo: list[Callable[[], Awaitable[Any]]]) -> str:
        """Ensure the tenant namespace (registering its deletion if this attempt made it)."""
        namespace = names.tenant_namespace(consumer_id)
        try:
            tenant = await self._client.create(NAMESPACES, tenant_namespace_manifest(consumer_id))
        except ConflictError:
            tenant = await self._client.get(NAMESPACES, namespace)
        else:
            undo.append(partial(self._client.delete, NAMESPACES, namespace, uid=tenant["metadata"]["uid"]))
        if terminating(tenant):
            # Nothing can be created in it until it is gone; the consumer's next attempt starts afresh.
            raise ProvisioningBusy(f"namespace {namespace} is being deleted (an unpeer); retry later")
        return namespace

    async def _sign(self, *, consumer_id: str, csr_pem: str) -> str:
        """Have the consumer's CSR signed (the request object is deleted whatever the outcome)."""
        try:
            return await self._issuer.sign(
                csr_object(consumer_id=consumer_id, csr_pem=csr_pem, ttl=self._ttl),
                reason="LiqoPeerAuthenticated",
                message=f"peer {consumer_id} authenticated with its cluster key",
            )
        except csr.SigningError as exc:
            raise ProvisioningError(str(exc)) from None
