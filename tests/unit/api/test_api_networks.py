"""Cluster networks and address translation: what a reader dials, or why it cannot (pure, property-tested)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from liqo.api.networks import (
    ClusterNetwork,
    InvalidNetwork,
    IPAddress,
    IPNetwork,
    Refused,
    Remapped,
    Unchanged,
    conflict,
    network_patch,
    overlaps,
    parse_cidr,
    pods_seen_at,
    recorded_network,
    returned_home,
    translate,
)

ROME = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
MILAN = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.96.0.0/16")
TWIN = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.97.0.0/16")


FIRST_BITS = {4: (10, 11, 100, 172, 192), 6: (0x2001, 0x2A00, 0xFD00, 0xFD01)}
"""Leading octets (IPv6: 16 bits) of the networks drawn: few, so that two clusters often collide."""


def _network(version: int, first: int) -> st.SearchStrategy[IPNetwork]:
    lead, bits = (8, 32) if version == 4 else (16, 128)
    low = 8 if version == 4 else 32

    def build(rest: int, prefix: int) -> IPNetwork:
        return ipaddress.ip_network(((first << (bits - lead)) | rest, prefix), strict=False)

    return st.builds(build, st.integers(0, 2 ** (bits - lead) - 1), st.integers(low, bits))


def _any_network(version: int) -> st.SearchStrategy[IPNetwork]:
    return st.sampled_from(FIRST_BITS[version]).flatmap(lambda first: _network(version, first))


def _cluster_network(version: int) -> st.SearchStrategy[ClusterNetwork]:
    # Pods and Services under distinct leading bits: disjoint by construction, as a cluster's are.
    firsts = st.lists(st.sampled_from(FIRST_BITS[version]), min_size=2, max_size=2, unique=True)
    pairs = firsts.flatmap(lambda f: st.tuples(_network(version, f[0]), _network(version, f[1])))
    return pairs.map(lambda p: ClusterNetwork(pod_cidr=p[0], service_cidr=p[1]))


networks = st.one_of(_cluster_network(4), _cluster_network(6))
ipv4_networks = _cluster_network(4)


@st.composite
def _pod_address(draw: st.DrawFn, network: ClusterNetwork) -> IPAddress:
    pods = network.pod_cidr
    return pods.network_address + draw(st.integers(0, pods.num_addresses - 1))


def _address(network: IPNetwork, offset: int) -> IPAddress:
    return network.network_address + offset % network.num_addresses


# -- parsing what a peer (or an operator) writes ---------------------------------------------------------


def test_a_network_round_trips_through_its_message() -> None:
    assert ROME.to_message() == {"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/16"}
    assert ClusterNetwork.from_message(ROME.to_message()) == ROME
    v6 = ClusterNetwork.parse(pod_cidr="fd00:10::/56", service_cidr="fd00:20::/112")
    assert ClusterNetwork.from_message(v6.to_message()) == v6


@given(networks)
def test_every_valid_network_round_trips(network: ClusterNetwork) -> None:
    assert ClusterNetwork.from_message(network.to_message()) == network


@pytest.mark.parametrize(
    ("pod_cidr", "service_cidr", "complaint"),
    [
        (
            "10.244.1.0/16",
            "10.96.0.0/16",
            "'network.podCIDR': '10.244.1.0/16' is not written as a network: write 10.244.0.0/16",
        ),
        ("10.244.0.0/255.255.0.0", "10.96.0.0/16", "write 10.244.0.0/16"),
        ("FD00::/48", "fd01::/112", "write fd00::/48"),
        ("fd00:0:0::/48", "fd01::/112", "write fd00::/48"),
        ("fd00::%eth0/48", "fd01::/112", "IPv6 zone"),
        ("10.244.0.0", "10.96.0.0/16", "write 10.244.0.0/32"),
        ("banana", "10.96.0.0/16", "'network.podCIDR': 'banana' is not a CIDR"),
        (" 10.244.0.0/16", "10.96.0.0/16", "is not a CIDR"),
        ("10.244.0.0/33", "10.96.0.0/16", "is not a CIDR"),
        ("1" * 44, "10.96.0.0/16", "longer than 43 characters"),
        ("", "10.96.0.0/16", "'network.podCIDR' must be a CIDR"),
        (None, "10.96.0.0/16", "'network.podCIDR' must be a CIDR"),
        (167772160, "10.96.0.0/16", "'network.podCIDR' must be a CIDR"),
        (["10.244.0.0/16"], "10.96.0.0/16", "'network.podCIDR' must be a CIDR"),
        ("10.244.0.0/16", None, "'network.serviceCIDR' must be a CIDR"),
        ("10.244.0.0/16", "fd00::/112", "are not of one IP family"),
        ("10.0.0.0/8", "10.96.0.0/16", "overlap"),
        ("10.244.0.0/16", "10.244.128.0/24", "overlap"),
        ("0.0.0.0/0", "10.96.0.0/16", "wider than a /8"),
        ("8.0.0.0/7", "10.96.0.0/16", "wider than a /8"),
        ("fd00::/31", "fd01::/112", "wider than a /32"),
        ("127.0.0.0/8", "10.96.0.0/16", "special-purpose range 127.0.0.0/8"),
        ("169.254.0.0/16", "10.96.0.0/16", "special-purpose range 169.254.0.0/16"),
        ("10.244.0.0/16", "169.254.169.254/32", "'network.serviceCIDR': 169.254.169.254/32 overlaps the special"),
        ("224.0.0.0/8", "10.96.0.0/16", "special-purpose range 224.0.0.0/4"),
        ("255.255.255.255/32", "10.96.0.0/16", "special-purpose range 240.0.0.0/4"),
        ("0.0.0.0/8", "10.96.0.0/16", "special-purpose range 0.0.0.0/8"),
        ("::ffff:0:0/96", "fd01::/112", "special-purpose range ::ffff:0:0/96"),
        ("fe80::/64", "fd01::/112", "special-purpose range fe80::/10"),
        ("fd00:ec2::/64", "fd01::/112", "special-purpose range fd00:ec2::254/128"),
        ("::1/128", "fd01::/112", "special-purpose range ::/127"),
    ],
)
def test_what_no_cluster_may_claim_is_refused_naming_the_field(
    pod_cidr: Any, service_cidr: Any, complaint: str
) -> None:
    with pytest.raises(InvalidNetwork) as refused:
        ClusterNetwork.from_message({"podCIDR": pod_cidr, "serviceCIDR": service_cidr})
    assert complaint in str(refused.value)


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        (None, "'network' must be an object"),
        ("10.244.0.0/16", "'network' must be an object"),
        ([], "'network' must be an object"),
        ({"serviceCIDR": "10.96.0.0/16"}, "'network.podCIDR' must be a CIDR"),
        ({**ROME.to_message(), "externalCIDR": "10.1.0.0/16"}, "unknown fields: 'externalCIDR'"),
    ],
)
def test_a_network_message_of_another_shape_is_refused(message: object, complaint: str) -> None:
    with pytest.raises(InvalidNetwork, match=complaint):
        ClusterNetwork.from_message(message)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=10,
)


@given(st.one_of(json_values, st.fixed_dictionaries({"podCIDR": json_values, "serviceCIDR": json_values})))
def test_whatever_a_peer_sends_is_a_network_or_a_refusal_never_another_error(message: object) -> None:
    try:
        network = ClusterNetwork.from_message(message)
    except InvalidNetwork:
        return
    assert network.to_message() == message


def test_a_direct_construction_is_checked_too() -> None:
    with pytest.raises(InvalidNetwork, match="overlap"):
        ClusterNetwork(pod_cidr=ipaddress.ip_network("10.0.0.0/8"), service_cidr=ipaddress.ip_network("10.1.0.0/16"))


def test_a_cidr_alone_is_parsed_canonically() -> None:
    assert parse_cidr("10.244.0.0/16", field="f") == ipaddress.ip_network("10.244.0.0/16")
    with pytest.raises(InvalidNetwork, match=r"'--pod-cidr': '10\.244\.0\.1/16' is not written as a network"):
        parse_cidr("10.244.0.1/16", field="--pod-cidr")


def test_a_foreign_cluster_records_the_network_under_its_spec() -> None:
    assert recorded_network({"spec": {"clusterID": "x"}}) is None
    assert recorded_network({"spec": {"network": MILAN.to_message()}}) == MILAN
    with pytest.raises(InvalidNetwork, match=r"'spec\.network\.podCIDR'"):
        recorded_network({"spec": {"network": {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}}})


# -- overlap ----------------------------------------------------------------------------------------------


@given(st.one_of(_any_network(4), _any_network(6)), st.one_of(_any_network(4), _any_network(6)))
def test_overlap_is_symmetric_and_means_a_shared_address(a: IPNetwork, b: IPNetwork) -> None:
    assert overlaps(a, b) == overlaps(b, a)
    shared = a.version == b.version and (a.network_address in b or b.network_address in a)
    assert overlaps(a, b) == shared


@given(ipv4_networks, ipv4_networks)
def test_a_pod_cidr_clash_is_a_conflict_both_ways(a: ClusterNetwork, b: ClusterNetwork) -> None:
    if overlaps(a.pod_cidr, b.pod_cidr):
        assert conflict(owner=a, reader=b, owner_name="a") is not None
        assert conflict(owner=b, reader=a, owner_name="b") is not None


def test_conflicts_name_both_clusters_and_both_networks() -> None:
    assert conflict(owner=MILAN, reader=ROME, owner_name="milan") is None
    assert conflict(owner=TWIN, reader=ROME, owner_name="milan") == (
        "pod CIDR 10.244.0.0/16 of milan overlaps ours (10.244.0.0/16): its addresses cannot be reached until the"
        " network fabric remaps them"
    )
    on_services = ClusterNetwork.parse(pod_cidr="10.96.0.0/16", service_cidr="10.97.0.0/16")
    assert conflict(owner=on_services, reader=ROME, owner_name="milan") == (
        "pod CIDR 10.96.0.0/16 of milan overlaps our service CIDR (10.96.0.0/16): its addresses cannot be reached"
        " until the network fabric remaps them"
    )
    assert conflict(owner=ROME, reader=TWIN, owner_name="rome", reader_name="milan") == (
        "pod CIDR 10.244.0.0/16 of rome overlaps the pod CIDR of milan (10.244.0.0/16): milan cannot reach its"
        " addresses until the network fabric remaps them"
    )


def test_a_service_cidr_overlap_alone_is_no_conflict_for_pod_addresses() -> None:
    """Services are never dialled across clusters by their ClusterIP: only pod addresses travel."""
    assert overlaps(ROME.service_cidr, MILAN.service_cidr)
    assert conflict(owner=MILAN, reader=ROME, owner_name="milan") is None


# -- translation ------------------------------------------------------------------------------------------


def test_disjoint_pod_cidrs_pass_addresses_unchanged() -> None:
    assert translate("10.245.3.7", owner=MILAN, reader=ROME, owner_name="milan") == Unchanged(
        ipaddress.ip_address("10.245.3.7")
    )
    assert translate(ipaddress.ip_address("10.244.0.9"), owner=ROME, reader=MILAN, owner_name="rome") == Unchanged(
        ipaddress.ip_address("10.244.0.9")
    )


def test_an_ipv6_pod_address_with_a_zone_is_refused() -> None:
    v6 = ClusterNetwork.parse(pod_cidr="fd00:10::/56", service_cidr="fd00:20::/112")
    refused = translate("fd00:10::1%eth0", owner=v6, reader=ROME, owner_name="milan")
    assert refused == Refused("'fd00:10::1%eth0' carries an IPv6 zone: not a pod address")


def test_the_same_pod_cidr_is_refused_with_the_reason() -> None:
    refused = translate("10.244.3.7", owner=TWIN, reader=ROME, owner_name="milan")
    assert refused == Refused(
        "pod CIDR 10.244.0.0/16 of milan overlaps ours (10.244.0.0/16): its addresses cannot be reached until the"
        " network fabric remaps them"
    )


def test_a_remapped_block_moves_the_address_keeping_its_host_bits() -> None:
    block = ipaddress.ip_network("10.50.0.0/16")
    remapped = translate("10.244.3.7", owner=TWIN, reader=ROME, owner_name="milan", remapped_pod_cidr=block)
    assert remapped == Remapped(address=ipaddress.ip_address("10.50.3.7"), original=ipaddress.ip_address("10.244.3.7"))


def test_a_remapped_block_of_another_size_is_refused() -> None:
    block = ipaddress.ip_network("10.50.0.0/24")
    refused = translate("10.244.3.7", owner=TWIN, reader=ROME, owner_name="milan", remapped_pod_cidr=block)
    assert isinstance(refused, Refused)
    assert "10.50.0.0/24" in refused.reason
    assert "not the size of its pod CIDR 10.244.0.0/16" in refused.reason


def test_unknown_networks_are_refused_never_guessed() -> None:
    assert translate("10.245.0.1", owner=None, reader=ROME, owner_name="milan") == Refused(
        "the network of milan is not known yet: peers tell each other their networks at authentication, so it is"
        " known after the next handshake"
    )
    refused = translate("10.244.0.1", owner=ROME, reader=None, owner_name="rome", reader_name="milan")
    assert isinstance(refused, Refused)
    assert refused.reason.startswith("the network of milan is not known yet")
    refused = translate("10.245.0.1", owner=MILAN, reader=None, owner_name="milan")
    assert isinstance(refused, Refused)
    assert refused.reason.startswith("the network of this cluster is not known yet")


@pytest.mark.parametrize(
    "address", ["10.246.0.1", "127.0.0.1", "169.254.169.254", "fd00::1", "not-an-ip", "", "1" * 999, "10.245.0.1%0"]
)
def test_an_address_outside_the_owners_pod_cidr_or_no_address_is_refused(address: str) -> None:
    refused = translate(address, owner=MILAN, reader=ROME, owner_name="milan")
    assert isinstance(refused, Refused)
    assert len(refused.reason) < 300


@given(networks, networks, st.data())
def test_translation_is_the_identity_when_the_owners_pods_are_clear_of_the_reader(
    owner: ClusterNetwork, reader: ClusterNetwork, data: st.DataObject
) -> None:
    assume(not overlaps(owner.pod_cidr, reader.pod_cidr) and not overlaps(owner.pod_cidr, reader.service_cidr))
    address = data.draw(_pod_address(owner))
    assert translate(address, owner=owner, reader=reader, owner_name="o") == Unchanged(address)
    assert translate(str(address), owner=owner, reader=reader, owner_name="o") == Unchanged(address)


@given(networks, networks, st.data())
def test_remapping_keeps_the_host_bits_and_lands_inside_the_remapped_block(
    owner: ClusterNetwork, reader: ClusterNetwork, data: st.DataObject
) -> None:
    pods = owner.pod_cidr
    bits = pods.max_prefixlen
    block = type(pods)((data.draw(st.integers(0, 2**bits - 1)), pods.prefixlen), strict=False)
    address = data.draw(_pod_address(owner))
    result = translate(address, owner=owner, reader=reader, owner_name="o", remapped_pod_cidr=block)
    assert isinstance(result, Remapped)
    assert result.original == address
    assert result.address in block
    host = int(pods.hostmask)
    assert int(result.address) & host == int(address) & host


@given(networks, networks, st.data())
def test_a_foreign_pod_never_lands_in_the_readers_pod_cidr_unless_remapped_there(
    owner: ClusterNetwork, reader: ClusterNetwork, data: st.DataObject
) -> None:
    address = data.draw(st.one_of(_pod_address(owner), _pod_address(reader)))
    remap = data.draw(st.none() | st.just(owner.pod_cidr) | st.just(reader.pod_cidr))
    result = translate(address, owner=owner, reader=reader, owner_name="o", remapped_pod_cidr=remap)
    if isinstance(result, Unchanged):
        assert result.address not in reader.pod_cidr
        assert result.address not in reader.service_cidr
    if isinstance(result, Remapped):
        assert remap is not None
        assert result.address in remap


@given(networks, networks, st.data())
def test_addresses_outside_the_owners_pod_cidr_are_always_refused(
    owner: ClusterNetwork, reader: ClusterNetwork, data: st.DataObject
) -> None:
    bits = owner.pod_cidr.max_prefixlen
    address = type(owner.pod_cidr.network_address)(data.draw(st.integers(0, 2**bits - 1)))
    assume(address not in owner.pod_cidr)
    for remap in (None, reader.pod_cidr, owner.pod_cidr):
        result = translate(address, owner=owner, reader=reader, owner_name="o", remapped_pod_cidr=remap)
        assert isinstance(result, Refused)
        assert "is not in the pod CIDR" in result.reason


@given(networks, st.data())
def test_an_address_of_the_reader_itself_is_refused_or_translated_never_passed_as_its_own(
    reader: ClusterNetwork, data: st.DataObject
) -> None:
    """A peer claiming our pod CIDR cannot make us dial our own pods: its claim overlaps ours."""
    owner = ClusterNetwork(pod_cidr=reader.pod_cidr, service_cidr=reader.service_cidr)
    address = data.draw(_pod_address(reader))
    assert isinstance(translate(address, owner=owner, reader=reader, owner_name="o"), Refused)


@given(st.integers(0, 2**32 - 1))
def test_any_ipv4_address_gets_an_answer(value: int) -> None:
    address = _address(ipaddress.ip_network("0.0.0.0/0"), value)
    result = translate(str(address), owner=MILAN, reader=ROME, owner_name="milan")
    assert isinstance(result, Unchanged) == (address in MILAN.pod_cidr)


@given(networks, networks, st.data())
def test_the_block_pods_are_seen_at_holds_exactly_what_translation_gives(
    owner: ClusterNetwork, reader: ClusterNetwork, data: st.DataObject
) -> None:
    """What the provider admits (the block) and what the consumer writes (translations) never disagree."""
    pods = owner.pod_cidr
    remap = data.draw(
        st.none()
        | st.just(reader.pod_cidr)
        | st.builds(lambda n: type(pods)((n, pods.prefixlen), strict=False), st.integers(0, 2**pods.max_prefixlen - 1))
    )
    block = pods_seen_at(owner=owner, reader=reader, remapped_pod_cidr=remap)
    address = data.draw(_pod_address(owner))
    result = translate(address, owner=owner, reader=reader, owner_name="o", remapped_pod_cidr=remap)
    if block is None:
        assert isinstance(result, Refused)
        return
    assert not isinstance(result, Refused)
    assert result.address in block
    assert block.num_addresses == pods.num_addresses  # one address in the block per pod address, no more


def test_no_block_is_known_without_both_networks_or_with_clashing_pod_cidrs() -> None:
    assert pods_seen_at(owner=None, reader=MILAN) is None
    assert pods_seen_at(owner=ROME, reader=None) is None
    assert pods_seen_at(owner=TWIN, reader=ROME) is None  # the same pod CIDR, not remapped
    assert pods_seen_at(owner=ROME, reader=MILAN) == ROME.pod_cidr
    remapped = ipaddress.ip_network("10.71.0.0/16")
    assert pods_seen_at(owner=TWIN, reader=ROME, remapped_pod_cidr=remapped) == remapped
    assert pods_seen_at(owner=ROME, reader=MILAN, remapped_pod_cidr=ipaddress.ip_network("10.71.0.0/24")) is None


def test_a_foreign_cluster_is_patched_only_when_its_record_differs() -> None:
    assert network_patch({"spec": {}}, MILAN) == {"spec": {"network": MILAN.to_message()}}
    assert network_patch({"spec": {"network": MILAN.to_message()}}, MILAN) is None
    assert network_patch({"spec": {"network": ROME.to_message()}}, MILAN) == {"spec": {"network": MILAN.to_message()}}
    hand_written = {"spec": {"network": {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}}}
    assert network_patch(hand_written, MILAN) == {"spec": {"network": MILAN.to_message()}}


# -- a pod of ours the provider sent back ----------------------------------------------------------------------


@given(networks, networks, st.data())
def test_an_address_of_ours_as_the_provider_sees_it_comes_back_to_our_own(
    home: ClusterNetwork, provider: ClusterNetwork, data: st.DataObject
) -> None:
    """Whatever block the provider sees our pods at, the address it gives for one of them names that very pod."""
    pods = home.pod_cidr
    block = data.draw(
        st.none()
        | st.integers(0, 2**pods.max_prefixlen - 1).map(lambda n: type(pods)((n, pods.prefixlen), strict=False))
    )
    ours = data.draw(_pod_address(home))
    seen = translate(ours, owner=home, reader=provider, owner_name="home", remapped_pod_cidr=block)
    if not isinstance(seen, Refused):
        claimed = returned_home(str(seen.address), home=home, provider=provider, provider_sees_home=block)
        # One of the provider's own addresses is its pod, never a claim on ours (the fabric never remaps there).
        assert claimed == (None if seen.address in provider.pod_cidr else ours)


def test_an_address_outside_where_the_provider_sees_us_names_no_pod_of_ours() -> None:
    block = ipaddress.ip_network("10.71.0.0/16")
    assert returned_home("10.71.3.4", home=ROME, provider=MILAN, provider_sees_home=block) == ipaddress.ip_address(
        "10.244.3.4"
    )
    assert returned_home("10.72.0.1", home=ROME, provider=MILAN, provider_sees_home=block) is None
    assert (
        returned_home("10.244.3.4", home=ROME, provider=MILAN, provider_sees_home=block) is None
    )  # remapped: only the block
    assert returned_home("10.244.3.4", home=ROME, provider=MILAN, provider_sees_home=None) == ipaddress.ip_address(
        "10.244.3.4"
    )
    # Two clusters of one pod CIDR and no fabric: the provider's address is its own pod's, whatever it means here.
    assert returned_home("10.244.3.4", home=ROME, provider=TWIN, provider_sees_home=None) is None
    assert returned_home("10.244.3.4", home=ROME, provider=None, provider_sees_home=None) is None
    assert returned_home("fd00::1", home=ROME, provider=MILAN, provider_sees_home=None) is None
    assert returned_home("not-an-ip", home=ROME, provider=MILAN, provider_sees_home=None) is None
    assert returned_home("10.244.3.4", home=None, provider=MILAN, provider_sees_home=None) is None
    wider = ipaddress.ip_network("10.70.0.0/15")  # not the size of our pod CIDR: no claim is read from it
    assert returned_home("10.70.0.1", home=ROME, provider=MILAN, provider_sees_home=wider) is None
