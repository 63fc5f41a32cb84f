"""The consumer side of a peering: get (and renew) an identity, ask for resources, and undo it all.

Keyed by the provider's cluster ID. While its ForeignCluster says ``outgoingPeeringEnabled: Yes`` the
reconcile makes sure that the tenant namespace exists, that a valid identity is stored (handshake with
the token when missing or due for renewal) and that the ResourceRequest exists; it comes back when the
identity is due. Otherwise — or when the ForeignCluster is being deleted — it tears the outgoing side
down: the request on the provider first (so the provider releases what it reserved for us), then the
virtual nodes, offers, identity and token here, and the tenant namespace unless the peer also consumes
from us. A finalizer on the ForeignCluster makes ``kubectl delete`` go through the same teardown.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from typing import Any

from liqo.api import names
from liqo.api.identity import ClusterIdentity
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.resources import NAMESPACES, SECRETS
from liqo.peering import authclient
from liqo.peering.identities import PeerClients, identity_secret, renewal_due, token_of
from liqo.peering.observations import Observation, Observations
from liqo.peering.tenants import tenant_namespace_manifest

log = logging.getLogger(__name__)

MANAGED = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"


def resource_request(*, local: ClusterIdentity, provider_id: str) -> dict[str, Any]:
    """The consumer's ResourceRequest for ``provider_id`` (pure)."""
    return {
        "apiVersion": RESOURCE_REQUESTS.api_version,
        "kind": RESOURCE_REQUESTS.kind,
        "metadata": {
            "name": local.cluster_id,
            "namespace": names.tenant_namespace(provider_id),
            "labels": names.peer_labels(provider_id),
        },
        "spec": {"consumerClusterID": local.cluster_id, "consumerClusterName": local.cluster_name},
    }


def wants_outgoing(foreign_cluster: dict[str, Any] | None) -> bool:
    """Whether this ForeignCluster asks us to consume from the peer."""
    if foreign_cluster is None or foreign_cluster["metadata"].get("deletionTimestamp"):
        return False
    return bool(foreign_cluster.get("spec", {}).get("outgoingPeeringEnabled") == "Yes")


