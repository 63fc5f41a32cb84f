"""Cluster networks, and what one cluster must dial to reach an address another cluster owns (pure).

When a Service's EndpointSlices are reflected between peers (issue #8), every address in them belongs to
one cluster — its *owner* — and is about to be dialled from another — the *reader*. Two clusters may well
use the same pod CIDR (every local cluster does by default): an address copied as it is would then reach
a pod of the reader's own, silently. So every address goes through :func:`translate`, a pure function of
the two networks: it passes unchanged only when it cannot mean anything else to the reader, is moved into
the block the reader sees the owner's pods at when the network fabric has remapped them (issue #11: the
reader's NetworkConfig for the owner says where), and is otherwise refused with a reason a human can
act on. Never silently wrong: an unknown network is a refusal too, never a guess.

A peer's network is what it told us at authentication (ForeignCluster ``spec.network``), and so is
untrusted input like everything else a peer says: :meth:`ClusterNetwork.from_message` refuses anything but
two canonical, disjoint networks of one IP family, clear of the special-purpose ranges (loopback,
link-local — where cloud metadata endpoints live —, multicast, reserved); and an address a peer claims
outside its own pod CIDR is refused, so what a lying peer can make us dial is bounded by the CIDR it
claimed, which can never cover our own pods or Services (docs/security.md, "Peer networks").

This module lives in ``liqo.api`` because both peering (which reports the situation) and the virtual
kubelet (which translates addresses) need it, and capabilities never import each other.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

POD_CIDR = "podCIDR"
SERVICE_CIDR = "serviceCIDR"
REMAPPED_POD_CIDR = "remappedPodCIDR"
"""In a NetworkConfig's spec: where its author sees the other cluster's pods (:mod:`liqo.network.links`)."""
NETWORK = "network"
"""The key of a network in handshake messages, and under a ForeignCluster's ``spec``."""

MAX_CIDR_LENGTH = len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")
"""The longest canonical CIDR (43 characters): anything longer is refused before it is parsed."""
MIN_PREFIX = {4: 8, 6: 32}
"""The widest network a cluster may claim, per IP family: no pod or service CIDR spans more than a /8 (or
an IPv6 /32, a whole provider allocation), and the wider a claim, the more of the reader's world it covers."""

SPECIAL_PURPOSE: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",  # "this network": 0.0.0.0 reaches the reader itself
        "127.0.0.0/8",  # loopback: the reader's own host
        "169.254.0.0/16",  # link-local, where cloud metadata endpoints answer with node credentials
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        "::/127",  # unspecified and loopback
        "::ffff:0:0/96",  # IPv4-mapped: an IPv6 way of writing any IPv4 address, special ones included
        "fe80::/10",  # link-local
        "fd00:ec2::254/128",  # a cloud metadata endpoint over IPv6 (AWS's; the IPv4 one is 169.254.169.254)
        "ff00::/8",  # multicast
    )
)
"""Ranges no cluster network may touch: an address in them means something else to every reader."""

UNKNOWN_HINT = "peers tell each other their networks at authentication, so it is known after the next handshake"


class InvalidNetwork(ValueError):
    """A network (or a CIDR in it) is malformed or not one a cluster may claim; the message names the field."""


def parse_cidr(value: object, *, field: str) -> IPNetwork:
    """``value`` as a network, if it is one written canonically (``10.244.0.0/16``, ``fd00:10::/56``).

    Canonical only: no host bits, no netmask notation, no uppercase or uncompressed IPv6. A peer's word is
    compared, stored and shown as written, so one network has one spelling.

    Raises:
        InvalidNetwork: it is not a string, too long, not a network, or not written canonically; the
            message names ``field``.
    """
    if not isinstance(value, str) or not value:
        raise InvalidNetwork(f"{field!r} must be a CIDR such as 10.244.0.0/16")
    if len(value) > MAX_CIDR_LENGTH:
        raise InvalidNetwork(f"{field!r} is longer than {MAX_CIDR_LENGTH} characters: not a CIDR")
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise InvalidNetwork(f"{field!r}: {value!r} is not a CIDR such as 10.244.0.0/16") from None
    if "%" in value:  # an IPv6 zone names an interface of the writer's host: meaningless to anyone else
        raise InvalidNetwork(f"{field!r}: {value!r} carries an IPv6 zone (%...): a cluster network has none")
    if str(network) != value:
        raise InvalidNetwork(f"{field!r}: {value!r} is not written as a network: write {network}")
    return network


def overlaps(a: IPNetwork, b: IPNetwork) -> bool:
    """Whether two networks share an address (never across IP families)."""
    return a.version == b.version and a.overlaps(b)


