"""The nftables rulesets of gateways and nodes, and the node routes to the gateway (pure: text and argv).

**Rulesets are whole tables, replaced atomically.** Each script declares its table, deletes it and
declares it again with every chain and rule, and is applied with one ``nft -f -``: one netlink batch, so
packets see the old ruleset or the new one, never a table half-written or empty, and applying it again
duplicates nothing (a restarted gateway or agent simply applies its script). A table holds only what
liqo writes, so replacing it never touches anyone else's rules.

**Gateway: double NAT.** Each gateway rewrites its own cluster's pod addresses into the name the peer
gave them (``seen_as``), by prefix — host bits kept, so the mapping is one-to-one and both directions of
a connection are translated by conntrack from the first packet's rule. The peer's gateway does the same
for its pods, so inside the tunnel a packet's source is already named as the receiver names it, and its
destination is still named as the sender names it. See :func:`gateway_ruleset`.

**Node: notrack.** The CNI's bridge plugin masquerades what pods send off the pod CIDR (iptables,
POSTROUTING): traffic to the peer's pods would reach them from the node's address, and their replies
would not find the pod. NAT only ever applies to tracked packets, so the node agent untracks traffic
to and from the peer's (remapped) CIDRs in the raw table, before conntrack: no masquerade, whoever
installed it and in whatever table, and the routing that is asymmetric at the node (pod → node → gateway
out, gateway → node → pod back) is not dropped as ``ct state invalid`` either. See :func:`node_ruleset`.

**Node: no redirects to a gateway.** A pod on the gateway's node sends to the peer through the node, which
forwards the packet back out of the bridge it came in on, to the gateway pod: the kernel then tells the
pod, with an ICMP redirect, to send to the gateway pod directly, and the pod caches that next hop (for
minutes). A restarted gateway gets a new pod IP, and every such pod would keep sending to the old one
while the node's route already points at the new one. So the node drops the redirects it would send
naming a gateway as the better next hop: its pods always go through the node, whose route liqo keeps.

**Routes carry a protocol number of their own.** The node agent routes each peer CIDR to the gateway in
the main table with ``proto 76`` (:data:`ROUTE_PROTO`): ``ip route show proto 76`` lists exactly the
routes liqo wrote, and ``ip route del ... proto 76`` cannot delete anyone else's. A dedicated routing
table would separate them too, but it needs a policy rule (``ip rule``) to be consulted — one more object
to reconcile, and one that reorders every lookup on the node — where a protocol number costs nothing.
See :func:`route_commands`.

**Routes only where a peer's pods may be.** The block a route leads to is the manager's choice
(:func:`liqo.network.ipam.allocate`, always inside the peer pools), carried by the gateway pod's
annotation. The node agent does not take it on trust: a route it is asked for outside the pools, or
overlapping any route of the node that is not liqo's (its connected LAN, its own addresses in the
``local`` table, a VPN, a CNI's routes; the default route aside), would send the node's own traffic into
a peer's tunnel, and is refused (:func:`route_refusal`). See :func:`foreign_routes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from liqo.api.networks import IPNetwork
from liqo.network.ipam import in_pools

ROUTE_PROTO = "76"
"""The ``proto`` of liqo's routes (0x4c, "L"): free in iproute2's ``rt_protos`` and unused by common CNIs
(Calico's is 80, BIRD's 12)."""

SHOW_ROUTES = ("ip", "-j", "route", "show", "proto", ROUTE_PROTO)
"""The command listing liqo's routes in the main table, as JSON for :func:`parse_routes`."""
SHOW_ALL_ROUTES = ("ip", "-4", "-j", "route", "show", "table", "all")
"""The command listing every IPv4 route of every table, as JSON for :func:`foreign_routes`."""

_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
"""Names written into a script: plain, so that no name can close a quote and add a rule of its own."""


class RouteParseError(ValueError):
    """``ip -j route show`` printed a route liqo never writes under its protocol number; the message shows it."""


@dataclass(frozen=True)
class RouteSpec:
    """A route liqo writes: ``destination`` (a peer CIDR, as this cluster names it) ``via`` a next hop.

    The next hop must be on a link of the node: the gateway pod's address on the node hosting it, the
    address of that node elsewhere.
    """

    destination: IPv4Network
    via: IPv4Address


