"""The CRD replicator: the consumer's half of every conversation with a provider runs through here.

Only the consumer needs to reach the other side (the provider never holds credentials on its consumers),
so replication runs on the consumer, with the identity the provider issued:

- ResourceRequest: our spec → the provider's tenant namespace; the provider's status → back here.
- ResourceOffer: the provider's spec → a copy in our tenant namespace; our status (accepted or not) →
  the provider's object.
- NetworkConfig: each side's word about the network between us (:mod:`liqo.network.links`) goes to the
  other: ours → the provider's tenant namespace, the provider's → ours. Specs only: a word's status is its
  author's gateway's view, for its author alone.

Objects are keyed by name on both sides and written with server-side apply, so a restart or a reconnect
replays the same writes and produces no duplicate. The informers on each provider's tenant namespace follow
the identities (:class:`~liqo.kube.following.Following`): started when one appears, restarted when it is
renewed (a new client), stopped when it goes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from liqo.api import names
from liqo.api.peers import PeerClientSource
from liqo.api.requests import withdraw
from liqo.api.resources import NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.kube.cache import InformerGroup, SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.following import Following
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import Resource, terminating

log = logging.getLogger(__name__)

Kind = Literal["peer", "request", "offer", "network"]
Key = tuple[Kind, str]
REPLICATED_KINDS: tuple[Kind, ...] = ("request", "offer", "network")


def replica(obj: dict[str, Any], *, resource: Resource, namespace: str, peer_id: str) -> dict[str, Any]:
    """The copy of ``obj``'s spec for the other side (pure): same name, the other side's labels."""
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": namespace,
            "labels": names.peer_labels(peer_id) | {names.REPLICATED: "true"},
        },
        "spec": obj.get("spec") or {},
    }


class _Tenant(InformerGroup):
    """Our tenant namespace on one provider, through one client (one identity): requests, offers, network words."""

    def __init__(self, client: KubeClient, *, namespace: str, enqueue: Callable[[Kind], None]) -> None:
        self.client = client
        self.requests = Informer(client=client, resource=RESOURCE_REQUESTS, namespace=namespace)
        self.offers = Informer(client=client, resource=RESOURCE_OFFERS, namespace=namespace)
        self.networks = Informer(client=client, resource=NETWORK_CONFIGS, namespace=namespace)
        self.requests.add_handler(_enqueue_handler(enqueue, "request"))
        self.offers.add_handler(_enqueue_handler(enqueue, "offer"))
        self.networks.add_handler(_enqueue_handler(enqueue, "network"))
        super().__init__([self.requests, self.offers, self.networks], name=f"tenant {namespace}")


class Replicator(Component):
    """Replicates ResourceRequests and ResourceOffers between this consumer and its providers."""

    def __init__(
        self, *, client: KubeClient, informers: SharedInformers, local_id: str, peers: PeerClientSource
    ) -> None:
        self._client = client
        self._local_id = local_id
        self._peers = peers
        self._tenants: Following[str, KubeClient, _Tenant] = Following(
            make=lambda provider_id, client: _Tenant(
                client, namespace=names.tenant_namespace(local_id), enqueue=self._remote_enqueue(provider_id)
            ),
            on_synced=lambda provider_id, _tenant: self._replay(provider_id),
        )
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.networks = informers.informer(NETWORK_CONFIGS)
        self.controller: Controller[Key] = Controller(name="replicator", reconcile=self.reconcile, workers=4)
        self.controller.watch(self.requests, lambda rr: self._keys("request", rr))
        self.controller.watch(self.offers, lambda ro: self._keys("offer", ro))
        self.controller.watch(self.networks, lambda nc: self._keys("network", nc))

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def peer_changed(self, provider_id: str) -> None:
        """Hook for PeerClients: an identity appeared, was renewed or went away."""
        self.controller.queue.add(("peer", provider_id))

    def _keys(self, kind: Kind, obj: dict[str, Any]) -> list[Key]:
        return [(kind, peer) for peer in names.tenant_peer(obj)]

    def _remote_enqueue(self, provider_id: str) -> Callable[[Kind], None]:
        return lambda kind: self.controller.queue.add((kind, provider_id))

    async def reconcile(self, key: Key) -> None:
        """Replicate one kind for one provider (or follow its identity, for ``peer``)."""
        kind, provider_id = key
        if kind == "peer":
            self._tenants.follow(self._peers.clients())
            self._replay(provider_id)
            return
        remote = self._tenants.get(provider_id)
        if remote is None or not remote.synced:
            return  # replayed once the remote caches sync
        if kind == "request":
            await self._replicate_request(provider_id, remote)
        elif kind == "offer":
            await self._replicate_offer(provider_id, remote)
        else:
            await self._replicate_network(provider_id, remote)

    def _replay(self, provider_id: str) -> None:
        for kind in REPLICATED_KINDS:
            self.controller.queue.add((kind, provider_id))

    async def _replicate_request(self, provider_id: str, remote: _Tenant) -> None:
        ours = names.tenant_namespace(provider_id)
        theirs = names.tenant_namespace(self._local_id)
        local = self.requests.store.get(f"{ours}/{self._local_id}")
        copy = remote.requests.store.get(f"{theirs}/{self._local_id}")

        async def withdraw_ours() -> None:
            log.info("withdrawing our request from %s (no local request)", provider_id)
            await withdraw(remote.client, consumer_id=self._local_id)

        mirrored = await mirror(
            remote.client,
            RESOURCE_REQUESTS,
            source=local,
            copy=copy,
            namespace=theirs,
            peer_id=self._local_id,
            remove=withdraw_ours,
        )
        if mirrored and copy is not None and copy.get("status") and copy["status"] != mirrored.get("status"):
            await self._client.apply_status(
                RESOURCE_REQUESTS, name=self._local_id, namespace=ours, status=copy["status"]
            )

    async def _replicate_offer(self, provider_id: str, remote: _Tenant) -> None:
        ours = names.tenant_namespace(provider_id)
        theirs = names.tenant_namespace(self._local_id)
        original = remote.offers.store.get(f"{theirs}/{provider_id}")
        local = self.offers.store.get(f"{ours}/{provider_id}")
        mirrored = await mirror(
            self._client, RESOURCE_OFFERS, source=original, copy=local, namespace=ours, peer_id=provider_id
        )
        status = (local or {}).get("status")
        if mirrored and status and status != mirrored.get("status"):
            await remote.client.apply_status(RESOURCE_OFFERS, name=provider_id, namespace=theirs, status=status)

    async def _replicate_network(self, provider_id: str, remote: _Tenant) -> None:
        """Our word to the provider, the provider's word to us: specs both ways, deletions too."""
        ours = names.tenant_namespace(provider_id)
        theirs = names.tenant_namespace(self._local_id)
        word = self.networks.store.get(f"{ours}/{self._local_id}")
        sent = remote.networks.store.get(f"{theirs}/{self._local_id}")
        await mirror(remote.client, NETWORK_CONFIGS, source=word, copy=sent, namespace=theirs, peer_id=self._local_id)
        original = remote.networks.store.get(f"{theirs}/{provider_id}")
        copy = self.networks.store.get(f"{ours}/{provider_id}")
        await mirror(self._client, NETWORK_CONFIGS, source=original, copy=copy, namespace=ours, peer_id=provider_id)

    async def close(self) -> None:
        """Stop every remote informer."""
        await self._tenants.close()


