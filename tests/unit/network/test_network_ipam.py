"""How this cluster names a peer's networks: inside the pools always, its own CIDR only when free there (properties)."""

from __future__ import annotations

import ipaddress
import random
import time
from ipaddress import IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.networks import SPECIAL_PURPOSE, InvalidNetwork, IPNetwork, overlaps
from liqo.network.ipam import DEFAULT_POOLS, NoFreeBlock, NotIPv4, allocate, in_pools, parse_pools


def net(cidr: str) -> IPv4Network:
    return IPv4Network(cidr)


# This cluster, as every local cluster: pods 10.244.0.0/16, Services 10.96.0.0/12, external 10.70.0.0/16.
OURS = [net("10.244.0.0/16"), net("10.96.0.0/12"), net("10.70.0.0/16")]


# -- examples ------------------------------------------------------------------------------------------


def test_a_free_network_inside_the_pools_is_named_as_it_is() -> None:
    assert allocate(net("10.245.0.0/16"), reserved=OURS, taken=[]) == net("10.245.0.0/16")
    assert allocate(net("172.20.0.0/16"), reserved=OURS, taken=[]) == net("172.20.0.0/16")


@pytest.mark.parametrize(
    ("declared", "named", "why"),
    [
        ("100.64.0.0/16", "10.0.0.0/16", "the shared address space clouds run their own services in"),
        ("8.8.0.0/16", "10.0.0.0/16", "the internet: a DNS upstream"),
        ("192.0.2.0/24", "10.0.0.0/24", "documentation, but public all the same"),
        ("11.0.0.0/8", "10.0.0.0/8", "the internet, as wide as a claim may be (on a cluster outside 10.0.0.0/8)"),
    ],
)
def test_a_network_outside_the_pools_is_never_named_as_it_is_even_when_free(
    declared: str, named: str, why: str
) -> None:
    assert allocate(net(declared), reserved=[net("172.20.0.0/16")], taken=[]) == net(named), why


def test_a_network_over_our_nodes_or_control_plane_is_named_elsewhere() -> None:
    # A LAN inside a pool, where one of our nodes and the API server are: their addresses are reserved.
    hosts = [net("192.168.1.10/32"), net("192.168.1.2/32")]
    assert allocate(net("192.168.0.0/16"), reserved=[*OURS, *hosts], taken=[]) == net("10.0.0.0/16")
    assert allocate(net("192.168.2.0/24"), reserved=[*OURS, *hosts], taken=[]) == net("192.168.2.0/24")


def test_a_network_like_ours_is_named_at_the_first_free_block_of_its_size() -> None:
    assert allocate(net("10.244.0.0/16"), reserved=OURS, taken=[]) == net("10.0.0.0/16")
    # A second peer with the same CIDR gets the next block.
    assert allocate(net("10.244.0.0/16"), reserved=OURS, taken=[net("10.0.0.0/16")]) == net("10.1.0.0/16")


def test_the_search_jumps_past_reserved_and_taken_blocks_and_moves_on_to_the_next_pool() -> None:
    taken = [net("10.0.0.0/9"), net("10.128.0.0/10"), net("10.192.0.0/11"), net("10.224.0.0/11")]
    assert allocate(net("10.244.0.0/16"), reserved=OURS, taken=taken) == net("172.16.0.0/16")
    assert allocate(net("10.244.0.0/16"), reserved=OURS, taken=[*taken, net("172.16.0.0/12")]) == net("192.168.0.0/16")


def test_a_block_is_never_in_a_special_purpose_range() -> None:
    # A peer's external CIDR is not checked as a ClusterNetwork is: link-local is renamed all the same.
    pools = [net("169.254.0.0/16"), net("192.168.0.0/16")]
    assert allocate(net("169.254.0.0/24"), reserved=[], taken=[], pools=pools) == net("192.168.0.0/24")


def test_a_valid_previous_allocation_is_kept_even_once_the_network_is_free() -> None:
    previous = net("10.0.0.0/16")
    assert allocate(net("10.245.0.0/16"), reserved=OURS, taken=[], previous=previous) == previous


def test_a_previous_allocation_outside_the_pools_is_no_longer_valid_even_the_peers_own_cidr() -> None:
    # What an earlier version allocated: the peer's CIDR as it was, outside every pool. It is named anew.
    own = net("100.64.0.0/16")
    assert allocate(own, reserved=OURS, taken=[], previous=own) == net("10.0.0.0/16")
    # And when the admin narrows the pools, an allocation left outside them moves in.
    assert allocate(
        net("10.245.0.0/16"), reserved=OURS, taken=[], pools=[net("172.16.0.0/12")], previous=net("10.245.0.0/16")
    ) == net("172.16.0.0/16")


@pytest.mark.parametrize(
    ("previous", "why"),
    [
        (net("10.244.0.0/16"), "overlaps our pod CIDR"),
        (net("10.5.0.0/16"), "taken by another peer since"),
        (net("10.0.0.0/24"), "not the wanted size"),
        (net("100.64.0.0/16"), "outside the pools, and not the peer's CIDR"),
        (ipaddress.ip_network("fd00::/112"), "IPv6"),
    ],
)
def test_an_invalid_previous_allocation_is_replaced(previous: IPNetwork, why: str) -> None:
    result = allocate(net("10.244.0.0/16"), reserved=OURS, taken=[net("10.5.0.0/16")], previous=previous)
    assert result == net("10.0.0.0/16"), why


