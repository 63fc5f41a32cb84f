"""The LAN source as the installed listener runs it: its DiscoverySource followed, its status written.

:class:`~liqo.discovery.lan.LanListener` knows multicast DNS and nothing of Kubernetes. Installed, the
listener is a host-network pod that holds three rights, all on named objects: read its DiscoverySource and
the cluster's identity ConfigMap, write that source's status. This module joins them:

- what the listener should be doing is a pure function of the two objects (:func:`listener_config`): no
  source, or a source that is not a LAN, means nothing runs and nothing is announced; the spec's ``announce``
  and ``limit``, and the identity's ID, name, endpoint and key fingerprint, make the rest;
- when that changes (the operator switches announcing off, a re-install moves the endpoint) the running
  listener is stopped, which says goodbye, and a new one starts (its table starts empty: whoever is on the LAN
  is heard again within a few seconds, at their next announcement or our first query);
- the status is written whole, by server-side apply, at most once a :data:`MIN_WRITE_INTERVAL` (a LAN of
  many clusters re-announcing cannot turn into a stream of writes) and at least once a :data:`HEARTBEAT`,
  so that a stale ``status.listener.heartbeat`` tells an operator that no listener runs. Each neighbour
  carries its expiry, so the manager ages the table even when the listener is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.discoverysources import SourceType, source_of
from liqo.api.identity import ClusterIdentity
from liqo.api.resources import DISCOVERY_SOURCES
from liqo.discovery.announcements import Announcement, Unusable, check_auth_url
from liqo.discovery.lan import TTL, LanListener
from liqo.discovery.neighbours import Neighbours
from liqo.kube.client import KubeClient
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS
from liqo.kube.timefmt import format_time

log = logging.getLogger(__name__)

MIN_WRITE_INTERVAL = 1.0
"""Seconds between two status writes, at least."""
HEARTBEAT = TTL / 3
"""Seconds between two status writes, at most."""


@dataclass(frozen=True)
class ListenerConfig:
    """What the listener runs with: how many neighbours it holds, and what it announces (None: nothing)."""

    limit: int
    announcement: Announcement | None


def listener_config(source: Obj | None, identity: Obj | None) -> ListenerConfig | None:
    """What to run for a LAN source and this cluster's identity; None: nothing (pure).

    Announcing needs the whole identity (a cluster installed before keys were fingerprinted, or with an
    endpoint peers could not use, only listens: the reason is logged by the caller from :func:`why_silent`).
    """
    if source is None:
        return None
    try:
        spec = source_of(source)
    except (KeyError, ValueError):
        return None
    if spec.type is not SourceType.LAN:
        return None
    announcement = announcement_of(identity) if spec.announce else None
    return ListenerConfig(limit=spec.limit, announcement=announcement)


def announcement_of(identity: Obj | None) -> Announcement | None:
    """This cluster's announcement from its identity ConfigMap; None if it cannot be made (see :func:`why_silent`)."""
    return None if why_silent(identity) else _announcement(identity)


def why_silent(identity: Obj | None) -> str:
    """Why the identity makes no announcement; empty if it makes one (pure)."""
    if identity is None:
        return "liqo's identity is not there yet"
    try:
        ours = ClusterIdentity.from_configmap(identity)
    except (KeyError, ValueError) as exc:
        return f"liqo's identity cannot be read: {exc}"
    if not ours.key_fingerprint:
        return "the identity has no key fingerprint (install liqo again)"
    try:
        check_auth_url(ours.auth_url)
    except Unusable as exc:
        return f"the authentication URL cannot be announced: {exc}"
    return ""


def _announcement(identity: Obj | None) -> Announcement:
    assert identity is not None
    ours = ClusterIdentity.from_configmap(identity)
    return Announcement(
        cluster_id=ours.cluster_id,
        cluster_name=ours.cluster_name,
        auth_url=ours.auth_url,
        key_fingerprint=ours.key_fingerprint,
    )


