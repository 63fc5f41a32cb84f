"""``make bench-network``: pod→pod through the network fabric against bare wireguard-go on the same nodes.

One run, two local clusters with the *same* pod CIDR (10.244.0.0/16), one real node each, liqo on both
(``liqoctl install``: gateways and node agents as pods of liqo's image), A peered with B. Two paths, both
measured ``--repeat`` times, alternately (bare, fabric, bare, fabric...), so that the machine's load falls
on both alike:

- **bare**: ``wireguard-go`` in each real node's network namespace, a tunnel straight between the nodes'
  underlay addresses, ``iperf3`` and ``ping`` in the nodes' namespaces over the tunnel's addresses. The
  binary is the one the gateways run (copied from ``/proc/<pid>/exe`` of A's gateway), with the Go
  settings of its environment (``GOMEMLIMIT``) and the gateway's MTU. Why the nodes' namespaces rather
  than two fresh ones on the underlay: the fabric's tunnel packets cross exactly these namespaces (each
  node's ``eth0``, its netfilter hooks — kube-proxy's and the CNI's — and the underlay bridge), so this is
  the same hardware and node plumbing without the fabric. Two fresh namespaces skip the nodes' netfilter:
  measured once, ~5 % more throughput (~4 % less CPU per MB) than the nodes' (docs/operations.md).
- **fabric**: a pod of the tool image on each node; A's pod dials B's pod at the address A sees it at
  (B's pod CIDR remapped by A's NetworkConfig, e.g. 10.244.0.6 → 10.0.0.6): pod → node A (the node agent's
  route; the node's ICMP redirect then sends the pod straight to the gateway over the bridge) → A's gateway
  pod (SNAT, WireGuard) → node A (masquerade) → underlay → node B (NodePort DNAT) → B's gateway pod
  (WireGuard, DNAT) → B's pod.

The tools run in the pods' and nodes' network namespaces with ``nsenter``, from the tool image's files
(``iperf3``, ``ping``), so both paths use the same binaries and this process knows their PIDs. CPU weights
are the same on both paths too (cgroup v1 ``cpu``): each iperf3 runs in the cgroup of its side's bench pod
(which requests the gateway's 50m), each bare wireguard-go in that of its side's gateway container. Left
where they were started (the host's root cgroup), the bare processes would outweigh the gateways, whose
50m sit deep under the node's cgroups, and the ratio would measure the CPU scheduler, not the fabric.

Measured per path: the median throughput of ``iperf3 -c`` (TCP, one stream, ``--seconds`` long); CPU per
MB received (ms of CPU per 10^6 bytes: user + system time of both wireguard-go processes and both iperf3
processes, plus the ksoftirqd threads, whose share is the whole machine's; the kernel's forwarding, NAT
and veth work runs in softirq context and this kernel, without IRQ time accounting, charges it to whichever
of those processes it interrupted); wireguard-go's peak RSS; the RTT of ``--pings`` pings 10 ms apart (p50
and p99, every repeat pooled). Also shown: the whole machine's busy CPU per MB (others' work included) and
before the run, to judge how much others were using it; the CPU ratio (bare CPU per MB over the fabric's:
what the throughput ratio tends to when both paths are CPU-bound, and much steadier on a shared machine).
The last line is ``fabric_ratio=X``: the fabric's median throughput over the bare one.

``--clusters A B`` measures two clusters already peered (A consumer, B provider) and leaves them up.
``--json`` prints the report as JSON instead of the tables (progress goes to stderr either way).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import functools
import ipaddress
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import cpu_seconds, host_busy_seconds, peak_rss_mib
from liqo.api import names
from liqo.api.networks import POD_CIDR, REMAPPED_POD_CIDR
from liqo.api.resources import NETWORK_CONFIGS
from liqo.install.values import RESOURCES_GATEWAY
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import NAMESPACES, PODS
from liqo.kube.waiting import poll_until
from liqo.localclusters import clusters
from liqo.localclusters.layout import ClusterDir, read_json
from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.nodes import RealNode, real_nodes
from liqo.localclusters.spec import ClusterSpec
from liqo.network import gateway_loop as fabric_gateway
from liqo.network import wireguard
from liqo.peering import operations as peering

console = Console(stderr=True)
MB = 1_000_000
POD = "bench-net"
NAMESPACE = "default"
IPERF_PORT = 5201
BENCH_POD_CPU = RESOURCES_GATEWAY["requests"]["cpu"]
BARE_TUNNEL = ipaddress.IPv4Network("169.254.77.0/30")
"""The bare tunnel's two addresses, in the nodes' namespaces only (link-local: routed nowhere)."""
WIREGUARD_SOCKETS = Path("/var/run/wireguard")
"""Where wireguard-go, run from this machine's mount namespace, puts its control sockets."""
DEVICES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9)}
"""The character devices (major, minor) made in the tool image's unpacked files: iperf3 reads /dev/urandom."""


