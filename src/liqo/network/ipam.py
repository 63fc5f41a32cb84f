"""How this cluster names a peer's networks: always a block inside the pools the admin gave (pure).

A peer's CIDR is only ever a name for *its* pods, and the name is ours to choose. Whatever block we name
a peer's pods at becomes a route into that peer's tunnel on every one of our nodes (the node agent's), so
a block outside the private pools would send our own traffic to the peer: a peer declaring ``8.8.0.0/16``
would receive our DNS queries, one declaring ``100.64.0.0/10`` our cloud's own services, one declaring our
LAN our nodes' neighbours. So the block is always inside the pools (the admin's ``--peer-pools``, by default
the private ranges of RFC 1918): the peer's own CIDR when it lies inside a pool and overlaps nothing this
cluster uses, otherwise a block of the same size from the pools, otherwise nothing — the peering's network
is refused (:class:`NoFreeBlock`), with a reason its operator sees. The gateway maps one to the other by
prefix (:func:`~liqo.network.rules.gateway_ruleset`), host bits kept, which is why the block must be
exactly the peer's size.

Two peers may use the same pod CIDR as this cluster (every local cluster does by default), or as each
other. A collision is impossible by construction: :func:`allocate` never returns a block overlapping what
it is told is reserved (this cluster's pod and service CIDRs, its nodes' and control plane's addresses,
the admin's reserved subnets), what is already allocated to other peers, or
:data:`~liqo.api.networks.SPECIAL_PURPOSE` (a block there would mean loopback or a metadata endpoint to
every pod). Allocations are stable: a previous allocation that is still valid — inside a pool and free —
is kept across restarts, so addresses already handed out (reflected endpoints, open connections) keep
their meaning. The choice is deterministic — pools in order, lowest block first — so two controllers
computing it from the same records agree.

The search jumps past each obstacle instead of trying every block, so a /28 in a /8 pool with thousands
of blocks taken costs a few thousand steps, not 2^20.

IPv4 only, as upstream Liqo's fabric: the rulesets are ``ip`` family, and an IPv6 network is refused
with :class:`NotIPv4` rather than named wrongly.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Network

from liqo.api.networks import SPECIAL_PURPOSE, InvalidNetwork, IPNetwork, parse_cidr

DEFAULT_POOLS: tuple[IPv4Network, ...] = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
)
"""Where peers' networks are named when the admin gives no pools: the private ranges (RFC 1918)."""

_BITS = 32


class NotIPv4(ValueError):
    """A network given to the allocator is IPv6: the fabric is IPv4 only; the message names it."""


class NoFreeBlock(ValueError):
    """No block of the wanted size is free in the pools; the message names the size and the pools."""


def allocate(
    wanted: IPNetwork,
    *,
    reserved: Iterable[IPNetwork],
    taken: Iterable[IPNetwork],
    pools: Sequence[IPNetwork] = DEFAULT_POOLS,
    previous: IPNetwork | None = None,
) -> IPv4Network:
    """The block this cluster names a peer's network ``wanted`` at: always inside ``pools``.

    Args:
        wanted: the peer's network, as the peer declared it (its word, never a name we must use).
        reserved: what this cluster uses itself (pod and service CIDRs, node and control-plane addresses,
            reserved subnets). IPv6 entries are ignored: they overlap no IPv4 block.
        taken: the blocks already allocated to other peers (not this peer's own: pass that as ``previous``).
        pools: where blocks are named, searched in order.
        previous: this peer's earlier allocation, if any.

    Returns:
        ``previous`` while it is still valid: ``wanted``'s size, inside a pool, overlapping nothing reserved
        or taken. Else ``wanted`` itself if it is valid in the same way. Else the lowest free block of
        ``wanted``'s size in the first pool that has one.

    Raises:
        NotIPv4: ``wanted`` or a pool is IPv6.
        NoFreeBlock: no pool has a free block of ``wanted``'s size.
    """
    wanted4 = _ipv4(wanted, what="the network to name")
    pools4 = [_ipv4(pool, what="the pool") for pool in pools]
    obstacles = _Obstacles([*SPECIAL_PURPOSE, *reserved, *taken])
    for candidate in (previous, wanted4):
        if (
            isinstance(candidate, IPv4Network)
            and candidate.prefixlen == wanted4.prefixlen
            and in_pools(candidate, pools4)
            and obstacles.first_overlapping(candidate) is None
        ):
            return candidate
    for pool in pools4:
        block = obstacles.first_free(pool, prefixlen=wanted4.prefixlen)
        if block is not None:
            return block
    if all(wanted4.prefixlen < pool.prefixlen for pool in pools4):
        why = "it is wider than every pool"
    else:
        why = (
            "every block of that size overlaps a network this cluster uses (its pods, Services, nodes, control"
            " plane, reserved subnets) or one named for another peer"
        )
    raise NoFreeBlock(
        f"no free /{wanted4.prefixlen} to name {wanted4} in the pools {', '.join(map(str, pools4)) or '(none)'}: {why}"
    )


