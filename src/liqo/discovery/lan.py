"""The LAN source: announce this cluster and hear the others by multicast DNS, on one interface only.

python-zeroconf does the protocol (probing, answering, the cache, refresh queries before a record's life
ends, goodbyes); this module decides what to believe and keeps it bounded. It binds to the one address it
is given — a real node's address on its LAN, never the machine's other interfaces — and:

- announces an :class:`~liqo.discovery.announcements.Announcement` as its instance of ``_liqo._tcp.local.``
  (:attr:`~liqo.discovery.announcements.Announcement.instance`), its records living :data:`TTL` seconds (a cluster that
  vanishes without a goodbye is forgotten within that), again every third of that (a listener's cache
  only refreshes the list of instances by itself, not what each one says), and says goodbye when stopped;
- refuses at once an instance whose name is no cluster ID and key, resolves the others,
  :func:`~liqo.discovery.announcements.parse` judging the TXT record, and feeds
  :class:`~liqo.discovery.neighbours.Neighbours`; at most :data:`MAX_RESOLVING` resolutions run at
  once, so a flood of instance names queues nothing unbounded (what is skipped comes back with the next
  announcement or refresh);
- every :data:`TICK` seconds, takes each neighbour's remaining life from its SRV record in zeroconf's cache
  (a re-announcement refreshes the cache silently, with no event) and forgets those whose records are gone.

Each change of what the table shows is handed to ``publish`` (the source's status); the listener writes
nothing else, so what it hears from strangers can at worst fill that one bounded list.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from zeroconf import IPVersion, ServiceStateChange, Zeroconf, current_time_millis
from zeroconf._dns import DNSService  # the cache holds these; the package exports no name for them
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from liqo.discovery.announcements import SERVICE_TYPE, Announcement, Unusable, claim_of_instance, parse
from liqo.discovery.neighbours import Neighbours

log = logging.getLogger(__name__)

DOMAIN = "local."
FULL_TYPE = f"{SERVICE_TYPE}.{DOMAIN}"
TTL = 60
"""Seconds every record we announce lives, by default: how long a cluster gone without a goodbye stays known."""
TICK = 5.0
"""Seconds between two looks at zeroconf's cache (silent refreshes, records run out)."""
MAX_RESOLVING = 8
RESOLVE_TIMEOUT_MS = 3000
_SRV, _IN = 33, 1
_SAME = datetime.timedelta(seconds=2)
"""Expiries this close are one (the cache's clock and ours tick apart): no status write for a jitter."""

Publish = Callable[[Neighbours], Awaitable[None]]


def claim_of(name: str) -> tuple[str, str] | None:
    """The cluster ID and ``sha256:<prefix>`` an instance's full name stands for (pure); None if not ours."""
    instance = name.removesuffix(f".{FULL_TYPE}")
    return None if instance == name else claim_of_instance(instance)


