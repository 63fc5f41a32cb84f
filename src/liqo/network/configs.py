"""The manager's side of the network fabric: per peer, our word, the gateway's key, its Deployment and Service.

Keyed by the peer's cluster ID. A peer gets a gateway while a peering links us in either direction and its
network is known (told at its handshake). We consume from it: our ForeignCluster for it says so and our
ResourceRequest is in its tenant namespace. It consumes from us: its request is there *and it accepted our
offer* (:mod:`liqo.api.peerings`) — an enrolled tenant that has not, however many of them a token holder
made, costs no Deployment and opens no node port. Neither is read from a request alone: a consumer may write
one under our name in its tenant namespace. The reconcile then, in this order:

1. decides where we see the peer's pods (:func:`liqo.network.ipam.allocate`): always a block inside the
   pools (``--peer-pools``), its own pod CIDR only when that lies in a pool and overlaps nothing of ours,
   else a free block of the same size; the block already in our word is kept while it is still valid, so
   allocations survive restarts and are never reshuffled under live traffic. "Ours" is read, not only
   configured: besides the pod and service CIDRs and the admin's reserved subnets, the addresses of our
   nodes (their status) and of our control plane (the endpoints of ``default/kubernetes``), so that no
   peer is ever named at an address our own nodes must reach. When no pool can name it, the peer gets no
   gateway and no word, and a Warning Event on its ForeignCluster says why;
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
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Network
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ForeignClusters, cluster_id, peer_key
from liqo.api.networks import ClusterNetwork, IPNetwork
from liqo.api.peerings import offer_accepted, wants_outgoing
from liqo.api.resources import NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.errors import ConflictError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs
from liqo.kube.projection import keep
from liqo.kube.resources import (
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    NODES,
    POD_TEMPLATES,
    PODS,
    SECRETS,
    SERVICES,
    Resource,
    terminating,
)
from liqo.network import gateway_objects, ipam, wireguard
from liqo.network.links import Endpoint, InvalidWord, Role, our_word, read_word, role

log = logging.getLogger(__name__)

GATEWAY_SELECTOR = f"{names.COMPONENT}={names.GATEWAY}"
NO_FREE_BLOCK = "NoFreeBlock"
"""The reason of the Warning Event saying that no pool can name a peer's pods (so it gets no gateway)."""
API_SERVER_ENDPOINTS = ("default", "kubernetes")
"""The EndpointSlice the API server keeps of its own addresses (named after its Service, in ``default``)."""
NODE_ADDRESS_TYPES = frozenset({"InternalIP", "ExternalIP"})
"""The node status addresses that are addresses (``Hostname`` and the DNS types are names)."""


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
        pools: Sequence[IPv4Network] = ipam.DEFAULT_POOLS,
        events: EventRecorder,
    ) -> None:
        self._client = client
        self._local_id = local_id
        self._network = network
        self._reserved = (network.pod_cidr, network.service_cidr, *reserved)
        self._pools = tuple(pools)
        self._events = events
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.foreign_clusters = self._by_cluster_id.informer
        self.requests = informers.informer(RESOURCE_REQUESTS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.configs = informers.informer(NETWORK_CONFIGS)
        self.templates = informers.informer(
            POD_TEMPLATES,
            namespace=names.LIQO_NAMESPACE,
            field_selector=f"metadata.name={gateway_objects.GATEWAY_TEMPLATE}",
        )
        self.secrets = informers.informer(SECRETS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.deployments = informers.informer(
            DEPLOYMENTS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR
        )
        self.services = informers.informer(SERVICES, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.pods = informers.informer(PODS, namespace=names.LIQO_NAMESPACE, label_selector=GATEWAY_SELECTOR)
        self.nodes = informers.informer(NODES, projection=keep("metadata", "status.addresses"))
        namespace, name = API_SERVER_ENDPOINTS
        self.api_endpoints = informers.informer(
            ENDPOINT_SLICES, namespace=namespace, field_selector=f"metadata.name={name}"
        )
        self.controller: Controller[str] = Controller(name="network-configs", reconcile=self.reconcile)
        self.controller.watch(self.foreign_clusters, peer_key)
        self.controller.watch(self.requests, names.tenant_peer)
        self.controller.watch(self.offers, names.tenant_peer)
        self.controller.watch(self.configs, names.tenant_peer)
        for informer in (self.secrets, self.deployments, self.services, self.pods):
            self.controller.watch(informer, names.labelled_peer)
        self.controller.watch(self.templates, lambda _t: self._peers())
        self.controller.watch(self.api_endpoints, lambda _s: self._peers())
        # A node's status changes every few seconds; its addresses hardly ever: only they matter here.
        self.nodes.add_handler(
            HandlerFuncs(
                add=lambda _n: self._requeue_all(),
                update=lambda old, new: None if _addresses(old) == _addresses(new) else self._requeue_all(),
                delete=lambda _n: self._requeue_all(),
            )
        )

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def _peers(self) -> list[str]:
        return [cluster_id(fc) for fc in self.foreign_clusters.store.list()]

    def _requeue_all(self) -> None:
        for peer_id in self._peers():
            self.controller.queue.add(peer_id)

    async def reconcile(self, peer_id: str) -> None:
        """Converge ``peer_id``'s gateway and our word (or remove them)."""
        namespace = names.tenant_namespace(peer_id)
        template = self.templates.store.get(f"{names.LIQO_NAMESPACE}/{gateway_objects.GATEWAY_TEMPLATE}")
        fc = self._foreign_cluster(peer_id)
        gateway_role = role(
            consuming=wants_outgoing(fc) and _live(self.requests.store.get(f"{namespace}/{self._local_id}")),
            providing=_live(self.requests.store.get(f"{namespace}/{peer_id}"))
            and offer_accepted(self.offers.store.get(f"{namespace}/{self._local_id}")),
            local_id=self._local_id,
            peer_id=peer_id,
        )
        peer_network = None if fc is None else self._by_cluster_id.network_of(peer_id)
        if template is None or gateway_role is None or fc is None or peer_network is None:
            await self._remove(peer_id)
            return
        ours = self.configs.store.get(f"{namespace}/{self._local_id}")
        try:
            block = self._allocate(peer_id, peer_network.pod_cidr, ours)
        except ipam.NoFreeBlock as exc:
            # Nothing may route to a block that is no longer valid (the pools or our addresses changed since),
            # so what was made for it goes. Nothing retries by itself: a peer leaving (freeing a block), a
            # node's addresses changing or a new handshake enqueue this again.
            await self._remove(peer_id)
            await self._events.record(
                fc, type="Warning", reason=NO_FREE_BLOCK, message=f"no gateway to {peer_id}: {exc}"
            )
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
                gateway_objects.deployment(template, peer_id=peer_id, local_id=self._local_id, peer_cidr=str(block)),
            )
            if gateway_role is Role.SERVER:
                await self._client.apply(SERVICES, gateway_objects.service(peer_id=peer_id))
                endpoint = self._endpoint(peer_id)
            elif self.services.store.get(f"{names.LIQO_NAMESPACE}/{gateway_objects.gateway_name(peer_id)}") is not None:
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
        fc = self._by_cluster_id.record_of(peer_id)
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
        reserved = [*self._reserved, *cluster_addresses(self.nodes.store.list(), self.api_endpoints.store.list())]
        return ipam.allocate(wanted, reserved=reserved, taken=taken, pools=self._pools, previous=previous)

    async def _ensure_key(self, peer_id: str) -> str:
        """The gateway's public key, making its private key first if there is none."""
        secret = self.secrets.store.get(f"{names.LIQO_NAMESPACE}/{gateway_objects.gateway_name(peer_id)}")
        if secret is None:
            private = wireguard.generate_private_key()
            try:
                await self._client.create(SECRETS, gateway_objects.key_secret(peer_id=peer_id, private_key=private))
            except ConflictError:  # made meanwhile (a previous leader's write not yet in our cache)
                secret = await self._client.get(
                    SECRETS, gateway_objects.gateway_name(peer_id), namespace=names.LIQO_NAMESPACE
                )
            else:
                return wireguard.public_key(private)
        private = base64.b64decode(secret["data"][gateway_objects.KEY_FILE]).decode()
        return wireguard.public_key(private)

    def _endpoint(self, peer_id: str) -> Endpoint | None:
        """Where the peer dials our server: the node its pod runs on, at the Service's node port."""
        host = gateway_objects.running_host([p for p in self.pods.store.list() if names.labelled_peer_id(p) == peer_id])
        port = gateway_objects.node_port(
            self.services.store.get(f"{names.LIQO_NAMESPACE}/{gateway_objects.gateway_name(peer_id)}")
        )
        if host is None or port is None:
            return None
        return Endpoint(address=ipaddress.ip_address(host), port=port)

    async def _remove(self, peer_id: str) -> None:
        namespace = names.tenant_namespace(peer_id)
        if self.configs.store.get(f"{namespace}/{self._local_id}") is not None:
            log.info("no gateway to %s any more: removing it and our network config", peer_id)
            await self._client.delete(NETWORK_CONFIGS, self._local_id, namespace=namespace, missing_ok=True)
        await self._remove_gateway(peer_id, keep_key=False)

    async def _remove_gateway(self, peer_id: str, *, keep_key: bool) -> None:
        key = f"{names.LIQO_NAMESPACE}/{gateway_objects.gateway_name(peer_id)}"
        made = [(self.deployments, DEPLOYMENTS), (self.services, SERVICES)]
        if not keep_key:
            made.append((self.secrets, SECRETS))
        for informer, resource in made:
            if informer.store.get(key) is not None:
                await _delete(self._client, resource, peer_id)


async def _delete(client: KubeClient, resource: Resource, peer_id: str) -> None:
    await client.delete(
        resource, gateway_objects.gateway_name(peer_id), namespace=names.LIQO_NAMESPACE, missing_ok=True
    )


def cluster_addresses(nodes: Iterable[dict[str, Any]], api_endpoints: Iterable[dict[str, Any]]) -> list[IPNetwork]:
    """Every address this cluster's nodes report and its API server is reached at, each as one host (pure).

    No peer may be named there: our nodes and control plane must reach these addresses themselves. What
    is not an address (a hostname, a malformed entry) is skipped.
    """
    found: set[IPNetwork] = set()
    texts = [address for node in nodes for address in _addresses(node)]
    texts += [
        address
        for slice_ in api_endpoints
        for endpoint in slice_.get("endpoints") or []
        for address in endpoint.get("addresses") or []
        if isinstance(address, str)
    ]
    for text in texts:
        with contextlib.suppress(ValueError):
            found.add(ipaddress.ip_network(text))
    return sorted(found, key=lambda n: (n.version, n))


def _addresses(node: dict[str, Any]) -> list[str]:
    """A node's addresses (not its names), as its status lists them."""
    return [
        str(address.get("address"))
        for address in (node.get("status") or {}).get("addresses") or []
        if isinstance(address, dict) and address.get("type") in NODE_ADDRESS_TYPES
    ]


def _live(request: dict[str, Any] | None) -> bool:
    """Whether a ResourceRequest stands for a peering: present, not being deleted, not withdrawn."""
    return (
        request is not None and not terminating(request) and not (request.get("spec") or {}).get("withdrawalTimestamp")
    )
