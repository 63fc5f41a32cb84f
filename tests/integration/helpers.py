"""The integration tests' helpers: local clusters (start, purge, kubectl, liqoctl), sites with liqo installed,
peering and offloading for the duration of a test, components stopped and restarted, what must be left clean.

Waiting goes through :func:`tests.shared.eventually` (never bare sleeps); the pure helpers the unit tests
share are in :mod:`tests.shared`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import os
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.resources import ALL as LIQO_RESOURCES
from liqo.api.resources import (
    FOREIGN_CLUSTERS,
    NAMESPACE_MAPS,
    SHADOW_PODS,
    SHARING_POLICIES,
    VIRTUAL_NODES,
    WORKING_MODES,
)
from liqo.install.installer import InstallOptions, install
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import CSRS, EVENTS, NAMESPACES, NODES, PODS, SECRETS
from liqo.localclusters import clusters, toolchain
from liqo.localclusters.launch import detect
from liqo.localclusters.layout import ClusterDir, read_json
from liqo.localclusters.processes import ProcessRef
from liqo.localclusters.realnodes.nodes import RealNode, real_nodes
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering
from liqo.peering.authprotocol import make_csr, sign_request
from tests.shared import eventually


def eventually_sync(check: Callable[[], bool], *, timeout: float, message: str, every: float = 0.1) -> None:
    """:func:`eventually` for synchronous checks."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        time.sleep(every)


async def made_once_allowed(
    create: Callable[[], Awaitable[object]], *, refused_with: int, timeout: float, message: str
) -> None:
    """Call ``create`` until it succeeds, as long as the API server refuses it with ``refused_with`` only (a
    webhook still loading its caches, a right not granted yet); any other refusal is raised."""

    async def made() -> bool:
        try:
            await create()
        except ApiError as exc:
            if exc.status != refused_with:
                raise
            return False
        return True

    await eventually(made, timeout=timeout, message=message)


async def recorded_event(
    client: KubeClient, *, namespace: str, reason: str, about: str | None = None, timeout: float = 30
) -> Obj:
    """The first Event of ``reason`` in ``namespace`` (about the object named ``about``), waited for.

    Our controllers write a status, then record its Event: a test that reads the status at once can run
    between the two writes, so an Event is always waited for, never listed once.
    """
    found: list[Obj] = []

    async def recorded() -> bool:
        events, _ = await client.list_all(EVENTS, namespace=namespace)
        found[:] = [e for e in events if e["reason"] == reason and about in (None, e["involvedObject"].get("name"))]
        return bool(found)

    what = f"an Event {reason}" + (f" about {about}" if about else "") + f" in namespace {namespace}"
    await eventually(recorded, timeout=timeout, message=what)
    return found[0]


@dataclass(frozen=True)
class LocalCluster:
    """A running local cluster, as tests see it."""

    spec: ClusterSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dir(self) -> ClusterDir:
        return ClusterDir.named(self.name)

    @property
    def kubeconfig(self) -> Path:
        return self.dir.kubeconfig

    def client(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig, name=self.name)

    def kubectl(self) -> list[str]:
        return [str(toolchain.bin_dir() / "kubectl"), f"--kubeconfig={self.kubeconfig}"]


def only_real_node(cluster: LocalCluster) -> RealNode:
    """The real node of a cluster made with one (``real_nodes=1``)."""
    stored = read_json(cluster.dir.cluster_file)
    [node] = real_nodes(cluster=cluster.name, count=1, underlay=int(stored["underlay"]), cluster_root=cluster.dir.root)
    return node


KEEP = os.environ.get("LIQO_TEST_KEEP") == "1"
"""Keep the session clusters when the run ends, under fixed names, and reuse them on the next run."""
RUN_ID = "keep" if KEEP else f"{os.getpid() % 100000}"
"""In the name of every session cluster (``t<RUN_ID>-rome``), so that concurrent runs never collide."""


