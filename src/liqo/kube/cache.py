"""Shared informers: one list+watch per (resource, namespace, selector) for every controller of a process.

Controllers ask for the informers they need before the process starts them; two controllers watching
ConfigMaps in the same scope share one watch and one cache, as client-go's SharedInformerFactory does.

An :class:`Index` answers "which cached objects have this value" without a scan of the cache (client-go's
``Indexer``): a handler that finds the objects concerned by an event looks them up instead of listing
them all, which would make the work per event grow with the cache, and a burst of N events quadratic.

A :class:`Derived` keeps what a controller works out from cached objects (a parsed network, a budget) until
one of them changes: a value asked for at every event is then computed once per change of its inputs, not
once per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

from liqo.kube.client import KubeClient
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.projection import Projection
from liqo.kube.resources import Resource, object_key

V = TypeVar("V", bound=Hashable)
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

_Scope = tuple[Resource, str | None, str | None, str | None]


class SharedInformers:
    """The informers of one cluster, created on demand and run together."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._informers: dict[_Scope, Informer] = {}
        self._views: dict[str, Any] = {}

    def view(self, name: str, make: Callable[[], T]) -> T:
        """The view ``name`` over these informers (an :class:`Index` with its lookups), made on first request.

        Shared like the informers: every controller of the process that asks for it gets the same one.
        """
        if name not in self._views:
            self._views[name] = make()
        return cast(T, self._views[name])

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        projection: Projection | None = None,
    ) -> Informer:
        """The informer for this scope (created on first request).

        ``projection`` is what the caller reads of each object (None: all of it); an informer shared by
        several callers keeps the union of what they read.
        """
        scope = (resource, namespace, label_selector, field_selector)
        found = self._informers.get(scope)
        if found is None:
            self._informers[scope] = found = Informer(
                client=self.client,
                resource=resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                projection=projection,
            )
        else:
            found.widen(projection)
        return found

    async def run(self) -> None:
        """Run every informer requested so far, until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self._informers.values():
                group.create_task(informer.run(), name=f"informer {informer.name}")

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether every informer completed its first list within ``timeout`` seconds."""
        results = await asyncio.gather(*(i.wait_synced(timeout) for i in self._informers.values()))
        return all(results)

    @property
    def has_synced(self) -> bool:
        """Whether every informer requested so far completed its first list."""
        return all(informer.has_synced for informer in self._informers.values())


class InformerGroup:
    """Informers run together as one background task, started and stopped as a unit.

    For watches whose set changes at run time (one group per namespace that comes and goes), where
    :class:`SharedInformers` runs a fixed set for the life of the process.
    """

    def __init__(self, informers: list[Informer], *, name: str, depends: Sequence[Informer] = ()) -> None:
        """``informers`` are run by the group; ``depends``, run by someone else, must have listed too."""
        self.informers = informers
        self.depends = list(depends)
        self.name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._task is not None

    @property
    def synced(self) -> bool:
        """Whether every informer of the group, and every one it depends on, completed its first list."""
        return all(informer.has_synced for informer in (*self.informers, *self.depends))

    def start(self, *, on_synced: Callable[[], None] | None = None) -> None:
        """Start every informer (needs a running event loop); call ``on_synced`` once all have listed.

        Reconciles that ran before the first lists returned early (they cannot tell "absent" from "not
        listed yet"): ``on_synced`` is where their keys are queued again.
        """

        async def replay() -> None:
            for informer in (*self.informers, *self.depends):
                await informer.wait_synced()
            if on_synced is not None:
                on_synced()

        async def run_all() -> None:
            async with asyncio.TaskGroup() as group:
                for informer in self.informers:
                    group.create_task(informer.run(), name=f"informer {informer.name}")
                group.create_task(replay(), name=f"{self.name} synced")

        self._task = asyncio.get_running_loop().create_task(run_all(), name=self.name)

    async def stop(self) -> None:
        """Stop every informer and wait until they are stopped."""
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Index(Generic[V]):
    """The keys of an informer's cached objects by a value computed from each (``by``; None: not indexed).

    Kept by a handler of the informer, so it is current when the handlers registered after it run: create
    it before them. ``by`` must be pure and cheap (it runs on the informer's task, for every event).
    """

    def __init__(self, informer: Informer, *, by: Callable[[dict[str, Any]], V | None]) -> None:
        self._by = by
        self._keys: dict[V, set[str]] = {}
        self._values: dict[str, V] = {}
        informer.add_handler(HandlerFuncs(add=self._put, update=lambda _old, new: self._put(new), delete=self._drop))

    def keys(self, value: V) -> list[str]:
        """The keys of the cached objects indexed under ``value``."""
        return list(self._keys.get(value, ()))

    def _put(self, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        self._forget(key)
        value = self._by(obj)
        if value is not None:
            self._values[key] = value
            self._keys.setdefault(value, set()).add(key)

    def _drop(self, obj: dict[str, Any]) -> None:
        self._forget(object_key(obj))

    def _forget(self, key: str) -> None:
        value = self._values.pop(key, None)
        if value is None:
            return
        keys = self._keys[value]
        keys.discard(key)
        if not keys:
            del self._keys[value]


class Changes:
    """Wakes its waiters at every change of some informers' caches: a condition of them awaited without polling.

    For a caller that just wrote through the API server and must not go on before its own caches show the
    write (the next request it serves would be judged without it). Register it before the informers run.
    """

    def __init__(self, *informers: Informer) -> None:
        self._next: asyncio.Future[None] | None = None
        for informer in informers:
            informer.add_handler(
                HandlerFuncs(add=self._changed, update=lambda _old, new: self._changed(new), delete=self._changed)
            )

    def _changed(self, _: dict[str, Any]) -> None:
        if self._next is not None and not self._next.done():
            self._next.set_result(None)
        self._next = None

    async def until(self, condition: Callable[[], bool], *, timeout: float) -> bool:
        """Whether ``condition`` holds within ``timeout`` seconds: checked now, then after every change."""
        try:
            async with asyncio.timeout(timeout):
                while not condition():
                    if self._next is None:
                        self._next = asyncio.get_running_loop().create_future()
                    # Not the future itself: a waiter cancelled (its timeout) must not cancel the others' wake-up.
                    await asyncio.wait([self._next])
        except TimeoutError:
            return False
        return True


Version = tuple[str, str] | None
"""An object's UID and resourceVersion (None: no object): any change to it, or its replacement, moves it."""


def version_of(obj: Mapping[str, Any] | None) -> Version:
    """``obj``'s :data:`Version` (pure)."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    return str(meta.get("uid")), str(meta.get("resourceVersion"))


class Derived(Generic[K, T]):
    """Values derived from cached objects, by key, derived again only when those objects' versions change.

    The objects come from informer caches, which replace an object on every change (a new resourceVersion)
    and never mutate one in place: equal versions mean equal inputs, so the value kept is the value
    ``derive`` would give.
    """

    def __init__(self) -> None:
        self._known: dict[K, tuple[tuple[Version, ...], T]] = {}

    def get(self, key: K, inputs: Sequence[Mapping[str, Any] | None], derive: Callable[[], T]) -> T:
        """The value for ``key`` from ``inputs``: kept from last time if they are the same versions."""
        versions = tuple(version_of(obj) for obj in inputs)
        known = self._known.get(key)
        if known is not None and known[0] == versions:
            return known[1]
        value = derive()
        self._known[key] = (versions, value)
        return value
