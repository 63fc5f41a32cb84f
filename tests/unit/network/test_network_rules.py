"""Gateway and node rulesets, and route convergence: the text and argv, then the real nft and ip in a netns."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from ipaddress import IPv4Address, IPv4Network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.networks import IPNetwork
from liqo.network.ipam import DEFAULT_POOLS
from liqo.network.rules import (
    ROUTE_PROTO,
    SHOW_ALL_ROUTES,
    SHOW_ROUTES,
    RouteParseError,
    RouteSpec,
    foreign_routes,
    gateway_ruleset,
    node_ruleset,
    parse_routes,
    route_commands,
    route_refusal,
)
from tests.unit.network.sandbox import needs, netns, run_in


def net(cidr: str) -> IPv4Network:
    return IPv4Network(cidr)


POD_CIDR = net("10.244.0.0/16")
SEEN_AS = net("10.72.0.0/16")  # how the peer names our pods
PEER_SEEN = net("10.71.0.0/16")  # how we name the peer's pods

GATEWAY = """\
table ip liqo-gw
delete table ip liqo-gw
table ip liqo-gw {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "liqo-tunnel" ip saddr 10.71.0.0/16 ip daddr 10.72.0.0/16 dnat ip prefix to 10.244.0.0/16
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "liqo-tunnel" ip saddr 10.244.0.0/16 ip daddr 10.71.0.0/16 snat ip prefix to 10.72.0.0/16
  }
  chain forward {
    type filter hook forward priority mangle; policy accept;
    iifname "liqo-tunnel" ip daddr != 10.244.0.0/16 drop
    oifname "liqo-tunnel" tcp flags syn tcp option maxseg size set rt mtu
    iifname "liqo-tunnel" tcp flags syn tcp option maxseg size set rt mtu
  }
}
"""


def gateway(
    *,
    table: str = "liqo-gw",
    tunnel: str = "liqo-tunnel",
    pod_cidr: IPNetwork = POD_CIDR,
    seen_as: IPNetwork = SEEN_AS,
    peer_seen: IPNetwork = PEER_SEEN,
) -> str:
    return gateway_ruleset(table=table, tunnel=tunnel, pod_cidr=pod_cidr, seen_as=seen_as, peer_seen=peer_seen)


# -- gateway -------------------------------------------------------------------------------------------


def test_a_gateway_renames_its_pods_both_ways_and_clamps_the_mss() -> None:
    assert gateway() == GATEWAY


def test_a_gateway_the_peer_did_not_need_to_rename_writes_no_nat() -> None:
    script = gateway(seen_as=POD_CIDR)
    assert "nat" not in script
    assert "prerouting" not in script
    assert "postrouting" not in script
    assert 'iifname "liqo-tunnel" ip daddr != 10.244.0.0/16 drop' in script
    assert script.startswith("table ip liqo-gw\ndelete table ip liqo-gw\ntable ip liqo-gw {\n")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"table": 'gw" ; flush ruleset ; "'}, "not a plain table name"),
        ({"table": ""}, "not a plain table name"),
        ({"tunnel": 'wg0" accept'}, "not a plain interface name"),
        ({"tunnel": "a-very-long-interface"}, "not a plain interface name"),
        ({"seen_as": net("10.72.0.0/17")}, "not the size of our pod CIDR"),
        ({"peer_seen": ipaddress.ip_network("fd00::/64")}, "IPv6"),
    ],
)
def test_a_gateway_ruleset_refuses_what_it_cannot_write_safely(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gateway(**changes)


# -- node ----------------------------------------------------------------------------------------------


def test_a_node_untracks_traffic_to_and_from_every_remote_cidr_but_replies_to_itself() -> None:
    script = node_ruleset(table="liqo-node", remote_cidrs=[net("10.73.0.0/16"), PEER_SEEN, net("10.73.0.0/16")])
    assert script == (
        "table ip liqo-node\n"
        "delete table ip liqo-node\n"
        "table ip liqo-node {\n"
        "  chain prerouting {\n"
        "    type filter hook prerouting priority raw; policy accept;\n"
        "    ip daddr 10.71.0.0/16 notrack\n"
        "    ip saddr 10.71.0.0/16 fib daddr type != local notrack\n"
        "    ip daddr 10.73.0.0/16 notrack\n"
        "    ip saddr 10.73.0.0/16 fib daddr type != local notrack\n"
        "  }\n"
        "}\n"
    )


def test_a_node_drops_the_redirects_it_would_send_naming_a_gateway() -> None:
    script = node_ruleset(
        table="liqo-node",
        remote_cidrs=[PEER_SEEN],
        gateways=[IPv4Address("10.244.1.5"), IPv4Address("172.30.1.2"), IPv4Address("10.244.1.5")],
    )
    assert script.endswith(
        "  chain output {\n"
        "    type filter hook output priority filter; policy accept;\n"
        f"    icmp type redirect icmp gateway {int(IPv4Address('10.244.1.5'))} drop\n"
        f"    icmp type redirect icmp gateway {int(IPv4Address('172.30.1.2'))} drop\n"
        "  }\n"
        "}\n"
    )
    assert "output" not in node_ruleset(table="liqo-node", remote_cidrs=[PEER_SEEN])
    assert node_ruleset(table="liqo-node", remote_cidrs=[], gateways=[IPv4Address("10.244.1.5")]) == (
        "table ip liqo-node\ndelete table ip liqo-node\n"
    )


def test_a_node_without_peers_deletes_its_table() -> None:
    assert node_ruleset(table="liqo-node", remote_cidrs=[]) == "table ip liqo-node\ndelete table ip liqo-node\n"


def test_a_node_ruleset_refuses_ipv6_and_odd_names() -> None:
    with pytest.raises(ValueError, match="IPv6"):
        node_ruleset(table="liqo-node", remote_cidrs=[ipaddress.ip_network("fd00::/64")])
    with pytest.raises(ValueError, match="plain table name"):
        node_ruleset(table="liqo node", remote_cidrs=[])


# -- the real nft, in a throwaway namespace -------------------------------------------------------------


@needs("nft")
def test_the_real_nft_accepts_the_rulesets_and_applying_again_duplicates_nothing() -> None:
    with netns() as namespace:
        script = gateway()
        run_in(namespace, "nft", "--check", "-f", "-", input=script)
        run_in(namespace, "nft", "-f", "-", input=script)
        run_in(namespace, "nft", "-f", "-", input=script)
        listed = run_in(namespace, "nft", "list", "table", "ip", "liqo-gw")
        # nft lists `dnat ip prefix to` as `dnat prefix to` (1.0.6): the same statement.
        assert listed.count("dnat prefix to 10.244.0.0/16") == 1
        assert listed.count("snat prefix to 10.72.0.0/16") == 1
        assert listed.count("tcp option maxseg size set rt mtu") == 2
        # A new state replaces the old one whole.
        run_in(namespace, "nft", "-f", "-", input=gateway(seen_as=POD_CIDR))
        assert "nat" not in run_in(namespace, "nft", "list", "table", "ip", "liqo-gw")

        node = node_ruleset(
            table="liqo-node", remote_cidrs=[PEER_SEEN, net("10.73.0.0/16")], gateways=[IPv4Address("10.244.1.5")]
        )
        run_in(namespace, "nft", "-f", "-", input=node)
        run_in(namespace, "nft", "-f", "-", input=node)
        listed = run_in(namespace, "nft", "list", "table", "ip", "liqo-node")
        assert listed.count("notrack") == 4
        # nft lists the redirect's type as implied by its gateway field.
        assert listed.count(f"icmp gateway {int(IPv4Address('10.244.1.5'))} drop") == 1
        gone = node_ruleset(table="liqo-node", remote_cidrs=[])
        run_in(namespace, "nft", "-f", "-", input=gone)
        run_in(namespace, "nft", "-f", "-", input=gone)  # also when there is no table
        assert "liqo-node" not in run_in(namespace, "nft", "list", "tables")


# -- routes --------------------------------------------------------------------------------------------


def route(destination: str, via: str) -> RouteSpec:
    return RouteSpec(destination=net(destination), via=IPv4Address(via))


def test_routes_converge_with_del_add_and_replace() -> None:
    present = [route("10.71.0.0/16", "10.1.0.5"), route("10.72.0.0/16", "10.1.0.5"), route("10.73.0.0/16", "10.1.0.5")]
    wanted = [route("10.74.0.0/16", "10.1.0.6"), route("10.72.0.0/16", "10.1.0.6"), route("10.73.0.0/16", "10.1.0.5")]
    assert route_commands(wanted=wanted, present=present) == [
        ["ip", "route", "del", "10.71.0.0/16", "via", "10.1.0.5", "proto", "76"],
        ["ip", "route", "replace", "10.72.0.0/16", "via", "10.1.0.6", "proto", "76"],
        ["ip", "route", "add", "10.74.0.0/16", "via", "10.1.0.6", "proto", "76"],
    ]
    assert route_commands(wanted=wanted, present=wanted) == []


def test_two_routes_to_one_destination_are_refused() -> None:
    twice = [route("10.71.0.0/16", "10.1.0.5"), route("10.71.0.0/16", "10.1.0.6")]
    with pytest.raises(ValueError, match=r"two wanted routes to 10\.71\.0\.0/16"):
        route_commands(wanted=twice, present=[])
    with pytest.raises(ValueError, match="two present routes"):
        route_commands(wanted=[], present=twice)
    assert route_commands(wanted=twice[:1] * 2, present=[]) == [
        ["ip", "route", "add", "10.71.0.0/16", "via", "10.1.0.5", "proto", "76"]
    ]


IP_JSON = json.dumps(
    [
        {"dst": "10.71.0.0/16", "gateway": "10.1.0.5", "dev": "d0", "flags": []},
        {"dst": "10.72.0.5", "gateway": "10.1.0.6", "dev": "d0", "flags": []},
    ]
)
"""As ``ip -j route show proto 76`` prints (iproute2 6.1): no protocol, host routes without /32."""


def test_routes_are_parsed_from_ip_json() -> None:
    assert parse_routes(IP_JSON) == [route("10.71.0.0/16", "10.1.0.5"), route("10.72.0.5/32", "10.1.0.6")]
    assert parse_routes("[]") == []
    assert SHOW_ROUTES == ("ip", "-j", "route", "show", "proto", ROUTE_PROTO)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not the JSON of ip -j route"),
        ('{"dst": "10.71.0.0/16"}', "not the JSON of ip -j route"),
        ("[1]", "not a route"),
        ('[{"dst": "10.74.0.0/16", "dev": "d0", "scope": "link", "flags": []}]', "no gateway"),
        ('[{"dst": "10.75.0.0/16", "gateway": "10.1.0.8", "metric": 50}]', "metric"),
        ('[{"dst": "10.76.0.0/16", "nexthops": [{"gateway": "10.1.0.5"}, {"gateway": "10.1.0.6"}]}]', "nexthops"),
        ('[{"dst": "default", "gateway": "10.1.0.1"}]', "not an IPv4 route"),
        ('[{"dst": "fd00::/64", "gateway": "fd00::1"}]', "not an IPv4 route"),
    ],
)
def test_routes_liqo_never_writes_are_refused_not_guessed(text: str, message: str) -> None:
    with pytest.raises(RouteParseError, match=message):
        parse_routes(text)


# A kernel's main table, reduced to what convergence needs: destination → (next hop, protocol).
Table = dict[IPv4Network, tuple[IPv4Address, str]]


def apply(table: Table, argv: list[str]) -> None:
    """What the kernel does with one of the commands (raising where ip fails)."""
    assert argv[:2] == ["ip", "route"]
    assert argv[4] == "via"
    assert argv[6:] == ["proto", ROUTE_PROTO]
    verb, destination, via = argv[2], net(argv[3]), IPv4Address(argv[5])
    if verb == "add":
        if destination in table:
            raise FileExistsError(destination)
        table[destination] = (via, ROUTE_PROTO)
    elif verb == "replace":
        table[destination] = (via, ROUTE_PROTO)
    else:
        assert verb == "del"
        if table.get(destination) != (via, ROUTE_PROTO):  # del matches the next hop and the protocol
            raise ProcessLookupError(destination)
        del table[destination]


def apply_all(table: Table, commands: list[list[str]]) -> None:
    for argv in commands:
        apply(table, argv)


SMALL = st.builds(lambda third: IPv4Network(f"10.{third}.0.0/16"), st.integers(70, 79))
VIA = st.builds(lambda last: IPv4Address(f"10.1.0.{last}"), st.integers(1, 3))
routes = st.dictionaries(SMALL, VIA, max_size=6)
foreign = st.dictionaries(SMALL, st.tuples(VIA, st.sampled_from(["kernel", "static", "77"])), max_size=4)


@given(routes, routes, foreign)
def test_applying_the_commands_turns_present_into_wanted_and_touches_nothing_else(
    wanted: dict[IPv4Network, IPv4Address], present: dict[IPv4Network, IPv4Address], others: Table
) -> None:
    others = {destination: entry for destination, entry in others.items() if destination not in present}
    table: Table = others | {destination: (via, ROUTE_PROTO) for destination, via in present.items()}
    wanted_routes = [RouteSpec(destination=d, via=v) for d, v in wanted.items()]
    present_routes = [RouteSpec(destination=d, via=v) for d, v in present.items()]
    commands = route_commands(wanted=wanted_routes, present=present_routes)
    if any(destination in others for destination in wanted):
        # Someone else's route is where ours should go: adding ours fails rather than replace theirs.
        with pytest.raises(FileExistsError):
            apply_all(table, commands)
        return
    apply_all(table, commands)
    assert {d: via for d, (via, proto) in table.items() if proto == ROUTE_PROTO} == wanted
    assert {d: entry for d, entry in table.items() if entry[1] != ROUTE_PROTO} == others
    assert route_commands(wanted=wanted_routes, present=wanted_routes) == []


# -- the real ip, in a throwaway namespace --------------------------------------------------------------


@needs()
def test_the_real_ip_converges_and_lists_liqos_routes_only() -> None:
    with netns() as namespace:
        run_in(namespace, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
        for link in ("d0", "d1"):
            run_in(namespace, "ip", "link", "set", link, "up")
        run_in(namespace, "ip", "addr", "add", "10.1.0.1/24", "dev", "d0")
        run_in(namespace, "ip", "route", "add", "10.79.0.0/16", "via", "10.1.0.9", "proto", "static")

        def converge(wanted: list[RouteSpec]) -> list[RouteSpec]:
            present = parse_routes(run_in(namespace, *SHOW_ROUTES))
            for argv in route_commands(wanted=wanted, present=present):
                run_in(namespace, *argv)
            return parse_routes(run_in(namespace, *SHOW_ROUTES))

        first = [route("10.71.0.0/16", "10.1.0.5"), route("10.72.0.5/32", "10.1.0.6")]
        assert converge(first) == first
        second = [route("10.71.0.0/16", "10.1.0.7"), route("10.73.0.0/16", "10.1.0.7")]
        assert converge(second) == second
        assert converge([]) == []
        assert "10.79.0.0/16 via 10.1.0.9" in run_in(namespace, "ip", "route", "show")
        # Someone else's route where ours should go: add fails, theirs stays.
        with pytest.raises(subprocess.CalledProcessError, match="exit status 2"):
            converge([route("10.79.0.0/16", "10.1.0.5")])
        assert "10.79.0.0/16 via 10.1.0.9 dev d0 proto static" in run_in(namespace, "ip", "route", "show")


# -- which routes liqo may make at all ------------------------------------------------------------------

ALL_JSON = json.dumps(
    [
        {"dst": "default", "gateway": "192.168.1.1", "dev": "eth0", "flags": []},
        {"dst": "10.0.0.0/16", "gateway": "10.244.0.7", "dev": "cni0", "protocol": "76", "flags": []},
        {"dst": "192.168.1.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link", "flags": []},
        {"dst": "10.244.0.0/24", "dev": "cni0", "protocol": "kernel", "scope": "link", "flags": []},
        {"dst": "10.8.0.0/24", "dev": "tun0", "protocol": "static", "flags": []},
        {"dst": "172.20.0.0/16", "gateway": "10.9.0.1", "table": "100", "protocol": "76", "flags": []},
        {"type": "local", "dst": "192.168.1.10", "dev": "eth0", "table": "local", "protocol": "kernel", "flags": []},
        {"type": "broadcast", "dst": "192.168.1.255", "dev": "eth0", "table": "local", "flags": []},
        {"type": "unreachable", "dst": "default", "table": "200", "flags": []},
    ]
)
"""As ``ip -4 -j route show table all`` prints (iproute2 6.1): the main table's routes name no table."""