@dataclass(frozen=True)
class ClusterNetwork:
    """The networks of one cluster: its pods' and its Services' (single stack).

    Constructing one checks what a cluster may claim (see :func:`_check`), so a ``ClusterNetwork`` in hand
    is always one: two disjoint networks of one family, each at most a /8 (IPv6: /32), clear of
    :data:`SPECIAL_PURPOSE`.
    """

    pod_cidr: IPNetwork
    service_cidr: IPNetwork

    def __post_init__(self) -> None:
        _check(self.pod_cidr, self.service_cidr, prefix="")

    @classmethod
    def parse(cls, *, pod_cidr: object, service_cidr: object, prefix: str = "") -> ClusterNetwork:
        """The network of two CIDRs as written; ``prefix`` goes before the field names in messages.

        Raises:
            InvalidNetwork: either is malformed, or together they are not a network a cluster may claim.
        """
        pods = parse_cidr(pod_cidr, field=prefix + POD_CIDR)
        services = parse_cidr(service_cidr, field=prefix + SERVICE_CIDR)
        _check(pods, services, prefix=prefix)
        return cls(pod_cidr=pods, service_cidr=services)

    @classmethod
    def from_message(cls, value: object, *, field: str = NETWORK) -> ClusterNetwork:
        """The network in ``value``, a peer's ``{"podCIDR": ..., "serviceCIDR": ...}`` (untrusted).

        Raises:
            InvalidNetwork: anything else — another type, a missing, extra or malformed field —, naming it.
        """
        if not isinstance(value, Mapping):
            raise InvalidNetwork(f"{field!r} must be an object with {POD_CIDR!r} and {SERVICE_CIDR!r}")
        extra = sorted(str(key) for key in value if key not in (POD_CIDR, SERVICE_CIDR))
        if extra:
            # A field we do not know is a field we would silently ignore: a newer peer must not be misread.
            raise InvalidNetwork(f"{field!r} has unknown fields: {', '.join(repr(k[:40]) for k in extra[:5])}")
        return cls.parse(pod_cidr=value.get(POD_CIDR), service_cidr=value.get(SERVICE_CIDR), prefix=f"{field}.")

    def to_message(self) -> dict[str, str]:
        """``{"podCIDR": ..., "serviceCIDR": ...}``: as handshakes carry it and ForeignClusters record it."""
        return {POD_CIDR: str(self.pod_cidr), SERVICE_CIDR: str(self.service_cidr)}

    def __str__(self) -> str:
        return f"pods {self.pod_cidr}, services {self.service_cidr}"


def _check(pods: IPNetwork, services: IPNetwork, *, prefix: str) -> None:
    pod_field, service_field = prefix + POD_CIDR, prefix + SERVICE_CIDR
    if pods.version != services.version:
        raise InvalidNetwork(f"{pod_field!r} {pods} and {service_field!r} {services} are not of one IP family")
    for field, network in ((pod_field, pods), (service_field, services)):
        widest = MIN_PREFIX[network.version]
        if network.prefixlen < widest:
            raise InvalidNetwork(f"{field!r}: {network} is wider than a /{widest}: no cluster network is")
        special = next((s for s in SPECIAL_PURPOSE if overlaps(network, s)), None)
        if special is not None:
            raise InvalidNetwork(f"{field!r}: {network} overlaps the special-purpose range {special}")
    if overlaps(pods, services):
        raise InvalidNetwork(f"{pod_field!r} {pods} and {service_field!r} {services} overlap")


@dataclass(frozen=True)
class NetworkPeer:
    """Where a provider lets its consumers' pods connect (or be reached from), besides their own pods and DNS.

    Either a CIDR (``except``: blocks within it left out), or one of this cluster's namespaces by name (its
    ``kubernetes.io/metadata.name`` label, which the API server alone writes).
    """

    cidr: IPNetwork | None = None
    excepted: tuple[IPNetwork, ...] = ()
    namespace: str = ""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], *, field: str) -> NetworkPeer:
        """An entry of a SharingPolicy's ``podNetwork.egress`` or ``.ingress`` (the admin's word).

        Raises:
            InvalidNetwork: neither or both of ``cidr`` and ``namespace``, or a malformed CIDR; naming ``field``.
        """
        namespace = spec.get("namespace") or ""
        if bool(spec.get("cidr")) == bool(namespace):
            raise InvalidNetwork(f"{field!r} must give either a cidr or a namespace")
        if namespace:
            return cls(namespace=str(namespace))
        excepted = tuple(
            parse_cidr(value, field=f"{field}.except[{i}]") for i, value in enumerate(spec.get("except") or ())
        )
        return cls(cidr=parse_cidr(spec.get("cidr"), field=f"{field}.cidr"), excepted=excepted)


