"""Informer groups for a set of members that changes at run time: started, restarted and stopped with it.

Some watches cannot be set up once per process, because what they watch comes and goes: the tenant
namespace on each provider we hold an identity for (a new identity is a new client, so a renewal means new
watches), the twin namespaces of a virtual node on its provider. The controllers that need them all do the
same four things, and this module does them once:

- the caller says, at every change, what it wants: member → spec (:meth:`Following.follow`, a whole
  mapping, so that a missed change cannot leave a group behind);
- a new member gets a group from the caller's factory, started at once;
- a member whose spec changed (a renewed identity: another client) gets a new group, the old one stopped;
- a member gone is stopped, and a group whose first lists complete calls ``on_synced`` so that the keys its
  reconciles skipped while it was listing are queued again.

Stopping is asynchronous (informer tasks are cancelled and awaited) but :meth:`Following.follow` is not, so
that it can be called from an informer handler; the stops run as tasks that :meth:`Following.close` awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from liqo.kube.cache import InformerGroup

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")
G = TypeVar("G", bound=InformerGroup)


class Following(Generic[K, S, G]):
    """The running groups, one per member, kept equal to the wanted members and their specs.

    Specs are compared with ``==``: a client (which defines no equality) thus counts as changed exactly when
    it is another object.
    """

    def __init__(
        self,
        *,
        make: Callable[[K, S], G],
        on_synced: Callable[[K, G], None] | None = None,
        on_stop: Callable[[K, G], None] | None = None,
    ) -> None:
        """``make(member, spec)`` builds a group (handlers added, not started); ``on_stop`` hears of each stop."""
        self._make = make
        self._on_synced = on_synced
        self._on_stop = on_stop
        self._groups: dict[K, tuple[S, G]] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def get(self, member: K) -> G | None:
        """The running group of ``member``, if any (synced or not: check :attr:`InformerGroup.synced`)."""
        found = self._groups.get(member)
        return found[1] if found is not None else None

    def members(self) -> list[K]:
        """The members followed now."""
        return list(self._groups)

    def follow(self, wanted: Mapping[K, S]) -> tuple[set[K], set[K]]:
        """Start, restart and stop groups to match ``wanted``; the members started and stopped (a restart is both)."""
        started: set[K] = set()
        stopped: set[K] = set()
        for member in list(self._groups):
            spec, group = self._groups[member]
            if member not in wanted or wanted[member] != spec:
                del self._groups[member]
                self._stop(member, group)
                stopped.add(member)
        for member, spec in wanted.items():
            if member not in self._groups:
                group = self._make(member, spec)
                self._groups[member] = (spec, group)
                group.start(on_synced=self._synced_callback(member, group))
                started.add(member)
        return started, stopped

    def _synced_callback(self, member: K, group: G) -> Callable[[], None] | None:
        on_synced = self._on_synced
        if on_synced is None:
            return None
        return lambda: on_synced(member, group)

    def _stop(self, member: K, group: G) -> None:
        if self._on_stop is not None:
            self._on_stop(member, group)
        task = asyncio.get_running_loop().create_task(group.stop(), name=f"stop {group.name}")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        """Stop every group and wait until all are stopped (those stopping already included)."""
        groups = [(member, group) for member, (_, group) in self._groups.items()]
        self._groups.clear()
        for member, group in groups:
            self._stop(member, group)
        await asyncio.gather(*list(self._stopping), return_exceptions=True)
