"""Making and unmaking a real node's place on this machine: namespaces, mounts, cgroups, links, NAT.

A node gets, before any of its processes starts:

- a network namespace, linked by a veth to the shared underlay bridge, with its address on it;
- a mount namespace (slave of the host's: the host's mounts still show, nothing shows back) where its own
  directories cover ``/var/lib``, ``/var/log`` and ``/run``, and files with the kubelet's wanted values
  cover the host-wide sysctls it would otherwise rewrite;
- a cgroup in every v1 hierarchy (cpuset copied from the parent, else nothing may run there), with a
  ``daemons`` child for containerd, the kubelet and kube-proxy.

Both namespaces are bound to files in the node's directory, on a private bind mount of that directory
(the kernel refuses to bind a mount namespace where mounts propagate). The cluster gets one nftables
table on the host: what nodes send to the underlay's host address at the API server's port goes to the
API server on 127.0.0.1 (``route_localnet`` is set on the bridge only, the one interface that needs it).

Teardown does not trust any process list: it kills whatever is in the node's cgroups (containerd's shims
and the containers outlive a killed containerd, and only the cgroup knows them all), then unmounts the
namespace files — the last reference to the mount namespace, which takes every mount made inside with
it — and removes cgroups deepest first, the veth, the table, and the bridge once no node uses it. Each
step tolerates what is already gone, so a teardown after a SIGKILLed supervisor, or a second one, works.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path

from liqo.kube.waiting import block_until
from liqo.localclusters.layout import locked
from liqo.localclusters.realnodes.nodes import (
    CGROUP_PARENT,
    NODE_PRIVATE_DIRS,
    SYSCTLS_KUBELET_WANTS,
    UNDERLAY_BRIDGE,
    UNDERLAY_HOST,
    UNDERLAY_NETWORK,
    RealNode,
)

CGROUP_ROOT = Path("/sys/fs/cgroup")
KILL_DEADLINE = 20.0
POLL = 0.05


class HostError(RuntimeError):
    """Setting up or tearing down a real node failed; the message names the command and its error."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HostError(f"`{' '.join(argv)}` failed: {(result.stderr or result.stdout).strip()}")
    return result


def _in_node(node: RealNode, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run("nsenter", f"--net={node.netns}", f"--mount={node.mountns}", "--", *argv, check=check)


# -- cgroups -------------------------------------------------------------------------------------------


def hierarchies() -> list[Path]:
    """Every cgroup hierarchy mounted under ``/sys/fs/cgroup``: the v1 ones and the (hybrid) v2 one.

    The v2 one holds no controller here, but runc creates the node's cgroups there too.
    """
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(
        path for path in CGROUP_ROOT.iterdir()
        if path.is_dir() and not path.is_symlink() and (path / "cgroup.procs").exists()
    )  # fmt: skip


def _make_cgroup(hierarchy: Path, cgroup: str, *, cpus: str = "") -> None:
    """Make ``cgroup`` and its missing parents; with ``cpus``, restrict the cgroup's cpuset to them.

    A process that joins a v1 cpuset cgroup gets that cpuset as its affinity (whatever it inherited), so a
    pinned cluster's real nodes are pinned here: the node's daemons and containers sit below this cgroup.
    """
    path = hierarchy
    for part in cgroup.strip("/").split("/"):
        parent, path = path, path / part
        if not path.is_dir():
            path.mkdir()
            for knob in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset takes no process
                if (parent / knob).exists():
                    (path / knob).write_text((parent / knob).read_text())
    if cpus and (path / "cpuset.cpus").exists():
        (path / "cpuset.cpus").write_text(cpus)


def cgroup_pids(cgroup: str) -> set[int]:
    """Every process in ``cgroup`` or below, in any hierarchy."""
    pids: set[int] = set()
    for hierarchy in hierarchies():
        top = hierarchy / cgroup.strip("/")
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(line) for line in procs.read_text().split())
    return pids


