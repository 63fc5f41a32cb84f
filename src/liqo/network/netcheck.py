"""``liqoctl test network``: real packets between pods of this cluster and of every provider, both ways.

A network is not tested by reading its configuration. This check runs pods of a tool image (``socat``,
``ping``) in a namespace offloaded to every provider: one on each real node here, one on each provider
(through its virtual node). Each pod serves TCP and UDP echoes of *the address it sees the caller at*.
Then every local pod probes every remote one and back, over ICMP, TCP and UDP, at the addresses each side
dials for the other (:func:`liqo.api.networks.translate` with both NetworkConfigs' remapping): what home
shows as an offloaded pod's IP, and where the provider sees home's pods.

An answer is not enough: the address the server saw must be the caller's as the server's cluster names it, or
the packet left the tunnel's NAT somewhere (a node masqueraded it). Last, every local pod reaches the remote
ones through a Service here whose endpoints are the remote pods (:data:`SERVICE`): the path most applications
take, where only an answer is required (the node's proxy rewrites the caller). Every failure names the hop to
look at (:func:`diagnose`, pure): the tunnel when the connection check says it is down, the gateway pod when
it does not run, the routes of the caller's node when the tunnel is up but nothing comes back, the NAT when
the answer names the wrong address.

The plan and the verdicts are pure; the I/O (pods, exec) is in :class:`NetworkCheck`. The namespace is
offloaded by the caller (liqoctl composes this with :mod:`liqo.offloading`), and deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from liqo.api import names
from liqo.api.networks import (
    ClusterNetwork,
    InvalidNetwork,
    IPNetwork,
    Remapped,
    Unchanged,
    recorded_network,
    remapped_pod_cidr,
    translate,
)
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, KubeError, NotFoundError
from liqo.kube.podexec import execute
from liqo.kube.resources import ENDPOINT_SLICES, NAMESPACES, NODES, PODS, SERVICES, terminating
from liqo.kube.waiting import poll_until

TCP_PORT = 7001
UDP_PORT = 7002
PROTOCOLS = ("icmp", "tcp", "udp")
SERVICE = "remote-pods"
"""A Service here whose endpoints are the remote probe pods (at the addresses the virtual kubelet shows)."""
SERVICE_PREFIX = "service/"
ROLE_LABEL = "liqo.io/netcheck"
NAMESPACE_PREFIX = "netcheck-"
"""Not liqo-*: providers reserve those names for themselves, and refuse twins of them."""
KWOK_NODE = "kwok.x-k8s.io/node"
"""The annotation of KWOK's fake nodes (local clusters): they run no container, so no probe pod goes there."""
PROBE_TIMEOUT = 3
SERVER = (
    f'socat TCP-LISTEN:{TCP_PORT},fork,reuseaddr SYSTEM:"echo \\$SOCAT_PEERADDR" & '
    f'socat UDP-RECVFROM:{UDP_PORT},fork SYSTEM:"echo \\$SOCAT_PEERADDR" & '
    "exec sleep 86400"
)
"""Every probe pod serves the address it sees its caller at, over TCP and UDP, and waits."""


class NetworkCheckError(RuntimeError):
    """The check could not run (no identity, no provider); the message says why."""


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


# -- pure: the plan and the verdicts -----------------------------------------------------------------------


def probe_command(probe: Probe) -> list[str]:
    """The command the source pod runs for ``probe`` (the toolbox image's busybox and socat)."""
    address = probe.target.address
    if probe.protocol == "icmp":
        return ["ping", "-c", "3", "-i", "0.2", "-W", str(PROBE_TIMEOUT), address]
    if probe.protocol == "tcp":
        return ["socat", f"-T{PROBE_TIMEOUT}", "-", f"TCP:{address}:{probe.port},connect-timeout={PROBE_TIMEOUT}"]
    return ["sh", "-c", f"echo probe | socat -T{PROBE_TIMEOUT} - UDP:{address}:{probe.port}"]


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

    ``tunnel`` is our NetworkConfig's ``status.connection`` for the provider (None: none reported).
    """
    if not gateway_running:
        return (
            f"gateway: no gateway pod runs for {probe.provider} here"
            " (kubectl -n liqo get pods -l liqo.io/component=gateway)"
        )
    state = (tunnel or {}).get("state")
    if state != "Connected" and not probe.target.pod.startswith(SERVICE_PREFIX):
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


# -- I/O -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A provider this cluster consumes from, and what the check needs to know about the link to it."""

    cluster_id: str
    name: str
    virtual_node: str
    network: ClusterNetwork | None
    provider_sees_home: IPNetwork | None
    tunnel: Mapping[str, Any] | None
    gateway_running: bool


def new_namespace() -> str:
    """A fresh namespace name for one run (runs never share pods)."""
    return NAMESPACE_PREFIX + secrets.token_hex(3)


