"""One reflector manager per virtual node: it follows the twins and gives every reflector their informers.

Everything a virtual node reflects (pods, ConfigMaps and Secrets, pod tokens, Events, Services, ...) lives in
the same places: a home namespace offloaded to the provider, and its twin there. So, as upstream Liqo's
``reflection/manager``, one component follows the set of those pairs — from the NamespaceOffloadings'
status, :func:`twins_on` — and tells each registered :class:`Reflector`:

- ``start_namespace(pair)``: a pair appeared; the reflector asks the pair for the informers it needs
  (:meth:`NamespacePair.home`, :meth:`NamespacePair.remote`) and adds handlers that enqueue its keys. Two
  reflectors asking for the same resource in the same scope share one watch and one cache;
- ``namespace_synced(pair)``: every informer of the pair has listed; keys whose reconcile ran before (and
  returned early: "absent" and "not listed yet" look alike) are queued again;
- ``stop_namespace(pair)``: the pair went (the namespace is no longer offloaded there, or the identity was
  renewed and everything restarts with the new client); per-pair state is dropped;
- ``namespaces_changed()``: the set changed; keys that waited for a twin (or must notice one gone) are
  queued again;
- ``network_changed()``: home's or the provider's network changed or became known; whatever holds a
  translated address (:class:`Addresses`) is queued again.

Each reflector then has one controller per kind of key, and one ``handle``-like reconcile per key that reads
the pair's caches and does one step. Why informers per pair rather than cluster-wide: the identity may only
read inside its twins, and at home only the offloaded namespaces matter (a cluster-wide Secret informer would
hold every Secret of the cluster in memory).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from liqo.api import names
from liqo.api.networks import ClusterNetwork, IPAddress, IPNetwork, Translation, returned_home, translate
from liqo.api.offloadings import TwinPhase
from liqo.kube.cache import InformerGroup
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.events import EventRecorder
from liqo.kube.following import Following
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.projection import Projection, keep
from liqo.kube.resources import PODS, Resource, terminating

log = logging.getLogger(__name__)


def twins_on(offloadings: Iterable[Obj], *, provider_id: str) -> dict[str, str]:
    """Home namespace → twin namespace on ``provider_id``, for twins the provider reports Ready (pure)."""
    twins: dict[str, str] = {}
    for offloading in offloadings:
        if terminating(offloading):
            continue
        for twin in (offloading.get("status") or {}).get("remoteNamespacesConditions") or []:
            if (
                twin.get("clusterID") == provider_id
                and twin.get("phase") == TwinPhase.READY
                and twin.get("remoteNamespace")
            ):
                twins[offloading["metadata"]["namespace"]] = twin["remoteNamespace"]
    return twins


class NamespacePair(InformerGroup):
    """One offloaded home namespace and its twin on the provider, with the informers reflectors asked for.

    Informers are created on request, before the pair starts (in ``start_namespace``); one per (side,
    resource, label selector, field selector), shared by every reflector asking for it.
    """

    def __init__(self, *, home: KubeClient, provider: KubeClient, home_namespace: str, twin: str) -> None:
        self.home_namespace = home_namespace
        self.twin = twin
        self._clients = {"home": home, "remote": provider}
        self._scoped: dict[tuple[str, Resource, str | None, str | None], Informer] = {}
        super().__init__([], name=f"reflection {home_namespace}→{twin}")

    def home(
        self, resource: Resource, *, label_selector: str | None = None, projection: Projection | None = None
    ) -> Informer:
        """The informer of ``resource`` in the home namespace; ``projection``: what the caller reads (None: all)."""
        return self._informer("home", resource, label_selector, projection)

    def remote(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        projection: Projection | None = None,
    ) -> Informer:
        """The informer of ``resource`` in the twin, with the provider's identity (``projection`` as for home)."""
        return self._informer("remote", resource, label_selector, projection, field_selector=field_selector)

    def _informer(
        self,
        side: str,
        resource: Resource,
        label_selector: str | None,
        projection: Projection | None,
        *,
        field_selector: str | None = None,
    ) -> Informer:
        scope = (side, resource, label_selector, field_selector)
        if scope in self._scoped:
            self._scoped[scope].widen(projection)
        else:
            if self.started:
                raise RuntimeError(f"{self.name}: {resource.plural}@{side} asked for after the pair started")
            namespace = self.home_namespace if side == "home" else self.twin
            informer = Informer(
                client=self._clients[side],
                resource=resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                name=f"{resource.plural}/{namespace}@{side}",
                projection=projection,
            )
            self._scoped[scope] = informer
            self.informers.append(informer)
        return self._scoped[scope]


