"""The network fabric's pods on a real node, before any fabric code: what liqo's image and the node allow.

- A gateway pod of liqo's image — uid 0, every capability dropped but NET_ADMIN, a read-only root, an
  emptyDir for wireguard-go's socket, ``/dev/net/tun`` from the host, ``net.ipv4.ip_forward=1`` as a pod
  sysctl (which the real node's kubelet allows) — runs ``wireguard-go`` under a Python supervisor and
  configures its own namespace with ``wg``, ``ip`` and ``nft``; no privileged container, no hostNetwork.
- A node agent pod (hostNetwork, NET_ADMIN, uid 0) writes a route and an nftables table into the node's
  namespace, and removes them.
- The CNI bridge plugin masquerades whatever a pod sends beyond the node's pod subnet, traffic to the
  gateway included; an nftables ``notrack`` rule in a table of our own (raw priority) keeps pod traffic to a
  remapped CIDR out of conntrack, hence out of that masquerade.

Node state is read from the host, in the node's namespaces, and must be as it was when a test ends.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest

from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, NODES, PODS
from liqo.localclusters.layout import read_json
from liqo.localclusters.realnodes import host, images
from liqo.localclusters.realnodes.enter import held_images
from liqo.localclusters.realnodes.nodes import RealNode
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    LocalCluster,
    eventually_sync,
    kubectl,
    only_real_node,
    purge,
    running_pods,
    start,
    unique,
)
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
    pytest.mark.skipif(images.project_source() is None, reason="liqo's image is built from the source tree"),
]

LIQO_IMAGE = images.liqo_image_ref()
REMAPPED = "10.71.0.0/16"
"""The name this cluster would give a peer's pods: routed to the gateway, never masqueraded."""
REMOTE_POD = "10.71.0.9"
TEST_ROUTE = "198.51.100.0/24"
"""TEST-NET-2 (RFC 5737): routed nowhere on any real network."""
NET_ADMIN_ONLY = 1 << 12
"""``CapEff`` with CAP_NET_ADMIN (bit 12) alone."""

RULESET = """\
table ip liqo-gateway {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "wg0" ip daddr 10.72.0.0/16 dnat ip prefix to 10.244.0.0/16
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "wg0" ip saddr 10.244.0.0/16 snat ip prefix to 10.72.0.0/16
  }
  chain forward {
    type filter hook forward priority mangle; policy accept;
    oifname "wg0" tcp flags syn tcp option maxseg size set rt mtu
  }
}
"""
"""The double NAT of ``gateway-in-pod.md``, one atomic batch (nft 1.0.6 wants each rule on a line of its own)."""

SUPERVISOR = textwrap.dedent(
    """\
    import os, signal, subprocess, sys, time

    RUN = "/var/run/wireguard"

    def run(*argv, input=None):
        done = subprocess.run(argv, input=input, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    # In the foreground, a child of this process: a daemonised wireguard-go would be reparented to PID 1
    # (this process, which does not reap it). WG_PROCESS_FOREGROUND=1 also drops its start-up banner.
    tunnel = subprocess.Popen(
        ["wireguard-go", "-f", "wg0"], env=dict(os.environ, WG_PROCESS_FOREGROUND="1", LOG_LEVEL="error")
    )
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    deadline = time.monotonic() + 30
    while not os.path.exists(f"{RUN}/wg0.sock"):  # its UAPI socket: from then on `wg` can configure it
        if tunnel.poll() is not None:
            sys.exit(f"wireguard-go exited with {tunnel.returncode}")
        if time.monotonic() > deadline:
            sys.exit("wireguard-go made no UAPI socket in 30 s")
        time.sleep(0.05)
    key = f"{RUN}/wg0.key"
    handle = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(handle, run("wg", "genkey").encode())
    os.close(handle)
    run("wg", "set", "wg0", "private-key", key, "listen-port", "51820")
    run("ip", "addr", "add", "10.99.0.1/30", "dev", "wg0")
    run("ip", "link", "set", "wg0", "mtu", "1340", "up")
    run("ip", "route", "add", "10.71.0.0/16", "dev", "wg0")
    run("nft", "-f", "-", input=sys.argv[1])
    print("ready", run("wg", "show", "wg0", "public-key").strip(), flush=True)
    signal.sigwait({signal.SIGTERM})
    tunnel.terminate()
    sys.exit(tunnel.wait(timeout=10))
    """
)
"""What the gateway's supervisor will do: start, configure, and on SIGTERM stop wireguard-go."""