# -- nftables ------------------------------------------------------------------------------------------


def gateway_ruleset(*, table: str, tunnel: str, pod_cidr: IPNetwork, seen_as: IPNetwork, peer_seen: IPNetwork) -> str:
    """The nft script (re)creating a gateway's ``table ip <table>``.

    Args:
        table: the table's name.
        tunnel: the WireGuard interface.
        pod_cidr: this cluster's pod CIDR.
        seen_as: how the peer names this cluster's pods (the same size as ``pod_cidr``).
        peer_seen: how this cluster names the peer's pods.

    The rules, ``T`` being the tunnel:

    - prerouting (dstnat): ``iifname T ip saddr <peer_seen> ip daddr <seen_as> dnat ip prefix to <pod_cidr>``;
    - postrouting (srcnat): ``oifname T ip saddr <pod_cidr> ip daddr <peer_seen> snat ip prefix to <seen_as>``;
      both are omitted when ``seen_as`` is ``pod_cidr`` (the peer did not need to rename us);
    - forward (mangle): what comes out of the tunnel may only go to this cluster's pods (``ip daddr !=
      <pod_cidr> drop``): WireGuard checks a packet's source against the peer's allowed IPs, never its
      destination, and without this rule the peer could reach anything the gateway pod can (Services,
      nodes, the API server). Then TCP SYNs both ways have their MSS clamped to the route's MTU, since
      the tunnel's MTU is lower than the pods' and PMTU discovery depends on ICMP getting through.

    Raises:
        ValueError: a name is not a plain one, a network is IPv6, or ``seen_as`` is not ``pod_cidr``'s size.
    """
    _check_name(table, pattern=_TABLE, what="table")
    _check_name(tunnel, pattern=_INTERFACE, what="interface")
    pods, seen, peer = (_ipv4(n) for n in (pod_cidr, seen_as, peer_seen))
    if seen.prefixlen != pods.prefixlen:
        raise ValueError(f"the peer's name {seen} for our pods is not the size of our pod CIDR {pods}")
    chains = []
    if seen != pods:
        chains.append(
            _chain(
                "prerouting",
                "type nat hook prerouting priority dstnat",
                [f'iifname "{tunnel}" ip saddr {peer} ip daddr {seen} dnat ip prefix to {pods}'],
            )
        )
        chains.append(
            _chain(
                "postrouting",
                "type nat hook postrouting priority srcnat",
                [f'oifname "{tunnel}" ip saddr {pods} ip daddr {peer} snat ip prefix to {seen}'],
            )
        )
    chains.append(
        _chain(
            "forward",
            "type filter hook forward priority mangle",
            [
                f'iifname "{tunnel}" ip daddr != {pods} drop',
                f'oifname "{tunnel}" tcp flags syn tcp option maxseg size set rt mtu',
                f'iifname "{tunnel}" tcp flags syn tcp option maxseg size set rt mtu',
            ],
        )
    )
    return _table_script(table, chains)


