"""What a local cluster should look like, validated before anything starts.

Every flag of ``liqoctl local up`` lands in a :class:`ClusterSpec`. Validation is pure and happens first,
so a typo in a CIDR or a quantity costs nothing: no process is started, no directory is written. The
spec is stored with the cluster, which is how ``up`` stays idempotent and resumes: a flag not given means
"as stored" (defaults apply to a new cluster only, see :class:`SpecRequest`), and a flag given with another
value than the stored one is refused with the list of differences.

``--cpus`` (taskset's list syntax) is stored in its canonical form (``0-1``, never ``0,1``), so that the
same set of CPUs written two ways is the same spec. Whether those CPUs exist here is checked by ``up``
against the caller's own affinity (:func:`check_cpus`), not by the spec: a stored spec must still load in
a process that happens to run on fewer CPUs.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from typing import Any

from liqo.api import quantity

_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40
MAX_REAL_NODES = 20

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SpecError(ValueError):
    """A flag of ``liqoctl local up`` is invalid; the message says which and why."""


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (``500m``, ``8Gi``, ``1e3``...), as an exact decimal.

    Raises:
        SpecError: ``text`` is not a quantity, so the CLI reports it like every other bad flag.
    """
    try:
        return quantity.parse_quantity(text)
    except quantity.QuantityError as exc:
        raise SpecError(str(exc)) from exc


def parse_cpus(text: str) -> frozenset[int]:
    """A CPU list in taskset's syntax (``0``, ``0-1``, ``0,2-3``) as a set; empty text is the empty set.

    Raises:
        SpecError: ``text`` is not a CPU list.
    """
    cpus: set[int] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        first, dash, last = item.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise SpecError(f"--cpus {text!r}: {item!r} is neither a CPU number nor a range like 0-3")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise SpecError(f"--cpus {text!r}: the range {item!r} runs backwards")
        cpus.update(range(low, high + 1))
    if text.strip() and not cpus:
        raise SpecError(f"--cpus {text!r} names no CPU")
    return frozenset(cpus)


def format_cpus(cpus: frozenset[int] | set[int]) -> str:
    """The canonical CPU list of a set: ascending, consecutive CPUs as ranges (``0-2,5``)."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    start = 0
    for index, cpu in enumerate(ordered):
        if index + 1 == len(ordered) or ordered[index + 1] != cpu + 1:
            first = ordered[start]
            ranges.append(str(cpu) if first == cpu else f"{first}-{cpu}")
            start = index + 1
    return ",".join(ranges)


def check_cpus(cpus: frozenset[int], *, available: set[int] | frozenset[int]) -> None:
    """Raise :class:`SpecError` unless every CPU of ``cpus`` is one this process may run on."""
    missing = cpus - available
    if missing:
        raise SpecError(
            f"--cpus {format_cpus(cpus)}: CPU(s) {format_cpus(missing)} not available here "
            f"(this process may run on {format_cpus(available)})"
        )


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` into a dict, each key and value checked against Kubernetes' label rules."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"label {item!r} must be key=value")
        check_label(key, value)
        labels[key] = value
    return labels


def check_label(key: str, value: str) -> None:
    """Raise :class:`SpecError` unless ``key=value`` is a valid Kubernetes label."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SpecError(f"label key {key!r}: the prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise SpecError(f"label key {key!r}: the name must be 1-63 alphanumerics, '-', '_' or '.'")
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise SpecError(f"label value {value!r} (key {key!r}) must be at most 63 alphanumerics, '-', '_' or '.'")


def node_cidr_mask(pod_cidr: ipaddress.IPv4Network, *, nodes: int, pods_per_node: int) -> int:
    """The per-node pod subnet size (prefix length) that fits ``nodes`` subnets in ``pod_cidr``.

    A /24 per node is the Kubernetes default; nodes holding more pods get larger subnets, and smaller pod
    CIDRs smaller ones, as long as each still holds ``pods_per_node`` addresses (plus network and broadcast).
    """
    for_pods = 32 - math.ceil(math.log2(pods_per_node + 2))
    for_nodes = pod_cidr.prefixlen + math.ceil(math.log2(nodes))
    # kube-controller-manager refuses node subnets more than 16 bits longer than the cluster CIDR.
    mask = min(max(for_nodes, min(24, for_pods)), pod_cidr.prefixlen + 16)
    if mask > 30 or 2 ** (32 - mask) - 2 < pods_per_node:
        raise SpecError(
            f"pod CIDR {pod_cidr} is too small for {nodes} node(s) of {pods_per_node} pods each: "
            f"use a larger --pod-cidr or fewer --nodes/--node-pods"
        )
    return mask


