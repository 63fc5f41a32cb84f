"""Shared test helpers: condition waits with deadlines (never bare sleeps), local cluster handles."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.resources import ALL as LIQO_RESOURCES
from liqo.api.resources import SHARING_POLICIES, VIRTUAL_NODES
from liqo.install import manifests
from liqo.install.installer import InstallOptions, install
from liqo.install.values import Values
from liqo.kube.client import KubeClient
from liqo.kube.resources import NAMESPACES, NODES, PODS, SECRETS
from liqo.local import clusters, toolchain
from liqo.local.layout import ClusterDir
from liqo.local.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering
from liqo.peering.authprotocol import make_csr, sign_request


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float, message: str, every: float = 0.1) -> None:
    """Wait until ``check()`` is true; fail with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        await asyncio.sleep(every)


def eventually_sync(check: Callable[[], bool], *, timeout: float, message: str, every: float = 0.1) -> None:
    """:func:`eventually` for synchronous checks."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        time.sleep(every)


class Signal:
    """Wakes a waiting test whenever the code under test reports progress (no sleeping to synchronise)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self._event.clear()
                await self._event.wait()


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
    result = subprocess.run(
        [*cluster.kubectl(), *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


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


def install_liqo(local: LocalCluster) -> str:
    """Install liqo on a local cluster (a short identity TTL); return its cluster ID."""

    async def run() -> str:
        async with local.client() as client:
            identity = await install(client, InstallOptions(identity_ttl=600), progress=lambda _: None)
            return identity.cluster_id

    return asyncio.run(run())


def purge(cluster: LocalCluster) -> None:
    if cluster.dir.exists():
        clusters.down(cluster.name, purge=True)


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
        if resource is SHARING_POLICIES:
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


Obj = dict[str, Any]


SAMPLE_VALUES = Values(
    api_server_url="https://127.0.0.1:6443",
    pod_cidr="10.244.0.0/16",
    service_cidr="10.96.0.0/16",
    cluster_name="rome",
    image="img",
)


def install_manifests(*, webhook_client_config: Any = None, placement_policy: bool = True, **values: Any) -> list[Obj]:
    """What ``liqoctl install`` would apply on a real cluster with sample values (``values`` override fields)."""
    return manifests.manifests(
        dataclasses.replace(SAMPLE_VALUES, **values),
        webhook_client_config=webhook_client_config,
        placement_policy=placement_policy,
    )


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
    # Small requests, so that many fit the offer (pods without any run too: test_budget).
    requests = {"requests": {"cpu": "50m", "memory": "16Mi"}}
    base = {"containers": [{"name": "app", "image": "nginx", "resources": requests}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": base | spec}


def running(obj: Obj) -> bool:
    return bool((obj.get("status") or {}).get("phase") == "Running")


async def running_pods(client: KubeClient, namespace: str, count: int) -> list[Obj]:
    found: list[Obj] = []

    async def all_running() -> bool:
        nonlocal found
        found = [p for p in (await client.list_all(PODS, namespace=namespace))[0] if running(p)]
        return len(found) == count

    await eventually(all_running, timeout=60, message=f"{count} pods Running in {client.name}/{namespace}")
    return found


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
async def offloaded_to(home: Site, provider: Site, *, strategy: str, prefix: str = "off") -> AsyncIterator[Offloaded]:
    """``home`` peered with ``provider`` and a fresh namespace offloaded there with ``strategy``, for the duration.

    On the way out: unoffloaded, the namespace deleted, unpeered, and both clusters checked clean.
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
            await peering.unpeer(consumer, provider.cluster_id, timeout=90)
        await expect_clean(consumer, producer)


def helm_binary() -> str:
    """The helm binary ``make setup`` fetched (``liqoctl local build``)."""
    return str(toolchain.helm_path())


_AMOUNTS = st.sampled_from(["100m", "1", "2", "64Mi", "1Gi", "0"])
_RESOURCE_LISTS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), _AMOUNTS, max_size=3)
_NOISE = st.fixed_dictionaries({"env": st.just([{"name": "E", "value": "v"}]), "image": st.just("nginx")})


@st.composite
def _containers(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(st.text("abc", min_size=1, max_size=3))} | draw(_NOISE)
    resources = draw(st.fixed_dictionaries({}, optional={"requests": _RESOURCE_LISTS, "limits": _RESOURCE_LISTS}))
    if draw(st.booleans()):
        container["resources"] = resources
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def api_pods(draw: st.DrawFn, *, nodes: tuple[str, ...] = ("n1", "n2")) -> dict[str, Any]:
    """A pod as an API server returns it, with every field a projection might wrongly drop or keep."""
    name = draw(st.text("abcdef", min_size=1, max_size=4))
    meta: dict[str, Any] = {
        "name": name,
        "namespace": draw(st.sampled_from(["default", "liqo-tenant-x", "twin"])),
        "uid": f"uid-{name}",
        "resourceVersion": str(draw(st.integers(1, 100))),
        "labels": {"app": name},
        "ownerReferences": [{"uid": draw(st.sampled_from(["s1", "s2"])), "controller": draw(st.booleans())}],
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
    }
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "containers": draw(st.lists(_containers(init=False), min_size=1, max_size=3)),
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    }
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(_containers(init=True), max_size=3))
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(nodes))
    if draw(st.booleans()):
        spec["overhead"] = draw(_RESOURCE_LISTS)
    if draw(st.booleans()):
        spec["resources"] = {"requests": draw(_RESOURCE_LISTS)}
    if draw(st.booleans()):
        spec["terminationGracePeriodSeconds"] = draw(st.integers(0, 100))
    status = {
        "phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])),
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "a", "ready": True}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with an RFC 6902 ``add``/``replace``/``remove`` patch applied (as the API server applies ours)."""
    result = copy.deepcopy(document)
    for op in patch:
        *parents, last = _tokens(op["path"])
        target: Any = result
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
            continue
        value = copy.deepcopy(op["value"])
        if op["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), value)
            else:
                target[last] = value
        elif op["op"] == "replace":
            if isinstance(target, list):
                target[int(last)] = value
            else:
                assert last in target, f"replace of a missing member {op['path']}"
                target[last] = value
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return result
