"""The probes of ``liqoctl test network``: what to send where, what must come back, which hop failed (pure).

Every local probe pod probes every remote one and back, over ICMP, TCP and UDP, at the addresses each side
dials for the other (:func:`liqo.api.networks.translate` with both NetworkConfigs' remapping): what home
shows as an offloaded pod's IP, and where the provider sees home's pods (:func:`plan`). The pods serve the
address they see their caller at (:data:`SERVER`), so an answer is judged by what it says (:func:`judge`):
the caller's address as the server's cluster names it, or the packet left the tunnel's NAT somewhere (a node
masqueraded it). Last, every local pod reaches the remote ones through a Service here whose endpoints are
the remote pods (:func:`service_probes`): the path most applications take, where only an answer is
required (the node's proxy rewrites the caller). A failure names the hop to look at (:func:`diagnose`): the
gateway pod when it does not run, the tunnel when the connection check says it is down, the Service, the
NAT when the answer names the wrong address, else the routes of the caller's node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.networkconfigs import ConnectionState
from liqo.api.networks import ClusterNetwork, IPNetwork, Remapped, Unchanged, translate
from liqo.kube import podstate

TCP_PORT = 7001
UDP_PORT = 7002
PROTOCOLS = ("icmp", "tcp", "udp")
SERVICE = "remote-pods"
"""A Service here whose endpoints are the remote probe pods (at the addresses the virtual kubelet shows)."""
SERVICE_PREFIX = "service/"
ROLE_LABEL = "liqo.io/netcheck"
PROBE_TIMEOUT = 3
SERVER = (
    f'socat -t{PROBE_TIMEOUT} TCP-LISTEN:{TCP_PORT},fork,reuseaddr SYSTEM:"echo \\$SOCAT_PEERADDR" & '
    f'socat -t{PROBE_TIMEOUT} UDP-RECVFROM:{UDP_PORT},fork SYSTEM:"echo \\$SOCAT_PEERADDR" & '
    "exec sleep 86400"
)
"""Every probe pod serves the address it sees its caller at, over TCP and UDP, and waits.

``-t``, here and in :func:`probe_command`: once one side of an exchange ends (the caller's input, the one
datagram UDP-RECVFROM reads) socat gives the other side 0.5 s by default. A loaded node's fork and exec of
the reply can take longer, and the exchange then failed although the path worked (measured on loopback: a
reply 1 s late reaches the caller only when both ends wait longer)."""


@dataclass(frozen=True)
class Endpoint:
    """A probe pod and the address the other side of a probe dials for it."""

    cluster: str
    pod: str
    node: str
    address: str


@dataclass(frozen=True)
class Probe:
    """One packet exchange to try: from a pod to another's address, and what the server must see."""

    source: Endpoint
    target: Endpoint
    protocol: str
    port: int | None
    expected_source: str | None
    """The caller's address as the server's cluster names it: what comes back if nothing left the NAT. None
    through a Service: its node's proxy rewrites the caller on the way (docs/network.md, "Not done yet")."""
    provider: str
    """The peer this probe crosses to (its tunnel, its gateways)."""
    outbound: bool
    """From this cluster to the provider (the caller's node routes into our gateway)."""


@dataclass(frozen=True)
class Result:
    """A probe's outcome: ``hop`` names what to look at when it failed."""

    source: str
    target: str
    protocol: str
    address: str
    ok: bool
    detail: str
    hop: str = ""


def probe_command(probe: Probe) -> list[str]:
    """The command the source pod runs for ``probe`` (the toolbox image's busybox and socat)."""
    address = probe.target.address
    if probe.protocol == "icmp":
        return ["ping", "-c", "3", "-i", "0.2", "-W", str(PROBE_TIMEOUT), address]
    waits = [f"-T{PROBE_TIMEOUT}", f"-t{PROBE_TIMEOUT}"]
    if probe.protocol == "tcp":
        return ["socat", *waits, "-", f"TCP:{address}:{probe.port},connect-timeout={PROBE_TIMEOUT}"]
    return ["sh", "-c", f"echo probe | socat {' '.join(waits)} - UDP:{address}:{probe.port}"]


def judge(probe: Probe, *, exit_code: int | None, stdout: str, stderr: str) -> tuple[bool, str]:
    """Whether ``probe`` passed, from what its command printed, and a one-line detail (pure)."""
    if probe.protocol == "icmp":
        if exit_code == 0:
            return True, _ping_summary(stdout)
        return False, "no reply to ping" + (f": {_last_line(stderr)}" if stderr.strip() else "")
    seen = stdout.strip()
    if exit_code != 0 or not seen:
        return False, f"no answer on {probe.protocol.upper()} port {probe.port}" + (
            f": {_last_line(stderr)}" if stderr.strip() else ""
        )
    if probe.expected_source is None:
        return True, f"a remote pod answered (it saw the caller at {seen[:64]})"
    if seen != probe.expected_source:
        return False, f"answered, but the server saw the caller at {seen[:64]}, not {probe.expected_source}"
    return True, f"the server saw the caller at {seen}"