def status_of(table: Neighbours, *, address: str, now: datetime.datetime) -> dict[str, Any]:
    """The source's status for ``table``, heard on ``address`` (pure)."""
    return table.status() | {"listener": {"address": address, "heartbeat": format_time(now)}}


class LanSource:
    """Runs the listener for DiscoverySource ``source`` as long as the process runs (:meth:`run`)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        source: str,
        address: str,
        ttl: int = TTL,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._client = client
        self._source = source
        self._address = address
        self._ttl = ttl
        self._clock = clock
        self._sources = Informer(
            client=client, resource=DISCOVERY_SOURCES, field_selector=f"metadata.name={source}", name="source"
        )
        self._identity = Informer(
            client=client,
            resource=CONFIGMAPS,
            namespace=names.LIQO_NAMESPACE,
            field_selector=f"metadata.name={names.CLUSTER_IDENTITY}",
            name="identity",
        )
        self._changed = asyncio.Event()
        for informer in (self._sources, self._identity):
            informer.add_handler(
                HandlerFuncs(
                    add=lambda _: self._changed.set(),
                    update=lambda _old, _new: self._changed.set(),
                    delete=lambda _: self._changed.set(),
                )
            )
        self._latest: Neighbours | None = None
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        """Follow the source and the identity, run the listener they call for, write its table."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._sources.run())
            group.create_task(self._identity.run())
            group.create_task(self._write_status())
            await self._sources.wait_synced()
            await self._identity.wait_synced()
            await self._follow()

    async def _follow(self) -> None:
        running: tuple[ListenerConfig, asyncio.Task[None]] | None = None
        silent = ""
        try:
            while True:
                self._changed.clear()
                source = self._sources.store.get(self._source)
                identity = self._identity.store.get(f"{names.LIQO_NAMESPACE}/{names.CLUSTER_IDENTITY}")
                wanted = listener_config(source, identity)
                if wanted is not None and wanted.announcement is None and (why := why_silent(identity)) != silent:
                    silent = why
                    if why:
                        log.warning("listening only: %s", why)
                if running is None or running[0] != wanted:
                    if running is not None:
                        await _stop(running[1])
                        running = None
                    if wanted is not None:
                        running = (wanted, asyncio.create_task(self._listen(wanted)))
                await self._until_changed(running[1] if running is not None else None)
        finally:
            if running is not None:
                await _stop(running[1])

    async def _until_changed(self, listener: asyncio.Task[None] | None) -> None:
        """Until the source or the identity changes; a listener that fails meanwhile fails the process."""
        changed = asyncio.create_task(self._changed.wait())
        try:
            await asyncio.wait({changed, *([listener] if listener else [])}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
        if listener is not None and listener.done():
            listener.result()  # raises what stopped it (an address that cannot be bound: the pod restarts)
            raise RuntimeError("the LAN listener stopped by itself")

    async def _listen(self, config: ListenerConfig) -> None:
        listener = LanListener(
            address=self._address,
            announcement=config.announcement,
            publish=self._publish,
            limit=config.limit,
            ttl=self._ttl,
            clock=self._clock,
        )
        await listener.run()

    async def _publish(self, table: Neighbours) -> None:
        self._latest = table
        self._dirty.set()

    async def _write_status(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), timeout=HEARTBEAT)
            self._dirty.clear()
            if self._latest is not None:
                status = status_of(self._latest.expired(self._clock()), address=self._address, now=self._clock())
                try:
                    await self._client.apply_status(DISCOVERY_SOURCES, name=self._source, status=status)
                except NotFoundError:
                    self._latest = None  # the source is gone; the listener stops with it
                except KubeError as exc:
                    log.warning("cannot write the status of DiscoverySource %s: %s", self._source, exc)
                    self._dirty.set()
            # Rate, not synchronisation: what arrives meanwhile is coalesced into the next write.
            await asyncio.sleep(MIN_WRITE_INTERVAL)


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel the listener and wait for its goodbye."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
