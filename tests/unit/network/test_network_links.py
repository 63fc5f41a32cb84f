"""The two NetworkConfigs of a peering: roles, our word, checking the peer's, and the link they make (pure)."""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.network.links import (
    Endpoint,
    InvalidWord,
    Link,
    Role,
    check_peer_word,
    link,
    our_word,
    read_word,
    role,
)

KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes(range(1, 33))).decode()
PODS = ipaddress.ip_network("10.244.0.0/16")


def word(**overrides: Any) -> dict[str, Any]:
    obj = our_word(
        local_id="milan",
        peer_id="rome",
        pod_cidr=PODS,
        remapped_pod_cidr=ipaddress.ip_network("10.71.0.0/16"),
        gateway_role=Role.SERVER,
        public_key=KEY_A,
        endpoint=Endpoint(address=ipaddress.ip_address("172.30.1.1"), port=31000),
    )
    obj["spec"].update(overrides)
    return obj


@given(st.booleans(), st.booleans(), st.text(min_size=1), st.text(min_size=1))
def test_roles_are_complementary_and_absent_without_a_peering(consuming: bool, providing: bool, a: str, b: str) -> None:
    mine = role(consuming=consuming, providing=providing, local_id=a, peer_id=b)
    theirs = role(consuming=providing, providing=consuming, local_id=b, peer_id=a)
    if not (consuming or providing):
        assert mine is None
        assert theirs is None
    elif a != b:
        assert {mine, theirs} == {Role.SERVER, Role.CLIENT}


def test_the_provider_serves() -> None:
    assert role(consuming=False, providing=True, local_id="z", peer_id="a") is Role.SERVER
    assert role(consuming=True, providing=False, local_id="a", peer_id="z") is Role.CLIENT


def test_our_word_lives_in_the_peer_tenant_named_after_us_and_reads_back() -> None:
    obj = word()
    assert obj["metadata"]["name"] == "milan"
    assert obj["metadata"]["namespace"] == "liqo-tenant-rome"
    read = read_word(obj)
    assert read.remapped_pod_cidr == ipaddress.ip_network("10.71.0.0/16")
    assert read.role is Role.SERVER
    assert read.public_key == KEY_A
    assert str(read.endpoint) == "172.30.1.1:31000"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"remappedPodCIDR": "10.71.0.1/16"}, "remappedPodCIDR"),
        ({"gateway": {"role": "Boss"}}, "spec.gateway.role"),
        ({"gateway": {"role": "Server", "publicKey": "short"}}, "spec.gateway.publicKey"),
        ({"gateway": {"role": "Server", "endpoint": {"address": "example.com", "port": 1}}}, "endpoint.address"),
        ({"gateway": {"role": "Server", "endpoint": {"address": "1.2.3.4", "port": 70000}}}, "endpoint.port"),
        ({"gateway": {"role": "Server", "endpoint": {"address": "1.2.3.4", "port": True}}}, "endpoint.port"),
    ],
)
def test_malformed_words_are_refused_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidWord, match=field):
        read_word(word(**overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"clusterID": "someone-else"}, "not the peer's ID"),
        ({"remappedPodCIDR": "10.71.0.0/24"}, "not the size of our pod CIDR"),
        ({"remappedPodCIDR": "169.254.0.0/16"}, "special-purpose"),
        ({"gateway": {"role": "Server", "endpoint": {"address": "127.0.0.1", "port": 5}}}, "special-purpose"),
    ],
)
def test_a_peer_word_naming_what_it_may_not_is_refused(overrides: dict[str, Any], message: str) -> None:
    peer = read_word(word(**overrides))
    with pytest.raises(InvalidWord, match=message):
        check_peer_word(peer, peer_id="milan", our_pod_cidr=PODS)


def test_a_word_with_a_malformed_key_is_refused() -> None:
    with pytest.raises(InvalidWord, match="publicKey"):
        read_word(word(gateway={"role": "Server", "publicKey": KEY_A[:-2] + "B="}))


def test_a_link_needs_the_peer_key_and_a_client_needs_the_server_endpoint() -> None:
    server = read_word(word())
    client = read_word(
        our_word(
            local_id="rome",
            peer_id="milan",
            pod_cidr=PODS,
            remapped_pod_cidr=ipaddress.ip_network("10.72.0.0/16"),
            gateway_role=Role.CLIENT,
            public_key=KEY_B,
            endpoint=None,
        )
    )
    assert link(ours=client, theirs=server) == Link(
        role=Role.CLIENT,
        pod_cidr=PODS,
        peer_seen=ipaddress.ip_network("10.72.0.0/16"),
        seen_as=ipaddress.ip_network("10.71.0.0/16"),
        peer_public_key=KEY_A,
        peer_endpoint=server.endpoint,
    )
    served = link(ours=server, theirs=client)
    assert served is not None
    assert served.peer_endpoint is None
    assert served.peer_seen == ipaddress.ip_network("10.71.0.0/16")
    no_endpoint = read_word(word(gateway={"role": "Server", "publicKey": KEY_A}))
    assert link(ours=client, theirs=no_endpoint) is None
    no_key = read_word(word(gateway={"role": "Server"}))
    assert link(ours=client, theirs=no_key) is None