def node_ruleset(*, table: str, remote_cidrs: Sequence[IPNetwork], gateways: Sequence[IPv4Address] = ()) -> str:
    """The nft script (re)creating a node agent's ``table ip <table>``, or deleting it when there is no peer.

    One raw prerouting chain (before conntrack) untracking every packet to or from a remote CIDR (the
    peers' pods as this cluster names them), one rule per CIDR and direction: an anonymous set would
    refuse overlapping CIDRs, and a refused script keeps the node on its previous rules.

    One output chain dropping the ICMP redirects the node would send naming one of ``gateways`` (the next
    hops of liqo's routes) as the better next hop: a pod would cache it, and keep sending to a gateway's
    old address after the gateway restarted (see the module's docstring). The redirect's gateway field is
    matched as the integer nft 1.0 takes it (``icmp gateway`` has no address type).

    Only forwarded traffic needs untracking, so the output chain untracks nothing: a node's own processes
    and hostNetwork pods reach no peer through the fabric (their source is a node address, which the
    gateway does not rename and the peer's WireGuard refuses), so there is nothing of theirs to keep from
    a masquerade.

    A pod reaching a remote pod through one of this cluster's Services is the exception: its packets are
    addressed to the Service in prerouting, so they are tracked (kube-proxy's DNAT needs it) and the CNI
    masquerades them after the DNAT, to the node's own bridge address. Their replies, from a remote CIDR
    to that local address, must stay tracked to be un-NATed: so the ``saddr`` rule spares packets to the
    node itself (``fib daddr type != local``). The peer then sees the node's address (remapped), not the
    pod's: the one path where the caller is not named exactly.

    With no remote CIDR the script deletes the table (creating it first, so that it also applies when
    the table is absent): an unpeered node keeps nothing of liqo's, not even an empty table.

    Raises:
        ValueError: ``table`` is not a plain name, or a CIDR is IPv6.
    """
    _check_name(table, pattern=_TABLE, what="table")
    cidrs = sorted({_ipv4(cidr) for cidr in remote_cidrs})
    if not cidrs:
        return f"table ip {table}\ndelete table ip {table}\n"
    rules = [
        rule
        for cidr in cidrs
        for rule in (f"ip daddr {cidr} notrack", f"ip saddr {cidr} fib daddr type != local notrack")
    ]
    chains = [_chain("prerouting", "type filter hook prerouting priority raw", rules)]
    next_hops = sorted({IPv4Address(gateway) for gateway in gateways})
    if next_hops:
        redirects = [f"icmp type redirect icmp gateway {int(hop)} drop" for hop in next_hops]
        chains.append(_chain("output", "type filter hook output priority filter", redirects))
    return _table_script(table, chains)


def _chain(name: str, hook: str, rules: Sequence[str]) -> str:
    body = "".join(f"    {rule}\n" for rule in rules)
    return f"  chain {name} {{\n    {hook}; policy accept;\n{body}  }}\n"


def _table_script(table: str, chains: Sequence[str]) -> str:
    return f"table ip {table}\ndelete table ip {table}\ntable ip {table} {{\n{''.join(chains)}}}\n"


