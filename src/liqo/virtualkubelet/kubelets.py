"""One virtual kubelet per VirtualNode, inside one process: started, restarted and stopped as they come and go.

Each VirtualNode gets a :class:`NodeController` (Node, Lease, health) and, once an identity on its
provider exists and the Node is ours (:attr:`NodeController.owned`), a
:class:`~liqo.virtualkubelet.reflection.manager.ReflectionManager` running every reflector (pods, copies,
tokens, Events) over its twins. A renewed identity restarts the manager with the new client: its informers
re-list, and reconciling from fresh caches is idempotent, so nothing is lost or doubled. A deleted
VirtualNode (unpeer, a withdrawn offer) stops both; its Node goes by the same sweep that removes any of our
Nodes without a VirtualNode (:func:`~liqo.virtualkubelet.forge.node.orphans`), so a VirtualNode that went
while no virtual kubelet ran (an unpeer during a manager restart), or a delete that failed, leaves no Node
behind. The pods still bound to a Node it deleted are deleted next (:meth:`VirtualKubelets._release_pods`):
they run nowhere any more, and the cluster's pod garbage collector would take them only after a quarantine of
40 s, during which their Deployments saw them Running and made no replacement.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from liqo.api.foreignclusters import ForeignClusters, cluster_id
from liqo.api.names import IDENTITY_SECRET, tenant_namespace, tenant_peer
from liqo.api.networks import ClusterNetwork, IPNetwork, remapped_pod_cidr
from liqo.api.peers import IDENTITY_LABEL, PeerClients
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_OFFLOADINGS, NETWORK_CONFIGS, VIRTUAL_NODES
from liqo.api.storage import offered_classes
from liqo.kube.cache import Derived
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, KubeError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.metrics import CacheGauge
from liqo.kube.objects import Obj
from liqo.kube.resources import NODES, PODS, SECRETS, object_key, split_namespaced_key, terminating
from liqo.virtualkubelet import fit, metrics
from liqo.virtualkubelet.forge import node as forge_node
from liqo.virtualkubelet.node import NodeController
from liqo.virtualkubelet.reflection.copies import CopyReflector, claims_kind, copied_kinds
from liqo.virtualkubelet.reflection.endpointslices import EndpointSliceReflector
from liqo.virtualkubelet.reflection.events import EventReflector
from liqo.virtualkubelet.reflection.manager import Addresses, ReflectionManager
from liqo.virtualkubelet.reflection.pods import PodReflector
from liqo.virtualkubelet.reflection.steps import ReflectionPolicy
from liqo.virtualkubelet.reflection.tokens import TokenReflector

log = logging.getLogger(__name__)

ORPHAN_RETRY_SECONDS = 5.0
"""How soon a failed delete of an orphaned Node is tried again (the sweep runs on changes, not on a timer)."""


@dataclass
class _Running:
    """What runs for one VirtualNode."""

    node: NodeController
    node_task: asyncio.Task[None]
    provider_id: str
    manager: ReflectionManager | None = None
    reflector: PodReflector | None = None
    reflector_task: asyncio.Task[None] | None = None
    client: KubeClient | None = field(default=None)


class VirtualKubelets:
    """Follows the VirtualNodes of this cluster and runs a virtual kubelet for each."""

    def __init__(
        self,
        *,
        client: KubeClient,
        home_cluster_id: str,
        home_name: str,
        home_network: ClusterNetwork | None,
        address: str,
        port: int,
        holder: str,
        events: EventRecorder,
        policy: ReflectionPolicy,
    ) -> None:
        self._policy = policy
        self._client = client
        self._home_cluster_id = home_cluster_id
        self._home_name = home_name
        self._home_network = home_network
        self._address = address
        self._port = port
        self._holder = holder
        self._events = events
        self.virtual_nodes = Informer(client=client, resource=VIRTUAL_NODES)
        # By name as well as label: the look-alikes peers may write in twins are refused by PeerClients anyway.
        self.identities = Informer(
            client=client,
            resource=SECRETS,
            label_selector=f"{IDENTITY_LABEL}=true",
            field_selector=f"metadata.name={IDENTITY_SECRET}",
        )
        self.offloadings = Informer(client=client, resource=NAMESPACE_OFFLOADINGS)
        self.foreign_clusters = Informer(client=client, resource=FOREIGN_CLUSTERS)
        self._by_cluster_id = ForeignClusters(self.foreign_clusters)
        self.network_configs = Informer(client=client, resource=NETWORK_CONFIGS)
        self.nodes = Informer(client=client, resource=NODES, label_selector=forge_node.OURS_SELECTOR)
        self._remapped: Derived[str, IPNetwork | None] = Derived()
        self.peers = PeerClients(on_change=self._identity_changed)
        self.running: dict[str, _Running] = {}
        self._dirty = asyncio.Event()
        self.virtual_nodes.add_handler(
            HandlerFuncs(add=self._mark, update=self._virtual_node_updated, delete=self._mark)
        )
        self.offloadings.add_handler(
            HandlerFuncs(
                add=self._offloadings_changed,
                update=lambda _old, new: self._offloadings_changed(new),
                delete=self._offloadings_changed,
            )
        )
        self.foreign_clusters.add_handler(
            HandlerFuncs(
                add=self._foreign_cluster_changed,
                update=lambda old, new: self._foreign_cluster_changed(new, old=old),
                delete=self._foreign_cluster_changed,
            )
        )
        self.network_configs.add_handler(
            HandlerFuncs(
                add=self._network_config_changed,
                update=lambda old, new: self._network_config_changed(new, old=old),
                delete=self._network_config_changed,
            )
        )
        # A Node appearing may be an orphan; its heartbeats (updates) change nothing the sweep looks at.
        self.nodes.add_handler(HandlerFuncs(add=lambda _node: self._dirty.set()))
        self.identities.add_handler(
            HandlerFuncs(
                add=self.peers.update,
                update=lambda _old, secret: self.peers.update(secret),
                delete=self.peers.remove,
            )
        )

    def _mark(self, _obj: Obj | None = None) -> None:
        for running in self.running.values():
            running.node.changed()
        self._dirty.set()

    def _virtual_node_updated(self, old: Obj, new: Obj) -> None:
        self._mark(new)
        running = self.running.get(object_key(new))
        # Only the slots decide whether a held-back pod may go (fit.fits); other changes concern the Node.
        if running is not None and running.reflector is not None and fit.slots_of(old) != fit.slots_of(new):
            running.reflector.slots_changed()

    def _offloadings_changed(self, _obj: Obj | None = None) -> None:
        for running in self.running.values():
            if running.manager is not None:
                running.manager.twins_changed()

    def _readiness_changed(self, key: str) -> None:
        running = self.running.get(key)
        if running is not None and running.reflector is not None:
            running.reflector.provider_readiness_changed()

    def _foreign_cluster_changed(self, foreign_cluster: Obj, *, old: Obj | None = None) -> None:
        network = (foreign_cluster.get("spec") or {}).get("network")
        if old is not None and (old.get("spec") or {}).get("network") == network:
            return
        self._network_changed(cluster_id(foreign_cluster))

    def _network_changed(self, provider_id: str) -> None:
        for running in self.running.values():
            if running.provider_id == provider_id and running.manager is not None:
                running.manager.network_changed()

    def _network_config_changed(self, config: Obj, *, old: Obj | None = None) -> None:
        if old is not None and remapped_pod_cidr(old) == remapped_pod_cidr(config):
            return
        for peer in tenant_peer(config):
            self._network_changed(peer)

    def remapped(self, provider_id: str, *, author: str) -> IPNetwork | None:
        """Where ``author`` (home or the provider) sees the other's pods, by its NetworkConfig; None without one.

        Asked for every address the reflectors translate: parsed again only when the NetworkConfig changed.
        """
        key = f"{tenant_namespace(provider_id)}/{author}"
        config = self.network_configs.store.get(key)
        return self._remapped.get(key, [config], lambda: remapped_pod_cidr(config))

    def provider_network(self, provider_id: str) -> ClusterNetwork | None:
        """The network ``provider_id`` told us at its last handshake (None: not known, or not valid; cached)."""
        return self._by_cluster_id.network_of(provider_id)

    def _identity_changed(self, provider_id: str) -> None:
        for running in self.running.values():
            if running.provider_id == provider_id:
                running.node.changed()
        self._dirty.set()

    @property
    def gauges(self) -> list[CacheGauge]:
        """The pods of every virtual node reflected now, per phase, and what those not finished request."""
        return [
            CacheGauge(
                "liqo_offloaded_pods",
                "Pods bound to a virtual node (offloaded to its provider), per phase.",
                ("node", "provider", "phase"),
                lambda: (
                    sample
                    for node, provider, pods in self._reflected()
                    for sample in metrics.offloaded_pods(pods, node=node, provider=provider)
                ),
            ),
            CacheGauge(
                "liqo_consumer_used_resources",
                "What this cluster's pods on a provider's virtual node request (cpu in cores, memory in bytes,"
                " pods), finished pods left out.",
                ("provider", "resource"),
                lambda: (
                    sample
                    for _, provider, pods in self._reflected()
                    for sample in metrics.used_resources(pods, provider=provider)
                ),
            ),
        ]

    def _reflected(self) -> list[tuple[str, str, list[Obj]]]:
        """``(node, provider, home pods bound to it)`` for every virtual node whose pods are reflected now."""
        return [
            (split_namespaced_key(key)[1], running.provider_id, running.reflector.pods.store.list())
            for key, running in self.running.items()
            if running.reflector is not None
        ]

    def reflector_for(self, namespace: str, pod: str) -> PodReflector | None:
        """The reflector running home pod ``namespace/pod`` (for the kubelet API)."""
        for running in self.running.values():
            if running.reflector is not None and running.reflector.pods.store.get(f"{namespace}/{pod}") is not None:
                return running.reflector
        return None

    async def run(self) -> None:
        """Run until cancelled; on the way out stop every node (the Nodes stay: a new leader takes them)."""
        try:
            async with asyncio.TaskGroup() as group:
                informers = (
                    self.virtual_nodes,
                    self.identities,
                    self.offloadings,
                    self.foreign_clusters,
                    self.network_configs,
                    self.nodes,
                )
                for informer in informers:
                    group.create_task(informer.run())
                for informer in informers:
                    await informer.wait_synced()
                group.create_task(self._converge_forever())
        finally:
            for key in list(self.running):
                await self._stop(key)
            await self.peers.close()

    async def _converge_forever(self) -> None:
        while True:
            self._dirty.clear()
            await self.converge()
            await self._dirty.wait()

    async def converge(self) -> None:
        """Start, restart and stop virtual kubelets to match the VirtualNodes and identities."""
        wanted = {object_key(vn): vn for vn in self.virtual_nodes.store.list() if not terminating(vn)}
        for key in set(self.running) - set(wanted):
            await self._stop(key)
        await self._delete_orphans({split_namespaced_key(key)[1] for key in wanted})
        for key, vn in wanted.items():
            running = self.running.get(key) or self._start(key, vn)
            # Pods bound to a node name that is not ours (NodeController.owned) are someone else's.
            client = self.peers.get(running.provider_id) if running.node.owned else None
            if client is not running.client:
                await self._restart_reflector(running, vn, client)

    def _start(self, key: str, vn: Obj) -> _Running:
        node = NodeController(
            client=self._client,
            virtual_node=lambda: self.virtual_nodes.store.get(key),
            provider=lambda: self.peers.get(vn["spec"]["clusterID"]),
            provider_id=vn["spec"]["clusterID"],
            home_cluster_id=self._home_cluster_id,
            address=self._address,
            port=self._port,
            holder=self._holder,
            events=self._events,
            ownership_changed=self._dirty.set,
            readiness_changed=lambda: self._readiness_changed(key),
        )
        task = asyncio.get_running_loop().create_task(node.run(), name=f"node {vn['metadata']['name']}")
        running = _Running(node=node, node_task=task, provider_id=vn["spec"]["clusterID"])
        self.running[key] = running
        log.info("virtual node %s started", vn["metadata"]["name"])
        return running

    async def _restart_reflector(self, running: _Running, vn: Obj, client: KubeClient | None) -> None:
        if running.reflector_task is not None:
            running.reflector_task.cancel()
            await asyncio.gather(running.reflector_task, return_exceptions=True)
        running.manager, running.reflector, running.reflector_task, running.client = None, None, None, client
        if client is None:
            return
        key = object_key(vn)
        node_name = vn["metadata"]["name"]
        provider_id = running.provider_id
        provider_name = str(vn["spec"].get("clusterName") or provider_id)
        manager = ReflectionManager(
            home=self._client,
            provider=client,
            provider_id=provider_id,
            node_name=node_name,
            home_cluster_id=self._home_cluster_id,
            offloadings=self.offloadings,
            addresses=Addresses(
                home=self._home_network,
                home_name=self._home_name,
                provider=lambda: self.provider_network(provider_id),
                provider_name=provider_name,
                home_sees_provider=lambda: self.remapped(provider_id, author=self._home_cluster_id),
                provider_sees_home=lambda: self.remapped(provider_id, author=provider_id),
            ),
            events=self._events,
        )
        pods = PodReflector(
            manager=manager,
            node_address=self._address,
            virtual_node=lambda: self.virtual_nodes.store.get(key),
            provider_ready=lambda: running.node.ready,
        )
        manager.register(
            pods,
            CopyReflector(
                manager=manager,
                policy=self._policy,
                kinds=[
                    *copied_kinds(self._policy),
                    claims_kind(
                        node_name=node_name,
                        provider=provider_name,
                        offered=lambda: self._offered_classes(key),
                    ),
                ],
            ),
            TokenReflector(manager=manager, home_pods=pods.pods),
            EndpointSliceReflector(
                manager=manager,
                policy=self._policy,
                virtual_nodes=lambda: {vn["metadata"]["name"] for vn in self.virtual_nodes.store.list()},
            ),
            EventReflector(manager=manager, home_pods=pods.pods),
        )
        running.manager, running.reflector = manager, pods
        running.reflector_task = asyncio.get_running_loop().create_task(manager.run(), name=f"reflection {node_name}")

    def _offered_classes(self, key: str) -> tuple[str, ...]:
        """The provider's storage classes the VirtualNode ``key`` says are offered now."""
        vn = self.virtual_nodes.store.get(key) or {}
        return offered_classes((vn.get("spec") or {}).get("labels"))

    async def _stop(self, key: str) -> None:
        running = self.running.pop(key)
        tasks = [t for t in (running.node_task, running.reflector_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.info("virtual node %s stopped", key)

    async def _delete_orphans(self, wanted: set[str]) -> None:
        failed = False
        for node in forge_node.orphans(self.nodes.store.list(), wanted=wanted):
            name, uid = node["metadata"]["name"], node["metadata"]["uid"]
            try:
                await self._client.delete(NODES, name, uid=uid, missing_ok=True)
            except ConflictError:  # replaced by a namesake since: judged again when it shows up
                continue
            except KubeError as error:
                log.warning("virtual node %s: its VirtualNode is gone, deleting the Node failed: %s", name, error)
                failed = True
                continue
            log.info("virtual node %s deleted: no VirtualNode of that name", name)
            await self._release_pods(name)
        if failed:
            asyncio.get_running_loop().call_later(ORPHAN_RETRY_SECONDS, self._dirty.set)

    async def _release_pods(self, node: str) -> None:
        """Delete the pods bound to ``node``, a Node just deleted.

        Deleting the Node said that nothing runs there any more (its VirtualNode went with the peering or the
        offer, and the provider's pods with it), as deleting a real Node does: the pods go at once, with no
        grace period (no kubelet is left to confirm a graceful end), and their controllers replace them. One
        that fails to go is left to the cluster's pod garbage collector (the Node is gone: no sweep sees it).
        """
        try:
            pods, _ = await self._client.list_all(PODS, field_selector=f"spec.nodeName={node}")
        except KubeError as error:
            log.warning("virtual node %s deleted, listing the pods bound to it failed: %s", node, error)
            return
        for pod in pods:
            meta = pod["metadata"]
            await self._events.record(
                {"apiVersion": "v1", "kind": "Pod"} | pod,  # list items carry no kind: `kubectl get events` shows it
                type="Warning",
                reason="VirtualNodeDeleted",
                message=f"virtual node {node} was deleted (unpeered, or the offer withdrawn): the pod runs nowhere",
            )
            try:
                await self._client.delete(
                    PODS,
                    meta["name"],
                    namespace=meta["namespace"],
                    uid=meta["uid"],
                    grace_period_seconds=0,
                    missing_ok=True,
                )
            except ConflictError:  # a namesake since: not bound to this node
                continue
            except KubeError as error:
                log.warning(
                    "virtual node %s deleted, deleting its pod %s/%s failed: %s",
                    node,
                    meta["namespace"],
                    meta["name"],
                    error,
                )
        if pods:
            log.info("virtual node %s deleted: the %d pods bound to it too", node, len(pods))
