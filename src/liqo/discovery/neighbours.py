"""What one discovery source has heard, kept bounded and aged (pure).

A source (the LAN, a DNS domain) feeds :class:`Neighbours` with what it hears: an announcement from an
address, with the time to live its records carry; a withdrawal; something unusable. The table answers
with the neighbours it holds now, which is what the source's status shows and what the manager turns into
ForeignClusters under policy. The table is all a listener keeps, so its limits are the listener's:

- at most ``limit`` neighbours; an announcement of a cluster not held yet, once full, is counted and dropped
  (a flood of invented clusters cannot grow memory, nor the status, nor the ForeignClusters);
- a neighbour not heard again within its time to live is gone (a cluster taken down without a goodbye);
- one cluster ID heard with two key fingerprints is a conflict: both claims are held, marked, and the
  manager peers with neither (a stranger copying a neighbour's ID cannot take its place; it can only make
  the ID unusable until one of them is gone, which is all a LAN's openness allows to prevent);
- refusals are counted, and the last one kept with its reason: enough to diagnose, too little to flood.

Neighbours are keyed by cluster ID and fingerprint together, so a re-announcement replaces its own entry
and never adds one.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any

from liqo.api.discoverysources import DEFAULT_LIMIT
from liqo.discovery.announcements import Announcement
from liqo.kube.printable import printable
from liqo.kube.timefmt import format_time

MAX_REASON = 300


@dataclass(frozen=True)
class Neighbour:
    """A cluster as one source last heard it."""

    announcement: Announcement
    address: str
    """Where the announcement came from (``ip`` on the LAN, the SRV target in DNS): for the operator's eyes."""
    last_seen: datetime.datetime
    expires_at: datetime.datetime

    @property
    def key(self) -> tuple[str, str]:
        """One entry per cluster ID and key: the same claim heard again replaces it."""
        return (self.announcement.cluster_id, self.announcement.key_fingerprint)


@dataclass(frozen=True)
class Refusal:
    """The last thing heard that was not an announcement."""

    address: str
    reason: str
    at: datetime.datetime


@dataclass(frozen=True)
class Neighbours:
    """The table of one source: immutable, every change a new table."""

    limit: int = DEFAULT_LIMIT
    held: dict[tuple[str, str], Neighbour] = field(default_factory=dict)
    refused: int = 0
    """Announcements refused since the listener started (unusable, or beyond the limit)."""
    last_refusal: Refusal | None = None

    def heard(
        self, announcement: Announcement, *, address: str, now: datetime.datetime, ttl: datetime.timedelta
    ) -> Neighbours:
        """The table once ``announcement`` was heard from ``address``, valid ``ttl`` from ``now``."""
        table = self.expired(now)
        entry = Neighbour(announcement=announcement, address=address, last_seen=now, expires_at=now + ttl)
        if entry.key not in table.held and len(table.held) >= table.limit:
            return table.refuse(address=address, reason=f"{table.limit} neighbours held already", now=now)
        return replace(table, held={**table.held, entry.key: entry})

    def withdrawn(self, cluster_id: str, *, key_prefix: str = "", now: datetime.datetime) -> Neighbours:
        """The table without the claims of ``cluster_id`` whose fingerprint starts ``key_prefix`` (a goodbye)."""
        table = self.expired(now)
        gone = [key for key in table.held if key[0] == cluster_id and key[1].startswith(key_prefix)]
        return replace(table, held={key: n for key, n in table.held.items() if key not in gone}) if gone else table

    def renewed(self, key: tuple[str, str], *, expires_at: datetime.datetime) -> Neighbours:
        """The table with neighbour ``key`` living until ``expires_at`` (its records were refreshed silently)."""
        held = self.held.get(key)
        if held is None or held.expires_at == expires_at:
            return self
        return replace(self, held={**self.held, key: replace(held, expires_at=expires_at)})

    def refuse(self, *, address: str, reason: str, now: datetime.datetime) -> Neighbours:
        """The table once something unusable was heard from ``address``."""
        refusal = Refusal(address=printable(address, limit=64), reason=printable(reason, limit=MAX_REASON), at=now)
        return replace(self, refused=self.refused + 1, last_refusal=refusal)

    def expired(self, now: datetime.datetime) -> Neighbours:
        """The table without the neighbours whose time to live ran out by ``now``."""
        live = {key: n for key, n in self.held.items() if n.expires_at > now}
        return self if len(live) == len(self.held) else replace(self, held=live)

    def conflicts(self) -> set[str]:
        """The cluster IDs claimed with more than one key fingerprint."""
        seen: dict[str, int] = {}
        for cluster_id, _ in self.held:
            seen[cluster_id] = seen.get(cluster_id, 0) + 1
        return {cluster_id for cluster_id, count in seen.items() if count > 1}

    def status(self) -> dict[str, Any]:
        """The source's ``status`` fields for this table: every neighbour, by cluster ID, and the refusals."""
        conflicts = self.conflicts()
        neighbours = [
            {
                "clusterID": n.announcement.cluster_id,
                "clusterName": n.announcement.cluster_name,
                "authURL": n.announcement.auth_url,
                "keyFingerprint": n.announcement.key_fingerprint,
                "address": n.address,
                "lastSeen": format_time(n.last_seen),
                "expiresAt": format_time(n.expires_at),
                "conflict": n.announcement.cluster_id in conflicts,
            }
            | ({"labels": dict(n.announcement.labels)} if n.announcement.labels else {})
            for _, n in sorted(self.held.items())
        ]
        status: dict[str, Any] = {"neighbours": neighbours, "refused": self.refused}
        if self.last_refusal is not None:
            status["lastRefusal"] = {
                "address": self.last_refusal.address,
                "reason": self.last_refusal.reason,
                "at": format_time(self.last_refusal.at),
            }
        return status
