"""A gateway pod's loop: the tunnel, its addresses, routes and NAT, rebuilt from the two NetworkConfigs.

One gateway pod serves one peer. It reads our word and the peer's (both in the peer's tenant namespace),
and converges its own network namespace to what they describe: a WireGuard interface (the kernel's when it
has the module, else ``wireguard-go``, supervised here), the peer as its only WireGuard peer, the tunnel
addresses, the route to where we see the peer's pods, and the NAT table (:func:`liqo.network.rules.
gateway_ruleset`) as one atomic ``nft`` batch. Everything is level-triggered and idempotent: a restarted pod
starts from nothing and gets everything back from the CRs, a change of either word is applied in place,
and a full pass runs every :data:`RESYNC` seconds to restore what anything else removed. The pod's
namespace is its own, so nothing here can touch what it did not write. The route to the peer's pods is
made only into the peer pools (``--peer-pools``, as the manager's): a block elsewhere in our word, which
only a manager bug could write, leaves the tunnel as it was, and the log says why.

Beside it runs the connection check (:mod:`liqo.network.tunnelcheck`), whose verdict is written to the status
of our word, where the manager's ForeignCluster status reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from liqo.api import names
from liqo.api.networkconfigs import ConnectionReason, ConnectionState
from liqo.api.resources import NETWORK_CONFIGS
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import KubeError
from liqo.kube.informer import Informer
from liqo.kube.timefmt import format_time
from liqo.kube.waiting import poll_until
from liqo.network import ipam, rules, tunnelcheck, wireguard
from liqo.network.links import WIREGUARD_PORT, InvalidWord, Link, Role, check_peer_word, link, read_word
from liqo.network.runner import CommandError, Runner

log = logging.getLogger(__name__)

INTERFACE = "liqo-wg"
TABLE = "liqo-gateway"
MTU = 1340
"""Room for WireGuard's 60-byte overhead (IPv4; 80 over IPv6) inside an underlay MTU of 1400 or more."""
KEEPALIVE = 25
"""A client keeps NAT mappings on the way to the server open (WireGuard's usual value)."""
RESYNC = 30.0
TUNNEL_NETWORK = ipaddress.IPv4Network("169.254.18.0/30")
"""The tunnel's own two addresses (server ``.1``, client ``.2``): in each gateway's pod only, never routed."""
KEY = "tunnel"
FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")
USERSPACE_SOCKETS = "/var/run/wireguard"
"""Where wireguard-go puts its control sockets (an emptyDir in the pod: the root filesystem is read-only)."""
GO_MEMORY_SHARE = 0.5
"""wireguard-go's Go memory limit (``GOMEMLIMIT``) as a share of the container's memory limit; the rest is
this loop's (about 40 MiB) and headroom. Without one, wireguard-go's buffer pools ("allow for infinite
memory growth", its source says) reach 120-320 MiB under a single iperf3 stream, and at the default 256 MiB
limit the kernel kills it; at 100-128 MiB its throughput is unchanged, at 48 MiB its garbage collector
thrashes (half the throughput; ``make bench-network``, docs/operations.md)."""
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
"""The container's memory limit, as cgroup v2 and v1 show it inside the container."""
_UNLIMITED = 1 << 60
"""cgroup v1 spells "no limit" as a number near 2^63."""


def tunnel_addresses(role: Role) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """(ours, the peer's) tunnel address for a gateway of ``role``."""
    server, client = TUNNEL_NETWORK.network_address + 1, TUNNEL_NETWORK.network_address + 2
    return (server, client) if role is Role.SERVER else (client, server)


def wireguard_argv(tunnel: Link) -> list[str]:
    """The ``wg set`` command giving the interface its key (on standard input), port and only peer (pure)."""
    _, peer = tunnel_addresses(tunnel.role)
    return wireguard.set_peer_argv(
        interface=INTERFACE,
        peer_public_key=tunnel.peer_public_key,
        endpoint=None if tunnel.peer_endpoint is None else str(tunnel.peer_endpoint),
        allowed_ips=[ipaddress.ip_network(f"{peer}/32"), tunnel.peer_seen],
        keepalive=KEEPALIVE if tunnel.role is Role.CLIENT else None,
        # The server listens where its Service sends; a client's port is the kernel's pick.
        listen_port=WIREGUARD_PORT if tunnel.role is Role.SERVER else None,
    )


def ip_commands(tunnel: Link) -> list[list[str]]:
    """The ``ip`` commands giving the interface its address, MTU and route (each idempotent) (pure)."""
    local, _ = tunnel_addresses(tunnel.role)
    return [
        ["ip", "address", "replace", f"{local}/{TUNNEL_NETWORK.prefixlen}", "dev", INTERFACE],
        ["ip", "link", "set", INTERFACE, "mtu", str(MTU), "up"],
        ["ip", "route", "replace", str(tunnel.peer_seen), "dev", INTERFACE],
    ]


