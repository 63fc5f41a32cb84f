"""The installed listener: every DiscoverySource followed, each run as its type says, its status written.

:class:`~liqo.discovery.lan.LanListener` knows multicast DNS and :mod:`liqo.discovery.dnszone` DNS lookups;
neither knows Kubernetes. Installed, the listener is one host-network pod whose rights are these: read the
DiscoverySources and write their status, read the identity ConfigMap it announces. This module joins them:

- what runs for each source is a pure function of the sources and the identity (:func:`wanted`): the LAN
  source this listener was given (``--source``, ``lan``) is heard on the node's address, announcing what the
  identity says unless its spec says ``announce: false``; every DNS source is looked up in its zone; a source
  of another type, or none, runs nothing;
- when what a source calls for changes (the operator switches announcing off, edits a domain; a re-install
  moves the endpoint), its runner is stopped, which says goodbye on the LAN, and a new one starts with an
  empty table (whoever is there is heard again within seconds);
- each source's status is written whole, by server-side apply, at most once a :data:`MIN_WRITE_INTERVAL` (a
  LAN of many clusters re-announcing cannot turn into a stream of writes) and at least once a
  :data:`HEARTBEAT`, so that a stale ``status.listener.heartbeat`` tells an operator no listener runs. Each
  neighbour carries its expiry, so the manager ages the table even when the listener is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.discoverysources import SourceType, source_of
from liqo.api.identity import ClusterIdentity
from liqo.api.resources import DISCOVERY_SOURCES
from liqo.discovery.announcements import Announcement, Unusable, check_auth_url
from liqo.discovery.dnszone import apply_round, next_round_in, resolve
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
class LanConfig:
    """A LAN source's run: how many neighbours it holds, and what it announces (None: nothing)."""

    limit: int
    announcement: Announcement | None


@dataclass(frozen=True)
class DnsConfig:
    """A DNS source's run: the zone, whom to ask, how many instances to look up."""

    domain: str
    nameservers: tuple[str, ...]
    limit: int


RunConfig = LanConfig | DnsConfig


def wanted(sources: Iterable[Obj], identity: Obj | None, *, lan_source: str) -> dict[str, RunConfig]:
    """What to run for each source, by name (pure).

    Only the LAN source this listener was given is heard on the LAN (two on one interface would be one
    listener twice); a source of a type this code does not know runs nothing.
    """
    runs: dict[str, RunConfig] = {}
    for obj in sources:
        try:
            spec = source_of(obj)
        except (KeyError, ValueError):
            continue
        if spec.type is SourceType.LAN and spec.name == lan_source:
            runs[spec.name] = LanConfig(
                limit=spec.limit, announcement=announcement_of(identity) if spec.announce else None
            )
        elif spec.type is SourceType.DNS and spec.domain:
            runs[spec.name] = DnsConfig(domain=spec.domain, nameservers=spec.nameservers, limit=spec.limit)
    return runs


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
    return Announcement.of(ClusterIdentity.from_configmap(identity))


def status_of(table: Neighbours, *, address: str, now: datetime.datetime) -> dict[str, Any]:
    """The source's status for ``table``, heard by the listener at ``address`` (pure)."""
    return table.status() | {"listener": {"address": address, "heartbeat": format_time(now)}}