def test_foreign_routes_are_every_route_but_liqos_and_the_default() -> None:
    assert SHOW_ALL_ROUTES == ("ip", "-4", "-j", "route", "show", "table", "all")
    assert foreign_routes(ALL_JSON) == [
        net("192.168.1.0/24"),
        net("10.244.0.0/24"),
        net("10.8.0.0/24"),
        net("172.20.0.0/16"),  # protocol 76, but in a table liqo never writes: someone else's
        net("192.168.1.10/32"),
        net("192.168.1.255/32"),
    ]
    assert foreign_routes("[]") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not the JSON of ip -j route"),
        ('{"dst": "10.71.0.0/16"}', "not the JSON of ip -j route"),
        ("[1]", "not a route"),
        ('[{"dev": "eth0"}]', "not a route to an IPv4 network"),
        ('[{"dst": "fd00::/64", "dev": "eth0"}]', "not a route to an IPv4 network"),
    ],
)
def test_a_route_listing_that_cannot_be_read_is_an_error_not_an_empty_node(text: str, message: str) -> None:
    with pytest.raises(RouteParseError, match=message):
        foreign_routes(text)


NODE = foreign_routes(ALL_JSON)


@pytest.mark.parametrize(
    ("destination", "reason"),
    [
        ("10.0.0.0/16", None),
        ("172.16.0.0/16", None),
        (
            "8.8.0.0/16",
            "8.8.0.0/16 is outside the peer pools (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16): a peer's pods are only"
            " ever named inside them, and a route there would send this node's own traffic to the peer",
        ),
        ("100.64.0.0/16", "100.64.0.0/16 is outside the peer pools"),
        ("10.0.0.0/7", "10.0.0.0/7 is outside the peer pools"),  # covers a pool, is not inside one
        ("fd00::/64", "fd00::/64 is outside the peer pools"),
        (
            "192.168.0.0/16",
            "192.168.0.0/16 overlaps this node's routes to 192.168.1.0/24, 192.168.1.10/32, 192.168.1.255/32, which"
            " are not liqo's: that traffic would go to the peer",
        ),
        (
            "10.8.0.0/16",
            "10.8.0.0/16 overlaps this node's route to 10.8.0.0/24, which is not liqo's: that traffic would go to the"
            " peer",
        ),
        ("10.8.1.0/24", None),
        ("172.20.0.0/16", "172.20.0.0/16 overlaps this node's route to 172.20.0.0/16"),
    ],
)
def test_a_route_is_refused_outside_the_pools_or_over_the_nodes_own_routes(
    destination: str, reason: str | None
) -> None:
    found = route_refusal(ipaddress.ip_network(destination), pools=DEFAULT_POOLS, foreign=NODE)
    if reason is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(reason), found