def unique(prefix: str) -> str:
    """A name no other test (or test run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def start(spec: ClusterSpec) -> LocalCluster:
    """Start a local cluster; one that fails to come up is deleted, not left to the next tests."""
    try:
        clusters.up(spec)
    except BaseException:
        with contextlib.suppress(Exception):
            clusters.down(spec.name, purge=True)
        raise
    return LocalCluster(spec)


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    """Run kubectl against ``cluster``; its stdout, or an AssertionError with its stderr."""
    result = kubectl_run(cluster, *args, stdin=stdin, timeout=timeout)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def kubectl_run(
    cluster: LocalCluster, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """kubectl against ``cluster``, its failure kept (:func:`kubectl` asserts success)."""
    return subprocess.run(
        [*cluster.kubectl(), *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


@contextlib.contextmanager
def port_forward(cluster: LocalCluster, namespace: str, pod: str, port: int) -> Iterator[int]:
    """``kubectl port-forward`` to ``pod``'s ``port`` in the background; yields the local port."""
    argv = [*cluster.kubectl(), "port-forward", "-n", namespace, pod, f":{port}"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080", or nothing on failure
            if not line.startswith("Forwarding from 127.0.0.1:"):
                process.kill()
                _, stderr = process.communicate(timeout=10)
                raise AssertionError(f"kubectl port-forward: {line}{stderr}")
            yield int(line.split(":")[1].split()[0])
        finally:
            process.terminate()


LIQOCTL = [str(Path(sys.executable).parent / "liqoctl")]


def liqoctl(cluster: LocalCluster, *args: str, timeout: float = 180) -> str:
    """Run this checkout's liqoctl against ``cluster``; its stdout, or an AssertionError with its output."""
    result = subprocess.run(
        [*LIQOCTL, *args, f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"liqoctl {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def liqoctl_run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """liqoctl as a user runs it, with ``args`` only (no kubeconfig added): its result, unchecked, for the tests
    of what it prints and refuses."""
    return subprocess.run(
        [sys.executable, "-m", "liqo.cli.main", *args], capture_output=True, text=True, check=False, timeout=timeout
    )


def install_liqo(local: LocalCluster, *, discovery: bool = False) -> str:
    """Install liqo on a local cluster (a short identity TTL; LAN discovery if asked); return its cluster ID."""

    async def run() -> str:
        async with local.client() as client:
            options = InstallOptions(identity_ttl=600, lan_discovery=discovery)
            identity = await install(client, options, progress=lambda _: None, launch=detect(client.server))
            return identity.cluster_id

    return asyncio.run(run())


def start_sites(specs: dict[str, ClusterSpec], *, discovery: bool = False) -> dict[str, Site]:
    """Start a cluster per spec and install liqo on each, all at once; the sites by the specs' keys."""
    install = functools.partial(install_liqo, discovery=discovery)
    return together({role: functools.partial(site_of, spec, install=install) for role, spec in specs.items()})


def site_of(spec: ClusterSpec, *, install: Callable[[LocalCluster], str]) -> Site:
    """A cluster started from ``spec`` and installed by ``install`` (which returns its cluster ID); purged if
    either fails."""
    local = start(spec)
    try:
        return Site(local, install(local))
    except BaseException:
        purge(local)
        raise


def together(makers: Mapping[str, Callable[[], Site]]) -> dict[str, Site]:
    """Run every maker at once (each makes a site, or purges what it started and raises: :func:`site_of`).

    A cluster's start and install mostly wait (probes, Deployments rolling out), so three together take
    little more than one. If any fails, the sites made are purged and the first error is raised.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(makers)) as pool:
        futures = {role: pool.submit(make) for role, make in makers.items()}
        concurrent.futures.wait(futures.values())
    failed = [error for future in futures.values() if (error := future.exception()) is not None]
    if failed:
        purge(*(future.result().cluster for future in futures.values() if future.exception() is None))
        raise failed[0]
    return {role: future.result() for role, future in futures.items()}


def purge(*purged: LocalCluster) -> None:
    """Purge every one of ``purged``, even if one fails (then its error is raised after the others went)."""
    errors = []
    for cluster in purged:
        if cluster.dir.exists():
            try:
                clusters.down(cluster.name, purge=True)
            except Exception as exc:  # the next cluster is purged all the same
                errors.append(exc)
    if errors:
        raise errors[0]


async def compact_etcd(cluster: LocalCluster) -> int:
    """Compact the cluster's etcd up to its current revision, as its periodic compaction would; that revision.

    Through etcd's JSON gateway, as the API server's own client identity: a watch from any older
    resourceVersion then gets 410 Gone.
    """
    port = read_json(cluster.dir.cluster_file)["ports"]["etcd_client"]
    pki = cluster.dir.pki
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "apiserver-etcd-client.crt"), str(pki / "apiserver-etcd-client.key"))
    base = f"https://127.0.0.1:{port}/v3/kv"
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/range", json={"key": "AA=="}, ssl=context) as response:
            response.raise_for_status()
            revision = int((await response.json())["header"]["revision"])
        async with session.post(f"{base}/compaction", json={"revision": revision, "physical": True}, ssl=context) as r:
            r.raise_for_status()
    return revision


class TcpProxy:
    """A TCP forwarder to a local port that a test can cut and restore.

    Put between a client and the API server, it disconnects that client alone — the test keeps
    talking to the server directly — which is how a test makes an informer miss changes.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        """Listen (on a new port the first time, on the same port after a cut) and return the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def cut(self) -> None:
        """Stop listening and reset every open connection."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, upstream_writer}
        await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()


@dataclass(frozen=True)
class Site:
    """A cluster with liqo installed."""

    cluster: LocalCluster
    cluster_id: str

    def client(self) -> KubeClient:
        return self.cluster.client()


async def liqo_objects(client: KubeClient) -> list[str]:
    """Every liqo-managed object about peers on a cluster (what unpeer must leave at zero)."""
    found = []
    for resource in LIQO_RESOURCES:
        if resource in (SHARING_POLICIES, WORKING_MODES):
            continue  # the admin's, not the peering's
        items, _ = await client.list_all(resource)
        found += [f"{resource.kind} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in items]
    for selector in (f"{names.TENANT}=true", names.ORIGIN_NAMESPACE):  # tenant and twin namespaces
        namespaces, _ = await client.list_all(NAMESPACES, label_selector=selector)
        found += [f"Namespace {n['metadata']['name']}" for n in namespaces]
    nodes, _ = await client.list_all(NODES, label_selector=f"{names.VIRTUAL_NODE_TYPE}={names.VIRTUAL_NODE}")
    found += [f"Node {n['metadata']['name']}" for n in nodes]
    secrets, _ = await client.list_all(SECRETS, label_selector=names.REMOTE_CLUSTER_ID)
    found += [f"Secret {s['metadata']['namespace']}/{s['metadata']['name']}" for s in secrets]
    return found


async def held_for(provider: KubeClient, consumer: str) -> dict[str, Any]:
    """What ``provider`` holds for ``consumer`` (records, CSRs, tenant namespace), to compare before and after an
    attack."""
    fcs, _ = await provider.list_all(FOREIGN_CLUSTERS)
    csrs, _ = await provider.list_all(CSRS, label_selector=f"{names.REMOTE_CLUSTER_ID}={consumer}")
    try:
        tenant = (await provider.get(NAMESPACES, names.tenant_namespace(consumer)))["metadata"]["uid"]
    except NotFoundError:
        tenant = None
    # The spec is what an impersonation would rewrite (key fingerprint, network); the status keeps moving
    # for a while after a peering by the provider's own controllers, so resourceVersion would flake.
    return {
        "foreign clusters": sorted(
            (
                f["metadata"]["name"],
                f["metadata"].get("generation"),
                orjson.dumps(f["spec"], option=orjson.OPT_SORT_KEYS),
            )
            for f in fcs
            if f["spec"]["clusterID"] == consumer
        ),
        "csrs": [c["metadata"]["name"] for c in csrs],
        "tenant": tenant,
    }


async def expect_clean(*clients: KubeClient) -> None:
    for client in clients:
        left: list[str] = []

        async def clean(client: KubeClient = client, left: list[str] = left) -> bool:
            left[:] = await liqo_objects(client)
            return not left

        try:
            await eventually(clean, timeout=60, message=f"no liqo objects left on {client.name}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {', '.join(left)}") from None


def from_address(source: str | None) -> aiohttp.ClientSession:
    """A session whose connections come from the loopback address ``source`` (None: the system's choice).

    Every local cluster's endpoints listen on 127.0.0.1, where every client looks alike; a client bound to
    another address of 127.0.0.0/8 is another source to them, as another host would be.
    """
    local_addr = (source, 0) if source else None
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False, local_addr=local_addr))


async def signed_identity_request(
    auth_url: str, *, consumer: str, key: ClusterKey, token: str | None, source: str | None = None, **fields: Any
) -> tuple[int, dict[str, Any]]:
    """``POST /identity`` as a peer holding ``key`` (and ``token``) can send it, whatever ``fields`` say.

    The request is well signed — by the key it presents, and by the token's key — so only the provider's own
    checks of ``fields`` stand between it and provisioning. ``source``: the loopback address it comes from
    (:func:`from_address`). Returns the status and the decoded answer.
    """
    network = ClusterNetwork.parse(pod_cidr="10.80.0.0/16", service_cidr="10.81.0.0/16")
    async with from_address(source) as session:
        async with session.post(f"{auth_url}/nonce") as response:
            nonce = (await response.json())["nonce"]
        message = {
            "clusterID": consumer,
            "clusterName": f"consumer-{consumer[:8]}",
            "nonce": nonce,
            "csr": make_csr(consumer)[1],
            "publicKey": key.public_pem,
            "network": network.to_message(),
        } | fields
        async with session.post(f"{auth_url}/identity", json=sign_request(message, key=key, token=token)) as response:
            return response.status, await response.json()


# -- offloading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offloaded:
    """A namespace of rome offloaded to milan (strategy Remote)."""

    namespace: str
    twin: str
    node: str


def deployment(name: str, namespace: str, *, replicas: int, cpu: str = "100m", **spec: Any) -> Obj:
    """A Deployment of ``replicas`` nginx pods requesting ``cpu``; ``spec`` overrides pod spec fields."""
    labels = {"app": name}
    container = {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container], **spec}},
        },
    }