def diagnose(probe: Probe, detail: str, *, tunnel: Mapping[str, Any] | None, gateway_running: bool) -> str:
    """The hop to look at when ``probe`` failed with ``detail`` (pure).

    ``tunnel`` is our NetworkConfig's ``status.connection`` for the provider (empty: none reported; None:
    no provider in particular, through the Service with every tunnel up).
    """
    if not gateway_running:
        return (
            f"gateway: no gateway pod runs for {probe.provider} here"
            " (kubectl -n liqo get pods -l liqo.io/component=gateway)"
        )
    state = (tunnel or {}).get("state")
    if tunnel is not None and state != ConnectionState.CONNECTED:
        why = (tunnel or {}).get("message") or "no connection check reported"
        return f"tunnel to {probe.provider}: {state or 'unknown'} ({why})"
    if probe.target.pod.startswith(SERVICE_PREFIX):
        return (
            f"service: the pods answer directly but not through {probe.target.pod}: check its EndpointSlices here"
            f" (kubectl -n <namespace> get endpointslices) and kube-proxy on node {probe.source.node}"
        )
    if detail.startswith("answered, but"):
        return (
            "nat: the packet was rewritten outside the gateways (a node masqueraded it): check the node agent's"
            " nftables table liqo-node on the nodes of both pods"
        )
    node = probe.source.node
    if probe.outbound:
        return (
            f"route: the tunnel is up, but nothing came back: check `ip route show proto 76` on node {node} (the"
            " node agent's route to our gateway) and the gateway's table liqo-gateway"
        )
    return (
        f"route: the tunnel is up, but nothing came back from {probe.provider}'s side: check the routes of its node"
        f" {node} to its gateway (`ip route show proto 76`)"
    )


@dataclass(frozen=True)
class Remote:
    """A probe pod on a provider, and how that provider dials each local probe pod."""

    endpoint: Endpoint
    """As home dials it (its IP as home shows it: the virtual kubelet translated it)."""
    provider: str
    locals_seen: Mapping[str, str]
    """Local probe pod name → the address the provider dials for it."""


def plan(*, local: Iterable[Endpoint], remote: Iterable[Remote]) -> list[Probe]:
    """Every probe: each local pod to each remote one and back, over every protocol (pure)."""
    probes = []
    for target in remote:
        for source in local:
            seen_there = target.locals_seen[source.pod]
            back = Endpoint(cluster=source.cluster, pod=source.pod, node=source.node, address=seen_there)
            for protocol in PROTOCOLS:
                port = {"tcp": TCP_PORT, "udp": UDP_PORT}.get(protocol)
                probes.append(
                    Probe(
                        source=source,
                        target=target.endpoint,
                        protocol=protocol,
                        port=port,
                        expected_source=seen_there,
                        provider=target.provider,
                        outbound=True,
                    )
                )
                probes.append(
                    Probe(
                        source=target.endpoint,
                        target=back,
                        protocol=protocol,
                        port=port,
                        expected_source=target.endpoint.address,
                        provider=target.provider,
                        outbound=False,
                    )
                )
    return probes


def service_probes(*, local: Iterable[Endpoint], cluster_ip: str) -> list[Probe]:
    """Each local pod to the remote pods through the Service :data:`SERVICE`, TCP and UDP (pure)."""
    service = Endpoint(cluster="here", pod=SERVICE_PREFIX + SERVICE, node="", address=cluster_ip)
    return [
        Probe(
            source=source,
            target=service,
            protocol=protocol,
            port={"tcp": TCP_PORT, "udp": UDP_PORT}[protocol],
            expected_source=None,
            provider="",
            outbound=True,
        )
        for source in local
        for protocol in ("tcp", "udp")
    ]


def probe_service(namespace: str) -> dict[str, Any]:
    """The Service whose endpoints are the remote probe pods (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": namespace},
        "spec": {
            "selector": {ROLE_LABEL: "remote"},
            "ports": [
                {"name": "tcp", "protocol": "TCP", "port": TCP_PORT},
                {"name": "udp", "protocol": "UDP", "port": UDP_PORT},
            ],
        },
    }


def seen_by_provider(
    address: str,
    *,
    home: ClusterNetwork,
    provider: ClusterNetwork | None,
    provider_name: str,
    provider_sees_home: IPNetwork | None,
) -> str | None:
    """The address the provider dials for home's pod ``address`` (None: it cannot, see the translation)."""
    translation = translate(
        address,
        owner=home,
        reader=provider,
        owner_name="this cluster",
        reader_name=provider_name,
        remapped_pod_cidr=provider_sees_home,
    )
    if isinstance(translation, (Remapped, Unchanged)):
        return str(translation.address)
    return None


def _ping_summary(stdout: str) -> str:
    counts, rtt = "", ""
    for line in stdout.splitlines():
        if "packets transmitted" in line:
            sent, received = line.split(",")[:2]
            counts = f"{received.split()[0]}/{sent.split()[0]} replies"
        if "min/avg/max" in line:
            rtt = "round trip min/avg/max " + "/".join(line.split("=")[-1].strip().split("/")[:3]) + " ms"
    return ", ".join(part for part in (counts, rtt) if part) or "replied"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def probe_pod(name: str, *, namespace: str, node: str, image: str, virtual: bool) -> dict[str, Any]:
    """A probe pod bound to ``node`` (a virtual node sends it to its provider) (pure).

    Bound, it skips the scheduler and the pod webhook: a virtual node's pod carries the toleration itself.
    """
    tolerations = [names.virtual_node_toleration()] if virtual else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "liqo-netcheck", ROLE_LABEL: "remote" if virtual else "local"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": tolerations,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SERVER],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def why_not_running(pod: Mapping[str, Any] | None) -> str:
    """What a probe pod's status says about why it is not running with an IP (pure)."""
    if pod is None:
        return "not created"
    status = pod.get("status") or {}
    if status.get("phase") == "Running" and all(s.get("ready") for s in podstate.container_statuses(dict(pod))):
        return (
            "running, but no IP is shown here: the virtual kubelet could not translate the provider's address"
            " (kubectl describe pod: its Events say why)"
        )
    return podstate.pod_trouble(dict(pod)) or f"phase {status.get('phase') or 'unknown'}"