# -- processes and their CPU ---------------------------------------------------------------------------


def go_environment(pid: int) -> dict[str, str]:
    """The Go runtime's settings in a process's environment (``GOMEMLIMIT``, ``GOGC``, ``GOMAXPROCS``...)."""
    variables = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(v.split("=", 1) for v in variables if v.startswith("GO") and "=" in v)


def cpu_cgroup(pid: int) -> Path | None:
    """The directory of a process's cgroup in the cgroup v1 hierarchy of the ``cpu`` controller, if any.

    A process written into it competes for CPU with the weight (``cpu.shares``) of that cgroup and its
    ancestors: a gateway's is its container's (50m of request: 51 shares, deep under the node's cgroups).
    None under cgroup v2, where a process would also fall under the container's memory limit.
    """
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            directory = Path("/sys/fs/cgroup", controllers) / path.lstrip("/")
            return directory if (directory / "cgroup.procs").exists() else None
    return None


def ksoftirqd_pids() -> list[int]:
    """The kernel threads that run softirq work the interrupted context left over (one per CPU)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().startswith("ksoftirqd/"):
                    found.append(int(proc.name))
    return sorted(found)


def machine_busy_percent(*, seconds: float) -> float:
    """How busy the whole machine is over ``seconds`` (% of all its CPUs): others' load before a run."""
    before = host_busy_seconds()
    time.sleep(seconds)  # the sampling window
    return round(100 * (host_busy_seconds() - before) / seconds / (os.cpu_count() or 1), 1)


def pod_pids(uid: str, *, comm: str | None = None) -> list[int]:
    """Host PIDs of the processes of the pod with ``uid`` (its cgroup path names it), optionally by name."""
    marks = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
            if not any(mark in cgroups for mark in marks):
                continue
            if comm is not None and (proc / "comm").read_text().strip() != comm:
                continue
        except OSError:
            continue
        found.append(int(proc.name))
    return sorted(found)