async def peers(client: KubeClient, *, local_id: str) -> list[Peer]:
    """Every provider with a virtual node here, with its network, its remapping of us and our tunnel to it."""
    nodes, _ = await client.list_all(NODES, label_selector=f"{names.VIRTUAL_NODE_TYPE}={names.VIRTUAL_NODE}")
    foreign_clusters, _ = await client.list_all(FOREIGN_CLUSTERS)
    gateways, _ = await client.list_all(
        PODS, namespace=names.LIQO_NAMESPACE, label_selector="liqo.io/component=gateway"
    )
    found = []
    for node in nodes:
        peer_id = (node["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID)
        if not peer_id:
            continue
        fc = next((f for f in foreign_clusters if f["spec"].get("clusterID") == peer_id), None)
        namespace = names.tenant_namespace(peer_id)
        ours = await _get(client, namespace, local_id)
        theirs = await _get(client, namespace, peer_id)
        running = any(
            (p["metadata"].get("labels") or {}).get(names.REMOTE_CLUSTER_ID) == peer_id
            and (p.get("status") or {}).get("phase") == "Running"
            for p in gateways
        )
        try:
            network = recorded_network(fc) if fc else None
        except InvalidNetwork:
            network = None
        found.append(
            Peer(
                cluster_id=peer_id,
                name=fc["metadata"]["name"] if fc else peer_id,
                virtual_node=node["metadata"]["name"],
                network=network,
                provider_sees_home=remapped_pod_cidr(theirs),
                tunnel=((ours or {}).get("status") or {}).get("connection"),
                gateway_running=running,
            )
        )
    return sorted(found, key=lambda p: p.name)


async def _get(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await client.get(NETWORK_CONFIGS, name, namespace=namespace)
    except NotFoundError:
        return None


async def local_nodes(client: KubeClient) -> list[str]:
    """The nodes here that run containers: Ready, schedulable, neither virtual nor KWOK's fakes."""
    nodes, _ = await client.list_all(NODES)
    usable = []
    for node in nodes:
        meta = node["metadata"]
        if (meta.get("labels") or {}).get(names.VIRTUAL_NODE_TYPE) == names.VIRTUAL_NODE:
            continue
        if KWOK_NODE in (meta.get("annotations") or {}) or (node.get("spec") or {}).get("unschedulable"):
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            usable.append(meta["name"])
    return sorted(usable)


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


async def create_namespace(client: KubeClient, namespace: str) -> None:
    """The run's namespace (the caller offloads it)."""
    await client.create(
        NAMESPACES,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {names.MANAGED_BY: "liqoctl"}},
        },
    )


async def delete_namespace(client: KubeClient, namespace: str) -> None:
    """Remove the run's namespace, its pods and (through its offloading) their copies on the providers."""
    with contextlib.suppress(NotFoundError):
        await client.delete(NAMESPACES, namespace)


async def run_check(
    client: KubeClient,
    *,
    namespace: str,
    local_id: str,
    home: ClusterNetwork,
    image: str,
    timeout: float,
    progress: Callable[[str], None],
) -> list[Result]:
    """Start the probe pods in ``namespace`` (already offloaded), probe every pair, return every result.

    Raises:
        NetworkCheckError: no provider, no node here to run a pod on, or a probe pod did not start in time.
    """
    providers = await peers(client, local_id=local_id)
    if not providers:
        raise NetworkCheckError("this cluster consumes from no provider (no virtual node): nothing to test")
    nodes = await local_nodes(client)
    if not nodes:
        raise NetworkCheckError("no Ready node here runs containers (only virtual or fake nodes)")
    pods = {f"local-{i}": node for i, node in enumerate(nodes)} | {
        f"remote-{peer.name}"[:63]: peer.virtual_node for peer in providers
    }
    progress(f"starting {len(pods)} probe pods in {namespace}")
    service = await client.create(SERVICES, probe_service(namespace))
    for name, node in pods.items():
        pod = probe_pod(name, namespace=namespace, node=node, image=image, virtual=name.startswith("remote-"))
        await client.create(PODS, pod)
    running = await _wait_running(client, namespace, list(pods), timeout=timeout)
    local = [
        Endpoint(cluster="here", pod=name, node=node, address=running[name])
        for name, node in pods.items()
        if name.startswith("local-")
    ]
    remote = []
    for peer in providers:
        name = f"remote-{peer.name}"[:63]
        seen = {
            endpoint.pod: seen_by_provider(
                endpoint.address,
                home=home,
                provider=peer.network,
                provider_name=peer.name,
                provider_sees_home=peer.provider_sees_home,
            )
            for endpoint in local
        }
        if any(address is None for address in seen.values()):
            raise NetworkCheckError(
                f"{peer.name} cannot be given our pods' addresses: no network fabric links it to this cluster"
                " (its NetworkConfig is missing) and the pod CIDRs overlap"
            )
        remote.append(
            Remote(
                endpoint=Endpoint(cluster=peer.name, pod=name, node=peer.virtual_node, address=running[name]),
                provider=peer.name,
                locals_seen={pod: address for pod, address in seen.items() if address is not None},
            )
        )
    probes = plan(local=local, remote=remote)
    await _wait_endpoints(client, namespace, [r.endpoint.address for r in remote], timeout=timeout)
    probes += service_probes(local=local, cluster_ip=service["spec"]["clusterIP"])
    progress(f"probing: {len(probes)} exchanges")
    by_name = {peer.name: peer for peer in providers}
    limit = asyncio.Semaphore(8)

    async def one(probe: Probe) -> Result:
        async with limit:
            return await _run_probe(client, namespace, probe, by_name.get(probe.provider))

    return list(await asyncio.gather(*(one(probe) for probe in probes)))


async def _run_probe(client: KubeClient, namespace: str, probe: Probe, peer: Peer | None) -> Result:
    try:
        executed = await execute(
            client, namespace=namespace, pod=probe.source.pod, command=probe_command(probe), timeout=4 * PROBE_TIMEOUT
        )
        ok, detail = judge(probe, exit_code=executed.exit_code, stdout=executed.stdout, stderr=executed.stderr)
    except TimeoutError:
        ok, detail = False, "the probe did not end in time"
    except (ApiError, KubeError) as exc:
        ok, detail = False, f"cannot run the probe in {probe.source.pod}: {exc}"
    tunnel, running = (peer.tunnel, peer.gateway_running) if peer else (None, True)
    hop = "" if ok else diagnose(probe, detail, tunnel=tunnel, gateway_running=running)
    port = f":{probe.port}" if probe.port else ""
    return Result(
        source=f"{probe.source.cluster}/{probe.source.pod}",
        target=f"{probe.target.cluster}/{probe.target.pod}",
        protocol=probe.protocol.upper(),
        address=probe.target.address + port,
        ok=ok,
        detail=detail,
        hop=hop,
    )


async def _wait_running(client: KubeClient, namespace: str, pods: list[str], *, timeout: float) -> dict[str, str]:
    """Each pod's IP (as this cluster shows it) once all run."""
    found: dict[str, str] = {}
    seen: dict[str, dict[str, Any]] = {}

    async def all_running() -> bool:
        items, _ = await client.list_all(PODS, namespace=namespace)
        for pod in items:
            seen[pod["metadata"]["name"]] = pod
            status = pod.get("status") or {}
            if status.get("phase") == "Running" and status.get("podIP") and not terminating(pod):
                found[pod["metadata"]["name"]] = status["podIP"]
        return all(name in found for name in pods)

    try:
        await poll_until(all_running, timeout=timeout, interval=0.5, message="probe pods")
    except TimeoutError as exc:
        missing = "; ".join(f"{name}: {why_not_running(seen.get(name))}" for name in pods if name not in found)
        raise NetworkCheckError(f"probe pods not running with an IP within {timeout:.0f} s: {missing}") from exc
    return found


async def _wait_endpoints(client: KubeClient, namespace: str, addresses: list[str], *, timeout: float) -> None:
    """Wait until the Service's EndpointSlices here list every remote probe pod, ready."""

    async def listed() -> bool:
        slices, _ = await client.list_all(
            ENDPOINT_SLICES, namespace=namespace, label_selector=f"kubernetes.io/service-name={SERVICE}"
        )
        ready = {
            address
            for each in slices
            for endpoint in each.get("endpoints") or []
            if (endpoint.get("conditions") or {}).get("ready")
            for address in endpoint.get("addresses") or []
        }
        return set(addresses) <= ready

    try:
        await poll_until(listed, timeout=timeout, interval=0.5, message="endpoints")
    except TimeoutError as exc:
        raise NetworkCheckError(
            f"the Service {SERVICE} does not list the remote probe pods ({', '.join(addresses)}) within"
            f" {timeout:.0f} s: kubectl -n {namespace} get endpointslices"
        ) from exc


def why_not_running(pod: Mapping[str, Any] | None) -> str:
    """What a probe pod's status says about why it is not running with an IP (pure)."""
    if pod is None:
        return "not created"
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', 'waiting')}: {waiting.get('message', '')}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason') or condition.get('type')}: {condition['message']}"
    if status.get("phase") == "Running":
        return (
            "running, but no IP is shown here: the virtual kubelet could not translate the provider's address"
            " (kubectl describe pod: its Events say why)"
        )
    return f"phase {status.get('phase') or 'unknown'}"


def as_json(results: list[Result]) -> list[dict[str, Any]]:
    """The results as ``-o json`` prints them."""
    return [asdict(result) for result in results]