def test_no_free_block_names_the_size_the_pools_and_why() -> None:
    pools = [net("192.168.0.0/24")]
    with pytest.raises(NoFreeBlock) as crowded:
        allocate(net("192.168.0.0/25"), reserved=[net("192.168.0.0/26")], taken=[net("192.168.0.128/25")], pools=pools)
    assert str(crowded.value) == (
        "no free /25 to name 192.168.0.0/25 in the pools 192.168.0.0/24: every block of that size overlaps a network"
        " this cluster uses (its pods, Services, nodes, control plane, reserved subnets) or one named for another peer"
    )
    with pytest.raises(NoFreeBlock) as wide:
        allocate(net("10.0.0.0/7"), reserved=[], taken=[])
    assert str(wide.value) == (
        "no free /7 to name 10.0.0.0/7 in the pools 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16: it is wider than"
        " every pool"
    )
    # A /8 outside the pools, on a cluster whose pods are in 10.0.0.0/8: the one pool as wide is taken.
    with pytest.raises(NoFreeBlock, match=r"no free /8 to name 8\.0\.0\.0/8 .* every block of that size overlaps"):
        allocate(net("8.0.0.0/8"), reserved=OURS, taken=[])


def test_ipv6_is_refused_clearly_and_ignored_where_it_cannot_overlap() -> None:
    with pytest.raises(NotIPv4, match="fd00::/48 is IPv6: the network fabric is IPv4 only"):
        allocate(ipaddress.ip_network("fd00::/48"), reserved=[], taken=[])
    with pytest.raises(NotIPv4, match="pool fd00::/32"):
        allocate(net("10.244.0.0/16"), reserved=OURS, taken=[], pools=[ipaddress.ip_network("fd00::/32")])
    v6 = ipaddress.ip_network("fd00::/8")
    assert allocate(net("10.245.0.0/16"), reserved=[*OURS, v6], taken=[v6]) == net("10.245.0.0/16")


def test_a_small_block_in_a_crowded_8_is_found_without_trying_every_block() -> None:
    # 2^20 /28 blocks in 10.0.0.0/8: the first 80 000 taken or reserved in turn, then a /21 after them.
    start = int(net("10.0.0.0/8").network_address)
    taken = [IPv4Network((start + 32 * i, 28)) for i in range(40_000)] + [net("10.19.136.0/21")]
    reserved = [IPv4Network((start + 32 * i + 16, 28)) for i in range(40_000)]
    # This process's CPU time, not the wall clock: beside a loaded suite the wall clock measures the neighbours.
    began = time.process_time()
    block = allocate(net("10.244.0.0/28"), reserved=[*OURS, *reserved], taken=taken)
    assert block == net("10.19.144.0/28")
    assert time.process_time() - began < 5


def test_default_pools_are_the_private_ranges() -> None:
    assert [str(pool) for pool in DEFAULT_POOLS] == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


def test_pools_are_parsed_from_a_flag_and_default_to_the_private_ranges() -> None:
    assert parse_pools("100.64.0.0/10, 10.0.0.0/8", field="--peer-pools") == (net("100.64.0.0/10"), net("10.0.0.0/8"))
    assert parse_pools("", field="--peer-pools") == DEFAULT_POOLS
    assert parse_pools(" , ", field="--peer-pools") == DEFAULT_POOLS


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.0.0.1/8", "'--peer-pools': '10.0.0.1/8' is not written as a network: write 10.0.0.0/8"),
        ("10.0.0.0/8,nope", "'--peer-pools': 'nope' is not a CIDR such as 10.244.0.0/16"),
        ("fd00::/8", "'--peer-pools': fd00::/8 is IPv6: the network fabric is IPv4 only"),
    ],
)
def test_pools_that_are_not_ipv4_networks_are_refused_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(InvalidNetwork) as refused:
        parse_pools(text, field="--peer-pools")
    assert str(refused.value) == message


def test_in_pools_is_containment_and_never_across_families() -> None:
    assert in_pools(net("10.1.0.0/16"), DEFAULT_POOLS)
    assert in_pools(net("10.0.0.0/8"), DEFAULT_POOLS)
    assert not in_pools(net("8.0.0.0/7"), DEFAULT_POOLS)
    assert not in_pools(net("172.0.0.0/8"), DEFAULT_POOLS)  # overlaps 172.16.0.0/12, is not inside it
    assert not in_pools(ipaddress.ip_network("fd00::/64"), DEFAULT_POOLS)


# -- properties, against a brute force over small pools -----------------------------------------------

WORLD = net("10.0.0.0/22")
"""Where the networks drawn live: small enough to search exhaustively, crowded enough to collide."""
POOLS = [net("10.0.1.0/24"), net("10.0.3.0/24"), net("10.0.0.0/24")]
"""Pools in the world, leaving 10.0.2.0/24 (and the /22 and /23 around them) outside every one."""