class OutgoingPeering:
    """Reconciles the consumer side of every peering."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        local: ClusterIdentity,
        peers: PeerClients,
        observations: Observations,
        events: EventRecorder,
    ) -> None:
        self._client = client
        self._local = local
        self._peers = peers
        self._observations = observations
        self._events = events
        self.foreign_clusters = informers.informer(FOREIGN_CLUSTERS)
        self.secrets = informers.informer(SECRETS, label_selector=MANAGED)
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.controller: Controller[str] = Controller(name="outgoing-peering", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.foreign_clusters, lambda fc: [fc["spec"]["clusterID"]])
        self.controller.watch(self.secrets, _peer_of)

    def foreign_cluster(self, peer_id: str) -> dict[str, Any] | None:
        """The ForeignCluster of ``peer_id`` from the cache."""
        for fc in self.foreign_clusters.store.list():
            if fc["spec"].get("clusterID") == peer_id:
                return fc
        return None

    async def reconcile(self, peer_id: str) -> Result | None:
        """Converge the consumer side of the peering with ``peer_id``."""
        fc = self.foreign_cluster(peer_id)
        if not wants_outgoing(fc):
            await self._teardown(peer_id, fc)
            return None
        assert fc is not None
        await self._ensure_finalizer(fc)
        await self._client.apply(NAMESPACES, tenant_namespace_manifest(peer_id))
        namespace = names.tenant_namespace(peer_id)
        now = datetime.datetime.now(datetime.UTC)
        due = renewal_due(self.secrets.store.get(f"{namespace}/{names.IDENTITY_SECRET}"))
        if due is None or due <= now:
            due = await self._authenticate(fc, now=now)
            if due is None:
                return Result(requeue_after=30.0)
        await self._client.apply(RESOURCE_REQUESTS, resource_request(local=self._local, provider_id=peer_id))
        return Result(requeue_after=max(1.0, (due - now).total_seconds()))

    async def _authenticate(self, fc: dict[str, Any], *, now: datetime.datetime) -> datetime.datetime | None:
        """Run the handshake and store the identity; the renewal time, or None if it cannot run yet."""
        peer_id = fc["spec"]["clusterID"]
        namespace = names.tenant_namespace(peer_id)
        token = token_of(self.secrets.store.get(f"{namespace}/{names.PEER_TOKEN_SECRET}"))
        auth_url = fc["spec"].get("authURL")
        if not token or not auth_url:
            missing = "the peer's token (Secret liqo-peer-token)" if not token else "spec.authURL"
            self._observations.report(
                self._observations.authentication, peer_id, Observation(False, "MissingCredentials", f"no {missing}")
            )
            return None
        try:
            identity = await authclient.request_identity(
                auth_url=auth_url,
                token=token,
                consumer_id=self._local.cluster_id,
                consumer_name=self._local.cluster_name,
                consumer_auth_url=self._local.auth_url,
                expected_provider_id=peer_id,
            )
        except authclient.AuthError as exc:
            self._observations.report(
                self._observations.authentication, peer_id, Observation(False, "HandshakeFailed", str(exc))
            )
            await self._events.record(fc, type="Warning", reason="AuthenticationFailed", message=str(exc))
            raise
        secret = identity_secret(
            provider_id=peer_id, kubeconfig=identity.kubeconfig(), issued_at=now, expires_at=identity.expires_at
        )
        await self._client.apply(SECRETS, secret)
        self._observations.report(self._observations.authentication, peer_id, Observation(True, "IdentityIssued"))
        await self._events.record(
            fc,
            type="Normal",
            reason="Authenticated",
            message=f"identity valid until {identity.expires_at:%Y-%m-%dT%H:%M:%SZ}",
        )
        return renewal_due(secret)

    async def _ensure_finalizer(self, fc: dict[str, Any]) -> None:
        finalizers = fc["metadata"].get("finalizers") or []
        if names.FINALIZER not in finalizers:
            await self._client.patch(
                FOREIGN_CLUSTERS,
                fc["metadata"]["name"],
                {
                    "metadata": {
                        "finalizers": [*finalizers, names.FINALIZER],
                        "resourceVersion": fc["metadata"]["resourceVersion"],
                    }
                },
            )

    async def _teardown(self, peer_id: str, fc: dict[str, Any] | None) -> None:
        """Undo the consumer side; idempotent, and a no-op when nothing is left."""
        namespace = names.tenant_namespace(peer_id)
        remote = self._peers.get(peer_id)
        if remote is not None:
            # First: the provider releases what it reserved for us once our request is gone.
            with contextlib.suppress(NotFoundError):
                await remote.delete(
                    RESOURCE_REQUESTS, self._local.cluster_id, namespace=names.tenant_namespace(self._local.cluster_id)
                )
        for informer, resource in ((self.virtual_nodes, VIRTUAL_NODES), (self.offers, RESOURCE_OFFERS)):
            for obj in informer.store.list():
                # Our copies only: the offer we make to this peer (named after us) is the provider side's.
                if obj["metadata"].get("namespace") == namespace and obj["metadata"]["name"] != self._local.cluster_id:
                    await _delete(self._client, resource, obj)
        for key, resource in (
            (f"{namespace}/{self._local.cluster_id}", RESOURCE_REQUESTS),
            (f"{namespace}/{names.IDENTITY_SECRET}", SECRETS),
            (f"{namespace}/{names.PEER_TOKEN_SECRET}", SECRETS),
        ):
            cached = (self.requests if resource is RESOURCE_REQUESTS else self.secrets).store.get(key)
            if cached is not None:
                await _delete(self._client, resource, cached)
        self._observations.report(self._observations.authentication, peer_id, None)
        incoming = self.requests.store.get(f"{namespace}/{peer_id}") is not None or (
            fc is not None and fc["spec"].get("incomingPeeringEnabled") == "Yes"
        )
        if not incoming and fc is not None and fc["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(NotFoundError):
                await self._client.delete(NAMESPACES, namespace)
        if (
            fc is not None
            and fc["metadata"].get("deletionTimestamp")
            and names.FINALIZER in (fc["metadata"].get("finalizers") or [])
        ):
            remaining = [f for f in fc["metadata"]["finalizers"] if f != names.FINALIZER]
            with contextlib.suppress(NotFoundError):
                await self._client.patch(
                    FOREIGN_CLUSTERS,
                    fc["metadata"]["name"],
                    {"metadata": {"finalizers": remaining, "resourceVersion": fc["metadata"]["resourceVersion"]}},
                )


def _peer_of(obj: dict[str, Any]) -> list[str]:
    peer = (obj["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID)
    return [peer] if peer else []


async def _delete(client: KubeClient, resource: Any, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    try:
        await client.delete(resource, meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid"))
    except NotFoundError:
        return
    except KubeError:
        log.warning("could not delete %s %s/%s", resource.kind, meta.get("namespace"), meta["name"])
        raise