def run(*argv: str, input: str | None = None) -> str:
    """Run a command; its stdout. Raises RuntimeError naming it on failure."""
    done = subprocess.run(argv, input=input, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done.stdout


@dataclass(frozen=True)
class Place:
    """Where tools run: a network namespace (a node's or a pod's), a ``cpu`` cgroup, a name in the output."""

    label: str
    netns: str
    cgroup: Path | None = None
    """Written into before the tool starts (the bench pod's container's: the CPU weight of a pod)."""


class Tools:
    """``iperf3`` and ``ping`` of the tool image, run in any network namespace (chrooted in its files)."""

    def __init__(self, rootfs: Path) -> None:
        self.rootfs = rootfs

    def argv(self, place: Place, *argv: str) -> list[str]:
        """The command running ``argv`` from the tool image in ``place``'s network namespace (and cgroup)."""
        command = ["nsenter", f"--net={place.netns}", f"--root={self.rootfs}", "--wd=/", *argv]
        if place.cgroup is None:
            return command
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(place.cgroup), *command]

    @classmethod
    @contextlib.contextmanager
    def extracted(cls) -> Iterator[Tools]:
        """The tool image's archive (built by ``liqoctl local up``) unpacked into a scratch directory."""
        archive = images.toolbox_archive()
        with tempfile.TemporaryDirectory(prefix="bench-net-") as scratch:
            rootfs = Path(scratch) / "rootfs"
            rootfs.mkdir()
            with tarfile.open(archive) as outer:
                index = json.load(_member(outer, "index.json"))
                manifest = json.load(_member(outer, _blob(index["manifests"][0]["digest"])))
                layer = _member(outer, _blob(manifest["layers"][0]["digest"]))
                with tarfile.open(fileobj=layer) as inner:
                    inner.extractall(rootfs, filter="tar")
            (rootfs / "dev").mkdir(exist_ok=True)
            for device, (major, minor) in DEVICES.items():  # iperf3 reads /dev/urandom; a layer has no /dev
                os.mknod(rootfs / "dev" / device, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            yield cls(rootfs)


def _member(archive: tarfile.TarFile, name: str) -> Any:
    handle = archive.extractfile(name) or archive.extractfile(f"./{name}")
    if handle is None:
        raise RuntimeError(f"{name} is not a file in the tool image's archive")
    return handle


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


# -- one measurement -----------------------------------------------------------------------------------


@dataclass
class Throughput:
    """One iperf3 run and what it cost."""

    mbps: float
    received_bytes: int
    cpu: dict[str, float]
    """CPU-seconds by role during the run (wireguard-go of each side, iperf3 client and server, ksoftirqd)."""
    host_busy: float
    """CPU-seconds the whole machine spent busy during the run (others' work included)."""
    seconds: float
    retransmits: int

    @property
    def cpu_ms_per_mb(self) -> float:
        """ms of CPU (all the roles) per 10^6 bytes received."""
        return 1000 * sum(self.cpu.values()) / (self.received_bytes / MB)


@dataclass
class Path_:
    """One path's server, client and the processes to account: what a measurement needs."""

    name: str
    client: Place
    server: Place
    target: str
    wireguard: dict[str, int]
    """The wireguard-go PIDs of the path, by role (``wg-client``: A's side, ``wg-server``: B's)."""
    server_pid: int = 0
    peak_rss: dict[str, float] = field(default_factory=dict)
    """wireguard-go's peak RSS by role (MiB), read after the last run."""
    runs: list[Throughput] = field(default_factory=list)
    rtts: list[float] = field(default_factory=list)


def measure_throughput(tools: Tools, path: Path_, *, seconds: int) -> Throughput:
    """One ``iperf3 -c`` from the path's client to its server; its throughput and the CPU it cost."""
    tracked = {**path.wireguard, "iperf3-server": path.server_pid}
    softirq = ksoftirqd_pids()
    before = {role: cpu_seconds(pid) for role, pid in tracked.items()}
    softirq_before = sum(cpu_seconds(pid) for pid in softirq)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before, started = host_busy_seconds(), time.monotonic()
    argv = ["/usr/bin/iperf3", "-c", path.target, "-p", str(IPERF_PORT), "-t", str(seconds), "-J"]
    output = run(*tools.argv(path.client, *argv))
    busy, elapsed = host_busy_seconds() - busy_before, time.monotonic() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {role: cpu_seconds(pid) - before[role] for role, pid in tracked.items()}
    client_cpu = children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    cpu["iperf3-client"] = client_cpu
    cpu["ksoftirqd"] = sum(cpu_seconds(pid) for pid in softirq) - softirq_before
    report = json.loads(output)
    if "error" in report:
        raise RuntimeError(f"iperf3 to {path.target} ({path.name}): {report['error']}")
    received = report["end"]["sum_received"]
    return Throughput(
        mbps=received["bits_per_second"] / 1e6,
        received_bytes=int(received["bytes"]),
        cpu=cpu,
        host_busy=busy,
        seconds=elapsed,
        retransmits=int(report["end"]["sum_sent"].get("retransmits", 0)),
    )


def measure_rtts(tools: Tools, path: Path_, *, count: int) -> list[float]:
    """``count`` pings 10 ms apart from the path's client to its target; each RTT in ms (lost ones left out)."""
    run(*tools.argv(path.client, "/bin/ping", "-n", "-c", "3", "-i", "0.2", path.target))  # ARP, redirects
    output = run(*tools.argv(path.client, "/bin/ping", "-n", "-c", str(count), "-i", "0.01", "-W", "1",
                             path.target))  # fmt: skip
    return [float(match) for match in re.findall(r"time=([\d.]+) ms", output)]


def percentile(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (inclusive method)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# -- the bare tunnel -----------------------------------------------------------------------------------


def uapi(interface: str, request: str) -> None:
    """One request on wireguard-go's control socket (the protocol ``wg`` speaks); raises on a non-zero errno."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        deadline = time.monotonic() + 10
        while True:
            try:
                sock.connect(str(WIREGUARD_SOCKETS / f"{interface}.sock"))
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:  # bound, not listening yet
                if time.monotonic() > deadline:
                    # wireguard-go logs "Failed to listen on uapi socket: too many open files" when the
                    # machine is out of inotify instances (fs.inotify.max_user_instances, shared by all).
                    raise RuntimeError(f"wireguard-go {interface} does not listen on its control socket") from exc
                time.sleep(0.05)
        sock.sendall(request.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    if b"errno=0" not in answer:
        raise RuntimeError(f"wireguard-go {interface} refused the configuration: {answer.decode().strip()}")


def _hex(key: str) -> str:
    return base64.b64decode(key).hex()


class BareTunnel:
    """wireguard-go in two nodes' network namespaces, a tunnel between their underlay addresses."""

    def __init__(
        self,
        binary: Path,
        nodes: tuple[RealNode, RealNode],
        *,
        mtu: int,
        suffix: str,
        go_env: dict[str, str],
        cpu_cgroups: tuple[Path | None, Path | None] = (None, None),
    ) -> None:
        self.binary = binary
        self.go_env = go_env
        self.cpu_cgroups = cpu_cgroups
        self.nodes = nodes
        self.mtu = mtu
        self.interfaces = (f"nbw{suffix}a", f"nbw{suffix}b")
        self.port = 52000 + int(suffix, 16) % 1000
        self.addresses = (BARE_TUNNEL.network_address + 1, BARE_TUNNEL.network_address + 2)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> dict[str, int]:
        """Both ends up and configured; their PIDs by role."""
        keys = [wireguard.generate_private_key() for _ in self.nodes]
        env = os.environ | self.go_env | {"WG_PROCESS_FOREGROUND": "1", "LOG_LEVEL": "error"}
        for node, interface, cgroup in zip(self.nodes, self.interfaces, self.cpu_cgroups, strict=True):
            argv = ["nsenter", f"--net={node.netns}", str(self.binary), "-f", interface]
            self.processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
            if cgroup is not None:  # all its threads, those it starts later too
                (cgroup / "cgroup.procs").write_text(str(self.processes[-1].pid))
        for interface, process in zip(self.interfaces, self.processes, strict=True):
            deadline = time.monotonic() + 10
            while not (WIREGUARD_SOCKETS / f"{interface}.sock").exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"wireguard-go made no interface {interface} (exit {process.returncode})")
                time.sleep(0.05)  # until its control socket exists (uapi() waits for it to listen)
        for side in (0, 1):
            other = 1 - side
            node, interface = self.nodes[side], self.interfaces[side]
            uapi(
                interface,
                f"set=1\nprivate_key={_hex(keys[side])}\nlisten_port={self.port}\nreplace_peers=true\n"
                f"public_key={_hex(wireguard.public_key(keys[other]))}\n"
                f"endpoint={self.nodes[other].ip}:{self.port}\n"
                f"replace_allowed_ips=true\nallowed_ip={self.addresses[other]}/32\n",
            )
            ns = ["nsenter", f"--net={node.netns}", "ip"]
            run(*ns, "address", "add", f"{self.addresses[side]}/{BARE_TUNNEL.prefixlen}", "dev", interface)
            run(*ns, "link", "set", interface, "mtu", str(self.mtu), "up")
        return {"wg-client": self.processes[0].pid, "wg-server": self.processes[1].pid}

    def stop(self) -> None:
        """Both ends gone (their interfaces go with them, and their control sockets)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for interface in self.interfaces:
            (WIREGUARD_SOCKETS / f"{interface}.sock").unlink(missing_ok=True)


# -- the clusters --------------------------------------------------------------------------------------


@dataclass
class Side:
    """One cluster as the benchmark uses it."""

    name: str
    client: KubeClient
    node: RealNode
    cluster_id: str = ""
    pod_ip: str = ""
    pod_uid: str = ""
    gateway_uid: str = ""


def the_node(name: str) -> RealNode:
    """The one real node of local cluster ``name``."""
    cluster = ClusterDir.named(name)
    stored = read_json(cluster.cluster_file)
    [node] = real_nodes(cluster=name, count=1, underlay=int(stored["underlay"]), cluster_root=cluster.root)
    return node


def liqoctl_install(name: str) -> None:
    """``liqoctl install`` on local cluster ``name`` (liqo as pods, the fabric included)."""
    liqoctl = str(Path(sys.executable).parent / "liqoctl")
    run(liqoctl, "install", f"--kubeconfig={ClusterDir.named(name).kubeconfig}")


async def connected(side: Side) -> bool:
    """Whether this side's gateway reports its tunnel Connected (on its own NetworkConfig)."""
    configs, _ = await side.client.list_all(NETWORK_CONFIGS)
    for config in configs:
        if config["metadata"]["name"] == side.cluster_id:
            state = ((config.get("status") or {}).get("connection") or {}).get("state")
            return bool(state == "Connected")
    return False


async def remapped_address(a: Side, b: Side) -> str:
    """Where A sees B's pod: B's pod IP moved from B's pod CIDR into the block A's word names B's pods by."""
    configs, _ = await a.client.list_all(NETWORK_CONFIGS)
    words = {config["metadata"]["name"]: config["spec"] for config in configs}
    ours, theirs = words[a.cluster_id], words[b.cluster_id]
    pods = ipaddress.IPv4Network(theirs[POD_CIDR])
    seen = ipaddress.IPv4Network(ours[REMAPPED_POD_CIDR])
    return str(seen.network_address + (int(ipaddress.IPv4Address(b.pod_ip)) - int(pods.network_address)))


async def start_pod(side: Side) -> None:
    """A pod of the tool image on the side's node, doing nothing: the fabric path's network namespace."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "tools",
                    "image": images.TOOLBOX_PINNED,
                    "command": ["sleep", "infinity"],
                    # The gateway's request: iperf3 gets a pod's CPU weight, as much as wireguard-go's.
                    "resources": {"requests": {"cpu": BENCH_POD_CPU}},
                }
            ],
        },
    }
    with contextlib.suppress(NotFoundError):
        await side.client.delete(PODS, POD, namespace=NAMESPACE)
        await poll_until(lambda: _gone(side.client), timeout=60, interval=0.5, message=f"old {POD} not deleted")
    await side.client.create(PODS, pod)

    async def running() -> bool:
        obj = await side.client.get(PODS, POD, namespace=NAMESPACE)
        status = obj.get("status") or {}
        side.pod_ip, side.pod_uid = status.get("podIP", ""), obj["metadata"]["uid"]
        return bool(status.get("phase") == "Running" and side.pod_ip and pod_pids(side.pod_uid, comm="sleep"))

    await poll_until(running, timeout=120, interval=0.5, message=f"pod {POD} on {side.name} not running")


async def _gone(client: KubeClient) -> bool:
    try:
        await client.get(PODS, POD, namespace=NAMESPACE)
    except NotFoundError:
        return True
    return False


async def find_gateway(side: Side) -> int:
    """The PID of wireguard-go in the side's gateway pod (waits for one)."""
    found: list[int] = []

    async def running() -> bool:
        pods, _ = await side.client.list_all(
            PODS, namespace="liqo", label_selector=f"{names.COMPONENT}={names.GATEWAY}"
        )
        live = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(live) != 1:
            return False
        side.gateway_uid = live[0]["metadata"]["uid"]
        found[:] = pod_pids(side.gateway_uid, comm="wireguard-go")
        return len(found) == 1

    await poll_until(running, timeout=60, interval=0.5, message=f"no wireguard-go in {side.name}'s gateway")
    return found[0]


def interface_mtu(netns: str, interface: str) -> int:
    """An interface's MTU, read in a network namespace."""
    [link] = json.loads(run("nsenter", f"--net={netns}", "ip", "-j", "link", "show", interface))
    return int(link["mtu"])


# -- the run -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What the run was told."""

    repeat: int
    seconds: int
    pings: int
    bare_mtu: int | None


async def measure(a: Side, b: Side, settings: Settings, suffix: str) -> dict[str, Any]:
    """Both paths, ``repeat`` times each, alternately; the report."""
    for side in (a, b):
        side.cluster_id = (await side.client.get(NAMESPACES, "kube-system"))["metadata"]["uid"]
    for side in (a, b):
        await poll_until(functools.partial(connected, side), timeout=120, interval=1, message=f"{side.name}: no tunnel")
    wg_a, wg_b = await find_gateway(a), await find_gateway(b)
    for side in (a, b):
        await start_pod(side)
    target = await remapped_address(a, b)
    gateway_mtu = interface_mtu(f"/proc/{wg_a}/ns/net", fabric_gateway.INTERFACE)
    mtu = settings.bare_mtu or gateway_mtu
    pod_a, pod_b = pod_pids(a.pod_uid, comm="sleep")[0], pod_pids(b.pod_uid, comm="sleep")[0]
    fabric = Path_(
        name="fabric",
        client=Place(f"pod {POD} on {a.node.name}", f"/proc/{pod_a}/ns/net", cpu_cgroup(pod_a)),
        server=Place(f"pod {POD} on {b.node.name}", f"/proc/{pod_b}/ns/net", cpu_cgroup(pod_b)),
        target=target,
        wireguard={"wg-client": wg_a, "wg-server": wg_b},
    )
    described = {
        "clusters": [a.name, b.name],
        "nodes": {a.node.name: a.node.ip, b.node.name: b.node.ip},
        "gateway_mtu": gateway_mtu,
        "bare_mtu": mtu,
        "fabric_target": f"{b.pod_ip} of {b.name}, seen from {a.name} as {target}",
        "iperf3": f"TCP, 1 stream, {settings.seconds} s, A → B",
        "repeat": settings.repeat,
        "pings": f"{settings.pings} per repeat, 10 ms apart",
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
    }
    return await asyncio.to_thread(measure_paths, described, settings, fabric, (a.node, b.node), suffix=suffix)


def measure_paths(
    described: dict[str, Any], settings: Settings, fabric: Path_, nodes: tuple[RealNode, RealNode], *, suffix: str
) -> dict[str, Any]:
    """The bare tunnel made with the fabric's binary; both paths measured alternately; the report."""
    with Tools.extracted() as tools, tempfile.TemporaryDirectory(prefix="bench-net-wg-") as scratch:
        binary = Path(scratch) / "wireguard-go"
        shutil.copyfile(f"/proc/{fabric.wireguard['wg-client']}/exe", binary)
        binary.chmod(0o755)
        described["wireguard_go"] = run(str(binary), "--version").splitlines()[0]
        go_env = go_environment(fabric.wireguard["wg-client"])
        described["wireguard_go_environment"] = go_env
        cgroups = (cpu_cgroup(fabric.wireguard["wg-client"]), cpu_cgroup(fabric.wireguard["wg-server"]))
        described["bare_wireguard_go_cpu_cgroups"] = (
            "the gateways' (same CPU weight)" if all(cgroups) else "this process's (cgroup v2: not moved)"
        )
        bare_tunnel = BareTunnel(
            binary, nodes, mtu=described["bare_mtu"], suffix=suffix, go_env=go_env, cpu_cgroups=cgroups
        )
        bare = Path_(
            name="bare",
            client=Place(f"node {nodes[0].name}", str(nodes[0].netns), fabric.client.cgroup),
            server=Place(f"node {nodes[1].name}", str(nodes[1].netns), fabric.server.cgroup),
            target=str(bare_tunnel.addresses[1]),
            wireguard={},
        )
        described["load_before"] = os.getloadavg()
        described["machine_busy_before_percent"] = machine_busy_percent(seconds=3)
        console.print("settings: " + json.dumps(described))
        servers: list[subprocess.Popen[bytes]] = []
        try:
            bare.wireguard = bare_tunnel.start()
            for path in (bare, fabric):
                argv = ["/usr/bin/iperf3", "-s", "-p", str(IPERF_PORT)]
                servers.append(subprocess.Popen(tools.argv(path.server, *argv), stdout=subprocess.DEVNULL))
                path.server_pid = servers[-1].pid
            time.sleep(1)  # the servers listening (a client that comes too early is refused, and says so)
            for repeat in range(settings.repeat):
                for path in (bare, fabric):
                    result = measure_throughput(tools, path, seconds=settings.seconds)
                    path.runs.append(result)
                    path.rtts += measure_rtts(tools, path, count=settings.pings)
                    console.print(
                        f"[{repeat + 1}/{settings.repeat}] {path.name}: {result.mbps:.0f} Mbit/s, "
                        f"{result.cpu_ms_per_mb:.1f} ms CPU/MB, {result.retransmits} retransmits, "
                        f"machine busy {100 * result.host_busy / result.seconds / (os.cpu_count() or 1):.0f} %"
                    )
            for path in (bare, fabric):
                path.peak_rss = {role: peak_rss_mib(pid) for role, pid in path.wireguard.items()}
        finally:
            for server in servers:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=10)
            bare_tunnel.stop()
    described["load_after"] = os.getloadavg()
    described["machine_busy_after_percent"] = machine_busy_percent(seconds=3)
    return report(described, bare, fabric)