def _kill_cgroup(cgroup: str) -> None:
    def none_left() -> bool:
        pids = cgroup_pids(cgroup)
        for pid in pids:  # again at each look: a process may have forked meanwhile
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    if not block_until(none_left, timeout=KILL_DEADLINE, interval=POLL):
        raise HostError(f"processes {sorted(cgroup_pids(cgroup))} in cgroup {cgroup} would not die")


def _remove_cgroup(cgroup: str) -> None:
    for hierarchy in hierarchies():
        top = hierarchy / cgroup.strip("/")
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir_cgroup(directory)
        _rmdir_cgroup(top)
        _rmdir_cgroup(hierarchy / CGROUP_PARENT, missing_ok=True, busy_ok=True)


def _rmdir_cgroup(path: Path, *, missing_ok: bool = True, busy_ok: bool = False) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as exc:
        if not (busy_ok and exc.errno in (errno.EBUSY, errno.ENOTEMPTY)):
            raise HostError(f"cannot remove cgroup {path}: {exc}") from exc


# -- mounts --------------------------------------------------------------------------------------------


def mounts_under(path: Path) -> list[str]:
    """Mount points of this mount namespace at or below ``path``, deepest first."""
    prefix = str(path)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=lambda p: -p.count("/"))


def _unmount_all(path: Path) -> None:
    for point in mounts_under(path):
        _run("umount", "--lazy", point, check=False)
    if left := mounts_under(path):
        raise HostError(f"mounts left under {path}: {', '.join(left)}")


# -- the underlay --------------------------------------------------------------------------------------