@dataclass(frozen=True)
class ClusterSpec:
    """The validated shape of one local cluster."""

    name: str
    nodes: int = 1
    node_cpu: str = "8"
    node_memory: str = "32Gi"
    node_pods: int = 110
    node_storage: str = "20Gi"
    """What each real node holds for volumes (the local StorageClass's provisioner counts it)."""
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    node_labels: dict[str, str] = field(default_factory=dict)
    real_nodes: int = 0
    cpus: str = ""
    """The CPUs every process of the cluster is pinned to (canonical taskset list); empty: not pinned."""

    def __post_init__(self) -> None:
        check_name(self.name)
        # Frozen, but normalised once here: two spellings of one set must compare equal.
        object.__setattr__(self, "cpus", format_cpus(parse_cpus(self.cpus)))
        if not 0 <= self.real_nodes <= MAX_REAL_NODES:
            raise SpecError(f"--real-nodes must be between 0 and {MAX_REAL_NODES}, got {self.real_nodes}")
        if not (0 if self.real_nodes else 1) <= self.nodes <= 1000:
            raise SpecError(f"--nodes must be between 1 and 1000 (0 with --real-nodes), got {self.nodes}")
        if not 1 <= self.node_pods <= 10000:
            raise SpecError(f"--node-pods must be between 1 and 10000, got {self.node_pods}")
        if parse_quantity(self.node_cpu) <= 0:
            raise SpecError(f"--node-cpu must be positive, got {self.node_cpu!r}")
        if parse_quantity(self.node_memory) <= 0:
            raise SpecError(f"--node-memory must be positive, got {self.node_memory!r}")
        if parse_quantity(self.node_storage) <= 0:
            raise SpecError(f"--node-storage must be positive, got {self.node_storage!r}")
        pods = _ipv4_network("--pod-cidr", self.pod_cidr)
        services = _ipv4_network("--service-cidr", self.service_cidr)
        if pods.overlaps(services):
            raise SpecError(f"--pod-cidr {pods} and --service-cidr {services} overlap")
        if services.prefixlen < 12 or services.prefixlen > 28:
            raise SpecError(f"--service-cidr must be between /12 and /28, got {services}")
        node_cidr_mask(pods, nodes=self.all_nodes, pods_per_node=self.node_pods)
        for key, value in self.node_labels.items():
            check_label(key, value)

    @property
    def all_nodes(self) -> int:
        """Fake and real nodes."""
        return self.nodes + self.real_nodes

    @property
    def cpu_set(self) -> frozenset[int]:
        """The CPUs of :attr:`cpus` (empty when not pinned)."""
        return parse_cpus(self.cpus)

    @property
    def node_mask(self) -> int:
        """The prefix length of each node's pod subnet."""
        return node_cidr_mask(ipaddress.IPv4Network(self.pod_cidr), nodes=self.all_nodes, pods_per_node=self.node_pods)

    @property
    def api_service_ip(self) -> str:
        """The ClusterIP of the ``kubernetes`` Service: the first address of the service CIDR."""
        return str(ipaddress.IPv4Network(self.service_cidr).network_address + 1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, as stored with the cluster."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSpec:
        """The spec stored by :meth:`to_dict` (validated again)."""
        return cls(**data)

    def differences(self, other: ClusterSpec) -> list[str]:
        """Human-readable ``field: ours -> theirs`` lines for every field that differs."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [f"{key}: {mine[key]} -> {theirs[key]}" for key in mine if mine[key] != theirs[key]]


class SpecConflictError(SpecError):
    """``up`` was given a flag whose value differs from the one the existing cluster was made with."""


@dataclass(frozen=True)
class SpecRequest:
    """What ``liqoctl local up NAME`` was asked for: the name, and only the flags the user actually gave.

    The same command both creates and resumes, so a flag left out cannot mean its default: on an existing
    cluster it means "as stored" (``up rome`` resumes rome whatever it was made with), on a new one the
    default. A given flag must agree with the stored value; changing a made cluster is ``down --purge``.
    """

    name: str
    given: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        unknown = set(self.given) - ({f.name for f in fields(ClusterSpec)} - {"name"})
        if unknown:  # a programming error, not a user's: the CLI passes only its own flags
            raise ValueError(f"not flags of a cluster spec: {', '.join(sorted(unknown))}")

    @classmethod
    def exactly(cls, spec: ClusterSpec) -> SpecRequest:
        """Every field of ``spec`` given: the cluster must be (or become) exactly ``spec``."""
        return cls(spec.name, {key: value for key, value in spec.to_dict().items() if key != "name"})

    def settle(self, stored: ClusterSpec | None) -> ClusterSpec:
        """The spec to bring up: ``stored`` when the given flags agree with it, else a new one (pure).

        Raises:
            SpecError: a given flag is invalid (checked before any comparison: the message names the flag).
            SpecConflictError: the cluster exists and a given flag differs from its stored value.
        """
        if stored is None:
            return ClusterSpec(name=self.name, **self.given)
        asked = ClusterSpec(**(stored.to_dict() | dict(self.given)))
        if asked != stored:
            raise SpecConflictError(
                f"cluster {self.name!r} exists with other settings ({'; '.join(stored.differences(asked))}). "
                f"Leave the flags out to resume it as it is, or run `liqoctl local down {self.name} --purge` "
                "first to recreate it."
            )
        return stored


def check_name(name: str) -> None:
    """Raise :class:`SpecError` unless ``name`` can name a local cluster (a short DNS label)."""
    if not name or len(name) > NAME_MAX or not _NAME.match(name):
        raise SpecError(
            f"cluster name {name!r} must be 1-{NAME_MAX} lowercase letters, digits or '-', starting with a letter"
        )


def _ipv4_network(flag: str, text: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise SpecError(f"{flag} {text!r} is not a CIDR: {exc}") from exc
    if not isinstance(network, ipaddress.IPv4Network):
        raise SpecError(f"{flag} {text!r}: only IPv4 is supported by local clusters")
    return network