@dataclass(frozen=True)
class PodNetwork:
    """What a provider's SharingPolicy opens for its consumers' pods (``podNetwork``): nothing by default."""

    egress: tuple[NetworkPeer, ...] = ()
    """Where they may connect."""
    ingress: tuple[NetworkPeer, ...] = ()
    """What may connect to them."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> PodNetwork:
        """A SharingPolicy's ``podNetwork`` (None: nothing opened).

        Raises:
            InvalidNetwork: an entry is malformed (:meth:`NetworkPeer.from_spec`).
        """
        spec = spec or {}
        return cls(
            egress=tuple(
                NetworkPeer.from_spec(peer, field=f"podNetwork.egress[{i}]")
                for i, peer in enumerate(spec.get("egress") or ())
            ),
            ingress=tuple(
                NetworkPeer.from_spec(peer, field=f"podNetwork.ingress[{i}]")
                for i, peer in enumerate(spec.get("ingress") or ())
            ),
        )


def recorded_network(foreign_cluster: Mapping[str, Any]) -> ClusterNetwork | None:
    """The peer's network its ForeignCluster records (``spec.network``); None while it is not known.

    Raises:
        InvalidNetwork: what is recorded is not a network a cluster may claim (written by hand: the
            handshake records only valid ones).
    """
    recorded = (foreign_cluster.get("spec") or {}).get(NETWORK)
    return None if recorded is None else ClusterNetwork.from_message(recorded, field=f"spec.{NETWORK}")


def valid_network(foreign_cluster: Mapping[str, Any]) -> ClusterNetwork | None:
    """The peer's network its ForeignCluster records; None while unknown, or if it is not valid (pure).

    A network edited by hand into garbage is refused like an unknown one, never guessed: the next handshake
    records the peer's word again. (:func:`recorded_network` says why it is not valid, for a condition.)
    """
    try:
        return recorded_network(foreign_cluster)
    except InvalidNetwork:
        return None


def network_patch(foreign_cluster: Mapping[str, Any], network: ClusterNetwork) -> dict[str, Any] | None:
    """The merge patch recording ``network`` as the peer's on its ForeignCluster; None if it is recorded.

    What was recorded is replaced whatever it was (even written by hand into no valid network): the peer's
    word at its latest handshake is the truth about its network.
    """
    try:
        if recorded_network(foreign_cluster) == network:
            return None
    except InvalidNetwork:
        pass
    return {"spec": {NETWORK: network.to_message()}}


def remapped_pod_cidr(network_config: Mapping[str, Any] | None) -> IPNetwork | None:
    """Where the author of a NetworkConfig sees the other cluster's pods; None without one (or a valid one).

    The network fabric's word (issue #11): the virtual kubelet translates addresses with it.
    """
    spec = (network_config or {}).get("spec") or {}
    try:
        return parse_cidr(spec.get(REMAPPED_POD_CIDR), field=f"spec.{REMAPPED_POD_CIDR}")
    except InvalidNetwork:
        return None


# -- translation -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unchanged:
    """The reader dials the address as the owner wrote it: it cannot mean anything else to the reader."""

    address: IPAddress


@dataclass(frozen=True)
class Remapped:
    """The reader dials ``address``: ``original`` moved into the block the reader sees the owner's pods at."""

    address: IPAddress
    original: IPAddress


@dataclass(frozen=True)
class Refused:
    """The reader cannot be given an address to dial; ``reason`` says why, for a condition or an Event."""

    reason: str


Translation = Unchanged | Remapped | Refused


def conflict(
    *, owner: ClusterNetwork, reader: ClusterNetwork, owner_name: str, reader_name: str | None = None
) -> str | None:
    """Why the reader cannot dial the owner's pod addresses unchanged; None when it can.

    They would mean something else to the reader when the owner's pod CIDR overlaps the reader's pod CIDR
    (one of its own pods) or its service CIDR (one of its Services). ``reader_name`` None means the reader
    is this cluster ("ours").
    """
    for theirs, kind in ((reader.pod_cidr, "pod"), (reader.service_cidr, "service")):
        if overlaps(owner.pod_cidr, theirs):
            if reader_name is None:
                whose = "ours" if kind == "pod" else "our service CIDR"
                who = "its addresses cannot be reached"
            else:
                whose = f"the {kind} CIDR of {reader_name}"
                who = f"{reader_name} cannot reach its addresses"
            return (
                f"pod CIDR {owner.pod_cidr} of {owner_name} overlaps {whose} ({theirs}): {who} until the network"
                " fabric remaps them"
            )
    return None


