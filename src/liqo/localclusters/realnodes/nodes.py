"""Who a real node is and where its things are: names, addresses, directories, cgroups (pure).

Every real node of every local cluster sits on one shared underlay, a bridge in this machine's network
namespace standing for the LAN (or WAN) between machines: :data:`UNDERLAY_BRIDGE` with this machine at
:data:`UNDERLAY_HOST`. A cluster holds one ``/24`` of it (its *underlay index*, kept in ``cluster.json``),
node ``i`` the address ``.i`` in it, so two clusters' nodes never collide even when their pod CIDRs do.

A node's directory holds everything the node writes. Inside the node's own mount namespace three of its
sub-directories are mounted over ``/var/lib``, ``/var/log`` and ``/run``: containerd, the kubelet and the
CNI plugins then use their usual paths (``/run/containerd/containerd.sock``, ``/var/lib/kubelet``,
``/var/lib/cni``...), each node its own, without a per-path setting to forget.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

UNDERLAY_BRIDGE = "liqo-underlay"
UNDERLAY_NETWORK = ipaddress.IPv4Network("172.30.0.0/16")
UNDERLAY_HOST = str(UNDERLAY_NETWORK.network_address + 1)
MAX_CLUSTERS = 254
MAX_REAL_NODES = 200
CGROUP_PARENT = "liqo"
"""Every node's cgroups live under ``/liqo`` in each hierarchy: one place to look for leftovers."""
NODE_PRIVATE_DIRS = ("/var/lib", "/var/log", "/run")
"""The host paths a node's mount namespace replaces by its own directories."""
SYSCTLS_KUBELET_WANTS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
"""What the kubelet writes at start (host-wide: these are not namespaced) unless it already reads them.

Each node's mount namespace shows it these values (files mounted over ``/proc/sys/...``), so the kubelet
finds nothing to change and this machine's settings stay as they were.
"""


class UnderlayFullError(ValueError):
    """Every cluster slot of the underlay is taken."""


def underlay_index(*, previous: int | None, taken: Iterable[int]) -> int:
    """The underlay index of a cluster: its previous one if still free, else the smallest free one."""
    used = set(taken)
    if previous is not None and previous not in used and 1 <= previous <= MAX_CLUSTERS:
        return previous
    for candidate in range(1, MAX_CLUSTERS + 1):
        if candidate not in used:
            return candidate
    raise UnderlayFullError(f"all {MAX_CLUSTERS} underlay slots are taken by other local clusters with real nodes")


@dataclass(frozen=True)
class RealNode:
    """Real node ``index`` (1-based) of a local cluster."""

    cluster: str
    index: int
    underlay: int
    cluster_root: Path

    @property
    def name(self) -> str:
        """The Node's name."""
        return f"{self.cluster}-real-{self.index}"

    @property
    def ip(self) -> str:
        """The node's address on the underlay."""
        return str(UNDERLAY_NETWORK.network_address + self.underlay * 256 + self.index)

    @property
    def veth(self) -> str:
        """The host end of the node's link to the underlay (interface names are at most 15 bytes)."""
        return f"lq{self.underlay}n{self.index}"

    @property
    def cgroup(self) -> str:
        """The node's cgroup, the same path in every hierarchy (the kubelet's ``cgroupRoot``)."""
        return f"/{CGROUP_PARENT}/{self.cluster}-real-{self.index}"

    @property
    def daemons_cgroup(self) -> str:
        """Where containerd, the kubelet, kube-proxy (and so containerd's shims) run."""
        return f"{self.cgroup}/daemons"

    @property
    def root(self) -> Path:
        """The node's directory."""
        return self.cluster_root / "nodes" / f"real-{self.index}"

    @property
    def ns_dir(self) -> Path:
        """Holds the files the node's namespaces are bound to (a private mount of its own)."""
        return self.root / "ns"

    @property
    def netns(self) -> Path:
        """The node's network namespace."""
        return self.ns_dir / "net"

    @property
    def mountns(self) -> Path:
        """The node's mount namespace."""
        return self.ns_dir / "mnt"

    @property
    def sysctl_dir(self) -> Path:
        """The files shown over ``/proc/sys`` entries inside the node."""
        return self.root / "sysctl"

    @property
    def config_dir(self) -> Path:
        """Configuration files and credentials of the node's processes (read from the host's view)."""
        return self.root / "config"

    def private_dir(self, path: str) -> Path:
        """The node's own directory that shows as ``path`` (one of :data:`NODE_PRIVATE_DIRS`) inside it."""
        return self.root / "fs" / path.strip("/").replace("/", "-")

    def inside(self, path: str) -> Path:
        """Where a path seen inside the node (under one of :data:`NODE_PRIVATE_DIRS`) is on the host."""
        for private in NODE_PRIVATE_DIRS:
            if path == private or path.startswith(private + "/"):
                return self.private_dir(private) / path[len(private) :].lstrip("/")
        raise ValueError(f"{path} is not under a node's private directories")


def real_nodes(*, cluster: str, count: int, underlay: int, cluster_root: Path) -> list[RealNode]:
    """The ``count`` real nodes of a cluster."""
    return [RealNode(cluster, index, underlay, cluster_root) for index in range(1, count + 1)]


def pod_routes(nodes: list[RealNode], pod_cidrs: dict[str, str]) -> dict[str, dict[str, str]]:
    """For each node (by name), the other nodes' pod CIDRs and the address to reach each through (pure).

    ``pod_cidrs``: node name → the pod CIDR kube-controller-manager gave it (nodes without one are left out).
    """
    return {
        node.name: {pod_cidrs[other.name]: other.ip for other in nodes if other != node and other.name in pod_cidrs}
        for node in nodes
    }