def test_without_the_nodes_routes_only_the_pools_count() -> None:
    assert route_refusal(net("192.168.0.0/16"), pools=DEFAULT_POOLS) is None
    assert route_refusal(net("100.64.0.0/10"), pools=[net("100.64.0.0/10")]) is None
    assert route_refusal(net("10.0.0.0/16"), pools=[net("100.64.0.0/10")]) is not None


BLOCKS = st.builds(
    lambda address, prefix: IPv4Network((address, prefix), strict=False),
    st.integers(0, 2**32 - 1),
    st.integers(4, 32),
)


@given(BLOCKS, st.lists(BLOCKS, max_size=3), st.lists(BLOCKS, max_size=5))
def test_an_allowed_route_is_inside_a_pool_and_overlaps_no_foreign_route(
    destination: IPv4Network, pools: list[IPv4Network], foreign: list[IPv4Network]
) -> None:
    allowed = route_refusal(destination, pools=pools, foreign=foreign) is None
    assert allowed == (
        any(destination.subnet_of(pool) for pool in pools) and not any(destination.overlaps(r) for r in foreign)
    )


@needs()
def test_the_real_ip_lists_every_route_but_liqos_as_foreign() -> None:
    with netns() as namespace:
        run_in(namespace, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
        for link in ("d0", "d1"):
            run_in(namespace, "ip", "link", "set", link, "up")
        run_in(namespace, "ip", "addr", "add", "10.1.0.1/24", "dev", "d0")
        run_in(namespace, "ip", "route", "add", "default", "via", "10.1.0.254")
        run_in(namespace, "ip", "route", "add", "10.79.0.0/16", "via", "10.1.0.9", "proto", "static")
        run_in(namespace, "ip", "route", "add", "10.71.0.0/16", "via", "10.1.0.5", "proto", ROUTE_PROTO)
        run_in(namespace, "ip", "route", "add", "10.72.0.0/16", "via", "10.1.0.5", "proto", ROUTE_PROTO, "table", "7")
        found = foreign_routes(run_in(namespace, *SHOW_ALL_ROUTES))
        assert net("10.71.0.0/16") not in found
        assert {net("10.1.0.0/24"), net("10.79.0.0/16"), net("10.72.0.0/16"), net("10.1.0.1/32")} <= set(found)
        assert all(network.prefixlen for network in found)