REMOTE_POD_FIELDS = keep("metadata", "status")
"""All the reflectors read of a remote pod: whether it runs this home pod (its annotations, UID) and its
status, mirrored home (:func:`~liqo.virtualkubelet.forge.pods.home_status`); never its spec."""


def remote_pods(pair: NamespacePair) -> Informer:
    """The pods the provider runs for us in ``pair``'s twin (made from ShadowPods), shared by the reflectors."""
    return pair.remote(PODS, label_selector=names.SHADOW_POD, projection=REMOTE_POD_FIELDS)


K = TypeVar("K", bound=Hashable)


class Reflector(Component, Generic[K]):
    """One control loop over a virtual node's namespace pairs, and the hooks the manager calls on it.

    See the module docstring for when each hook is called; every hook does nothing here. A reflector is
    built on its node's :class:`ReflectionManager`, which holds both clusters, the identities and the event
    recorder: every reflector reads them from there, under the same names. Its loop is named after what it
    reflects and the node (``"pods liqo-milan"``), which is what logs and metrics show. A reflector overrides
    :meth:`reconcile` and the hooks it needs.
    """

    def __init__(self, manager: ReflectionManager, *, reflects: str, workers: int) -> None:
        self._manager = manager
        self._home = manager.home
        self._provider = manager.provider
        self._home_cluster_id = manager.home_cluster_id
        self._events = manager.events
        self.controller: Controller[K] = Controller(
            name=f"{reflects} {manager.node_name}", reconcile=self.reconcile, workers=workers
        )

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The reflector's loop."""
        return [self.controller]

    async def reconcile(self, key: K) -> Result | None:
        """Bring what ``key`` names in line on both sides."""
        raise NotImplementedError

    @property
    def informers(self) -> list[Informer]:
        """Informers of the reflector's own, outside any pair (the home pods bound to the node), run by the manager."""
        return []

    def start_namespace(self, pair: NamespacePair) -> None:
        """Ask ``pair`` for informers and add handlers that enqueue keys (no I/O)."""

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Every informer of ``pair`` has listed: queue its keys again."""

    def stop_namespace(self, pair: NamespacePair) -> None:
        """``pair`` is going: drop what the reflector keeps about it."""

    def namespaces_changed(self) -> None:
        """The set of pairs changed."""

    def network_changed(self) -> None:
        """What the provider's or home's network is known to be changed: addresses translate differently."""


@dataclass(frozen=True)
class Addresses:
    """What each side must dial for an address the other owns, from the networks known now.

    ``provider`` is read at each call (the provider's network is learnt at its next handshake); home's is
    this cluster's own.
    """

    home: ClusterNetwork | None
    home_name: str
    provider: Callable[[], ClusterNetwork | None]
    provider_name: str
    home_sees_provider: Callable[[], IPNetwork | None] = lambda: None
    """Where home sees the provider's pods, once the network fabric links them (home's NetworkConfig)."""
    provider_sees_home: Callable[[], IPNetwork | None] = lambda: None
    """Where the provider sees home's pods (the provider's NetworkConfig, replicated here)."""

    def for_provider(self, address: str) -> Translation:
        """What the provider must dial for home's pod ``address``."""
        return translate(
            address,
            owner=self.home,
            reader=self.provider(),
            owner_name=self.home_name,
            reader_name=self.provider_name,
            remapped_pod_cidr=self.provider_sees_home(),
        )

    def for_home(self, address: str) -> Translation:
        """What home must dial for the provider's pod ``address``."""
        return translate(
            address,
            owner=self.provider(),
            reader=self.home,
            owner_name=self.provider_name,
            remapped_pod_cidr=self.home_sees_provider(),
        )

    def returned_home(self, address: str) -> IPAddress | None:
        """Home's own pod the provider means by ``address``, if it names one (a pod it sent back here)."""
        return returned_home(
            address, home=self.home, provider=self.provider(), provider_sees_home=self.provider_sees_home()
        )


