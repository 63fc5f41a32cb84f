"""The manager's side of the network fabric: per peer, our word, the gateway's key, its Deployment and Service.

Keyed by the peer's cluster ID. A peer gets a gateway while a peering links us in either direction and its
network is known (told at its handshake). We consume from it: our ForeignCluster for it says so and our
ResourceRequest is in its tenant namespace. It consumes from us: its request is there *and it accepted our
offer* (:mod:`liqo.api.peerings`) — an enrolled tenant that has not, however many of them a token holder
made, costs no Deployment and opens no node port. Neither is read from a request alone: a consumer may write
one under our name in its tenant namespace. The reconcile then, in this order:

1. decides where we see the peer's pods (:func:`liqo.network.ipam.allocate`): its own pod CIDR when that
   overlaps nothing of ours, else a free block of the same size; the block already in our word is kept
   while it is still valid, so allocations survive restarts and are never reshuffled under live traffic;
2. makes the gateway's key if there is none (a Secret; never replaced, never sent);
3. once the peer's word is here (the peer runs the fabric too), applies the gateway's Deployment (and,
   serving, its Service) from the install's template; without it, no gateway could ever connect, and none
   runs;
4. applies our word: the block, our public key, and (serving) where the peer dials us, once the pod runs
   on a node and the Service has its node port.

When nothing links us any more, or the install has no gateway template, everything above is deleted —
found by name and labels, so nothing this controller did not make is touched. The peer's word is read
(and checked) by the gateway; the manager only needs to know it exists.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
from collections.abc import Sequence
from typing import Any

from liqo.api import names
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork, recorded_network
from liqo.api.peerings import offer_accepted, wants_outgoing
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.resources import DEPLOYMENTS, POD_TEMPLATES, PODS, SECRETS, SERVICES, Resource, terminating
from liqo.network import gateways, ipam, wireguard
from liqo.network.links import Endpoint, InvalidWord, Role, our_word, read_word, role

log = logging.getLogger(__name__)

GATEWAY_SELECTOR = f"{gateways.COMPONENT}={gateways.GATEWAY}"


class NetworkConfigs(Component):
    """Keeps one gateway, and our word about it, per linked peer."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        local_id: str,
        network: ClusterNetwork,
        reserved: Sequence[IPNetwork] = (),
        events: EventRecorder,
    ) -> None:
        self._client = client
        self._local_id = local_id
        self._network = network
        self._reserved = (network.pod_cidr, network.service_cidr, *reserved)
        self._events = events
        self.foreign_clusters = informers.informer(FOREIGN_CLUSTERS)
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.configs = informers.informer(NETWORK_CONFIGS)
        self.templates = informers.informer(
            POD_TEMPLATES, namespace=names.LIQO_NAMESPACE, field_selector=f"metadata.name={gateways.GATEWAY_TEMPLATE}"
        )
        self.secrets = informers.informer(SECRETS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.deployments = informers.informer(
            DEPLOYMENTS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR
        )
        self.services = informers.informer(SERVICES, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.pods = informers.informer(PODS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.controller: Controller[str] = Controller(name="network-configs", reconcile=self.reconcile)
        self.controller.watch(self.foreign_clusters, lambda fc: [fc["spec"]["clusterID"]])
        self.controller.watch(self.requests, names.tenant_peer)
        self.controller.watch(self.offers, names.tenant_peer)
        self.controller.watch(self.configs, names.tenant_peer)
        for informer in (self.secrets, self.deployments, self.services, self.pods):
            self.controller.watch(informer, _labelled_peer)
        self.controller.watch(self.templates, lambda _t: self._peers())

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def _peers(self) -> list[str]:
        return [fc["spec"]["clusterID"] for fc in self.foreign_clusters.store.list()]

    async def reconcile(self, peer_id: str) -> None:
        """Converge ``peer_id``'s gateway and our word (or remove them)."""
        namespace = names.tenant_namespace(peer_id)
        template = self.templates.store.get(f"{names.LIQO_NAMESPACE}/{gateways.GATEWAY_TEMPLATE}")
        fc = self._foreign_cluster(peer_id)
        gateway_role = role(
            consuming=wants_outgoing(fc) and _live(self.requests.store.get(f"{namespace}/{self._local_id}")),
            providing=_live(self.requests.store.get(f"{namespace}/{peer_id}"))
            and offer_accepted(self.offers.store.get(f"{namespace}/{self._local_id}")),
            local_id=self._local_id,
            peer_id=peer_id,
        )
        peer_network = _network_of(fc)
        if template is None or gateway_role is None or fc is None or peer_network is None:
            await self._remove(peer_id)
            return
        ours = self.configs.store.get(f"{namespace}/{self._local_id}")
        try:
            block = self._allocate(peer_id, peer_network.pod_cidr, ours)
        except ipam.NoFreeBlock as exc:
            # Nothing retries by itself: a peer leaving (freeing a block) or new pools enqueue this again.
            await self._events.record(fc, type="Warning", reason="NoFreeBlock", message=f"no gateway: {exc}")
            return
        public_key = await self._ensure_key(peer_id)
        endpoint = None
        if self.configs.store.get(f"{namespace}/{peer_id}") is None:
            # The peer runs no fabric (yet): no gateway would ever connect, so none runs. Our word goes all
            # the same: it is how the peer learns that we do.
            await self._remove_gateway(peer_id, keep_key=True)
        else:
            await self._client.apply(
                DEPLOYMENTS,
                gateways.deployment(template, peer_id=peer_id, local_id=self._local_id, peer_cidr=str(block)),
            )
            if gateway_role is Role.SERVER:
                await self._client.apply(SERVICES, gateways.service(peer_id=peer_id))
                endpoint = self._endpoint(peer_id)
            elif self.services.store.get(f"{names.LIQO_NAMESPACE}/{gateways.gateway_name(peer_id)}") is not None:
                await _delete(self._client, SERVICES, peer_id)  # we served before the roles changed
        desired = our_word(
            local_id=self._local_id,
            peer_id=peer_id,
            pod_cidr=self._network.pod_cidr,
            remapped_pod_cidr=block,
            gateway_role=gateway_role,
            public_key=public_key,
            endpoint=endpoint,
        )
        if ours is None or ours.get("spec") != desired["spec"]:
            await self._client.apply(NETWORK_CONFIGS, desired)

    def _foreign_cluster(self, peer_id: str) -> dict[str, Any] | None:
        fc = next((f for f in self.foreign_clusters.store.list() if f["spec"].get("clusterID") == peer_id), None)
        return None if fc is None or terminating(fc) else fc

    def _allocate(self, peer_id: str, wanted: IPNetwork, ours: dict[str, Any] | None) -> IPNetwork:
        """Where we see ``peer_id``'s pods: kept if still valid, else the peer's CIDR or a free block."""
        previous = None
        if ours is not None:
            with contextlib.suppress(InvalidWord):
                previous = read_word(ours).remapped_pod_cidr
        taken = []
        for config in self.configs.store.list():
            meta = config["metadata"]
            if meta["name"] == self._local_id and meta.get("namespace") != names.tenant_namespace(peer_id):
                with contextlib.suppress(InvalidWord):
                    taken.append(read_word(config).remapped_pod_cidr)
        return ipam.allocate(wanted, reserved=self._reserved, taken=taken, previous=previous)

    async def _ensure_key(self, peer_id: str) -> str:
        """The gateway's public key, making its private key first if there is none."""
        secret = self.secrets.store.get(f"{names.LIQO_NAMESPACE}/{gateways.gateway_name(peer_id)}")
        if secret is None:
            private = wireguard.generate_private_key()
            try:
                await self._client.create(SECRETS, gateways.key_secret(peer_id=peer_id, private_key=private))
            except ConflictError:  # made meanwhile (a previous leader's write not yet in our cache)
                secret = await self._client.get(SECRETS, gateways.gateway_name(peer_id), namespace=names.LIQO_NAMESPACE)
            else:
                return wireguard.public_key(private)
        private = base64.b64decode(secret["data"][gateways.KEY_FILE]).decode()
        return wireguard.public_key(private)

    def _endpoint(self, peer_id: str) -> Endpoint | None:
        """Where the peer dials our server: the node its pod runs on, at the Service's node port."""
        host = gateways.running_host(
            [
                p
                for p in self.pods.store.list()
                if (p["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID) == peer_id
            ]
        )
        port = gateways.node_port(self.services.store.get(f"{names.LIQO_NAMESPACE}/{gateways.gateway_name(peer_id)}"))
        if host is None or port is None:
            return None
        return Endpoint(address=ipaddress.ip_address(host), port=port)

    async def _remove(self, peer_id: str) -> None:
        namespace = names.tenant_namespace(peer_id)
        if self.configs.store.get(f"{namespace}/{self._local_id}") is not None:
            log.info("no gateway to %s any more: removing it and our network config", peer_id)
            with contextlib.suppress(NotFoundError):
                await self._client.delete(NETWORK_CONFIGS, self._local_id, namespace=namespace)
        await self._remove_gateway(peer_id, keep_key=False)

    async def _remove_gateway(self, peer_id: str, *, keep_key: bool) -> None:
        key = f"{names.LIQO_NAMESPACE}/{gateways.gateway_name(peer_id)}"
        made = [(self.deployments, DEPLOYMENTS), (self.services, SERVICES)]
        if not keep_key:
            made.append((self.secrets, SECRETS))
        for informer, resource in made:
            if informer.store.get(key) is not None:
                await _delete(self._client, resource, peer_id)


async def _delete(client: KubeClient, resource: Resource, peer_id: str) -> None:
    with contextlib.suppress(NotFoundError):
        await client.delete(resource, gateways.gateway_name(peer_id), namespace=names.LIQO_NAMESPACE)


def _network_of(fc: dict[str, Any] | None) -> ClusterNetwork | None:
    """The peer's network its ForeignCluster records; None while unknown (the next handshake records it)."""
    if fc is None:
        return None
    try:
        return recorded_network(fc)
    except InvalidNetwork:
        return None


def _live(request: dict[str, Any] | None) -> bool:
    """Whether a ResourceRequest stands for a peering: present, not being deleted, not withdrawn."""
    return (
        request is not None and not terminating(request) and not (request.get("spec") or {}).get("withdrawalTimestamp")
    )


def _labelled_peer(obj: dict[str, Any]) -> list[str]:
    peer = (obj["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID)
    return [peer] if peer else []
