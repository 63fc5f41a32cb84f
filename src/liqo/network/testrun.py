"""``liqoctl test network``: real packets between pods of this cluster and of every provider, both ways.

A network is not tested by reading its configuration. This runs pods of a tool image (``socat``, ``ping``)
in a namespace offloaded to every provider: one on each real node here, one on each provider (through its
virtual node), plus a Service here whose endpoints are the remote ones; then runs every probe of
:mod:`liqo.network.testplan` from inside its source pod (``pods/exec``, through the virtual kubelet for the
remote ones) and judges it there. The namespace is offloaded by the caller (liqoctl composes this with
:mod:`liqo.offloading`), and deleted at the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import record_of
from liqo.api.networkconfigs import ConnectionState
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork, recorded_network, remapped_pod_cidr
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, KubeError
from liqo.kube.podexec import execute
from liqo.kube.resources import ENDPOINT_SLICES, NAMESPACES, NODES, PODS, SERVICES, terminating
from liqo.kube.waiting import poll_until
from liqo.network.testplan import (
    PROBE_TIMEOUT,
    SERVICE,
    Endpoint,
    Probe,
    Remote,
    Result,
    diagnose,
    judge,
    plan,
    probe_command,
    probe_pod,
    probe_service,
    seen_by_provider,
    service_probes,
    why_not_running,
)

NAMESPACE_PREFIX = "netcheck-"
"""Not liqo-*: providers reserve those names for themselves, and refuse twins of them."""
KWOK_NODE = "kwok.x-k8s.io/node"
"""The annotation of KWOK's fake nodes (local clusters): they run no container, so no probe pod goes there."""


class NetworkCheckError(RuntimeError):
    """The check could not run (no identity, no provider); the message says why."""


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
        peer_id = names.labelled_peer_id(node)
        if not peer_id:
            continue
        fc = record_of(foreign_clusters, peer_id)
        namespace = names.tenant_namespace(peer_id)
        ours = await client.get_or_none(NETWORK_CONFIGS, local_id, namespace=namespace)
        theirs = await client.get_or_none(NETWORK_CONFIGS, peer_id, namespace=namespace)
        running = any(
            names.labelled_peer_id(p) == peer_id and (p.get("status") or {}).get("phase") == "Running" for p in gateways
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
    await client.delete(NAMESPACES, namespace, missing_ok=True)


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
            peer = by_name.get(probe.provider)
            if peer is None:
                # Through the Service, any provider's pod may answer: a tunnel that is down is the likely hop.
                peer = next((p for p in providers if (p.tunnel or {}).get("state") != ConnectionState.CONNECTED), None)
            return await _run_probe(client, namespace, probe, peer)

    return list(await asyncio.gather(*(one(probe) for probe in probes)))


RETRY_DELAYS = (1.0, 2.0)
"""Seconds before each try after the first: a failure must last about three seconds to count."""


async def _run_probe(client: KubeClient, namespace: str, probe: Probe, peer: Peer | None) -> Result:
    # One loss is not a broken network: a route converging right after a peering, a first packet's ARP, or
    # kube-proxy programming the probe Service moments after its endpoints appear (seen on a loaded node:
    # the pods answered directly, and twice not through the Service). A pass after a failure says so.
    result = await _try_probe(client, namespace, probe, peer)
    for attempt, delay in enumerate(RETRY_DELAYS, start=2):
        if result.ok:
            break
        await asyncio.sleep(delay)  # a backoff between tries of an exchange, not a wait on a condition
        result = await _try_probe(client, namespace, probe, peer)
        if result.ok:
            result = dataclasses.replace(result, detail=f"{result.detail} (try {attempt})")
    return result


async def _try_probe(client: KubeClient, namespace: str, probe: Probe, peer: Peer | None) -> Result:
    try:
        executed = await execute(
            client, namespace=namespace, pod=probe.source.pod, command=probe_command(probe), timeout=4 * PROBE_TIMEOUT
        )
        ok, detail = judge(probe, exit_code=executed.exit_code, stdout=executed.stdout, stderr=executed.stderr)
    except TimeoutError:
        ok, detail = False, "the probe did not end in time"
    except (ApiError, KubeError) as exc:
        ok, detail = False, f"cannot run the probe in {probe.source.pod}: {exc}"
    tunnel, running = (peer.tunnel or {}, peer.gateway_running) if peer else (None, True)
    named = dataclasses.replace(probe, provider=peer.name) if peer else probe
    hop = "" if ok else diagnose(named, detail, tunnel=tunnel, gateway_running=running)
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


def as_json(results: list[Result]) -> list[dict[str, Any]]:
    """The results as ``-o json`` prints them."""
    return [asdict(result) for result in results]