def summary(path: Path_) -> dict[str, Any]:
    """One path's medians and percentiles."""
    roles = sorted({role for run_ in path.runs for role in run_.cpu})
    return {
        "mbps": statistics.median(r.mbps for r in path.runs),
        "mbps_runs": [round(r.mbps, 1) for r in path.runs],
        "cpu_ms_per_mb": statistics.median(r.cpu_ms_per_mb for r in path.runs),
        "cpu_ms_per_mb_by_role": {
            role: statistics.median(1000 * r.cpu.get(role, 0.0) / (r.received_bytes / MB) for r in path.runs)
            for role in roles
        },
        "machine_busy_ms_per_mb": statistics.median(1000 * r.host_busy / (r.received_bytes / MB) for r in path.runs),
        "retransmits": statistics.median(r.retransmits for r in path.runs),
        "wireguard_go_peak_rss_mib": path.peak_rss,
        "rtt_ms_p50": percentile(path.rtts, 50),
        "rtt_ms_p99": percentile(path.rtts, 99),
        "pings_answered": len(path.rtts),
        "client": path.client.label,
        "server": path.server.label,
        "target": path.target,
    }


def report(settings: dict[str, Any], bare: Path_, fabric: Path_) -> dict[str, Any]:
    """The whole report: settings, both paths, the added latency and the ratios."""
    paths = {"bare": summary(bare), "fabric": summary(fabric)}
    pairwise = [f.mbps / b.mbps for b, f in zip(bare.runs, fabric.runs, strict=True)]
    return {
        "settings": settings,
        "paths": paths,
        "added_latency_ms": {q: paths["fabric"][f"rtt_ms_{q}"] - paths["bare"][f"rtt_ms_{q}"] for q in ("p50", "p99")},
        # What the throughput ratio tends to when both paths are CPU-bound; others' load moves it far less.
        "cpu_ratio": paths["bare"]["cpu_ms_per_mb"] / paths["fabric"]["cpu_ms_per_mb"],
        "pairwise_ratio_median": statistics.median(pairwise),
        "fabric_ratio": paths["fabric"]["mbps"] / paths["bare"]["mbps"],
    }