class Gateway:
    """The loop of one gateway pod."""

    def __init__(
        self,
        *,
        client: KubeClient,
        runner: Runner,
        local_id: str,
        peer_id: str,
        key_file: str,
        pools: Sequence[ipaddress.IPv4Network] = ipam.DEFAULT_POOLS,
    ) -> None:
        self._client = client
        self._runner = runner
        self._local_id = local_id
        self._peer_id = peer_id
        self._key_file = key_file
        self._pools = tuple(pools)
        self._namespace = names.tenant_namespace(peer_id)
        self._userspace: asyncio.subprocess.Process | None = None
        self._link: Link | None = None
        self._waiting: str | None = "the network configs are not read yet"
        self.configs = Informer(client=client, resource=NETWORK_CONFIGS, namespace=self._namespace)
        self.controller: Controller[str] = Controller(name="gateway", reconcile=self.reconcile)
        self.controller.watch(self.configs, lambda _obj: [KEY])
        self.prober = tunnelcheck.Prober()

    async def run(self) -> None:
        """Converge and probe until cancelled."""
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self.prober, local_addr=("0.0.0.0", tunnelcheck.PORT))
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.configs.run())
                group.create_task(self.controller.run())
                group.create_task(self._probe())
        finally:
            if self.prober.transport is not None:
                self.prober.transport.close()
            if self._userspace is not None and self._userspace.returncode is None:
                self._userspace.terminate()

    async def reconcile(self, _key: str) -> Result:
        """Make the tunnel, routes and rules what the two words say."""
        ours_obj = self.configs.store.get(f"{self._namespace}/{self._local_id}")
        theirs_obj = self.configs.store.get(f"{self._namespace}/{self._peer_id}")
        if ours_obj is None or theirs_obj is None:
            self._waiting = f"waiting for {'our' if ours_obj is None else 'the peer'}'s network config"
            return Result(requeue_after=RESYNC)
        try:
            ours = read_word(ours_obj)
            theirs = read_word(theirs_obj)
            check_peer_word(theirs, peer_id=self._peer_id, our_pod_cidr=ours.pod_cidr)
        except InvalidWord as exc:
            self._waiting = f"the peer's network config is refused: {exc}"
            log.warning("%s", self._waiting)
            return Result(requeue_after=RESYNC)
        tunnel = link(ours=ours, theirs=theirs)
        if tunnel is None:
            self._waiting = "waiting for the peer's gateway (its key, or its endpoint)"
            return Result(requeue_after=RESYNC)
        refusal = rules.route_refusal(tunnel.peer_seen, pools=self._pools)
        if refusal is not None:
            self._waiting = f"our network config is refused: {refusal}"
            log.warning("%s", self._waiting)
            return Result(requeue_after=RESYNC)
        await self._ensure_interface()
        # Read at every pass: a key rotated in its Secret reaches the mounted file, then the interface.
        key = _read_key(self._key_file)
        await self._runner.run(*wireguard_argv(tunnel), input=key + "\n")
        for argv in ip_commands(tunnel):
            await self._runner.run(*argv)
        state = wireguard.parse_dump(await self._runner.run(*wireguard.show_dump_argv(interface=INTERFACE)))
        for argv in wireguard.remove_stale_peers(interface=INTERFACE, state=state, wanted=tunnel.peer_public_key):
            await self._runner.run(*argv)
        await self._runner.run(
            "nft",
            "-f",
            "-",
            input=rules.gateway_ruleset(
                table=TABLE,
                tunnel=INTERFACE,
                pod_cidr=tunnel.pod_cidr,
                seen_as=tunnel.seen_as,
                peer_seen=tunnel.peer_seen,
            ),
        )
        if self._link != tunnel:
            log.info("tunnel to %s configured: %s", self._peer_id, tunnel)
        self._link, self._waiting = tunnel, None
        return Result(requeue_after=RESYNC)

    async def _ensure_interface(self) -> None:
        """The WireGuard interface: the kernel's if it can, else a ``wireguard-go`` child (restarted if it died)."""
        if _interface_exists():
            return
        try:
            await self._runner.run("ip", "link", "add", INTERFACE, "type", "wireguard")
            return
        except CommandError:
            pass  # no kernel module: userspace
        if self._userspace is not None and self._userspace.returncode is None:
            self._userspace.kill()
            await self._userspace.wait()
        log.info("no WireGuard in the kernel: starting wireguard-go")
        # In the foreground, as our child (a daemonised one would be a zombie nobody reaps, pid 1 being us);
        # the variable also silences its banner urging the kernel module, which was tried first.
        self._userspace = await asyncio.create_subprocess_exec(
            "wireguard-go", "-f", INTERFACE, env=wireguard_go_env(os.environ, memory_limit=container_memory_limit())
        )
        asyncio.get_running_loop().create_task(self._watch_userspace(self._userspace))

        async def created() -> bool:  # `wg` fails until the control socket exists, a moment after the link
            return _interface_exists() and _socket_exists()

        await poll_until(
            created,
            timeout=10,
            interval=0.05,
            message=f"wireguard-go did not create {INTERFACE} and its control socket within 10 s",
        )

    async def _watch_userspace(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if process is self._userspace:
            log.warning("wireguard-go exited (%s): rebuilding the tunnel", code)
            self.controller.queue.add(KEY)

    async def _probe(self) -> None:
        """Probe the peer's gateway every second; write the verdict to our word's status when it is worth it."""
        started = time.monotonic()
        written: dict[str, Any] | None = None
        written_at = 0.0
        seq = 0
        while True:
            await asyncio.sleep(tunnelcheck.INTERVAL)  # the probing period, not a synchronisation
            now = time.monotonic()
            if self._link is None:
                started = now  # the clock to the first answer starts with a tunnel to answer through
                verdict = tunnelcheck.Verdict(
                    ConnectionState.CONNECTING, ConnectionReason.NOT_CONFIGURED, self._waiting or ""
                )
            else:
                seq += 1
                self.prober.send(seq, str(tunnel_addresses(self._link.role)[1]))
                verdict = tunnelcheck.judge(
                    now=now, started=started, last_answer=self.prober.last_answer, peer=self._peer_id
                )
            if not tunnelcheck.worth_writing(written=written, verdict=verdict, now=now, written_at=written_at):
                continue
            connection = await self._connection(verdict, written)
            try:
                await self._client.apply_status(
                    NETWORK_CONFIGS, name=self._local_id, namespace=self._namespace, status={"connection": connection}
                )
            except KubeError as exc:
                log.warning("cannot write the connection status: %s", exc)
                continue
            if written is None or written.get("state") != verdict.state:
                log.info("connection to %s: %s (%s)", self._peer_id, verdict.state, verdict.message)
            written, written_at = connection, now

    async def _connection(self, verdict: tunnelcheck.Verdict, written: dict[str, Any] | None) -> dict[str, Any]:
        now = datetime.datetime.now(datetime.UTC)
        changed = written is None or written.get("state") != verdict.state
        connection: dict[str, Any] = {
            "state": verdict.state,
            "reason": verdict.reason,
            "message": verdict.message,
            "lastTransitionTime": format_time(now) if changed else (written or {}).get("lastTransitionTime"),
        }
        if verdict.state == ConnectionState.CONNECTED and self.prober.latency is not None:
            connection["latency"] = tunnelcheck.format_latency(self.prober.latency)
        with contextlib.suppress(CommandError):
            dump = wireguard.parse_dump(await self._runner.run(*wireguard.show_dump_argv(interface=INTERFACE)))
            handshakes = [p.latest_handshake for p in dump.peers if p.latest_handshake]
            if handshakes:
                connection["lastHandshakeTime"] = format_time(
                    datetime.datetime.fromtimestamp(max(handshakes), datetime.UTC)
                )
        return connection


def wireguard_go_env(environ: Mapping[str, str], *, memory_limit: int | None) -> dict[str, str]:
    """wireguard-go's environment (pure): ours, in the foreground, and a Go memory limit within the container's.

    A ``GOMEMLIMIT`` already in ``environ`` (an operator's, in the pod template) is kept as it is.
    """
    env = {**environ, "WG_PROCESS_FOREGROUND": "1"}
    if memory_limit is not None and "GOMEMLIMIT" not in environ:
        env["GOMEMLIMIT"] = str(int(memory_limit * GO_MEMORY_SHARE))
    return env


def container_memory_limit(paths: tuple[Path, ...] = CGROUP_MEMORY_LIMITS) -> int | None:
    """This container's memory limit in bytes, from its cgroup; None when it has none or none is readable."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if not text.isdigit():  # "max": no limit
            return None
        limit = int(text)
        return limit if limit < _UNLIMITED else None
    return None


def forwarding_enabled() -> bool:
    """Whether the pod's namespace forwards IPv4 (its ``net.ipv4.ip_forward`` sysctl, set by the kubelet)."""
    try:
        return FORWARDING.read_text().strip() == "1"
    except OSError:
        return False


def _interface_exists() -> bool:
    return Path("/sys/class/net", INTERFACE).exists()


def _socket_exists() -> bool:
    return Path(USERSPACE_SOCKETS, f"{INTERFACE}.sock").exists()


def _read_key(path: str) -> str:
    return Path(path).read_text().strip()
