"""Shared informers: one list+watch per (resource, namespace, selector) for every controller of a process.

Controllers ask for the informers they need before the process starts them; two controllers watching
ConfigMaps in the same scope share one watch and one cache, as client-go's SharedInformerFactory does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from liqo.kube.client import KubeClient
from liqo.kube.informer import Informer
from liqo.kube.projection import Projection
from liqo.kube.resources import Resource

_Scope = tuple[Resource, str | None, str | None, str | None]


class SharedInformers:
    """The informers of one cluster, created on demand and run together."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._informers: dict[_Scope, Informer] = {}

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


class InformerGroup:
    """Informers run together as one background task, started and stopped as a unit.

    For watches whose set changes at run time (one group per namespace that comes and goes), where
    :class:`SharedInformers` runs a fixed set for the life of the process.
    """

    def __init__(self, informers: list[Informer], *, name: str) -> None:
        self.informers = informers
        self.name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._task is not None

    @property
    def synced(self) -> bool:
        """Whether every informer of the group completed its first list."""
        return all(informer.has_synced for informer in self.informers)

    def start(self, *, on_synced: Callable[[], None] | None = None) -> None:
        """Start every informer (needs a running event loop); call ``on_synced`` once all have listed.

        Reconciles that ran before the first lists returned early (they cannot tell "absent" from "not
        listed yet"): ``on_synced`` is where their keys are queued again.
        """

        async def replay() -> None:
            for informer in self.informers:
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
