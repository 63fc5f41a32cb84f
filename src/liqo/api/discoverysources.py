"""A DiscoverySource read back: the operator's spec as a policy, the listener's status as neighbours (pure).

The manager decides from these (which neighbours become ForeignClusters, which are peered with), and
``liqoctl discover`` explains the same decisions; both read a source through here. The status is written by a
process that parses strangers' packets: the schema bounds it, and :func:`neighbours_of` reads it once more
defensively (an entry it cannot read is skipped, never trusted in part).
"""

from __future__ import annotations

import datetime
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from liqo.api.labels import selects
from liqo.kube.timefmt import format_time, parse_time

LAN_SOURCE = "lan"
"""The source ``liqoctl install --discovery`` makes: this cluster's LAN."""
DEFAULT_LIMIT = 64
"""Neighbours one source holds at most, unless its spec says otherwise."""
MAX_LIMIT = 256
MAX_LISTED = 64
"""Entries in one allow or deny list."""
MAX_NAMESERVERS = 4
MAX_HEARD_BY = 16
"""Sources a ForeignCluster's ``status.discovery`` names at most (the first by name)."""


class SourceType(StrEnum):
    """Where a source hears of clusters."""

    LAN = "LAN"
    DNS = "DNS"


class PeeringPolicy(StrEnum):
    """What a source's neighbours become."""

    MANUAL = "Manual"
    """A ForeignCluster, which an operator peers with (``liqoctl peer``)."""
    AUTO = "Auto"
    """A ForeignCluster that is peered with at once, presenting the source's token."""
    NEVER = "Never"
    """Nothing: listed in the source's status only."""


class Verdict(StrEnum):
    """What one discovered cluster becomes."""

    KNOWN = "Known"
    """It has a ForeignCluster (made here if there was none); an operator peers with it."""
    AUTO = "Auto"
    """It has a ForeignCluster that asks for the peering, with the token its source holds for it."""
    LISTED = "Listed"
    DENIED = "Denied"
    CONFLICT = "Conflict"
    KEY_MISMATCH = "KeyMismatch"


ACTED_ON = frozenset({Verdict.KNOWN, Verdict.AUTO})
"""The verdicts that keep (or make) a ForeignCluster."""


@dataclass(frozen=True)
class Clusters:
    """An allow or deny list: cluster IDs, and names (exact, or a prefix and ``*``)."""

    cluster_ids: frozenset[str] = frozenset()
    cluster_names: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    """A ``matchLabels``: the clusters announcing every one of these labels (none given: no cluster by labels)."""

    def matches(self, heard: Heard) -> bool:
        """Whether the list names this neighbour: by its ID, its name, or the labels it announces."""
        name = heard.cluster_name
        return (
            heard.cluster_id in self.cluster_ids
            or any(
                fnmatch.fnmatchcase(name, pattern) if pattern.endswith("*") else name == pattern
                for pattern in self.cluster_names
            )
            or selects(dict(self.labels), heard.labels)
        )


@dataclass(frozen=True)
class Source:
    """A source's spec."""

    name: str
    type: SourceType
    announce: bool = True
    domain: str = ""
    nameservers: tuple[str, ...] = ()
    limit: int = DEFAULT_LIMIT
    peering: PeeringPolicy = PeeringPolicy.MANUAL
    allow: Clusters | None = None
    """None: every neighbour not denied."""
    deny: Clusters = Clusters()
    token_secret: str = ""
    admit_consumers: bool = False
    """Its neighbours' records admit them as consumers without a token (the provider's opt-in)."""

    def admits(self, heard: Heard) -> bool:
        """Whether a neighbour may be taken from this source: not denied, and allowed if there is an allow list."""
        if self.deny.matches(heard):
            return False
        return self.allow is None or self.allow.matches(heard)


@dataclass(frozen=True)
class Heard:
    """A neighbour as a source's status lists it."""

    cluster_id: str
    cluster_name: str
    auth_url: str
    key_fingerprint: str
    address: str
    last_seen: datetime.datetime | None
    expires_at: datetime.datetime
    conflict: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    """The labels it announced (a claim, like its name)."""


