"""How this cluster names a peer's networks: free → kept, else the first free block of the pools (property-tested)."""

from __future__ import annotations

import ipaddress
import random
import time
from ipaddress import IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.networks import SPECIAL_PURPOSE, IPNetwork, overlaps
from liqo.network.ipam import DEFAULT_POOLS, NoFreeBlock, NotIPv4, allocate


def net(cidr: str) -> IPv4Network:
    return IPv4Network(cidr)


# This cluster, as every local cluster: pods 10.244.0.0/16, Services 10.96.0.0/12, external 10.70.0.0/16.
OURS = [net("10.244.0.0/16"), net("10.96.0.0/12"), net("10.70.0.0/16")]


# -- examples ------------------------------------------------------------------------------------------


def test_a_free_network_is_named_as_it_is() -> None:
    assert allocate(net("10.245.0.0/16"), reserved=OURS, taken=[]) == net("10.245.0.0/16")


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
    # The peer's own CIDR, even outside the pools.
    own = net("100.64.0.0/16")
    assert allocate(own, reserved=OURS, taken=[], previous=own) == own


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


def test_no_free_block_names_the_size_and_the_pools() -> None:
    pools = [net("192.168.0.0/24")]
    with pytest.raises(NoFreeBlock, match=r"/25 .* 192\.168\.0\.0/24"):
        allocate(net("192.168.0.0/25"), reserved=[net("192.168.0.0/26")], taken=[net("192.168.0.128/25")], pools=pools)
    with pytest.raises(NoFreeBlock, match="/7"):  # wider than every pool
        allocate(net("10.0.0.0/7"), reserved=[net("10.0.0.0/8")], taken=[])


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
    began = time.perf_counter()
    block = allocate(net("10.244.0.0/28"), reserved=[*OURS, *reserved], taken=taken)
    assert block == net("10.19.144.0/28")
    assert time.perf_counter() - began < 5


def test_default_pools_are_the_private_ranges() -> None:
    assert [str(pool) for pool in DEFAULT_POOLS] == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


# -- properties, against a brute force over small pools -----------------------------------------------

WORLD = net("10.0.0.0/22")
"""Where the networks drawn live: small enough to search exhaustively, crowded enough to collide."""
POOLS = [net("10.0.1.0/24"), net("10.0.3.0/24"), net("10.0.0.0/24")]


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
    expected = wanted if _free(wanted, reserved, taken) else _first_free_by_brute_force(wanted, reserved, taken, pools)
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
    valid = (
        previous.prefixlen == wanted.prefixlen
        and _free(previous, reserved, taken)
        and (previous == wanted or any(previous.subnet_of(pool) for pool in pools))
    )
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