def print_report(result: dict[str, Any]) -> None:
    """The settings, the tables and, last, the ratio line."""
    out = Console()
    settings = result["settings"]
    shown = Table(title="settings", show_header=False)
    shown.add_column("setting")
    shown.add_column("value")
    for key, value in settings.items():
        shown.add_row(key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    out.print(shown)
    paths = result["paths"]
    table = Table(title="pod→pod through the fabric against bare wireguard-go (same nodes, same binary, same MTU)")
    for column in ("metric", "bare wireguard-go", "fabric", "fabric/bare"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    rows = [
        ("throughput, median (Mbit/s)", "mbps", "{:.0f}"),
        ("CPU per MB (ms)", "cpu_ms_per_mb", "{:.2f}"),
        ("machine busy per MB (ms, others' work included)", "machine_busy_ms_per_mb", "{:.2f}"),
        ("TCP retransmits per run, median", "retransmits", "{:.0f}"),
        ("RTT p50 (ms)", "rtt_ms_p50", "{:.3f}"),
        ("RTT p99 (ms)", "rtt_ms_p99", "{:.3f}"),
    ]
    for label, key, shape in rows:
        b, f = paths["bare"][key], paths["fabric"][key]
        table.add_row(label, shape.format(b), shape.format(f), f"{f / b:.2f}" if b else "-")
    out.print(table)
    roles = Table(title="CPU per MB by process (ms, median of the runs)")
    roles.add_column("process")
    for name in ("bare", "fabric"):
        roles.add_column(name, justify="right")
    for role in sorted(set(paths["bare"]["cpu_ms_per_mb_by_role"]) | set(paths["fabric"]["cpu_ms_per_mb_by_role"])):
        roles.add_row(role, *(f"{paths[name]['cpu_ms_per_mb_by_role'].get(role, 0.0):.2f}" for name in paths))
    out.print(roles)
    for name, path in paths.items():
        rss = ", ".join(f"{role} {mib:.0f}" for role, mib in path["wireguard_go_peak_rss_mib"].items())
        out.print(f"{name}: runs {path['mbps_runs']} Mbit/s; wireguard-go peak RSS (MiB): {rss}")
        out.print(f"  {path['client']} → {path['server']} at {path['target']}")
    added = result["added_latency_ms"]
    out.print(f"added latency: p50 {added['p50']:+.3f} ms, p99 {added['p99']:+.3f} ms")
    out.print(
        f"CPU ratio (bare CPU/MB over fabric CPU/MB) {result['cpu_ratio']:.2f}; "
        f"median of the per-repeat throughput ratios {result['pairwise_ratio_median']:.2f}"
    )
    print(f"fabric_ratio={result['fabric_ratio']:.2f}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Clusters (made, or given), the measurement; made clusters are deleted whatever happens."""
    suffix = os.urandom(2).hex()
    made: list[str] = []
    names = args.clusters or [f"{args.prefix}-{suffix}-a", f"{args.prefix}-{suffix}-b"]
    settings = Settings(repeat=args.repeat, seconds=args.seconds, pings=args.pings, bare_mtu=args.bare_mtu)
    try:
        if not args.clusters:
            for name in names:
                made.append(name)
                console.print(f"starting {name} (one real node, pod CIDR 10.244.0.0/16)")
                await asyncio.to_thread(clusters.up, ClusterSpec(name=name, nodes=0, real_nodes=1))
            for name in names:
                console.print(f"liqoctl install on {name}")
                await asyncio.to_thread(liqoctl_install, name)
        a_client = KubeClient.from_kubeconfig(ClusterDir.named(names[0]).kubeconfig)
        b_client = KubeClient.from_kubeconfig(ClusterDir.named(names[1]).kubeconfig)
        async with a_client as ka, b_client as kb:
            a = Side(names[0], ka, the_node(names[0]))
            b = Side(names[1], kb, the_node(names[1]))
            if not args.clusters:
                console.print(f"peering {a.name} with {b.name}")
                await peering.peer(ka, kb, timeout=120)
            try:
                return await measure(a, b, settings, suffix)
            finally:
                for side in (a, b):
                    with contextlib.suppress(NotFoundError):
                        await side.client.delete(PODS, POD, namespace=NAMESPACE)
    finally:
        if not args.keep:
            for name in made:
                if name in clusters.names():
                    await asyncio.to_thread(clusters.down, name, purge=True)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="iperf3 runs per path (the median is reported)")
    parser.add_argument("--seconds", type=int, default=8, help="length of each iperf3 run")
    parser.add_argument("--pings", type=int, default=200, help="pings per path and repeat, 10 ms apart")
    parser.add_argument("--bare-mtu", type=int, help="the bare tunnel's MTU (default: the gateway's)")
    parser.add_argument("--clusters", nargs=2, metavar=("A", "B"), help="two local clusters already peered")
    parser.add_argument("--prefix", default="bench-net", help="name prefix of the clusters made")
    parser.add_argument("--keep", action="store_true", help="leave the clusters made up")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("real nodes and network namespaces need root")
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=2, default=_plain))
    else:
        print_report(result)


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


if __name__ == "__main__":
    main()
