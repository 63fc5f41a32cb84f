"""The network between this cluster and one peer, as the two NetworkConfigs describe it (pure).

Each side remaps the other on its own (:mod:`liqo.network.ipam`) and says so in its *word*: a NetworkConfig
named after its author, in the tenant namespace of the other (ours is written by our manager; the peer's
reaches us through the replicator, or is written by the peer itself when it consumes from us). A gateway
needs both words: ours says where we see the peer's pods (the route and WireGuard's allowed IPs), the
peer's says where the peer sees ours (what our gateway rewrites our pods' addresses into, both ways).

The peer's word is untrusted input, checked here before anything is built of it: its author must be the
peer, the block it sees us at the size of our pod CIDR and clear of the special-purpose ranges, its key a
WireGuard key, its endpoint an address and a port. What a lying peer can do with a word that passes is bounded: the
block only names our own pods inside the tunnel to that peer, and the endpoint is only where our gateway
sends WireGuard handshakes.

Who serves: the provider (the consumer already dials it, so a consumer behind NAT still connects). When
both clusters consume from each other, the one with the smaller cluster ID serves, so that both agree.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.networks import (
    POD_CIDR,
    REMAPPED_POD_CIDR,
    SPECIAL_PURPOSE,
    InvalidNetwork,
    IPAddress,
    IPNetwork,
    overlaps,
    parse_cidr,
)
from liqo.api.resources import NETWORK_CONFIGS
from liqo.network.wireguard import InvalidKey, parse_public_key

WIREGUARD_PORT = 51820
"""Where a gateway server listens inside its pod (its Service maps a node port to it)."""


class Role(enum.Enum):
    """A gateway's part in its tunnel."""

    SERVER = "Server"
    CLIENT = "Client"


class InvalidWord(ValueError):
    """A peer's NetworkConfig cannot be used; the message names the field and why."""


def role(*, consuming: bool, providing: bool, local_id: str, peer_id: str) -> Role | None:
    """Our gateway's role towards a peer; None when no peering links us (no gateway then)."""
    if consuming and providing:
        return Role.SERVER if local_id < peer_id else Role.CLIENT
    if providing:
        return Role.SERVER
    if consuming:
        return Role.CLIENT
    return None


@dataclass(frozen=True)
class Endpoint:
    """Where a gateway server is reached from the other cluster."""

    address: IPAddress
    port: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Word:
    """One side's NetworkConfig, checked."""

    cluster_id: str
    pod_cidr: IPNetwork
    remapped_pod_cidr: IPNetwork
    """Where the author sees the other cluster's pods."""
    role: Role | None
    public_key: str | None
    endpoint: Endpoint | None


def our_word(
    *,
    local_id: str,
    peer_id: str,
    pod_cidr: IPNetwork,
    remapped_pod_cidr: IPNetwork,
    gateway_role: Role,
    public_key: str | None,
    endpoint: Endpoint | None,
) -> dict[str, Any]:
    """Our NetworkConfig for ``peer_id``: in its tenant namespace, named after us (pure)."""
    gateway: dict[str, Any] = {"role": gateway_role.value}
    if public_key is not None:
        gateway["publicKey"] = public_key
    if endpoint is not None:
        gateway["endpoint"] = {"address": str(endpoint.address), "port": endpoint.port}
    return {
        "apiVersion": NETWORK_CONFIGS.api_version,
        "kind": NETWORK_CONFIGS.kind,
        "metadata": {
            "name": local_id,
            "namespace": names.tenant_namespace(peer_id),
            "labels": names.peer_labels(peer_id),
        },
        "spec": {
            "clusterID": local_id,
            POD_CIDR: str(pod_cidr),
            REMAPPED_POD_CIDR: str(remapped_pod_cidr),
            "gateway": gateway,
        },
    }


