"""The DNS source: clusters an operator publishes in a zone (DNS-SD over unicast DNS), looked up with dnspython.

The same records as on the LAN, in a zone: ``PTR _liqo._tcp.<domain>`` lists the instances, each instance's
``SRV`` gives the port of its authentication endpoint and its ``TXT`` the announcement
(:mod:`liqo.discovery.announcements`; ``liqoctl generate dns-records`` prints a cluster's). What the zone says
is a claim like any other: whoever writes the zone, or answers in its place, can list anything. So:

- each instance is judged by :func:`~liqo.discovery.announcements.parse`, and its name must be its cluster ID
  and key (``<ID>-<12 hex of the fingerprint>``, as on the LAN) and its SRV port the endpoint's;
- at most ``limit`` instances are looked up per round (a zone listing thousands costs one bounded round);
- the records' TTLs are honoured: a cluster is held until the shortest TTL of its records runs out, and the
  zone is asked again after the shortest TTL of the round (between :data:`MIN_INTERVAL` and
  :data:`MAX_INTERVAL`), so a cluster withdrawn from the zone is forgotten within its TTL and no sooner;
- a failed lookup (a timeout, SERVFAIL) changes nothing held; it is counted as a refusal, with its reason.

The lookups are :func:`resolve` (I/O over a resolver, returning plain data); turning a round into the source's
table is :func:`apply_round` (pure).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver

from liqo.discovery.announcements import SERVICE_TYPE, Announcement, Unusable, claim_of_instance, parse
from liqo.discovery.neighbours import Neighbours

MIN_INTERVAL = 10
MAX_INTERVAL = 300
DEFAULT_PORT = 53
LOOKUP_TIMEOUT = 5.0


@dataclass(frozen=True)
class Found:
    """One instance the zone lists, whole and well-formed."""

    announcement: Announcement
    target: str
    ttl: int


@dataclass(frozen=True)
class Round:
    """What one round of lookups gave."""

    found: list[Found] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(where, why) for each instance or lookup that gave nothing usable."""
    ttl: int = MAX_INTERVAL
    """The shortest TTL seen: when to ask again."""


def service_name(domain: str) -> str:
    """``_liqo._tcp.<domain>.``: the name whose PTR records list the clusters of ``domain``."""
    return f"{SERVICE_TYPE}.{domain.rstrip('.')}."


def make_resolver(nameservers: Sequence[str]) -> dns.asyncresolver.Resolver:
    """A resolver asking ``nameservers`` (``IPv4[:port]``), or the system's when there are none.

    Raises:
        ValueError: a nameserver is no IPv4 address and port.
        dns.exception.DNSException: no nameserver given and the host has no resolv.conf.
    """
    if not nameservers:
        resolver = dns.asyncresolver.Resolver()
    else:
        resolver = dns.asyncresolver.Resolver(configure=False)
        servers: list[str | dns.nameserver.Nameserver] = []
        for entry in nameservers:
            host, _, port = entry.partition(":")
            number = int(port or DEFAULT_PORT)
            if not 0 < number < 65536:  # the schema's pattern lets five digits through
                raise ValueError(f"nameserver {entry}: no such port")
            servers.append(dns.nameserver.Do53Nameserver(str(ipaddress.IPv4Address(host)), number))
        resolver.nameservers = servers
    resolver.lifetime = LOOKUP_TIMEOUT
    return resolver


async def resolve(nameservers: Sequence[str], domain: str, *, limit: int) -> Round:
    """One round: the instances ``domain`` lists, at most ``limit`` of them looked up.

    A lookup failing in any way is the round's refusal, never the listener's end: the resolver is made anew
    each round (the host's resolv.conf may appear or change between rounds), and what cannot be made or asked
    (no resolv.conf, a nameserver that is no address, a socket refused) is reported on the source's status.
    """
    try:
        return await _resolve(make_resolver(nameservers), domain, limit=limit)
    except (dns.exception.DNSException, OSError, ValueError) as exc:
        return Round(refused=[(domain, f"cannot look up {domain}: {type(exc).__name__}: {exc}")], ttl=MIN_INTERVAL)