def translate(
    address: str | IPAddress,
    *,
    owner: ClusterNetwork | None,
    reader: ClusterNetwork | None,
    owner_name: str,
    reader_name: str | None = None,
    remapped_pod_cidr: IPNetwork | None = None,
) -> Translation:
    """What the reader must dial to reach pod ``address`` of the owner, or why it cannot.

    Args:
        address: a pod address the owner published (untrusted when the owner is a peer).
        owner: the owner's network; None while unknown (refused, never guessed).
        reader: the network of the cluster that will dial; None while unknown.
        owner_name: the owner, as reasons name it.
        reader_name: the reader, as reasons name it; None when it is this cluster ("ours").
        remapped_pod_cidr: the block the reader sees the owner's pods at, once the network fabric has
            remapped them (issue #11); the same size as the owner's pod CIDR.

    Returns:
        :class:`Unchanged` when the owner's pod CIDR overlaps neither the reader's pod nor service CIDR;
        :class:`Remapped` (host bits kept) when ``remapped_pod_cidr`` is given; :class:`Refused` otherwise,
        and for an unknown network or an address outside the owner's pod CIDR.
    """
    if owner is None:
        return Refused(f"the network of {owner_name} is not known yet: {UNKNOWN_HINT}")
    if reader is None:
        return Refused(f"the network of {reader_name or 'this cluster'} is not known yet: {UNKNOWN_HINT}")
    if isinstance(address, str):
        try:
            ip: IPAddress = ipaddress.ip_address(address)
        except ValueError:
            return Refused(f"{address[:64]!r} is not an IP address")
        if "%" in address:  # a zone names an interface of the owner's host, not a pod
            return Refused(f"{address[:64]!r} carries an IPv6 zone: not a pod address")
    else:
        ip = address
    if ip not in owner.pod_cidr:  # never across IP families
        return Refused(
            f"{ip} is not in the pod CIDR {owner.pod_cidr} of {owner_name}: an address outside the pod CIDR its"
            " owner declared is not trusted"
        )
    if remapped_pod_cidr is not None:
        same_family = remapped_pod_cidr.version == owner.pod_cidr.version
        if not same_family or remapped_pod_cidr.prefixlen != owner.pod_cidr.prefixlen:
            return Refused(
                f"the block {remapped_pod_cidr} {owner_name}'s pods are remapped to is not the size of its pod"
                f" CIDR {owner.pod_cidr}"
            )
        offset = int(ip) - int(owner.pod_cidr.network_address)
        return Remapped(address=remapped_pod_cidr.network_address + offset, original=ip)
    reason = conflict(owner=owner, reader=reader, owner_name=owner_name, reader_name=reader_name)
    return Refused(reason) if reason else Unchanged(ip)


def pods_seen_at(
    *, owner: ClusterNetwork | None, reader: ClusterNetwork | None, remapped_pod_cidr: IPNetwork | None = None
) -> IPNetwork | None:
    """The block the reader dials the owner's pods at: where :func:`translate` puts the owner's pod CIDR.

    None when translate refuses every pod address of the owner (a network unknown, pod CIDRs that clash
    with nothing remapping them, a remapped block of the wrong size). The provider's admission holds the
    slices a consumer writes to this block (docs/security.md, "Endpoints"): the same function as the
    consumer's translation, so the two can never disagree about which addresses are the consumer's.
    """
    if owner is None:
        return None
    pods = owner.pod_cidr
    base = translate(
        pods.network_address, owner=owner, reader=reader, owner_name="", remapped_pod_cidr=remapped_pod_cidr
    )
    if isinstance(base, Refused):
        return None
    return ipaddress.ip_network((base.address, pods.prefixlen))


def returned_home(
    address: str,
    *,
    home: ClusterNetwork | None,
    provider: ClusterNetwork | None,
    provider_sees_home: IPNetwork | None,
) -> IPAddress | None:
    """Which of home's own pod addresses the provider means by ``address``, if it names one of them (pure).

    A provider may run a pod of home's back on home's own nodes (a tether's controlling peer does, through
    its virtual node for home): the address it then reports is home's pod as the provider sees it, in the
    block the network fabric remapped home's pods to (``provider_sees_home``), or home's pod CIDR itself while
    not remapped. An address in the provider's own pod CIDR is one of its pods, never a claim on home's (two
    clusters with one pod CIDR and no fabric: which pod it is cannot be told). The answer is only a claim:
    the caller must find home's pod with that address, run for this very pod in the provider's twin here,
    before it shows it (a peer's word is untrusted).
    """
    if home is None or provider is None:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if ip.version == provider.pod_cidr.version and ip in provider.pod_cidr:
        return None
    block = provider_sees_home or home.pod_cidr
    if ip.version != block.version or ip not in block or block.prefixlen != home.pod_cidr.prefixlen:
        return None
    return home.pod_cidr.network_address + (int(ip) - int(block.network_address))