def underlay_lock(clusters_root: Path) -> AbstractContextManager[None]:
    """Serialises changes to the shared bridge between the clusters' CLIs."""
    return locked(clusters_root / ".underlay.lock")


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _ensure_bridge() -> None:
    if not _link_exists(UNDERLAY_BRIDGE):
        _run("ip", "link", "add", UNDERLAY_BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{UNDERLAY_HOST}/{UNDERLAY_NETWORK.prefixlen}", "dev", UNDERLAY_BRIDGE)
    # DNAT to 127.0.0.1 of what arrives on this interface only (an interface setting, gone with it).
    Path(f"/proc/sys/net/ipv4/conf/{UNDERLAY_BRIDGE}/route_localnet").write_text("1")
    _run("ip", "link", "set", UNDERLAY_BRIDGE, "up")


def _remove_bridge_if_unused() -> None:
    ports = Path("/sys/class/net", UNDERLAY_BRIDGE, "brif")
    if ports.is_dir() and not any(ports.iterdir()):
        _run("ip", "link", "del", UNDERLAY_BRIDGE, check=False)


def nat_table(cluster: str) -> str:
    """The name of a cluster's nftables table on the host."""
    return f"liqo-local-{cluster}"


def apiserver_nat(*, cluster: str, port: int) -> str:
    """The nftables script that (re)creates a cluster's table: the underlay's host address → its API server.

    For traffic arriving from the underlay (pods, and peers' pods) and for this machine's own processes.
    """
    table = nat_table(cluster)
    return (
        f"table ip {table}\n"
        f"delete table ip {table}\n"
        f"table ip {table} {{\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f'    iifname "{UNDERLAY_BRIDGE}" ip daddr {UNDERLAY_HOST} tcp dport {port} dnat to 127.0.0.1:{port}\n'
        "  }\n"
        # The same address from this machine's own processes (another cluster's host-process components
        # reach the API server at the address its pods and peers' pods use).
        "  chain output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        f"    ip daddr {UNDERLAY_HOST} tcp dport {port} dnat to 127.0.0.1:{port}\n"
        "  }\n"
        "}\n"
    )


def _apply_nft(script: str) -> None:
    result = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HostError(f"nft failed: {result.stderr.strip()}")


# -- one node ------------------------------------------------------------------------------------------


def setup_node(node: RealNode, *, cpus: str = "") -> None:
    """Create the node's namespaces, mounts, cgroups and link (call :func:`teardown_node` first).

    ``cpus`` (a CPU list) pins everything that runs in the node to those CPUs; empty: not pinned.
    """
    node.ns_dir.mkdir(parents=True, exist_ok=True)
    _run("mount", "--bind", str(node.ns_dir), str(node.ns_dir))
    _run("mount", "--make-private", str(node.ns_dir))
    for ns_file in (node.netns, node.mountns):
        ns_file.touch()
    _run("unshare", f"--net={node.netns}", "true")
    _run("unshare", f"--mount={node.mountns}", "--propagation", "slave", "true")

    for private in NODE_PRIVATE_DIRS:
        node.private_dir(private).mkdir(parents=True, exist_ok=True)
        _in_node(node, "mount", "--bind", str(node.private_dir(private)), private)
    node.sysctl_dir.mkdir(parents=True, exist_ok=True)
    for key, wanted in SYSCTLS_KUBELET_WANTS.items():
        current = Path("/proc/sys", key).read_text().strip()
        if current != wanted:
            shown = node.sysctl_dir / key.replace("/", ".")
            shown.write_text(wanted + "\n")
            _in_node(node, "mount", "--bind", str(shown), f"/proc/sys/{key}")

    for hierarchy in hierarchies():
        _make_cgroup(hierarchy, node.cgroup, cpus=cpus)
        _make_cgroup(hierarchy, node.daemons_cgroup)

    _run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", str(node.netns))
    _run("ip", "link", "set", node.veth, "master", UNDERLAY_BRIDGE, "up")
    prefix = UNDERLAY_NETWORK.prefixlen
    _in_node(node, "ip", "addr", "add", f"{node.ip}/{prefix}", "dev", "eth0")
    _in_node(node, "ip", "link", "set", "eth0", "up")
    _in_node(node, "ip", "link", "set", "lo", "up")
    _in_node(node, "ip", "route", "add", "default", "via", UNDERLAY_HOST)


def teardown_node(node: RealNode) -> None:
    """Remove everything :func:`setup_node` made and everything the node's processes left (idempotent)."""
    _kill_cgroup(node.cgroup)
    _unmount_all(node.ns_dir)
    if _link_exists(node.veth):
        _run("ip", "link", "del", node.veth, check=False)
    _remove_cgroup(node.cgroup)


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
MIN_INOTIFY_INSTANCES = 1024
"""Each real node's containerd and kubelet hold a dozen inotify instances; Debian's default of 128 per user
(every node runs as root) runs out at about ten nodes, and containerd then starts without its CRI plugin."""


def _ensure_inotify_instances() -> None:
    """Raise ``fs.inotify.max_user_instances`` to :data:`MIN_INOTIFY_INSTANCES` if lower (never lowers it)."""
    current = int(INOTIFY_INSTANCES.read_text())
    if current < MIN_INOTIFY_INSTANCES:
        INOTIFY_INSTANCES.write_text(str(MIN_INOTIFY_INSTANCES))


def setup_cluster(
    nodes: list[RealNode], *, cluster: str, clusters_root: Path, apiserver_port: int, cpus: str = ""
) -> None:
    """Set up every real node of a cluster (pinned to ``cpus`` if not empty) and its NAT to the API server."""
    with underlay_lock(clusters_root):
        _ensure_inotify_instances()
        _ensure_bridge()
        _apply_nft(apiserver_nat(cluster=cluster, port=apiserver_port))
        for node in nodes:
            setup_node(node, cpus=cpus)


def teardown_cluster(nodes: list[RealNode], *, cluster: str, clusters_root: Path) -> None:
    """Tear down every real node of a cluster, its NAT table, and the bridge if nothing else uses it."""
    with underlay_lock(clusters_root):
        for node in nodes:
            teardown_node(node)
        _run("nft", "delete", "table", "ip", nat_table(cluster), check=False)
        _remove_bridge_if_unused()


def route_pods(node: RealNode, routes: dict[str, str]) -> None:
    """Route other nodes' pod CIDRs (keys) via their underlay addresses (values) inside ``node``."""
    for cidr, via in routes.items():
        _in_node(node, "ip", "route", "replace", cidr, "via", via)


def run_in_node(node: RealNode, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command inside the node's namespaces (e.g. ``ctr`` against its containerd); raises HostError."""
    return _in_node(node, *argv)
