"""The home endpoints of every reflected Service, listed on the provider under the addresses it must dial.

The Service's copy in the twin keeps its selector, so the provider's EndpointSlice controller lists the pods
running there; this reflector adds, per home EndpointSlice of a reflected Service, a slice in the twin with
the endpoints at home (:mod:`liqo.virtualkubelet.forge.endpointslices`: translated, or left out with a
reason). The other direction needs no slice: the home EndpointSlice controller lists the offloaded pods from
their home pods, whose IPs the pod reflector sets to what home must dial.

One key per home slice, ``(home namespace, slice name)``; the slice in the twin has the same name and is
written like every copy (:func:`~liqo.virtualkubelet.reflection.copies.converge_copy`). Endpoints left out
are reported once per change of reasons, as a Warning Event ``EndpointsNotReflected`` on the home Service:
never silently wrong, and never an Event per reconcile. A slice the provider refuses (its admission accepts
only the addresses it sees our pods at: until it knows where, none) is said the same way, ``ProviderRefused``
with the provider's message, and written again with a capped backoff.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from liqo.kube.controller import Result
from liqo.kube.objects import Obj
from liqo.kube.resources import ENDPOINT_SLICES, SERVICES
from liqo.virtualkubelet.forge import endpointslices as forge
from liqo.virtualkubelet.forge import services
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector
from liqo.virtualkubelet.reflection.steps import (
    ReflectionPolicy,
    Refusals,
    converge_copy,
    delete_copy,
    typed,
)

SliceKey = tuple[str, str]
"""``(home namespace, slice name)``."""
NOT_REFLECTED = "EndpointsNotReflected"


class EndpointSliceReflector(Reflector[SliceKey]):
    """Keeps, in every twin of one virtual node, the home endpoints of the reflected Services."""

    def __init__(
        self,
        *,
        manager: ReflectionManager,
        policy: ReflectionPolicy,
        virtual_nodes: Callable[[], Collection[str]],
    ) -> None:
        """``virtual_nodes`` gives every virtual node of home (endpoints there run in other providers)."""
        super().__init__(manager, reflects="endpointslices", workers=4)
        self._node_name = manager.node_name
        self._provider_name = manager.addresses.provider_name
        self._policy = policy
        self._virtual_nodes = virtual_nodes
        self._reported: dict[SliceKey, tuple[str, ...]] = {}
        self._refusals = Refusals(manager.events)

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch the slices on both sides, and the home Services (whose slices follow whether they are reflected)."""
        home_namespace = pair.home_namespace

        def by_name(obj: Obj) -> list[SliceKey]:
            return [(home_namespace, obj["metadata"]["name"])]

        self.controller.watch(pair.home(ENDPOINT_SLICES), by_name)
        self.controller.watch(pair.remote(ENDPOINT_SLICES), by_name)
        self.controller.watch(pair.home(SERVICES), lambda service: self._slices_of(pair, service["metadata"]["name"]))

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Reconcile every slice seen on either side again."""
        for key in self._all(pair):
            self.controller.queue.add(key)

    def stop_namespace(self, pair: NamespacePair) -> None:
        """Forget what was reported about the pair's slices."""
        for key in [k for k in self._reported if k[0] == pair.home_namespace]:
            del self._reported[key]
        self._refusals.forget_where(lambda key: key[0] == pair.home_namespace)

    def network_changed(self) -> None:
        """Every address is translated anew."""
        for home_namespace in list(self._manager.twins):
            pair = self._manager.pair(home_namespace)
            if pair is not None:
                self.namespace_synced(pair)

    def _slices_of(self, pair: NamespacePair, service: str) -> list[SliceKey]:
        return [
            (pair.home_namespace, s["metadata"]["name"])
            for s in pair.home(ENDPOINT_SLICES).store.list()
            if forge.service_of(s) == service
        ]

    def _all(self, pair: NamespacePair) -> set[SliceKey]:
        names = {s["metadata"]["name"] for s in pair.home(ENDPOINT_SLICES).store.list()}
        names |= {s["metadata"]["name"] for s in pair.remote(ENDPOINT_SLICES).store.list()}
        return {(pair.home_namespace, name) for name in names}

    async def reconcile(self, key: SliceKey) -> Result | None:
        """Bring the twin's slice for home slice ``key`` in line with it (or delete it)."""
        namespace, name = key
        pair = self._manager.pair(namespace)
        if pair is None or not pair.synced:
            return None  # not (or no longer) offloaded here; or namespace_synced re-queues it
        home = pair.home(ENDPOINT_SLICES).store.get(f"{namespace}/{name}")
        current = pair.remote(ENDPOINT_SLICES).store.get(f"{pair.twin}/{name}")
        if current is not None and not forge.is_reflected(current, origin=self._home_cluster_id):
            return None  # the provider's own (its controller's for the Service's pods there, or a namesake)
        service_name = forge.service_of(home) if home is not None else None
        service = pair.home(SERVICES).store.get(f"{namespace}/{service_name}") if service_name else None
        wanted = (
            home is not None
            and service is not None
            and services.reflectable(service)
            and self._policy.reflects(SERVICES)
        )
        desired: Obj | None = None
        if wanted and home is not None and service is not None:
            reflected = forge.reflected_slice(
                home,
                namespace=pair.twin,
                home_cluster_id=self._home_cluster_id,
                virtual_node=self._node_name,
                virtual_nodes=self._virtual_nodes(),
                translate=self._manager.addresses.for_provider,
            )
            desired = reflected.slice
            await self._report(key, service, reflected.refused)
        else:
            self._reported.pop(key, None)
        if desired is None or service is None:
            self._refusals.forget(key)
            if current is not None:
                await delete_copy(self._provider, ENDPOINT_SLICES, current)
            return None
        write = converge_copy(
            self._provider,
            ENDPOINT_SLICES,
            current=current,
            desired=desired,
            is_current=forge.slice_is_current,
            must_replace=forge.must_replace,
        )
        return await self._refusals.write(
            key,
            typed(SERVICES, service),
            write,
            controller=self.controller,
            reflector=ENDPOINT_SLICES.plural,
            what=f"EndpointSlice {name}: ",
        )

    async def _report(self, key: SliceKey, service: Obj, refused: list[str]) -> None:
        """A Warning Event on the home Service when the reasons endpoints are left out change (not on every look)."""
        reasons = tuple(dict.fromkeys(refused))
        if reasons == self._reported.get(key, ()):
            return
        self._reported[key] = reasons
        if not reasons:
            return
        count = len(refused)
        message = (
            f"{count} endpoint{'s' if count > 1 else ''} of EndpointSlice {key[1]} not reflected to"
            f" {self._provider_name}: {'; '.join(reasons)}"
        )
        await self._events.record(typed(SERVICES, service), type="Warning", reason=NOT_REFLECTED, message=message)
