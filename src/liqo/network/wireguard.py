"""WireGuard keys, the ``wg`` commands configuring a gateway's tunnel, and what ``wg show dump`` reports (pure).

**Keys.** Each gateway's private key is made in its own cluster and never leaves it; peers exchange public
keys through CRs. A peer's public key is untrusted input: :func:`parse_public_key` accepts only the
canonical base64 of exactly 32 bytes, so one key has one spelling and compares equal to itself.

**The private key never appears in argv.** A process's arguments are readable by every user of the host
(``/proc/<pid>/cmdline``) and end up in error messages and logs. ``wg`` reads keys only from files, so
:func:`set_peer_argv` names ``/dev/stdin`` (the container runtime provides it) and the caller passes the
key as the command's standard input: it is never written to a file (an emptyDir lives on the node's
disk), and the runner never repeats standard input in an error. ``wg show dump`` prints the private key
back, so :func:`parse_dump` drops it: an :class:`InterfaceState` may be logged.

**Convergence.** ``wg set ... allowed-ips`` replaces the peer's list, and a peer's settings are applied
in one command, so applying :func:`set_peer_argv` again changes nothing; peers other than the wanted
one (a previous key of the peer, a stale one) are removed by :func:`remove_stale_peers`. Both work the
same with the kernel module and with ``wireguard-go``.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from liqo.api.networks import IPNetwork

KEY_BYTES = 32
KEY_LENGTH = 44
"""A key is 32 bytes, 44 characters of base64."""

PRIVATE_KEY_FROM_STDIN = "/dev/stdin"
"""Where :func:`set_peer_argv` has ``wg`` read the private key: the caller passes it as standard input."""

_NONE = "(none)"
_OFF = "off"
_MAX_PORT = 65535


class InvalidKey(ValueError):
    """A key is not the canonical base64 of 32 bytes; the message names the field, never a private key."""


class DumpParseError(ValueError):
    """``wg show <interface> dump`` printed something else than an interface and its peers."""


@dataclass(frozen=True)
class PeerState:
    """One peer of an interface, as ``wg show dump`` reports it.

    Attributes:
        public_key: the peer's public key.
        endpoint: where its packets are sent (``host:port``, IPv6 in brackets); None until known.
        allowed_ips: the networks routed to it, and that its packets may come from.
        latest_handshake: the last handshake, in seconds since the epoch; None if none yet.
        rx_bytes: bytes received from it.
        tx_bytes: bytes sent to it.
        keepalive: the persistent keepalive interval in seconds; None when off.
    """

    public_key: str
    endpoint: str | None
    allowed_ips: tuple[IPNetwork, ...]
    latest_handshake: int | None
    rx_bytes: int
    tx_bytes: int
    keepalive: int | None


@dataclass(frozen=True)
class InterfaceState:
    """A WireGuard interface as ``wg show dump`` reports it, without its private key.

    Attributes:
        public_key: the interface's public key; None while it has no private key.
        listen_port: the UDP port it listens on.
        peers: its peers, in the order reported.
    """

    public_key: str | None
    listen_port: int
    peers: tuple[PeerState, ...]


# -- keys ----------------------------------------------------------------------------------------------


def generate_private_key() -> str:
    """A new X25519 private key, base64 as ``wg genkey`` prints it."""
    raw = X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def public_key(private: str) -> str:
    """The public key of a private key, base64 as ``wg pubkey`` prints it.

    Raises:
        InvalidKey: ``private`` is not a key (the message does not repeat it).
    """
    _, raw = _decode_key(private, field="private key", show=False)
    key = X25519PrivateKey.from_private_bytes(raw)
    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def parse_public_key(value: object, *, field: str) -> str:
    """``value`` if it is a public key written canonically (base64 of 32 bytes, as ``wg`` prints keys).

    Raises:
        InvalidKey: anything else, naming ``field``.
    """
    key, _ = _decode_key(value, field=field, show=True)
    return key


def _decode_key(value: object, *, field: str, show: bool) -> tuple[str, bytes]:
    if not isinstance(value, str) or len(value) != KEY_LENGTH:
        raise InvalidKey(f"{field!r} must be a WireGuard key: {KEY_LENGTH} characters of base64")
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error:
        raw = b""
    if len(raw) != KEY_BYTES or base64.b64encode(raw).decode() != value:
        shown = f": {value!r}" if show else ""
        raise InvalidKey(f"{field!r} is not the canonical base64 of a {KEY_BYTES}-byte WireGuard key{shown}")
    return value, raw


# -- wg ------------------------------------------------------------------------------------------------


def set_peer_argv(
    *,
    interface: str,
    peer_public_key: str,
    endpoint: str | None,
    allowed_ips: Sequence[IPNetwork],
    keepalive: int | None,
    listen_port: int | None,
) -> list[str]:
    """The ``wg set`` command giving ``interface`` its private key, port and one peer, all at once.

    Run it with the private key as standard input (:data:`PRIVATE_KEY_FROM_STDIN`), always: ``wg`` reads an
    empty key file as "no key" and would remove the interface's private key.

    Args:
        interface: the WireGuard interface.
        peer_public_key: the peer's public key.
        endpoint: where the peer is (``host:port``); None on the server side, which learns it from the
            client's packets and follows it if it changes (a client behind NAT).
        allowed_ips: the networks routed to the peer and accepted from it (replaces the peer's list).
        keepalive: seconds between keepalives, so that a NAT on the way keeps the client's mapping;
            None turns them off.
        listen_port: the UDP port to listen on; None keeps the current one (a client's is random).

    Raises:
        InvalidKey: ``peer_public_key`` is not a key.
        ValueError: a port or an interval is out of range.
    """
    argv = ["wg", "set", interface]
    if listen_port is not None:
        argv += ["listen-port", str(_in_range(listen_port, low=1, what="listen port"))]
    argv += ["private-key", PRIVATE_KEY_FROM_STDIN, "peer", parse_public_key(peer_public_key, field="peer public key")]
    if endpoint is not None:
        argv += ["endpoint", endpoint]
    interval = _OFF if keepalive is None else str(_in_range(keepalive, low=1, what="keepalive interval"))
    argv += ["persistent-keepalive", interval, "allowed-ips", ",".join(str(net) for net in allowed_ips)]
    return argv


def remove_stale_peers(*, interface: str, state: InterfaceState, wanted: str) -> list[list[str]]:
    """The ``wg set ... remove`` commands removing every peer of ``state`` but ``wanted`` (a public key)."""
    return [
        ["wg", "set", interface, "peer", peer.public_key, "remove"] for peer in state.peers if peer.public_key != wanted
    ]


def show_dump_argv(*, interface: str) -> list[str]:
    """The command printing ``interface``'s state for :func:`parse_dump` (and its private key: never log it)."""
    return ["wg", "show", interface, "dump"]


def parse_dump(text: str) -> InterfaceState:
    """The state in the output of ``wg show <interface> dump``.

    Its format: a line for the interface (private key, public key, listen port, fwmark), then one per
    peer (public key, preshared key, endpoint, allowed IPs, latest handshake, bytes received, bytes
    sent, persistent keepalive), fields separated by tabs, ``(none)`` and ``off`` for unset ones, 0 for
    no handshake yet.

    Raises:
        DumpParseError: the text is not in that format (the message never shows the first line: it holds
            the private key).
    """
    lines = text.splitlines()
    if not lines:
        raise DumpParseError("wg show dump printed nothing: not an interface")
    fields = lines[0].split("\t")
    if len(fields) != 4:
        raise DumpParseError(f"the interface line of wg show dump has {len(fields)} fields, not 4")
    own_key = None if fields[1] == _NONE else parse_public_key(fields[1], field="interface public key")
    port = _integer(fields[2], what="listen port")
    return InterfaceState(
        public_key=own_key, listen_port=port, peers=tuple(_parse_peer(line) for line in lines[1:] if line)
    )


def _parse_peer(line: str) -> PeerState:
    fields = line.split("\t")
    if len(fields) != 8:
        # Not shown: a peer line holds its preshared key, if it has one.
        raise DumpParseError(f"a peer line of wg show dump has {len(fields)} fields, not 8")
    key, _preshared, endpoint, allowed, handshake, rx, tx, keepalive = fields
    return PeerState(
        public_key=parse_public_key(key, field="peer public key"),
        endpoint=None if endpoint == _NONE else endpoint,
        allowed_ips=() if allowed == _NONE else tuple(_network(net) for net in allowed.split(",")),
        latest_handshake=_integer(handshake, what="latest handshake") or None,
        rx_bytes=_integer(rx, what="bytes received"),
        tx_bytes=_integer(tx, what="bytes sent"),
        keepalive=None if keepalive == _OFF else _integer(keepalive, what="persistent keepalive"),
    )


def _integer(value: str, *, what: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise DumpParseError(f"the {what} in wg show dump is not a number: {value[:40]!r}")
    return int(value)


def _network(value: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(value)
    except ValueError:
        raise DumpParseError(f"an allowed IP in wg show dump is not a network: {value[:50]!r}") from None


def _in_range(value: int, *, low: int, what: str) -> int:
    if not low <= value <= _MAX_PORT:
        raise ValueError(f"the {what} {value} is not between {low} and {_MAX_PORT}")
    return value