async def _resolve(resolver: dns.asyncresolver.Resolver, domain: str, *, limit: int) -> Round:
    try:
        listing = await resolver.resolve(service_name(domain), dns.rdatatype.PTR)
    except dns.resolver.NXDOMAIN:
        return Round(ttl=MAX_INTERVAL)  # no cluster published (yet): ask again later
    except dns.resolver.NoAnswer:
        return Round(ttl=MAX_INTERVAL)
    except dns.exception.DNSException as exc:
        return Round(
            refused=[(domain, f"cannot list the clusters of {domain}: {type(exc).__name__}")], ttl=MIN_INTERVAL
        )
    ttls = [listing.rrset.ttl] if listing.rrset is not None else []
    instances = sorted({str(rdata.target) for rdata in listing})
    found: list[Found] = []
    refused: list[tuple[str, str]] = []
    if len(instances) > limit:
        refused.append((domain, f"{len(instances)} instances listed, {limit} looked up"))
    for instance in instances[:limit]:
        try:
            srv = await resolver.resolve(instance, dns.rdatatype.SRV)
            txt = await resolver.resolve(instance, dns.rdatatype.TXT)
        except dns.exception.DNSException as exc:
            refused.append((instance, f"cannot look it up: {type(exc).__name__}"))
            continue
        ttl = min(rrset.ttl for rrset in (listing.rrset, srv.rrset, txt.rrset) if rrset is not None)
        ttls.append(ttl)
        strings = [s for rdata in txt for s in rdata.strings]
        try:
            found.append(
                judge(
                    instance, strings=strings, srv_ports=[r.port for r in srv], srv_target=str(srv[0].target), ttl=ttl
                )
            )
        except Unusable as exc:
            refused.append((instance, str(exc)))
    return Round(found=found, refused=refused, ttl=min(ttls, default=MAX_INTERVAL))


def judge(instance: str, *, strings: Sequence[bytes], srv_ports: Sequence[int], srv_target: str, ttl: int) -> Found:
    """One instance's records as an announcement, or why not (pure).

    Raises:
        Unusable: the TXT record is no announcement, the name is not its cluster ID and key, or the SRV port is
            not its endpoint's.
    """
    properties: dict[bytes, bytes | None] = {}
    for string in strings:
        key, equals, value = string.partition(b"=")
        properties.setdefault(key, value if equals else None)
    announcement = parse(properties)
    if claim_of_instance(instance.removesuffix(".").split(".", 1)[0]) != announcement.claims():
        raise Unusable("its instance name is not its cluster ID and key")
    port = urlsplit(announcement.auth_url).port or 443
    if port not in srv_ports:
        raise Unusable(f"its SRV record names port {srv_ports[0] if srv_ports else '-'}, its endpoint port {port}")
    return Found(announcement=announcement, target=srv_target.rstrip("."), ttl=ttl)


def apply_round(table: Neighbours, round_: Round, *, now: datetime.datetime) -> Neighbours:
    """The source's table after a round: what was found held for its TTL, refusals counted (pure).

    What the round did not list is left to run out: a record's TTL is how long it may be believed.
    """
    for found in round_.found:
        table = table.heard(
            found.announcement, address=found.target, now=now, ttl=datetime.timedelta(seconds=found.ttl)
        )
    for where, why in round_.refused:
        table = table.refuse(address=where, reason=why, now=now)
    return table.expired(now)


def next_round_in(round_: Round) -> float:
    """Seconds until the zone is asked again: its shortest TTL, bounded (pure)."""
    return float(min(MAX_INTERVAL, max(MIN_INTERVAL, round_.ttl)))


DEFAULT_RECORD_TTL = 300
"""Seconds the records ``liqoctl generate dns-records`` prints live: how long a cluster withdrawn from the zone
stays known."""


def dns_records(announcement: Announcement, *, domain: str, ttl: int = DEFAULT_RECORD_TTL) -> list[str]:
    """The zone-file lines that publish ``announcement`` in ``domain`` (pure).

    An SRV record names a host, never an address: when the endpoint is an IPv4 address, an A record names it
    ``<cluster ID>.<domain>``.
    """
    zone = domain.rstrip(".")
    instance = f"{announcement.instance}.{service_name(zone)}"
    parts = urlsplit(announcement.auth_url)
    host, port = parts.hostname or "", parts.port or 443
    lines = [f"{service_name(zone)} {ttl} IN PTR {instance}"]
    try:
        address = str(ipaddress.IPv4Address(host))
    except ValueError:
        target = f"{host.rstrip('.')}."
    else:
        target = f"{announcement.cluster_id}.{zone}."
        lines.append(f"{target} {ttl} IN A {address}")
    txt = " ".join(_txt_string(f"{key}={value}") for key, value in announcement.txt().items())
    lines += [f"{instance} {ttl} IN SRV 0 0 {port} {target}", f"{instance} {ttl} IN TXT {txt}"]
    return lines


def _txt_string(text: str) -> str:
    """One quoted character-string of a zone file: quotes and backslashes escaped, other bytes as three digits."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'