Clock = Callable[[], datetime.datetime]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class StatusWriter:
    """One source's status: the latest table, written coalesced and at least every heartbeat (:meth:`run`)."""

    def __init__(self, *, client: KubeClient, source: str, address: str, clock: Clock) -> None:
        self._client = client
        self._source = source
        self._address = address
        self._clock = clock
        self._latest: Neighbours | None = None
        self._dirty = asyncio.Event()

    async def publish(self, table: Neighbours) -> None:
        """Write ``table`` soon (what comes before the next write replaces it)."""
        self._latest = table
        self._dirty.set()

    async def run(self) -> None:
        """Write until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), timeout=HEARTBEAT)
            self._dirty.clear()
            if self._latest is not None:
                now = self._clock()
                status = status_of(self._latest.expired(now), address=self._address, now=now)
                try:
                    await self._client.apply_status(DISCOVERY_SOURCES, name=self._source, status=status)
                except NotFoundError:
                    self._latest = None  # the source is gone; its runner stops with it
                except KubeError as exc:
                    log.warning("cannot write the status of DiscoverySource %s: %s", self._source, exc)
                    self._dirty.set()
            # Rate, not synchronisation: what arrives meanwhile is coalesced into the next write.
            await asyncio.sleep(MIN_WRITE_INTERVAL)


class Listener:
    """Runs every DiscoverySource as long as the process runs (:meth:`run`)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        lan_source: str,
        address: str,
        ttl: int = TTL,
        clock: Clock = _utc_now,
    ) -> None:
        self._client = client
        self._lan_source = lan_source
        self._address = address
        self._ttl = ttl
        self._clock = clock
        self._sources = Informer(client=client, resource=DISCOVERY_SOURCES, name="sources")
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

    async def run(self) -> None:
        """Follow the sources and the identity, run what they call for."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._sources.run())
            group.create_task(self._identity.run())
            await self._sources.wait_synced()
            await self._identity.wait_synced()
            await self._follow()

    async def _follow(self) -> None:
        running: dict[str, tuple[RunConfig, asyncio.Task[None]]] = {}
        silent = ""
        try:
            while True:
                self._changed.clear()
                identity = self._identity.store.get(f"{names.LIQO_NAMESPACE}/{names.CLUSTER_IDENTITY}")
                runs = wanted(self._sources.store.list(), identity, lan_source=self._lan_source)
                lan = runs.get(self._lan_source)
                why = why_silent(identity) if isinstance(lan, LanConfig) and lan.announcement is None else ""
                if why != silent:
                    silent = why
                    if why:
                        log.warning("listening only: %s", why)
                for name in [n for n, (config, _) in running.items() if runs.get(n) != config]:
                    await _stop(running.pop(name)[1])
                for name, config in runs.items():
                    if name not in running:
                        running[name] = (config, asyncio.create_task(self._run(name, config)))
                await self._until_changed([task for _, task in running.values()])
        finally:
            for _, task in running.values():
                await _stop(task)

    async def _until_changed(self, runners: list[asyncio.Task[None]]) -> None:
        """Until the sources or the identity change; a runner that fails meanwhile fails the process."""
        changed = asyncio.create_task(self._changed.wait())
        try:
            await asyncio.wait({changed, *runners}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
        for runner in runners:
            if runner.done():
                runner.result()  # raises what stopped it (an address that cannot be bound: the pod restarts)
                raise RuntimeError("a discovery source stopped by itself")

    async def _run(self, name: str, config: RunConfig) -> None:
        writer = StatusWriter(client=self._client, source=name, address=self._address, clock=self._clock)
        async with asyncio.TaskGroup() as group:
            group.create_task(writer.run())
            if isinstance(config, LanConfig):
                listener = LanListener(
                    address=self._address,
                    announcement=config.announcement,
                    publish=writer.publish,
                    limit=config.limit,
                    ttl=self._ttl,
                    clock=self._clock,
                )
                await listener.run()
            else:
                await self._look_up(config, writer)

    async def _look_up(self, config: DnsConfig, writer: StatusWriter) -> None:
        """Ask the zone, as often as its TTLs say, forever (a failed round is a refusal, not a failure)."""
        table = Neighbours(limit=config.limit)
        await writer.publish(table)
        while True:
            round_ = await resolve(config.nameservers, config.domain, limit=config.limit)
            table = apply_round(table, round_, now=self._clock())
            await writer.publish(table)
            await asyncio.sleep(next_round_in(round_))  # the zone's own pace: its shortest TTL


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel a runner and wait for it (a LAN runner's goodbye)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