def _networks(low: int, high: int = 32) -> st.SearchStrategy[IPv4Network]:
    base = int(WORLD.network_address)

    def build(offset: int, prefix: int) -> IPv4Network:
        return IPv4Network((base + offset, prefix), strict=False)

    return st.builds(build, st.integers(0, WORLD.num_addresses - 1), st.integers(low, high))


wanted_networks = _networks(24, 30)
obstacles = st.lists(st.one_of(_networks(27), _networks(27), _networks(27), _networks(23, 26)), max_size=6)
pool_lists = st.lists(st.sampled_from(POOLS), min_size=1, max_size=3, unique=True)


def _free(block: IPv4Network, reserved: list[IPv4Network], taken: list[IPv4Network]) -> bool:
    return not any(overlaps(block, other) for other in [*reserved, *taken, *SPECIAL_PURPOSE])


def _inside(block: IPv4Network, pools: list[IPv4Network]) -> bool:
    return any(block.subnet_of(pool) for pool in pools)


def _first_free_by_brute_force(
    wanted: IPv4Network, reserved: list[IPv4Network], taken: list[IPv4Network], pools: list[IPv4Network]
) -> IPv4Network | None:
    for pool in pools:
        if wanted.prefixlen >= pool.prefixlen:
            for block in pool.subnets(new_prefix=wanted.prefixlen):
                if _free(block, reserved, taken):
                    return block
    return None


@given(wanted_networks, obstacles, obstacles, pool_lists)
def test_the_block_is_free_of_its_size_and_the_one_a_brute_force_finds(
    wanted: IPv4Network, reserved: list[IPv4Network], taken: list[IPv4Network], pools: list[IPv4Network]
) -> None:
    usable = _free(wanted, reserved, taken) and _inside(wanted, pools)
    expected = wanted if usable else _first_free_by_brute_force(wanted, reserved, taken, pools)
    if expected is None:
        with pytest.raises(NoFreeBlock):
            allocate(wanted, reserved=reserved, taken=taken, pools=pools)
        return
    block = allocate(wanted, reserved=reserved, taken=taken, pools=pools)
    assert block == expected
    assert block.prefixlen == wanted.prefixlen
    assert _free(block, reserved, taken)


@given(wanted_networks, obstacles, obstacles, pool_lists, st.randoms(use_true_random=False))
def test_the_result_is_deterministic_whatever_the_order_of_the_inputs(
    wanted: IPv4Network,
    reserved: list[IPv4Network],
    taken: list[IPv4Network],
    pools: list[IPv4Network],
    rng: random.Random,
) -> None:
    def outcome(reserved: list[IPv4Network], taken: list[IPv4Network]) -> IPv4Network | None:
        try:
            return allocate(wanted, reserved=reserved, taken=taken, pools=pools)
        except NoFreeBlock:
            return None

    first = outcome(reserved, taken)
    shuffled_reserved, shuffled_taken = list(reserved), list(taken)
    rng.shuffle(shuffled_reserved)
    rng.shuffle(shuffled_taken)
    assert outcome(shuffled_reserved, shuffled_taken) == first
    assert outcome(reserved, taken) == first


@given(wanted_networks, obstacles, obstacles, pool_lists, _networks(24, 30))
def test_a_valid_previous_allocation_is_kept_and_an_invalid_one_ignored(
    wanted: IPv4Network,
    reserved: list[IPv4Network],
    taken: list[IPv4Network],
    pools: list[IPv4Network],
    previous: IPv4Network,
) -> None:
    valid = previous.prefixlen == wanted.prefixlen and _free(previous, reserved, taken) and _inside(previous, pools)
    try:
        block = allocate(wanted, reserved=reserved, taken=taken, pools=pools, previous=previous)
    except NoFreeBlock:
        assert not valid
        return
    if valid:
        assert block == previous
    else:
        assert block == allocate(wanted, reserved=reserved, taken=taken, pools=pools)
    assert _free(block, reserved, taken)


@given(wanted_networks, obstacles, obstacles, pool_lists, st.one_of(st.none(), _networks(24, 30)))
def test_whatever_the_peer_declares_the_block_is_inside_the_pools_and_clear_of_what_is_reserved(
    wanted: IPv4Network,
    reserved: list[IPv4Network],
    taken: list[IPv4Network],
    pools: list[IPv4Network],
    previous: IPv4Network | None,
) -> None:
    try:
        block = allocate(wanted, reserved=reserved, taken=taken, pools=pools, previous=previous)
    except NoFreeBlock:
        assert _first_free_by_brute_force(wanted, reserved, taken, pools) is None
        return
    assert _inside(block, pools), (block, pools)
    assert not any(overlaps(block, other) for other in reserved), (block, reserved)
    assert not any(overlaps(block, other) for other in taken), (block, taken)
    assert block.prefixlen == wanted.prefixlen
    # Stable: asked again with its own answer as the previous allocation, the same block.
    assert allocate(wanted, reserved=reserved, taken=taken, pools=pools, previous=block) == block