def _check_name(value: str, *, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.fullmatch(value):
        raise ValueError(f"{value[:64]!r} is not a plain {what} name (one matching {pattern.pattern})")


def _ipv4(network: IPNetwork) -> IPv4Network:
    if not isinstance(network, IPv4Network):
        raise ValueError(f"{network} is IPv6: the network fabric's rules are IPv4 only")
    return network


# -- routes --------------------------------------------------------------------------------------------


def route_commands(*, wanted: Sequence[RouteSpec], present: Sequence[RouteSpec]) -> list[list[str]]:
    """The ``ip route`` commands turning liqo's routes from ``present`` into ``wanted``.

    Args:
        wanted: the routes there should be, one per destination.
        present: liqo's routes now (:data:`SHOW_ROUTES` through :func:`parse_routes`): only routes of
            :data:`ROUTE_PROTO`, so nothing else is ever deleted.

    Returns:
        Deletions of routes to destinations no longer wanted (``del``, with their protocol: the kernel
        then matches no other route), then, by destination, ``replace`` for a wanted destination whose
        next hop changed (one atomic change: no moment without a route) and ``add`` for a new one. A new
        destination is added, not replaced: were someone else's route there, ``add`` fails ("File
        exists") where ``replace`` would silently take it over. Empty when ``present`` is ``wanted``.

    Raises:
        ValueError: two routes of ``wanted``, or of ``present``, share a destination (the kernel keeps one
            route per destination and metric, and liqo writes no metric).
    """
    wanted_by_destination = _by_destination(wanted, what="wanted")
    present_by_destination = _by_destination(present, what="present")
    commands = [
        _route("del", route)
        for destination, route in sorted(present_by_destination.items())
        if destination not in wanted_by_destination
    ]
    for destination, route in sorted(wanted_by_destination.items()):
        current = present_by_destination.get(destination)
        if current is None:
            commands.append(_route("add", route))
        elif current != route:
            commands.append(_route("replace", route))
    return commands


def parse_routes(ip_json: str) -> list[RouteSpec]:
    """The routes in the output of :data:`SHOW_ROUTES` (``ip -j route show proto 76``).

    Raises:
        RouteParseError: the output is not iproute2's JSON, or holds a route liqo never writes under its
            protocol (no next hop, several, a metric): someone else uses the number, and guessing what to
            do with their route could delete it.
    """
    return [_parse_route(entry) for entry in _route_entries(ip_json)]


def _route_entries(ip_json: str) -> list[Any]:
    try:
        entries = json.loads(ip_json)
    except ValueError:
        raise RouteParseError(f"not the JSON of ip -j route: {ip_json[:200]!r}") from None
    if not isinstance(entries, list):
        raise RouteParseError(f"not the JSON of ip -j route: {ip_json[:200]!r}")
    return entries


def _parse_route(entry: Any) -> RouteSpec:
    shown = json.dumps(entry)[:200]
    if not isinstance(entry, dict):
        raise RouteParseError(f"not a route: {shown}")
    unexpected = sorted({"nexthops", "metric"} & entry.keys())
    if unexpected or "gateway" not in entry:
        raise RouteParseError(
            f"a route of proto {ROUTE_PROTO} that liqo does not write ({', '.join(unexpected) or 'no gateway'}):"
            f" {shown}; another program uses this protocol number"
        )
    try:
        return RouteSpec(destination=IPv4Network(entry["dst"]), via=IPv4Address(entry["gateway"]))
    except (KeyError, ValueError):  # "default", an IPv6 or malformed address
        raise RouteParseError(f"not an IPv4 route to a network via an address: {shown}") from None


def foreign_routes(ip_json: str) -> list[IPv4Network]:
    """The destinations of the routes in the output of :data:`SHOW_ALL_ROUTES` that are not liqo's.

    liqo's are those of :data:`ROUTE_PROTO` in the main table (iproute2 names no table for it); a route of
    that protocol in another table is someone else's. Default routes are left out: every destination lies
    under them, and a more specific route is exactly what liqo adds.

    Raises:
        RouteParseError: the output is not iproute2's JSON, or a destination is not an IPv4 network: the
            node's routes are then unknown, and nothing is routed on a guess.
    """
    found: list[IPv4Network] = []
    for entry in _route_entries(ip_json):
        if not isinstance(entry, dict):
            raise RouteParseError(f"not a route: {json.dumps(entry)[:200]}")
        if entry.get("protocol") == ROUTE_PROTO and entry.get("table", "main") == "main":
            continue
        destination = entry.get("dst")
        if destination == "default":
            continue
        try:
            network = IPv4Network(str(destination), strict=False)
        except ValueError:
            raise RouteParseError(f"not a route to an IPv4 network: {json.dumps(entry)[:200]}") from None
        if network.prefixlen:
            found.append(network)
    return found


def route_refusal(
    destination: IPNetwork, *, pools: Sequence[IPv4Network], foreign: Sequence[IPv4Network] = ()
) -> str | None:
    """Why no route to ``destination`` (a peer's pods, as this cluster names them) may be made here; None if none.

    Args:
        destination: the route's destination.
        pools: where this cluster names peers' pods (``--peer-pools``).
        foreign: the node's routes that are not liqo's (:func:`foreign_routes`); none where only the pools
            matter (a gateway, in a network namespace of its own).
    """
    if not isinstance(destination, IPv4Network) or not in_pools(destination, pools):
        return (
            f"{destination} is outside the peer pools ({', '.join(map(str, pools))}): a peer's pods are only ever"
            " named inside them, and a route there would send this node's own traffic to the peer"
        )
    clash = sorted(route for route in foreign if route.overlaps(destination))
    if clash:
        return (
            f"{destination} overlaps this node's route{'s' if len(clash) > 1 else ''} to"
            f" {', '.join(map(str, clash))}, which {'are' if len(clash) > 1 else 'is'} not liqo's: that traffic"
            " would go to the peer"
        )
    return None


def _by_destination(routes: Sequence[RouteSpec], *, what: str) -> dict[IPv4Network, RouteSpec]:
    found: dict[IPv4Network, RouteSpec] = {}
    for route in routes:
        if found.setdefault(route.destination, route) != route:
            first = found[route.destination]
            raise ValueError(f"two {what} routes to {route.destination}: via {first.via} and via {route.via}")
    return found


def _route(verb: str, route: RouteSpec) -> list[str]:
    return ["ip", "route", verb, str(route.destination), "via", str(route.via), "proto", ROUTE_PROTO]