def _enqueue_handler(enqueue: Callable[[Kind], None], kind: Kind) -> HandlerFuncs:
    """Any change on the remote side: replicate that kind again (the key carries no object)."""
    return HandlerFuncs(
        add=lambda _obj: enqueue(kind), update=lambda _old, _new: enqueue(kind), delete=lambda _obj: enqueue(kind)
    )


async def mirror(
    to: KubeClient,
    resource: Resource,
    *,
    source: Obj | None,
    copy: Obj | None,
    namespace: str,
    peer_id: str,
    remove: Callable[[], Awaitable[None]] | None = None,
) -> Obj | None:
    """One step of ``copy`` (what ``to`` holds in ``namespace``) towards the replica of ``source``.

    A source gone or being deleted takes its copy with it (``remove``; default: delete it by name); else the
    replica is applied when the copy's spec or labels differ. Returns the source it mirrored (None if none),
    for the caller's status, which flows the other way.
    """
    if source is None or terminating(source):
        if copy is not None:
            if remove is not None:
                await remove()
            else:
                await to.delete(resource, copy["metadata"]["name"], namespace=namespace, missing_ok=True)
        return None
    desired = replica(source, resource=resource, namespace=namespace, peer_id=peer_id)
    if copy is None or copy.get("spec") != desired["spec"] or not _labelled(copy, desired):
        await to.apply(resource, desired)
    return source


def _labelled(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    labels = current["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in desired["metadata"]["labels"].items())