def pod(name: str, namespace: str, **spec: Any) -> Obj:
    # Small requests, so that many fit the offer (pods without any run too: offloading/test_budget.py).
    requests = {"requests": {"cpu": "50m", "memory": "16Mi"}}
    base = {"containers": [{"name": "app", "image": "nginx", "resources": requests}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": base | spec}


def running(obj: Obj) -> bool:
    return bool((obj.get("status") or {}).get("phase") == "Running")


async def running_pods(client: KubeClient, namespace: str, count: int, *, timeout: float = 60) -> list[Obj]:
    found: list[Obj] = []
    seen: list[Obj] = []

    async def all_running() -> bool:
        nonlocal found, seen
        # A pod being deleted still says Running until its containers stop: not one the caller waits for.
        seen = (await client.list_all(PODS, namespace=namespace))[0]
        found = [p for p in seen if running(p) and not p["metadata"].get("deletionTimestamp")]
        return len(found) == count

    def last_seen() -> str:
        states = collections.Counter(pod_state(p) for p in seen)
        return f"{count} pods Running in {client.name}/{namespace}; last seen: " + (
            ", ".join(f"{n} {state}" for state, n in states.most_common()) or "no pod"
        )

    await eventually(all_running, timeout=timeout, message=last_seen)
    return found


def pod_state(pod: Obj) -> str:
    """A pod's phase and why, in a few words: ``Pending/ContainerCreating``, ``Running (deleting)``."""
    status = pod.get("status") or {}
    waiting = [
        (c.get("state") or {}).get("waiting", {}).get("reason")
        for c in status.get("containerStatuses") or []
        if (c.get("state") or {}).get("waiting")
    ]
    reason = status.get("reason") or next((r for r in waiting if r), "")
    deleting = " (deleting)" if pod["metadata"].get("deletionTimestamp") else ""
    return f"{status.get('phase', 'NoPhase')}{'/' + reason if reason else ''}{deleting}"


async def sigkill(site: Site, component: str) -> None:
    """SIGKILL the host process of ``component`` of a cluster (liqo's too, where it runs on the host), and wait
    until the cluster's supervisor restarted it and it is healthy again."""
    status = read_json(site.cluster.dir.status_file)["components"][component]
    victim = ProcessRef.from_dict(status["process"])
    assert victim is not None, f"{component} of {site.cluster.name} runs no process"
    os.kill(victim.pid, signal.SIGKILL)

    async def restarted() -> bool:
        now = read_json(site.cluster.dir.status_file)["components"][component]
        return bool(now["restarts"] > status["restarts"] and now["healthy"])

    await eventually(restarted, timeout=60, message=f"{component} restarted by the supervisor")


@contextlib.asynccontextmanager
async def stopped(site: Site | LocalCluster, *components: str) -> AsyncIterator[None]:
    """``components`` of a cluster stopped for the duration, restarted whatever happens.

    What attack tests use to take the peer's own components out of the way: only the other side's defences
    stand, against writes made with the peer's identity. Fault tests stop a cluster's own components.

    After an API server outage, kube-controller-manager is restarted too. Its informers back off while the API
    server is away and resume up to a minute after it returns (measured: a CSR signed 28-50 s after a
    15-25 s outage). That is the signer's behaviour, not ours, and the tests that follow need it prompt.
    """
    name = site.cluster.name if isinstance(site, Site) else site.name
    await asyncio.to_thread(clusters.set_components, name, list(components), enabled=False)
    try:
        yield
    finally:
        await asyncio.to_thread(clusters.set_components, name, list(components), enabled=True)
        if "kube-apiserver" in components and "kube-controller-manager" not in components:
            for enabled in (False, True):
                await asyncio.to_thread(clusters.set_components, name, ["kube-controller-manager"], enabled=enabled)


@contextlib.asynccontextmanager
async def offloaded_to(
    home: Site, provider: Site, *, strategy: str, prefix: str = "off", keep_peering: bool = False
) -> AsyncIterator[Offloaded]:
    """``home`` peered with ``provider`` and a fresh namespace offloaded there with ``strategy``, for the duration.

    On the way out: unoffloaded (its twin gone), the namespace deleted; unless ``keep_peering``, also
    unpeered and both clusters checked clean (then :func:`unpeered` does that later, once).
    """
    async with home.client() as consumer, provider.client() as producer:
        await peering.peer(consumer, producer, timeout=30)
        namespace = unique(prefix)
        await consumer.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        try:
            await offloading.offload(consumer, namespace, pod_offloading_strategy=strategy)
            await offloading.wait_offloaded(consumer, namespace, timeout=60)
            twin = names.twin_namespace(namespace, home_cluster_id=home.cluster_id)
            tenant = names.tenant_namespace(provider.cluster_id)
            nodes, _ = await consumer.list_all(VIRTUAL_NODES, namespace=tenant)
            yield Offloaded(namespace=namespace, twin=twin, node=nodes[0]["metadata"]["name"])
        finally:
            await offloading.unoffload(consumer, namespace, timeout=120)
            await consumer.delete(NAMESPACES, namespace)
    if not keep_peering:
        await unpeered(home, provider)


async def unpeered(home: Site, provider: Site) -> None:
    """``home`` no longer consuming from ``provider`` (a no-op if it was not), and both clusters checked clean."""
    async with home.client() as consumer, provider.client() as producer:
        try:
            await peering.unpeer(consumer, provider.cluster_id, timeout=90)
        except peering.PeeringError as exc:
            if not str(exc).startswith("no peer named"):
                raise
        await expect_clean(consumer, producer)


async def offload_fresh(consumer: KubeClient, home_id: str) -> Offloaded:
    """A new namespace of ``home_id`` offloaded (Remote) (peered already); undo with :func:`drop_offloaded`."""
    namespace = unique("off")
    await consumer.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await offloading.offload(consumer, namespace, pod_offloading_strategy="Remote")
    await offloading.wait_offloaded(consumer, namespace, timeout=60)
    return Offloaded(namespace=namespace, twin=names.twin_namespace(namespace, home_cluster_id=home_id), node="")


async def drop_offloaded(consumer: KubeClient, namespace: str) -> None:
    await offloading.unoffload(consumer, namespace, timeout=120)
    await consumer.delete(NAMESPACES, namespace)


def shadow_pod(name: str, twin: str, consumer_id: str, *, cpu: str) -> Obj:
    """A ShadowPod as a peer may write it: a plain baseline pod asking for ``cpu``."""
    resources: Obj = {"requests": {"cpu": cpu, "memory": "16Mi"}}
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": {"name": name, "namespace": twin, "labels": names.peer_labels(consumer_id)},
        "spec": {
            "pod": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "app", "image": "nginx", "resources": resources}],
            },
            "homePodUID": f"uid-{name}",
        },
    }