WHOAMI = textwrap.dedent(
    """\
    import socket, subprocess, sys

    # Stands in for a remote pod behind the tunnel: answers each connection with the address it came from.
    subprocess.run(["ip", "addr", "add", f"{sys.argv[1]}/32", "dev", "lo"], check=True)
    server = socket.create_server((sys.argv[1], 8080))
    print("listening", flush=True)
    while True:
        connection, (peer, _) = server.accept()
        connection.sendall(f"{peer}\\n".encode())
        connection.close()
    """
)
PAUSE = ["python3", "-c", "import signal; signal.pause()"]
"""liqo's image has no shell, no coreutils: Python waits."""


def network_pod(name: str, namespace: str, *, command: list[str], gateway: bool) -> Obj:
    """A pod of liqo's image as the fabric runs it: a gateway (own netns) or a node agent (hostNetwork).

    Both: uid 0 (the image's uid 65532 gets no effective capability from ``capabilities.add``), every
    capability dropped but NET_ADMIN, a read-only root. The gateway adds ``/dev/net/tun``, an emptyDir for
    wireguard-go's UAPI socket and ``net.ipv4.ip_forward=1``.
    """
    container: Obj = {
        "name": "main",
        "image": LIQO_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": {
            "runAsUser": 0,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
    }
    spec: Obj = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]}
    if gateway:
        container["volumeMounts"] = [
            {"name": "tun", "mountPath": "/dev/net/tun"},
            {"name": "wireguard", "mountPath": "/var/run/wireguard"},
        ]
        spec["volumes"] = [
            {"name": "tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
            {"name": "wireguard", "emptyDir": {}},
        ]
        spec["securityContext"] = {"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}
    else:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> Iterator[LocalCluster]:
    """A cluster of one real node holding liqo's image (``nimg``: the network image's clusters)."""
    local = start(ClusterSpec(name=unique("netpod"), nodes=0, real_nodes=1))
    try:
        node = only_real_node(local)
        ctr = os.path.join(read_json(local.dir.cluster_file)["nodeBinDir"], "ctr")

        def held() -> bool:  # imported while the kubelet runs
            listing = host.run_in_node(node, ctr, "--namespace", "k8s.io", "images", "list").stdout
            return LIQO_IMAGE in held_images(listing)

        eventually_sync(held, timeout=120, message=f"{LIQO_IMAGE} on the node")
        yield local
    finally:
        purge(local)


@pytest.fixture
async def real_kube(real: LocalCluster) -> AsyncIterator[KubeClient]:
    async with real.client() as client:
        yield client


@pytest.fixture
async def ns(real_kube: KubeClient) -> AsyncIterator[str]:
    name = unique("net")
    await real_kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await real_kube.delete(NAMESPACES, name)


# -- helpers ----------------------------------------------------------------------------------------------


def in_node(node: RealNode, *argv: str) -> str:
    return host.run_in_node(node, *argv).stdout


def node_state(node: RealNode) -> tuple[set[tuple[str, ...]], list[str]]:
    """The node's IPv4 routes (main table; link flags left out, they follow pods coming and going) and nft tables."""
    keys = ("dst", "gateway", "dev", "protocol", "scope")
    routes = {
        tuple(str(r.get(key, "")) for key in keys)
        for r in orjson.loads(in_node(node, "ip", "-4", "-j", "route", "show", "table", "main"))
    }
    return routes, sorted(in_node(node, "nft", "list", "tables").splitlines())


def exec_in(cluster: LocalCluster, ns: str, pod: str, *argv: str, stdin: str | None = None) -> str:
    flags = ["-i"] if stdin is not None else []
    return kubectl(cluster, "exec", *flags, "-n", ns, pod, "--", *argv, stdin=stdin)


def python_in(cluster: LocalCluster, ns: str, pod: str, code: str) -> str:
    return exec_in(cluster, ns, pod, "python3", "-c", code).strip()


def wait_for_line(cluster: LocalCluster, ns: str, pod: str, prefix: str) -> str:
    """The first line of ``pod``'s log that starts with ``prefix``, once there; fails if the pod ends first."""
    found: list[str] = []

    def logged() -> bool:
        phase = kubectl(cluster, "get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.phase}")
        logs = kubectl(cluster, "logs", "-n", ns, pod) if phase not in ("", "Pending") else ""
        assert phase not in ("Failed", "Succeeded"), f"{pod} ended ({phase}): {logs}"
        found[:] = [line for line in logs.splitlines() if line.startswith(prefix)]
        return bool(found)

    eventually_sync(logged, timeout=60, message=f"{pod} logs {prefix!r}", every=0.25)
    return found[0]


async def pod_phase(kube: KubeClient, ns: str, name: str) -> str:
    return str((await kube.get(PODS, name, namespace=ns)).get("status", {}).get("phase", ""))


def nft_counters(node: RealNode, family: str, table: str, *, chain: str | None = None) -> dict[str, int]:
    """The packets each counting rule of an nft table (or one of its chains) in the node's netns has seen.

    Keyed by the rule's last statement (``notrack``, ``accept``...), an iptables-nft target by its name in
    lower case (``masquerade``: iptables-nft writes MASQUERADE as an xtables target, not nft's own).
    """
    argv = ["nft", "-j", "list", *(("chain", family, table, chain) if chain else ("table", family, table))]
    counted: dict[str, int] = {}
    for item in orjson.loads(in_node(node, *argv))["nftables"]:
        expressions = item.get("rule", {}).get("expr", [])
        packets = [e["counter"]["packets"] for e in expressions if "counter" in e]
        if packets:
            [(statement, value)] = expressions[-1].items()
            counted[value["name"].lower() if statement == "xt" else statement] = int(packets[0])
    return counted


# -- (a) the gateway pod ----------------------------------------------------------------------------------


async def test_a_gateway_pod_runs_wireguard_go_and_programs_its_own_namespace(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    await real_kube.create(
        PODS, network_pod("gateway", ns, command=["python3", "-c", SUPERVISOR, RULESET], gateway=True)
    )
    public_key = wait_for_line(real, ns, "gateway", "ready").split()[1]

    def run(*argv: str) -> str:
        return exec_in(real, ns, "gateway", *argv).strip()

    # Who it runs as: uid 0 with NET_ADMIN alone, on a read-only root.
    status = python_in(real, ns, "gateway", "print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split()[0] == "0"
    assert int(fields["CapEff"], 16) == NET_ADMIN_ONLY
    read_only = python_in(real, ns, "gateway", "import os\ntry: os.mkdir('/x')\nexcept OSError as e: print(e.errno)")
    assert read_only == "30"  # EROFS
    # wireguard-go runs in the foreground, a child of the supervisor (PID 1).
    parents = python_in(
        real, ns, "gateway",
        "import os\nfor p in filter(str.isdigit, os.listdir('/proc')):\n"
        "    s = open(f'/proc/{p}/status').read()\n"
        "    if 'Name:\\twireguard-go' in s: print(s.split('PPid:\\t')[1].split()[0])",
    )  # fmt: skip
    assert parents.split() == ["1"]
    # The tunnel as `wg` and `ip` see it.
    assert run("wg", "show", "wg0", "public-key") == public_key
    assert run("wg", "show", "wg0", "listen-port") == "51820"
    [link] = orjson.loads(run("ip", "-j", "addr", "show", "wg0"))
    assert link["mtu"] == 1340
    assert "UP" in link["flags"]
    assert [(a["local"], a["prefixlen"]) for a in link["addr_info"] if a["family"] == "inet"] == [("10.99.0.1", 30)]
    assert orjson.loads(run("ip", "-j", "route", "show", "10.71.0.0/16"))[0]["dev"] == "wg0"
    # The NAT, applied in one batch and read back.
    table = run("nft", "list", "table", "ip", "liqo-gateway")
    assert re.search(r'iifname "wg0" ip daddr 10\.72\.0\.0/16 dnat (ip )?prefix to 10\.244\.0\.0/16', table), table
    assert re.search(r'oifname "wg0" ip saddr 10\.244\.0\.0/16 snat (ip )?prefix to 10\.72\.0\.0/16', table), table
    assert "tcp option maxseg size set rt mtu" in table
    # Forwarding, from the pod's sysctl.
    assert python_in(real, ns, "gateway", "print(open('/proc/sys/net/ipv4/ip_forward').read())") == "1"

    # SIGTERM (what deleting the pod sends): the supervisor stops wireguard-go, which exits cleanly.
    python_in(real, ns, "gateway", "import os, signal; os.kill(1, signal.SIGTERM)")

    async def ended() -> bool:
        return await pod_phase(real_kube, ns, "gateway") in ("Succeeded", "Failed")

    await eventually(ended, timeout=60, message="the gateway pod ended after SIGTERM")
    assert await pod_phase(real_kube, ns, "gateway") == "Succeeded", kubectl(real, "logs", "-n", ns, "gateway")


# -- (b) the node agent pod -------------------------------------------------------------------------------


async def test_a_host_network_agent_pod_writes_routes_and_nftables_in_the_nodes_namespace_and_removes_them(
    real: LocalCluster, real_kube: KubeClient, ns: str
) -> None:
    node = only_real_node(real)
    await real_kube.create(PODS, network_pod("agent", ns, command=PAUSE, gateway=False))
    await running_pods(real_kube, ns, 1)
    before = node_state(node)
    [default] = orjson.loads(in_node(node, "ip", "-j", "route", "show", "default"))
    table = unique("liqo-test")
    ruleset = (
        f"table ip {table} {{\n  chain postrouting {{\n"
        "    type nat hook postrouting priority srcnat - 1; policy accept;\n"
        f"    ip daddr {TEST_ROUTE} counter return\n  }}\n}}\n"
    )
    route = ["ip", "route", "replace", TEST_ROUTE, "via", default["gateway"], "dev", default["dev"]]
    try:
        exec_in(real, ns, "agent", *route)
        exec_in(real, ns, "agent", *route)  # idempotent: a restarted agent writes the same again
        exec_in(real, ns, "agent", "nft", "-f", "-", stdin=ruleset)
        # Seen from the host, in the node's network namespace:
        [written] = orjson.loads(in_node(node, "ip", "-j", "route", "show", TEST_ROUTE))
        assert (written["gateway"], written["dev"]) == (default["gateway"], default["dev"])
        listed = in_node(node, "nft", "list", "table", "ip", table)
        assert f"ip daddr {TEST_ROUTE} counter packets 0 bytes 0 return" in listed
        exec_in(real, ns, "agent", "ip", "route", "del", TEST_ROUTE)
        exec_in(real, ns, "agent", "nft", "delete", "table", "ip", table)
        assert node_state(node) == before
    finally:  # whatever failed above, the node is left as it was found
        with contextlib.suppress(host.HostError):
            host.run_in_node(node, "ip", "route", "del", TEST_ROUTE)
        with contextlib.suppress(host.HostError):
            host.run_in_node(node, "nft", "delete", "table", "ip", table)


# -- (c) the bridge plugin's masquerade and a notrack exemption ------------------------------------------


async def test_a_notrack_rule_keeps_pod_traffic_to_the_gateway_out_of_the_bridge_plugins_masquerade(
    real: LocalCluster, real_kube: KubeClient, ns: str, tmp_path: Path
) -> None:
    node = only_real_node(real)
    await real_kube.create(
        PODS, network_pod("gateway", ns, command=["python3", "-c", WHOAMI, REMOTE_POD], gateway=True)
    )
    client = {"name": "main", "image": images.TOOLBOX_PINNED, "command": ["sleep", "3600"]}
    await real_kube.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": ns},
                             "spec": {"terminationGracePeriodSeconds": 1, "containers": [client]}})  # fmt: skip
    pods = {p["metadata"]["name"]: p for p in await running_pods(real_kube, ns, 2)}
    wait_for_line(real, ns, "gateway", "listening")
    gateway_ip, client_ip = pods["gateway"]["status"]["podIP"], pods["client"]["status"]["podIP"]
    node_subnet = ipaddress.ip_network((await real_kube.get(NODES, node.name))["spec"]["podCIDR"])
    bridge_ip = str(next(node_subnet.hosts()))  # the bridge plugin's gateway address on cni0

    # The bridge plugin's rules for the client (iptables-nft, table ip nat): to the node's own pod subnet
    # untouched, anything else but multicast masqueraded — traffic to a remapped CIDR via the gateway too.
    nat = in_node(node, "iptables-save", "-t", "nat")
    [jump] = [line for line in nat.splitlines() if line.startswith(f"-A POSTROUTING -s {client_ip}/32 ")]
    chain = jump.split(" -j ")[-1]
    rules = [re.sub(r' -m comment --comment "(?:[^"\\]|\\.)*"', "", line) for line in nat.splitlines()
             if line.startswith(f"-A {chain} ")]  # fmt: skip
    assert rules == [f"-A {chain} -d {node_subnet} -j ACCEPT", f"-A {chain} ! -d 224.0.0.0/4 -j MASQUERADE"], nat

    def whoami() -> str:
        """The source address the 'remote pod' sees for a TCP connection from the client."""
        answer = exec_in(real, ns, "client", "sh", "-c", f"nc -w 5 {REMOTE_POD} 8080 </dev/null")
        return answer.strip()

    def masqueraded() -> int:  # NAT rules see a connection's first packet only: one per connection
        return nft_counters(node, "ip", "nat", chain=chain)["masquerade"]

    before = node_state(node)
    notrack = unique("liqo-notrack")
    ruleset = tmp_path / "notrack.nft"  # the node's mount namespace sees the host's /tmp
    ruleset.write_text(
        f"table ip {notrack} {{\n  chain prerouting {{\n"
        "    type filter hook prerouting priority raw; policy accept;\n"
        f"    ip daddr {REMAPPED} counter notrack\n  }}\n}}\n"
    )
    try:
        # What the agent will do: the remapped CIDR goes to the gateway pod.
        in_node(node, "ip", "route", "replace", REMAPPED, "via", gateway_ip, "dev", "cni0")
        count = masqueraded()
        assert whoami() == bridge_ip  # the remote side sees the node's bridge address
        assert masqueraded() == count + 1

        # A table of our own, before conntrack (raw priority): untracked packets skip every NAT chain.
        in_node(node, "nft", "-f", str(ruleset))
        assert whoami() == client_ip  # the remote side sees the pod itself
        assert masqueraded() == count + 1
        assert nft_counters(node, "ip", notrack)["notrack"] > 0, "the notrack rule saw none of the client's packets"

        in_node(node, "nft", "delete", "table", "ip", notrack)
        in_node(node, "ip", "route", "del", REMAPPED)
        assert node_state(node) == before
    finally:  # whatever failed above, the node is left as it was found
        with contextlib.suppress(host.HostError):
            host.run_in_node(node, "nft", "delete", "table", "ip", notrack)
        with contextlib.suppress(host.HostError):
            host.run_in_node(node, "ip", "route", "del", REMAPPED)
