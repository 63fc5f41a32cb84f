"""WireGuard keys, ``wg set`` arguments and ``wg show dump`` parsing; then the real wg and wireguard-go."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import subprocess
import time
from collections.abc import Iterator
from ipaddress import IPv4Network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.network.runner import ProcessRunner
from liqo.network.wireguard import (
    PRIVATE_KEY_FROM_STDIN,
    DumpParseError,
    InterfaceState,
    InvalidKey,
    PeerState,
    generate_private_key,
    parse_dump,
    parse_public_key,
    public_key,
    remove_stale_peers,
    set_peer_argv,
    show_dump_argv,
)
from tests.unit.network.sandbox import needs, netns, run_in

# A pair from `wg genkey | tee /dev/stderr | wg pubkey` (a throwaway interface's).
PRIVATE = "wKQlqGqIbpmqYM28unyrF277Il7I5yx8Cs6x9wnOgWM="
PUBLIC = "a8zYiW8MZo+niuzbV+NHfRlH3KEyUhTIP8h8a+SV/kA="
PEER = "OWnV4MAB1vTlpLkhec2KJaJIkXOzh1RmflULRa0+4h4="
OTHER = "nNB57PAjJ2CvDZb48F+5DC0UIoAumZpk4yYkvfoe8TA="

# `wg show wa0 dump` on a server (wireguard-go 0.0.20220316) after a client's handshake: the client's
# endpoint learnt from its packets, no keepalive; then a stale peer that never shook hands.
SERVER_DUMP = (
    f"{PRIVATE}\t{PUBLIC}\t51820\toff\n"
    f"{PEER}\t(none)\t192.0.2.2:57062\t169.254.18.2/32,10.71.0.0/16\t1795721231\t180\t92\toff\n"
    f"{OTHER}\t(none)\t(none)\t(none)\t0\t0\t0\toff\n"
)


# -- keys ----------------------------------------------------------------------------------------------


def test_the_public_key_is_the_one_wg_pubkey_computes() -> None:
    assert public_key(PRIVATE) == PUBLIC


def test_a_generated_key_is_a_fresh_32_byte_key_as_wg_genkey_prints_it() -> None:
    keys = {generate_private_key() for _ in range(8)}
    assert len(keys) == 8
    for key in keys:
        assert len(base64.b64decode(key, validate=True)) == 32
        assert parse_public_key(public_key(key), field="k") == public_key(key)


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        PUBLIC[:-1],  # 43 characters
        PUBLIC + "A",
        PUBLIC[:-2] + "d=",  # 'd' sets bits past the 32nd byte: not canonical
        PUBLIC[:-1] + "A",  # no padding
        " " + PUBLIC[1:],
        "!" * 44,
        base64.b64encode(bytes(33)).decode()[:44],
    ],
)
def test_a_public_key_that_is_not_canonical_base64_of_32_bytes_is_refused(value: object) -> None:
    with pytest.raises(InvalidKey, match=r"'spec\.publicKey'"):
        parse_public_key(value, field="spec.publicKey")


@given(st.binary(min_size=32, max_size=32))
def test_every_canonical_key_is_accepted_as_written(raw: bytes) -> None:
    key = base64.b64encode(raw).decode()
    assert parse_public_key(key, field="k") == key


def test_a_malformed_private_key_is_refused_without_being_shown() -> None:
    malformed = PRIVATE[:-2] + "d="
    with pytest.raises(InvalidKey) as error:
        public_key(malformed)
    assert malformed not in str(error.value)
    assert "private key" in str(error.value)


# -- wg set --------------------------------------------------------------------------------------------


def test_a_client_sets_its_key_its_peer_the_endpoint_and_keepalives_in_one_command() -> None:
    argv = set_peer_argv(
        interface="liqo-tunnel",
        peer_public_key=PEER,
        endpoint="192.0.2.1:51820",
        allowed_ips=[IPv4Network("169.254.18.1/32"), IPv4Network("10.72.0.0/16")],
        keepalive=25,
        listen_port=None,
    )
    assert argv == [
        "wg", "set", "liqo-tunnel",
        "private-key", "/dev/stdin",
        "peer", PEER, "endpoint", "192.0.2.1:51820", "persistent-keepalive", "25",
        "allowed-ips", "169.254.18.1/32,10.72.0.0/16",
    ]  # fmt: skip
    assert PRIVATE_KEY_FROM_STDIN == "/dev/stdin"


def test_a_server_listens_on_its_port_and_lets_the_client_roam() -> None:
    argv = set_peer_argv(
        interface="liqo-tunnel",
        peer_public_key=PEER,
        endpoint=None,
        allowed_ips=[],
        keepalive=None,
        listen_port=51820,
    )
    assert argv == [
        "wg", "set", "liqo-tunnel", "listen-port", "51820",
        "private-key", "/dev/stdin",
        "peer", PEER, "persistent-keepalive", "off", "allowed-ips", "",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"peer_public_key": "-" * 44}, InvalidKey, "peer public key"),
        ({"listen_port": 0}, ValueError, "listen port 0"),
        ({"listen_port": 65536}, ValueError, "listen port 65536"),
        ({"keepalive": 0}, ValueError, "keepalive interval 0"),
    ],
)
def test_wg_set_refuses_what_wg_would_misread(changes: dict[str, Any], error: type[Exception], message: str) -> None:
    arguments: dict[str, Any] = {
        "interface": "wg0",
        "peer_public_key": PEER,
        "endpoint": None,
        "allowed_ips": [],
        "keepalive": None,
        "listen_port": None,
    } | changes
    with pytest.raises(error, match=message):
        set_peer_argv(**arguments)


def test_every_peer_but_the_wanted_one_is_removed() -> None:
    state = parse_dump(SERVER_DUMP)
    assert remove_stale_peers(interface="wg0", state=state, wanted=PEER) == [
        ["wg", "set", "wg0", "peer", OTHER, "remove"]
    ]
    assert remove_stale_peers(interface="wg0", state=state, wanted=OTHER) == [
        ["wg", "set", "wg0", "peer", PEER, "remove"]
    ]
    assert show_dump_argv(interface="wg0") == ["wg", "show", "wg0", "dump"]


# -- wg show dump --------------------------------------------------------------------------------------


def test_a_servers_dump_is_parsed_without_its_private_key() -> None:
    state = parse_dump(SERVER_DUMP)
    assert state == InterfaceState(
        public_key=PUBLIC,
        listen_port=51820,
        peers=(
            PeerState(
                public_key=PEER,
                endpoint="192.0.2.2:57062",
                allowed_ips=(IPv4Network("169.254.18.2/32"), IPv4Network("10.71.0.0/16")),
                latest_handshake=1795721231,
                rx_bytes=180,
                tx_bytes=92,
                keepalive=None,
            ),
            PeerState(
                public_key=OTHER,
                endpoint=None,
                allowed_ips=(),
                latest_handshake=None,
                rx_bytes=0,
                tx_bytes=0,
                keepalive=None,
            ),
        ),
    )
    assert PRIVATE not in repr(state)


def test_a_clients_dump_with_keepalives_and_an_ipv6_endpoint() -> None:
    text = (
        f"{PRIVATE}\t{PUBLIC}\t57062\t0x4c\n"
        f"{PEER}\t(none)\t[2001:db8::1]:51820\t169.254.18.1/32,fd00::/64\t1795721231\t92\t180\t25\n"
    )
    (peer,) = parse_dump(text).peers
    assert peer.endpoint == "[2001:db8::1]:51820"
    assert peer.allowed_ips == (IPv4Network("169.254.18.1/32"), ipaddress.ip_network("fd00::/64"))
    assert peer.keepalive == 25


def test_an_interface_without_a_key_or_peers() -> None:
    assert parse_dump("(none)\t(none)\t0\toff\n") == InterfaceState(public_key=None, listen_port=0, peers=())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed nothing"),
        (f"{PRIVATE}\t{PUBLIC}\t51820\n", "interface line .* 3 fields, not 4"),
        (f"{PRIVATE}\t{PUBLIC}\tport\toff\n", "listen port .* not a number"),
        (f"{PRIVATE}\t{PUBLIC}\t51820\toff\n{PEER}\t{PRIVATE}\t(none)\n", "peer line .* 3 fields, not 8"),
        (f"{PRIVATE}\t{PUBLIC}\t51820\toff\n{PEER}\t(none)\t(none)\t10.0.0.1/8\t0\t0\t0\toff\n", "not a network"),
        (f"{PRIVATE}\t{PUBLIC}\t51820\toff\n{PEER}\t(none)\t(none)\t(none)\t-1\t0\t0\toff\n", "not a number"),
        (f"{PRIVATE}\t{PUBLIC}\t51820\toff\n{PEER}\t(none)\t(none)\t(none)\t0\t٣\t0\toff\n", "not a number"),
    ],
)
def test_a_dump_in_another_format_is_refused_without_showing_keys(text: str, message: str) -> None:
    with pytest.raises(DumpParseError, match=message) as error:
        parse_dump(text)
    assert PRIVATE not in str(error.value)


def test_a_malformed_peer_key_in_a_dump_is_refused() -> None:
    with pytest.raises(InvalidKey, match="peer public key"):
        parse_dump(f"{PRIVATE}\t{PUBLIC}\t51820\toff\nkey\t(none)\t(none)\t(none)\t0\t0\t0\toff\n")


# -- the real wg, on wireguard-go in a throwaway namespace ---------------------------------------------


@contextlib.contextmanager
def wireguard_go(namespace: str, interface: str) -> Iterator[None]:
    """A wireguard-go interface in ``namespace``, stopped (with its UAPI socket) on exit."""
    process = subprocess.Popen(
        ["ip", "netns", "exec", namespace, "wireguard-go", interface],
        env={**os.environ, "WG_PROCESS_FOREGROUND": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while f"{interface}:" not in run_in(namespace, "ip", "-o", "link", "show"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("wireguard-go made no interface")
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


@needs("wg", "wireguard-go")
@pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="needs /dev/net/tun")
async def test_the_real_wg_takes_the_arguments_and_its_dump_parses() -> None:
    interface = f"wgt{os.getpid() % 100_000}"
    private = generate_private_key()
    runner = ProcessRunner()
    with netns() as namespace, wireguard_go(namespace, interface):
        in_namespace = ("ip", "netns", "exec", namespace)
        for peer, allowed in ((OTHER, "10.99.0.0/16"), (PEER, "10.98.0.0/16")):
            argv = set_peer_argv(
                interface=interface,
                peer_public_key=peer,
                endpoint="192.0.2.1:51820",
                allowed_ips=[IPv4Network(allowed)],
                keepalive=25,
                listen_port=51820,
            )
            await runner.run(*in_namespace, *argv, input=private + "\n")
        # Applied again with other allowed IPs: the list is replaced, not extended.
        argv = set_peer_argv(
            interface=interface,
            peer_public_key=PEER,
            endpoint=None,
            allowed_ips=[IPv4Network("169.254.18.2/32"), IPv4Network("10.71.0.0/16")],
            keepalive=None,
            listen_port=51820,
        )
        await runner.run(*in_namespace, *argv, input=private + "\n")
        state = parse_dump(await runner.run(*in_namespace, *show_dump_argv(interface=interface)))
        assert state.public_key == public_key(private)
        assert state.listen_port == 51820
        assert {peer.public_key: peer for peer in state.peers}[PEER] == PeerState(
            public_key=PEER,
            endpoint="192.0.2.1:51820",  # an endpoint is kept until the peer roams
            allowed_ips=(IPv4Network("169.254.18.2/32"), IPv4Network("10.71.0.0/16")),
            latest_handshake=None,
            rx_bytes=0,
            tx_bytes=0,
            keepalive=None,
        )
        for argv in remove_stale_peers(interface=interface, state=state, wanted=PEER):
            await runner.run(*in_namespace, *argv)
        state = parse_dump(await runner.run(*in_namespace, *show_dump_argv(interface=interface)))
        assert [peer.public_key for peer in state.peers] == [PEER]