class LanListener:
    """One interface's announcer and listener; :meth:`run` until cancelled."""

    def __init__(
        self,
        *,
        address: str,
        announcement: Announcement | None,
        publish: Publish,
        limit: int,
        ttl: int = TTL,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._address = address
        self._announcement = announcement
        self._publish = publish
        self._clock = clock
        self._ttl = ttl
        self._table = Neighbours(limit=limit)
        self._resolving: set[str] = set()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def table(self) -> Neighbours:
        """What is known now."""
        return self._table

    async def run(self) -> None:
        """Announce, listen and publish until cancelled; then say goodbye."""
        zc = AsyncZeroconf(interfaces=[self._address], ip_version=IPVersion.V4Only)
        info = self._service_info()
        browser: AsyncServiceBrowser | None = None
        shown: dict[str, Any] | None = None
        try:
            # Listening first, and saying so: registering takes a second and a half of probing.
            browser = AsyncServiceBrowser(zc.zeroconf, [FULL_TYPE], handlers=[self._on_change])
            await self._publish(self._table)
            shown = self._table.status()
            if info is not None:
                await (await zc.async_register_service(info))
                log.info("announcing %s on %s", info.name, self._address)
            loop = asyncio.get_running_loop()
            announced = loop.time()
            while True:
                if info is not None and loop.time() - announced >= self._ttl / 3:
                    await (await zc.async_update_service(info))
                    announced = loop.time()
                self._refresh_from_cache(zc.zeroconf)
                if (status := self._table.status()) != shown:
                    await self._publish(self._table)
                    shown = status
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=min(TICK, self._ttl / 3))
                self._changed.clear()
        finally:
            for task in list(self._tasks):
                task.cancel()
            if browser is not None:
                await browser.async_cancel()
            if info is not None:
                with contextlib.suppress(Exception):
                    await (await zc.async_unregister_service(info))
            await zc.async_close()

    def _service_info(self) -> AsyncServiceInfo | None:
        if self._announcement is None:
            return None
        return AsyncServiceInfo(
            FULL_TYPE,
            f"{self._announcement.instance}.{FULL_TYPE}",
            addresses=[socket.inet_aton(self._address)],
            port=urlsplit(self._announcement.auth_url).port or 443,
            properties=self._announcement.txt(),
            server=f"{self._announcement.cluster_id}.{DOMAIN}",
            host_ttl=self._ttl,
            other_ttl=self._ttl,
        )

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        """zeroconf's (synchronous) callback: a goodbye to apply, or an instance to resolve."""
        claim = claim_of(name)
        if state_change is ServiceStateChange.Removed:
            if claim is not None:
                self._table = self._table.withdrawn(claim[0], key_prefix=claim[1], now=self._clock())
                self._changed.set()
            return
        if claim is None:
            # Not even asked about: it cannot be an announcement (:meth:`_judge` checks that again), and zeroconf
            # refuses to query many such names, with an exception that would put each stranger's packet in our log.
            reason = "its instance name is no cluster ID and key"
            self._table = self._table.refuse(address=name, reason=reason, now=self._clock())
            self._changed.set()
            return
        if name in self._resolving or len(self._resolving) >= MAX_RESOLVING:
            return
        self._resolving.add(name)
        task = asyncio.get_running_loop().create_task(self._resolve(zeroconf, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, zeroconf: Zeroconf, name: str) -> None:
        try:
            info = AsyncServiceInfo(FULL_TYPE, name)
            found = await info.async_request(zeroconf, RESOLVE_TIMEOUT_MS)
            address = next(iter(info.parsed_addresses(IPVersion.V4Only)), "") if found else ""
            self._table = self._judge(info if found else None, name=name, address=address)
            self._changed.set()
        finally:
            self._resolving.discard(name)

    def _judge(self, info: AsyncServiceInfo | None, *, name: str, address: str) -> Neighbours:
        now = self._clock()
        where = address or name
        if info is None:
            return self._table.refuse(address=where, reason="announced, but did not answer", now=now)
        try:
            announcement = parse(info.properties)
        except Unusable as exc:
            return self._table.refuse(address=where, reason=str(exc), now=now)
        if claim_of(name) != announcement.claims():
            return self._table.refuse(address=where, reason="its instance name is not its cluster ID and key", now=now)
        if announcement == self._announcement:
            return self._table
        # The life its records carry, taken from the cache at the next look; a default till then.
        return self._table.heard(announcement, address=address, now=now, ttl=datetime.timedelta(seconds=TTL))

    def _refresh_from_cache(self, zeroconf: Zeroconf) -> None:
        """Each neighbour's expiry from its SRV record in zeroconf's cache; gone with the record.

        The SRV record, not the PTR: zeroconf keeps a PTR record at least 1125 s whatever its TTL says (to
        spare the LAN its refresh queries), which would keep a dead cluster for twenty minutes.
        """
        now, millis = self._clock(), current_time_millis()
        table = self._table
        for key, neighbour in table.held.items():
            name = f"{neighbour.announcement.instance}.{FULL_TYPE}"
            records = [r for r in zeroconf.cache.get_all_by_details(name, _SRV, _IN) if isinstance(r, DNSService)]
            record = max(records, key=lambda r: r.get_expiration_time(100), default=None)
            if record is None or record.is_expired(millis):
                table = table.withdrawn(key[0], key_prefix=key[1], now=now)
            else:
                expires_at = now + datetime.timedelta(milliseconds=record.get_expiration_time(100) - millis)
                if abs(expires_at - neighbour.expires_at) > _SAME:
                    table = table.renewed(key, expires_at=expires_at.replace(microsecond=0))
        self._table = table.expired(now)