class ReflectionManager:
    """Follows the twins of one virtual node and runs its reflectors over them.

    It also holds what every reflector of the node is built with (clients, names, the Event recorder, the
    address translation), so that a reflector is constructed from the manager and its own few inputs.
    """

    def __init__(
        self,
        *,
        home: KubeClient,
        provider: KubeClient,
        provider_id: str,
        node_name: str,
        home_cluster_id: str,
        offloadings: Informer,
        addresses: Addresses,
        events: EventRecorder,
    ) -> None:
        """``offloadings`` is the home NamespaceOffloading informer the caller runs (one per process)."""
        self.home = home
        """The home cluster's client."""
        self.provider = provider
        """The provider's client, with this virtual node's identity."""
        self.provider_id = provider_id
        self.node_name = node_name
        """The virtual node's name at home."""
        self.home_cluster_id = home_cluster_id
        """Home's cluster ID: the marker of every copy reflectors make."""
        self.addresses = addresses
        self.events = events
        self._offloadings = offloadings
        self._reflectors: list[Reflector[Any]] = []
        self.twins: dict[str, str] = {}
        """Home namespace → twin, as followed now."""
        self._pairs: Following[str, str, NamespacePair] = Following(
            make=self._start_pair,
            on_synced=lambda _twin, pair: self._each(lambda r: r.namespace_synced(pair)),
            on_stop=lambda _twin, pair: self._each(lambda r: r.stop_namespace(pair)),
        )

    def register(self, *reflectors: Reflector[Any]) -> None:
        """Add reflectors (before :meth:`run`)."""
        self._reflectors.extend(reflectors)

    def pair(self, home_namespace: str) -> NamespacePair | None:
        """The pair of ``home_namespace``, if it is offloaded to this provider."""
        twin = self.twins.get(home_namespace)
        return self._pairs.get(twin) if twin is not None else None

    def pair_of_twin(self, twin: str) -> NamespacePair | None:
        """The pair whose twin is ``twin``, if any."""
        return self._pairs.get(twin)

    def twins_changed(self) -> None:
        """The NamespaceOffloadings changed: follow the twins on this provider (call on every change)."""
        wanted = twins_on(self._offloadings.store.list(), provider_id=self.provider_id)
        if wanted == self.twins:
            return
        self.twins = wanted
        self._pairs.follow({twin: home for home, twin in wanted.items()})
        self._each(lambda r: r.namespaces_changed())

    def network_changed(self) -> None:
        """Either side's network changed (or became known): every address is translated again."""
        self._each(lambda r: r.network_changed())

    def _start_pair(self, twin: str, home_namespace: str) -> NamespacePair:
        pair = NamespacePair(home=self.home, provider=self.provider, home_namespace=home_namespace, twin=twin)
        for reflector in self._reflectors:
            reflector.start_namespace(pair)
        return pair

    def _each(self, call: Callable[[Reflector[Any]], None]) -> None:
        for reflector in self._reflectors:
            call(reflector)

    async def run(self) -> None:
        """Run the reflectors' informers, then follow the twins and reconcile until cancelled."""
        informers = [i for r in self._reflectors for i in r.informers]
        try:
            async with asyncio.TaskGroup() as group:
                for informer in informers:
                    group.create_task(informer.run(), name=f"informer {informer.name}")
                for informer in informers:
                    await informer.wait_synced()
                self.twins_changed()
                for reflector in self._reflectors:
                    for controller in reflector.controllers:
                        group.create_task(controller.run(), name=f"controller {controller.name}")
        finally:
            await self._pairs.close()