def namespace_map(consumer_id: str, mappings: dict[str, str]) -> Obj:
    """A consumer's NamespaceMap on its provider (home namespace → twin), as its manager or a peer writes it."""
    return {
        "apiVersion": NAMESPACE_MAPS.api_version,
        "kind": NAMESPACE_MAPS.kind,
        "metadata": {"name": consumer_id, "namespace": names.tenant_namespace(consumer_id)},
        "spec": {"consumerClusterID": consumer_id, "mappings": mappings},
    }


@contextlib.asynccontextmanager
async def peer_identity(consumer: KubeClient, provider_id: str, *, name: str = "") -> AsyncIterator[KubeClient]:
    """A client on the provider holding the consumer's identity there (the kubeconfig the provider issued it):
    what a hostile consumer would use."""
    async with KubeClient.from_kubeconfig_dict(await peering.peer_kubeconfig(consumer, provider_id), name=name) as c:
        yield c


@contextlib.asynccontextmanager
async def sharing_policy(provider: KubeClient, consumer_id: str, *, prefix: str, **spec: Any) -> AsyncIterator[str]:
    """A SharingPolicy of ``provider`` for ``consumer_id`` alone (its name: ``prefix-…``), deleted afterwards."""
    name = unique(prefix)
    body = {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": name},
        "spec": {"peers": [consumer_id], "action": "Share"} | spec,
    }
    await provider.apply(SHARING_POLICIES, body)
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            await provider.delete(SHARING_POLICIES, name)


def helm_binary() -> str:
    """The helm binary ``make setup`` fetched (``liqoctl local build``)."""
    return str(toolchain.helm_path())