def read_word(obj: Mapping[str, Any]) -> Word:
    """A NetworkConfig as a :class:`Word`, checking only its shape (for our own, which we wrote).

    Raises:
        InvalidWord: a field is missing or malformed, naming it.
    """
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidWord("spec is missing")
    cluster_id = spec.get("clusterID")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise InvalidWord("spec.clusterID is missing")
    try:
        pod_cidr = parse_cidr(spec.get(POD_CIDR), field=f"spec.{POD_CIDR}")
        remapped = parse_cidr(spec.get(REMAPPED_POD_CIDR), field=f"spec.{REMAPPED_POD_CIDR}")
    except InvalidNetwork as exc:
        raise InvalidWord(str(exc)) from None
    gateway = spec.get("gateway") or {}
    if not isinstance(gateway, Mapping):
        raise InvalidWord("spec.gateway must be an object")
    try:
        gateway_role = Role(gateway["role"]) if "role" in gateway else None
    except ValueError:
        raise InvalidWord(f"spec.gateway.role must be one of {[r.value for r in Role]}") from None
    key = gateway.get("publicKey")
    try:
        public_key = None if key is None else parse_public_key(key, field="spec.gateway.publicKey")
    except InvalidKey as exc:
        raise InvalidWord(str(exc)) from None
    return Word(
        cluster_id=cluster_id,
        pod_cidr=pod_cidr,
        remapped_pod_cidr=remapped,
        role=gateway_role,
        public_key=public_key,
        endpoint=_endpoint(gateway.get("endpoint")),
    )


def check_peer_word(word: Word, *, peer_id: str, our_pod_cidr: IPNetwork) -> None:
    """Refuse a peer's word that is not the peer's, or that names networks it may not name.

    Its own pod CIDR is not used (we route the block *we* see the peer at), so it is not checked here.

    Raises:
        InvalidWord: why, naming the field.
    """
    if word.cluster_id != peer_id:
        raise InvalidWord(f"spec.clusterID is {word.cluster_id[:63]!r}, not the peer's ID {peer_id}")
    seen_as = word.remapped_pod_cidr
    if seen_as.version != our_pod_cidr.version or seen_as.prefixlen != our_pod_cidr.prefixlen:
        raise InvalidWord(
            f"spec.{REMAPPED_POD_CIDR} {seen_as} is not the size of our pod CIDR {our_pod_cidr}: it cannot name our"
            " pods one for one"
        )
    special = next((s for s in SPECIAL_PURPOSE if overlaps(seen_as, s)), None)
    if special is not None:
        raise InvalidWord(f"spec.{REMAPPED_POD_CIDR} {seen_as} overlaps the special-purpose range {special}")
    if word.endpoint is not None and any(word.endpoint.address in s for s in SPECIAL_PURPOSE):
        raise InvalidWord(f"spec.gateway.endpoint {word.endpoint} is in a special-purpose range")


def _endpoint(value: object) -> Endpoint | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidWord("spec.gateway.endpoint must be an object")
    try:
        address = ipaddress.ip_address(str(value.get("address")))
    except ValueError:
        raise InvalidWord("spec.gateway.endpoint.address must be an IP address") from None
    port = value.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise InvalidWord("spec.gateway.endpoint.port must be a port number")
    return Endpoint(address=address, port=port)


@dataclass(frozen=True)
class Link:
    """Everything one gateway needs, from both words: what it builds its tunnel and its rules of."""

    role: Role
    pod_cidr: IPNetwork
    """Our pod CIDR."""
    peer_seen: IPNetwork
    """Where we see the peer's pods (our word): routed into the tunnel, WireGuard's allowed IPs."""
    seen_as: IPNetwork
    """Where the peer sees our pods (its word): our pods' addresses are rewritten into it, and back."""
    peer_public_key: str
    peer_endpoint: Endpoint | None
    """The server's endpoint, for a client; None for a server (it learns the client's as it roams)."""


def link(*, ours: Word, theirs: Word) -> Link | None:
    """The link both words describe; None while one is incomplete (no key yet, a client without endpoint)."""
    if ours.role is None or theirs.public_key is None:
        return None
    endpoint = theirs.endpoint if ours.role is Role.CLIENT else None
    if ours.role is Role.CLIENT and endpoint is None:
        return None
    return Link(
        role=ours.role,
        pod_cidr=ours.pod_cidr,
        peer_seen=ours.remapped_pod_cidr,
        seen_as=theirs.remapped_pod_cidr,
        peer_public_key=theirs.public_key,
        peer_endpoint=endpoint,
    )