def _clusters(raw: Any) -> Clusters:
    raw = raw if isinstance(raw, Mapping) else {}
    return Clusters(
        cluster_ids=frozenset(str(i) for i in raw.get("clusterIDs") or ()),
        cluster_names=tuple(str(n) for n in raw.get("clusterNames") or ()),
        labels=tuple(sorted(_string_map(raw.get("labels")).items())),
    )


def _string_map(raw: Any) -> dict[str, str]:
    """A map of strings as the schema holds it; anything else read as none (a status is read defensively)."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(key): value for key, value in raw.items() if isinstance(value, str)}


def source_of(obj: Mapping[str, Any]) -> Source:
    """The spec of a DiscoverySource (its schema holds the shape; defaults as the schema's).

    Raises:
        ValueError: the type is not one of :class:`SourceType` (a CRD older or newer than this code).
    """
    spec = obj.get("spec") or {}
    allow = spec.get("allow")
    return Source(
        name=str(obj["metadata"]["name"]),
        type=SourceType(str(spec.get("type"))),
        announce=bool(spec.get("announce", True)),
        domain=str(spec.get("domain") or ""),
        nameservers=tuple(str(n) for n in spec.get("nameservers") or ()),
        limit=int(spec.get("limit") or DEFAULT_LIMIT),
        peering=PeeringPolicy(spec.get("peering") or PeeringPolicy.MANUAL),
        allow=_clusters(allow) if allow is not None else None,
        deny=_clusters(spec.get("deny")),
        token_secret=str(spec.get("tokenSecret") or ""),
        admit_consumers=spec.get("admitConsumers") is True,
    )


def admitting(sources: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The sources whose neighbours may consume here without a token (``spec.admitConsumers``; pure)."""
    return frozenset(
        str(obj["metadata"]["name"]) for obj in sources if (obj.get("spec") or {}).get("admitConsumers") is True
    )


def neighbours_of(obj: Mapping[str, Any]) -> list[Heard]:
    """The neighbours a DiscoverySource's status lists, each one read whole or skipped."""
    heard = []
    for entry in (obj.get("status") or {}).get("neighbours") or ():
        try:
            last_seen = entry.get("lastSeen")
            heard.append(
                Heard(
                    cluster_id=str(entry["clusterID"]),
                    cluster_name=str(entry.get("clusterName") or ""),
                    auth_url=str(entry["authURL"]),
                    key_fingerprint=str(entry["keyFingerprint"]),
                    address=str(entry.get("address") or ""),
                    last_seen=parse_time(str(last_seen)) if last_seen else None,
                    expires_at=parse_time(str(entry["expiresAt"])),
                    conflict=bool(entry.get("conflict")),
                    labels=_string_map(entry.get("labels")),
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return heard


def heard_by(sources: Iterable[Mapping[str, Any]], cluster_id: str, *, now: datetime.datetime) -> list[dict[str, str]]:
    """Where ``cluster_id`` is heard now, for its ForeignCluster's ``status.discovery`` (pure).

    One entry per source whose table holds it unexpired, by source name: an operator reading a record sees
    which sources still hear the cluster, of which type, at which address and when last, without reading every
    source's table. ``lastSeen`` is to the minute: it moves at every announcement, and a record's status
    is rewritten when what it says changes — once a minute at most, not at every announcement.
    """
    found = []
    for obj in sorted(sources, key=lambda o: str(o["metadata"]["name"])):
        for heard in neighbours_of(obj):
            if heard.cluster_id == cluster_id and heard.expires_at > now:
                found.append(_said(obj, heard))
                break
    return found[:MAX_HEARD_BY]


def said_of(obj: Mapping[str, Any]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """What a source's table would say in records' status, by cluster ID: a change here is one for them."""
    return {(heard.cluster_id, tuple(sorted(_said(obj, heard).items()))) for heard in neighbours_of(obj)}


def _said(obj: Mapping[str, Any], heard: Heard) -> dict[str, str]:
    entry = {
        "source": str(obj["metadata"]["name"]),
        "type": str((obj.get("spec") or {}).get("type") or ""),
        "address": heard.address,
    }
    if heard.last_seen is not None:
        entry["lastSeen"] = format_time(heard.last_seen.replace(second=0, microsecond=0))
    return entry


def heard_ids(obj: Mapping[str, Any]) -> set[str]:
    """The cluster IDs a source's status lists (expired or not): the records whose status it may change."""
    return {heard.cluster_id for heard in neighbours_of(obj)}
