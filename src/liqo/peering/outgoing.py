"""The consumer side of a peering: get (and renew) an identity, ask for resources, and undo it all.

Keyed by the provider's cluster ID. While its ForeignCluster says ``outgoingPeeringEnabled: Yes`` the
reconcile makes sure that the tenant namespace exists, that a valid identity is stored (a handshake signed
with this cluster's key, and with the enrolment token's, when missing or due for renewal; the answer must be
signed by the provider key the ForeignCluster's ``keyFingerprint`` names) and that the ResourceRequest
exists; it comes back when the identity is due. A provider's refusal (401, 403) is reported as a Denied
authentication and tried again after a while, not hammered: it changes only when someone acts.

Each handshake tells the provider this cluster's network and records the provider's, from its signed answer,
on the ForeignCluster (``spec.network``, a merge patch that ``liqoctl peer``'s server-side apply of the spec
leaves alone). A ForeignCluster without one — a peering established before networks were exchanged — gets a
handshake at once rather than at the identity's renewal: the provider learns ours from the same request.

Otherwise — or when the ForeignCluster is being deleted — it tears the outgoing side down: the request on
the provider first (so the provider releases what it reserved for us), then the
virtual nodes, offers, identity and token here, and the tenant namespace unless the peer also consumes
from us. A finalizer on the ForeignCluster makes ``kubectl delete`` go through the same teardown.

A second loop answers the look-alikes: a Secret named like an identity anywhere else (a peer may write one
in its twins, with our labels) is never used (:mod:`liqo.api.peers`), and gets a Warning Event saying why,
so that whoever wonders where it went sees the refusal where they look.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.foreignclusters import Reason, cluster_id, peer_key
from liqo.api.identity import ClusterIdentity
from liqo.api.networks import network_patch
from liqo.api.peerings import wants_outgoing
from liqo.api.peers import UntrustedIdentity, identity_access
from liqo.api.requests import withdrawn
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.csr import renewal_time
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.finalizers import add_finalizer, has_finalizer, remove_finalizer
from liqo.kube.resources import NAMESPACES, SECRETS, changed_beyond_status, object_key, terminating
from liqo.kube.timefmt import format_time
from liqo.peering import authclient
from liqo.peering.consumerside import ConsumerLoop, ConsumerSide
from liqo.peering.identities import identity_secret, renewal_due
from liqo.peering.observations import Observation
from liqo.peering.tenants import tenant_namespace_manifest
from liqo.peering.tokens import token_of

log = logging.getLogger(__name__)

PEERING_REQUESTED = "liqo.io/peering-requested-at"
"""Stamped on the ForeignCluster by every `liqoctl peer`: the manager sees a change and tries again at once."""
RETRY_REFUSED_SECONDS = 30.0
"""A handshake that cannot run (missing credentials) or was refused is tried again this soon."""


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


class OutgoingPeering(ConsumerLoop):
    """Reconciles the consumer side of every peering."""

    def __init__(self, side: ConsumerSide, *, key: ClusterKey) -> None:
        super().__init__(side)
        self._key = key
        self._forced: dict[str, tuple[float, str]] = {}  # provider → (when, request stamp) of the last forced handshake
        self.controller: Controller[str] = Controller(name="outgoing-peering", reconcile=self.reconcile, workers=2)
        # Not on status updates: ForeignClusterStatus writes what the handshakes observed, and a refused or busy
        # handshake waking the next one at once would flood the provider (its rate limit then answers 429).
        self.controller.watch(self.foreign_clusters, peer_key, changed=changed_beyond_status)
        for informer in self.caches.secrets:
            self.controller.watch(informer, names.tenant_peer)
        self.look_alikes: Controller[str] = Controller(name="identity-look-alikes", reconcile=self.refuse, workers=1)
        self.look_alikes.watch(self.caches.identities, lambda secret: [object_key(secret)])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loops."""
        return [self.controller, self.look_alikes]

    async def refuse(self, key: str) -> None:
        """Tell, with a Warning Event on it, why a Secret named like an identity is not used as one."""
        secret = self.caches.identities.store.get(key)
        if secret is None:
            return
        try:
            identity_access(secret)
        except UntrustedIdentity as exc:
            await self._events.record(secret, type="Warning", reason="UntrustedIdentity", message=f"not used: {exc}")

    async def reconcile(self, peer_id: str) -> Result | None:
        """Converge the consumer side of the peering with ``peer_id``."""
        fc = self.caches.foreign_cluster(peer_id)
        if fc is None:
            # Not in the cache (yet, or any more): a peering being declared may have its token Secret
            # cached before its ForeignCluster, and a deleted one went through the finalizer already.
            return None
        if not wants_outgoing(fc):
            done = await self._teardown(peer_id, fc)
            return None if done else Result(requeue_after=0.5)
        await add_finalizer(self._client, FOREIGN_CLUSTERS, fc, finalizer=names.FINALIZER)
        await self._client.apply(NAMESPACES, tenant_namespace_manifest(peer_id))
        now = datetime.datetime.now(datetime.UTC)
        due = renewal_due(self.caches.identity(peer_id))
        if (
            due is None
            or due <= now
            or self.caches.by_cluster_id.network_of(peer_id) is None
            or self._refused_by_provider(fc)
        ):
            renewal = await self._authenticate(fc, now=now)
            if isinstance(renewal, Result):
                return renewal
            due = renewal
        await self._client.apply(RESOURCE_REQUESTS, resource_request(local=self._local, provider_id=peer_id))
        return Result(requeue_after=max(1.0, (due - now).total_seconds()))

    def _refused_by_provider(self, fc: dict[str, Any]) -> bool:
        """Whether to authenticate again now: the provider refuses our identity (the status probe saw 401/403).

        The handshake then learns the provider's verdict (revoked?) instead of waiting for the renewal.

        At most every :data:`RETRY_REFUSED_SECONDS`, unless someone asked again (``liqoctl peer`` stamps
        the ForeignCluster): a provider that keeps refusing is not hammered.
        """
        peer_id = cluster_id(fc)
        probe = self._observations.api_server.get(peer_id)
        if probe is None or probe.reason != Reason.FORBIDDEN:
            self._forced.pop(peer_id, None)
            return False
        asked = (fc["metadata"].get("annotations") or {}).get(PEERING_REQUESTED, "")
        last = self._forced.get(peer_id)
        now = time.monotonic()
        if last is not None and last[1] == asked and now - last[0] < RETRY_REFUSED_SECONDS:
            return False
        self._forced[peer_id] = (now, asked)
        return True

    async def _authenticate(self, fc: dict[str, Any], *, now: datetime.datetime) -> datetime.datetime | Result:
        """Run the handshake and store the identity; the renewal time, or when to try again if it did not."""
        peer_id = cluster_id(fc)
        token = token_of(self.caches.peer_token(peer_id))
        auth_url = fc["spec"].get("authURL")
        fingerprint = fc["spec"].get("keyFingerprint")
        missing = [
            what
            for what, present in (
                ("token of the peer (Secret liqo-peer-token)", token),
                ("spec.authURL", auth_url),
                ("spec.keyFingerprint (the provider's key; `liqoctl peer` sets it)", fingerprint),
            )
            if not present
        ]
        if missing:
            self._observations.report(
                self._observations.authentication,
                peer_id,
                Observation(False, Reason.MISSING_CREDENTIALS, "no " + ", no ".join(missing)),
            )
            return Result(requeue_after=RETRY_REFUSED_SECONDS)
        try:
            identity = await authclient.request_identity(
                auth_url=auth_url,
                key=self._key,
                token=token,
                consumer_id=self._local.cluster_id,
                consumer_name=self._local.cluster_name,
                consumer_network=self._network,
                consumer_auth_url=self._local.auth_url,
                expected_provider_id=peer_id,
                expected_fingerprint=fingerprint,
            )
        except authclient.ProviderBusy as exc:
            # Not a verdict: the provider is starting, throttling us, or still releasing our last peering.
            busy = Observation(False, Reason.PROVIDER_BUSY, f"{exc}; asking again in {exc.retry_after:g} s", at=now)
            self._observations.report(self._observations.authentication, peer_id, busy)
            return Result(requeue_after=exc.retry_after)
        except (authclient.AuthRejected, authclient.ProviderNotAuthenticated) as exc:
            # Final until someone acts (a new token, the provider's admin, the right fingerprint): reported,
            # tried again after a while, never hammered.
            reason = Reason.REFUSED if isinstance(exc, authclient.AuthRejected) else Reason.PROVIDER_NOT_AUTHENTICATED
            refusal = Observation(False, reason, str(exc), at=datetime.datetime.now(datetime.UTC))
            self._observations.report(self._observations.authentication, peer_id, refusal)
            await self._events.record(fc, type="Warning", reason="AuthenticationFailed", message=str(exc))
            return Result(requeue_after=RETRY_REFUSED_SECONDS)
        except authclient.AuthError as exc:
            failure = Observation(False, Reason.HANDSHAKE_FAILED, str(exc), at=datetime.datetime.now(datetime.UTC))
            self._observations.report(self._observations.authentication, peer_id, failure)
            await self._events.record(fc, type="Warning", reason="AuthenticationFailed", message=str(exc))
            raise
        patch = network_patch(fc, identity.provider_network)
        if patch is not None:
            await self._client.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], patch)
            log.info("recorded the network of provider %s: %s", peer_id, identity.provider_network)
        secret = identity_secret(
            provider_id=peer_id, kubeconfig=identity.kubeconfig(), issued_at=now, expires_at=identity.expires_at
        )
        await self._client.apply(SECRETS, secret)
        self._observations.report(self._observations.authentication, peer_id, Observation(True, Reason.IDENTITY_ISSUED))
        await self._events.record(
            fc,
            type="Normal",
            reason="Authenticated",
            message=f"identity valid until {format_time(identity.expires_at)}",
        )
        return renewal_time(not_before=now, not_after=identity.expires_at)

    def _has_outgoing_state(self, peer_id: str, fc: dict[str, Any]) -> bool:
        """Whether anything of ours exists for this peer (a provider-only peer has nothing to tear down)."""
        namespace = names.tenant_namespace(peer_id)
        deleting = terminating(fc)
        ours = (
            self.caches.identity(peer_id),
            deleting and self.caches.peer_token(peer_id),
            self.requests.store.get(f"{namespace}/{self._local.cluster_id}"),
            self.offers.store.get(f"{namespace}/{peer_id}"),
        )
        return (
            any(ours)
            or bool(self.caches.in_tenant(self.virtual_nodes, peer_id))
            or has_finalizer(fc, finalizer=names.FINALIZER)
        )

    async def _teardown(self, peer_id: str, fc: dict[str, Any]) -> bool:
        """Undo the consumer side, step by step; True once done (and a no-op when nothing is left).

        Order matters: our local objects go first (so the replicator stops pushing our request), then the
        request on the provider must be seen gone — its deletion is what makes the provider release our
        tenant namespace — and only then do we drop the identity that lets us check.
        """
        if not self._has_outgoing_state(peer_id, fc):
            return True
        namespace = names.tenant_namespace(peer_id)
        log.info("tearing down the outgoing peering with %s", peer_id)
        for informer, resource in (
            (self.virtual_nodes, VIRTUAL_NODES),
            (self.offers, RESOURCE_OFFERS),
            (self.requests, RESOURCE_REQUESTS),
        ):
            for obj in informer.store.list():
                meta = obj["metadata"]
                # Ours only: in a bidirectional peering the same namespace holds the peer's request and our
                # offer to it (the request named after the peer, the offer named after us).
                theirs = meta["name"] == (peer_id if resource is RESOURCE_REQUESTS else self._local.cluster_id)
                if meta.get("namespace") == namespace and not theirs:
                    await _delete(self._client, resource, obj)
        remote = self._peers.get(peer_id)
        if remote is not None and not await withdrawn(remote, consumer_id=self._local.cluster_id):
            return False
        # The token stays until the ForeignCluster goes: a peering being re-enabled may have just written it.
        deleting = terminating(fc)
        for cached in (self.caches.identity(peer_id), deleting and self.caches.peer_token(peer_id)):
            if cached:
                await _delete(self._client, SECRETS, cached)
        self._observations.report(self._observations.authentication, peer_id, None)
        if not deleting:
            return True
        incoming = self.requests.store.get(f"{namespace}/{peer_id}") is not None
        if not incoming:
            await self._client.delete(NAMESPACES, namespace, missing_ok=True)
        await remove_finalizer(self._client, FOREIGN_CLUSTERS, fc, finalizer=names.FINALIZER)
        return True


async def _delete(client: KubeClient, resource: Any, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    try:
        await client.delete(resource, meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid"))
    except NotFoundError:
        return
    except KubeError:
        log.warning("could not delete %s %s/%s", resource.kind, meta.get("namespace"), meta["name"])
        raise