def in_pools(network: IPNetwork, pools: Iterable[IPv4Network]) -> bool:
    """Whether ``network`` lies inside one of ``pools`` (an IPv6 network never does)."""
    return isinstance(network, IPv4Network) and any(network.subnet_of(pool) for pool in pools)


def parse_pools(text: str, *, field: str) -> tuple[IPv4Network, ...]:
    """The pools ``a,b,c`` (IPv4 CIDRs, written canonically) names; :data:`DEFAULT_POOLS` when it names none.

    Raises:
        InvalidNetwork: an item is not a canonical CIDR, or is IPv6 (the fabric is IPv4 only); the message
            names ``field``.
    """
    pools = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        pool = parse_cidr(item, field=field)
        if not isinstance(pool, IPv4Network):
            raise InvalidNetwork(f"{field!r}: {item} is IPv6: the network fabric is IPv4 only")
        pools.append(pool)
    return tuple(pools) or DEFAULT_POOLS


def _ipv4(network: IPNetwork, *, what: str) -> IPv4Network:
    if not isinstance(network, IPv4Network):
        raise NotIPv4(f"{what} {network} is IPv6: the network fabric is IPv4 only")
    return network


class _Obstacles:
    """The IPv4 addresses a block must avoid, as sorted, disjoint, inclusive integer ranges."""

    def __init__(self, networks: Iterable[IPNetwork]) -> None:
        ranges = sorted(
            (int(n.network_address), int(n.broadcast_address)) for n in networks if isinstance(n, IPv4Network)
        )
        merged: list[tuple[int, int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        self._starts = [start for start, _ in merged]
        self._ends = [end for _, end in merged]

    def _overlapping(self, first: int, last: int) -> int | None:
        """The end of the first range overlapping ``[first, last]``, if any (ranges are sorted and disjoint)."""
        index = bisect.bisect_left(self._ends, first)  # the first range ending at or after ``first``
        if index < len(self._starts) and self._starts[index] <= last:
            return self._ends[index]
        return None

    def first_overlapping(self, network: IPv4Network) -> int | None:
        """The end of the first range ``network`` overlaps; None when it is free."""
        return self._overlapping(int(network.network_address), int(network.broadcast_address))

    def first_free(self, pool: IPv4Network, *, prefixlen: int) -> IPv4Network | None:
        """The lowest free ``/prefixlen`` block inside ``pool``, jumping past each obstacle met."""
        if prefixlen < pool.prefixlen:
            return None
        size = 1 << (_BITS - prefixlen)
        start, last = int(pool.network_address), int(pool.broadcast_address)
        while start + size - 1 <= last:
            end = self._overlapping(start, start + size - 1)
            if end is None:
                return IPv4Network((start, prefixlen))
            start = (end + size) // size * size  # the first aligned block after the obstacle
        return None
