"""Local clusters: bring one up, take it down, list them, and start or stop single components.

``up`` is idempotent and resumable: flags left out mean "as stored", it writes only what is missing (PKI,
configuration), keeps the ports it used before unless one has been taken meanwhile, starts the supervisor
only if it is not running, and then waits — on conditions, with deadlines — for the API, the fake nodes and
the default ServiceAccount. ``down`` stops exactly the processes recorded in ``status.json``, by identity
(pid + start time), and keeps the data unless asked to purge it, so a later ``up`` brings back the same
cluster.

Concurrent commands: one cluster's commands take its lock (``NAME/.lock``); what clusters share (ports,
underlay slots) is chosen and recorded under the machine-wide allocation lock (:mod:`liqo.localclusters.layout`);
``down --purge`` renames the directory away before deleting it, and whatever reads every cluster skips
one that vanished meanwhile: ``local list`` beside a purge lists it or not, and never fails.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from liqo.kube import pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, KubeError, NotFoundError
from liqo.kube.kubeconfig import KubeconfigError
from liqo.kube.resources import NODES, SERVICE_ACCOUNTS
from liqo.kube.waiting import WaitTimeout, block_until, poll_until
from liqo.localclusters import toolchain
from liqo.localclusters.components import (
    WEBHOOK_CLIENT,
    WEBHOOK_CLIENT_CA,
    Component,
    admission_config,
    kwok_config,
    node_manifest,
    plan,
    scheduler_config,
    webhook_client_kubeconfig,
)
from liqo.localclusters.layout import (
    ClusterDir,
    Ports,
    allocation_lock,
    choose_ports,
    clusters_root,
    kernel_ports,
    locked,
    read_json,
    read_record,
    records,
    refresh_ports,
    remove_cluster,
    reserved_ports,
    write_json,
)
from liqo.localclusters.processes import ProcessRef, is_alive, terminate, wait_gone
from liqo.localclusters.realnodes import host, images, volumes
from liqo.localclusters.realnodes import plan as realplan
from liqo.localclusters.realnodes.nodes import (
    NODE_PRIVATE_DIRS,
    UNDERLAY_HOST,
    RealNode,
    pod_routes,
    real_nodes,
    underlay_index,
)
from liqo.localclusters.spec import ClusterSpec, SpecRequest, check_cpus, check_name

Progress = Callable[[str], None]

API_DEADLINE = 120.0
NODES_DEADLINE = 120.0
DOWN_DEADLINE = 30.0
POLL = 0.05


class ClusterError(RuntimeError):
    """A local-cluster operation cannot proceed; the message says why and what to do."""


class ClusterNotFoundError(ClusterError):
    """No local cluster has this name."""


@dataclass
class ClusterInfo:
    """What ``liqoctl local list`` shows about one cluster."""

    name: str
    api_url: str
    state: str
    kubeconfig: str
    nodes: str
    real_nodes: str = "0"
    cpus: str = ""
    """The CPUs every process of the cluster is pinned to; empty: not pinned."""
    unhealthy: list[str] = field(default_factory=list)
    components: dict[str, Any] = field(default_factory=dict)

    @property
    def restarts(self) -> int:
        """Crash restarts of all components since the supervisor started."""
        return sum(int(c.get("restarts") or 0) for c in self.components.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON/YAML-ready form."""
        return {
            "name": self.name,
            "apiURL": self.api_url,
            "state": self.state,
            "kubeconfig": self.kubeconfig,
            "nodes": self.nodes,
            "realNodes": self.real_nodes,
            "cpus": self.cpus,
            "restarts": self.restarts,
            "unhealthyComponents": self.unhealthy,
            "components": self.components,
        }


# -- up ------------------------------------------------------------------------------------------------


def up(request: SpecRequest | ClusterSpec, *, progress: Progress = lambda _: None) -> ClusterInfo:
    """Bring a cluster up (or make sure it is up, or resume it) and return its state once Ready.

    ``request``: the flags the user gave (one left out: as stored, or its default for a new cluster); a
    ``ClusterSpec`` asks for exactly that spec.

    Raises:
        SpecError: a given flag is invalid, or the cluster's CPUs are not ones this process may run on.
        SpecConflictError: the cluster exists and a given flag differs from what it was made with.
    """
    if isinstance(request, ClusterSpec):
        request = SpecRequest.exactly(request)
    cluster = ClusterDir.named(request.name)
    spec = request.settle(_stored_spec(cluster))
    check_cpus(spec.cpu_set, available=os.sched_getaffinity(0))
    bin_dir = toolchain.ensure_binaries(progress=progress)
    node_kit = _node_kit(spec, cluster, progress=progress) if spec.real_nodes else None
    with _cluster_lock(cluster, create=True):
        # Building took long and held no lock: another command may have made or purged the cluster.
        if request.settle(_stored_spec(cluster)) != spec:
            raise ClusterError(
                f"cluster {spec.name} was changed by another command meanwhile; run `liqoctl local up` again"
            )
        supervisor = supervisor_ref(cluster)
        if supervisor is None:
            progress(f"starting cluster {spec.name}")
            _stop_processes(cluster)  # leftovers of a supervisor that died, if any
            _teardown_real_nodes(cluster)
            _prepare(spec, cluster, bin_dir, node_kit)
            if spec.real_nodes:
                progress(f"setting up {spec.real_nodes} real node(s)")
                _setup_real_nodes(spec, cluster)
            _start_supervisor(cluster)
        elif _enable_all(cluster):
            progress(f"starting the stopped components of {spec.name}")
            os.kill(supervisor.pid, signal.SIGHUP)
    asyncio.run(_wait_ready(spec, cluster, progress=progress))
    return info(spec.name)


@dataclass(frozen=True)
class _NodeKit:
    """What real nodes need from this machine, checked before anything starts."""

    bin_dir: Path
    archives: list[Path]
    runc: str
    cni_bin_dir: Path


def _node_kit(spec: ClusterSpec, cluster: ClusterDir, *, progress: Progress) -> _NodeKit:
    """Check that real nodes can run here, and build their binaries and images (cached)."""
    if os.geteuid() != 0:
        raise ClusterError("real nodes need root (network and mount namespaces, cgroups): run as root")
    for private in NODE_PRIVATE_DIRS:
        if cluster.root.is_relative_to(private):
            raise ClusterError(
                f"real nodes cover {private} with their own directory: move LIQO_HOME ({cluster.root.parent}) "
                f"out of {', '.join(NODE_PRIVATE_DIRS)}"
            )
    tools = {name: toolchain.os_tool(name) for name in toolchain.NODE_OS_TOOLS}
    cni = toolchain.cni_bin_dir()
    node_bin = toolchain.ensure_node_binaries(progress=progress)
    archives = images.ensure_images(progress=progress)
    return _NodeKit(bin_dir=node_bin, archives=archives, runc=tools["runc"], cni_bin_dir=cni)


def _real_nodes(cluster: ClusterDir, spec: ClusterSpec | None = None) -> list[RealNode]:
    """The cluster's real nodes: those of its spec, and any other whose directory is left (to tear down)."""
    stored = read_record(cluster) or {}
    underlay = stored.get("underlay")
    if underlay is None:
        return []
    count = (spec or ClusterSpec.from_dict(stored["spec"])).real_nodes
    nodes_dir = cluster.root / "nodes"
    if nodes_dir.is_dir():
        indexes = [int(p.name.removeprefix("real-")) for p in nodes_dir.glob("real-*") if p.name[5:].isdigit()]
        count = max([count, *indexes])
    return real_nodes(cluster=cluster.name, count=count, underlay=int(underlay), cluster_root=cluster.root)


def _setup_real_nodes(spec: ClusterSpec, cluster: ClusterDir) -> None:
    port = int(read_json(cluster.cluster_file)["ports"]["apiserver"])
    host.setup_cluster(
        _real_nodes(cluster, spec),
        cluster=spec.name,
        clusters_root=cluster.root.parent,
        apiserver_port=port,
        cpus=spec.cpus,
    )


def _teardown_real_nodes(cluster: ClusterDir) -> None:
    nodes = _real_nodes(cluster)
    if nodes:
        host.teardown_cluster(nodes, cluster=cluster.name, clusters_root=cluster.root.parent)


def _stored_spec(cluster: ClusterDir) -> ClusterSpec | None:
    record = read_record(cluster)
    return ClusterSpec.from_dict(record["spec"]) if record is not None else None


def allocate(spec: ClusterSpec, *, bin_dir: Path, node_bin_dir: Path | None) -> dict[str, Any]:
    """Choose a cluster's ports (and, with real nodes, its underlay slot); record them with its spec.

    Under the machine-wide allocation lock, from what every cluster recorded in its ``cluster.json``: once
    this returns, no other cluster's ``up`` or install can choose what this one did. What the record held
    besides (liqo's ports) is kept. ``up`` calls it under the cluster's own lock.
    """
    cluster = ClusterDir.named(spec.name)
    with allocation_lock(cluster.root.parent):
        everything = records(cluster.root.parent)
        mine = everything.get(spec.name, {})
        previous = mine.get("ports")
        ports = refresh_ports(
            Ports(**previous) if previous else None,
            reserved=reserved_ports(everything, name=spec.name, group="ports"),
        )
        record = {key: value for key, value in mine.items() if key not in ("underlay", "nodeBinDir")} | {
            "spec": spec.to_dict(),
            "ports": ports.to_dict(),
            "versions": {
                "kubernetes": toolchain.KUBERNETES_VERSION,
                "etcd": toolchain.ETCD_VERSION,
                "kwok": toolchain.KWOK_VERSION,
            },
            "binDir": str(bin_dir),
        }
        if node_bin_dir is not None:
            taken = [int(r["underlay"]) for n, r in everything.items() if n != spec.name and r.get("underlay")]
            record |= {
                "underlay": underlay_index(previous=mine.get("underlay"), taken=taken),
                "nodeBinDir": str(node_bin_dir),
            }
        write_json(cluster.cluster_file, record)
    return record


def reserve_ports(name: str, wanted: dict[str, int]) -> dict[str, int]:
    """Ports for processes a cluster runs besides its own components (liqo's), recorded in ``cluster.json``.

    ``wanted`` maps each purpose to the port it had (kept: peers know liqo's authentication URL) or 0 for
    a new one. Chosen under the machine-wide allocation lock, like the cluster's own ports.
    """
    cluster = _existing(name)
    with allocation_lock(cluster.root.parent):
        everything = records(cluster.root.parent)
        if name not in everything:  # purged since _existing looked
            raise _not_found(name)
        chosen = choose_ports(
            wanted,
            reserved=reserved_ports(everything, name=name, group="liqoPorts"),
            keep=lambda _: True,  # its own process may be listening on it right now
            candidates=kernel_ports(),
        )
        record = everything[name]
        write_json(cluster.cluster_file, record | {"liqoPorts": (record.get("liqoPorts") or {}) | chosen})
    return chosen


def _prepare(spec: ClusterSpec, cluster: ClusterDir, bin_dir: Path, node_kit: _NodeKit | None) -> None:
    """Write every file the supervisor needs: ports, PKI, kubeconfigs, configuration, components."""
    record = allocate(spec, bin_dir=bin_dir, node_bin_dir=node_kit.bin_dir if node_kit is not None else None)
    ports = Ports(**record["ports"])
    _write_pki(spec, cluster, ports)
    cluster.config.mkdir(parents=True, exist_ok=True)
    (cluster.config / "admission.yaml").write_text(
        admission_config(kubeconfig=str(cluster.pki / "webhook-client.kubeconfig"))
    )
    (cluster.config / "scheduler.yaml").write_text(
        scheduler_config(kubeconfig=str(cluster.pki / "scheduler.kubeconfig"))
    )
    logs_file = cluster.config / "container.log"
    if not logs_file.exists():
        logs_file.write_text(_container_log_lines(spec.name))
    stages = sorted((bin_dir / toolchain.STAGES_DIR).glob("*.yaml"))
    exec_dir = cluster.root / "exec"
    exec_dir.mkdir(exist_ok=True)
    kwok = kwok_config(stages=[stage.read_text() for stage in stages], logs_file=str(logs_file), exec_dir=str(exec_dir))
    (cluster.config / "kwok.yaml").write_text(kwok)
    components = plan(spec=spec, ports=ports, cluster=cluster, bin_dir=bin_dir)
    if node_kit is not None:
        underlay = int(record["underlay"])
        components.append(
            realplan.registry_component(cluster_root=cluster.root, preloaded=node_kit.archives, port=ports.registry)
        )
        ca = pki.KeyPair((cluster.pki / "ca.crt").read_bytes(), (cluster.pki / "ca.key").read_bytes())
        sandbox = images.pause_archive()
        nodes = real_nodes(cluster=spec.name, count=spec.real_nodes, underlay=underlay, cluster_root=cluster.root)
        components.append(
            realplan.provisioner_component(
                nodes=nodes, kubeconfig=cluster.pki / "volume-provisioner.kubeconfig", capacity=spec.node_storage
            )
        )
        for node in nodes:
            realplan.write_node_files(
                node,
                ca=ca,
                cluster=spec.name,
                apiserver_port=ports.apiserver,
                pod_cidr=spec.pod_cidr,
                max_pods=spec.node_pods,
                sandbox_image=images.PAUSE_IMAGE,
                runc=node_kit.runc,
                cni_bin_dir=str(node_kit.cni_bin_dir),
                registry_port=ports.registry,
            )
            components += realplan.node_components(
                node=node,
                node_bin=node_kit.bin_dir,
                sandbox=sandbox,
                archives=[archive for archive in node_kit.archives if archive != sandbox],
                labels=spec.node_labels,
            )
    core = {c.name for c in components}
    extras = [item for item in read_json(cluster.components_file) if item["name"] not in core] if (
        cluster.components_file.exists()
    ) else []  # fmt: skip
    write_json(cluster.components_file, [c.to_dict() for c in components] + extras)


def _container_log_lines(name: str) -> str:
    """What ``kubectl logs`` prints for any pod of the cluster (kwok serves it in CRI log format)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    lines = [f"simulated container started on local cluster {name}", "ready to serve"]
    return "".join(f"{stamp} stdout F {line}\n" for line in lines)


def _enable_all(cluster: ClusterDir) -> bool:
    """Mark every component enabled (``up`` means all of it up); whether any was stopped."""
    components = read_json(cluster.components_file)
    if all(item.get("enabled", True) for item in components):
        return False
    write_json(cluster.components_file, [item | {"enabled": True} for item in components])
    return True


def _write_pki(spec: ClusterSpec, cluster: ClusterDir, ports: Ports) -> None:
    """Create missing certificates and (always) the kubeconfigs, whose server URL follows the port."""
    d = cluster.pki
    ca = _ca(d, "ca", f"liqo-local-{spec.name}-ca")
    if not (d / "sa.key").exists():
        sa_key = pki.new_key()
        pki.write_private(d / "sa.key", pki.key_pem(sa_key))
        (d / "sa.pub").write_bytes(pki.public_pem(sa_key))
    service_names = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    leaves: dict[str, dict[str, Any]] = {
        "apiserver": {"common_name": "kube-apiserver", "server": True, "dns_names": ["localhost", *service_names],
                      "ip_addresses": ["127.0.0.1", spec.api_service_ip, UNDERLAY_HOST]},
        "serving": {"common_name": "localhost", "server": True, "dns_names": ["localhost"],
                    "ip_addresses": ["127.0.0.1"]},
        "etcd": {"common_name": "etcd", "server": True, "client": True, "dns_names": ["localhost"],
                 "ip_addresses": ["127.0.0.1"]},
        "apiserver-etcd-client": {"common_name": "kube-apiserver-etcd-client", "client": True},
        "apiserver-kubelet-client": {"common_name": "kube-apiserver-kubelet-client", "client": True},
        "admin": {"common_name": "liqo-local-admin", "organizations": ["system:masters"], "client": True},
        "controller-manager": {"common_name": "system:kube-controller-manager", "client": True},
        "scheduler": {"common_name": "system:kube-scheduler", "client": True},
        # kwok impersonates every kubelet of the cluster: no per-node identity fits it.
        "kwok": {"common_name": "kwok-controller", "organizations": ["system:masters"], "client": True},
        "volume-provisioner": {"common_name": volumes.IDENTITY, "client": True},
    }  # fmt: skip
    for name, params in leaves.items():
        if not (d / f"{name}.crt").exists():
            pair = pki.issue(ca, **params)
            pki.write_private(d / f"{name}.key", pair.key)
            (d / f"{name}.crt").write_bytes(pair.cert)
    webhook_ca = _ca(d, WEBHOOK_CLIENT_CA, f"liqo-local-{spec.name}-webhook-client-ca")
    if not (d / f"{WEBHOOK_CLIENT}.crt").exists():
        pair = pki.issue(webhook_ca, common_name="kube-apiserver-webhook-client", client=True)
        pki.write_private(d / f"{WEBHOOK_CLIENT}.key", pair.key)
        (d / f"{WEBHOOK_CLIENT}.crt").write_bytes(pair.cert)
    webhook_client = webhook_client_kubeconfig(
        cert=(d / f"{WEBHOOK_CLIENT}.crt").read_bytes(), key=(d / f"{WEBHOOK_CLIENT}.key").read_bytes()
    )
    pki.write_private(d / "webhook-client.kubeconfig", yaml.safe_dump(webhook_client, sort_keys=False).encode())
    server = f"https://127.0.0.1:{ports.apiserver}"
    for user, target in (
        ("admin", cluster.kubeconfig),
        ("controller-manager", d / "controller-manager.kubeconfig"),
        ("scheduler", d / "scheduler.kubeconfig"),
        ("kwok", d / "kwok.kubeconfig"),
        ("volume-provisioner", d / "volume-provisioner.kubeconfig"),
    ):
        config = pki.kubeconfig(
            cluster=spec.name,
            server=server,
            ca=ca.cert,
            user=f"{spec.name}-{user}",
            cert=(d / f"{user}.crt").read_bytes(),
            key=(d / f"{user}.key").read_bytes(),
        )
        pki.write_private(target, yaml.safe_dump(config, sort_keys=False).encode())


def _ca(directory: Path, name: str, common_name: str) -> pki.KeyPair:
    """The CA ``name`` of a cluster's PKI, made if missing."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not (cert.exists() and key.exists()):
        ca = pki.make_ca(common_name)
        pki.write_private(key, ca.key)
        cert.write_bytes(ca.cert)
    return pki.KeyPair(cert.read_bytes(), key.read_bytes())


def _start_supervisor(cluster: ClusterDir) -> None:
    cluster.logs.mkdir(parents=True, exist_ok=True)
    if cluster.status_file.exists():
        cluster.status_file.unlink()  # stale: written by a supervisor that is gone
    with cluster.supervisor_log.open("ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "liqo.localclusters.supervisor", str(cluster.root)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


async def _wait_ready(spec: ClusterSpec, cluster: ClusterDir, *, progress: Progress) -> None:
    """Wait for the API, then create the fake nodes and wait for them and the default ServiceAccount."""
    progress("waiting for the API server")
    await _wait_api(cluster)
    async with KubeClient.from_kubeconfig(cluster.kubeconfig, name=spec.name) as client:
        for index in range(1, spec.nodes + 1):
            with suppress(ConflictError):
                await client.create(NODES, node_manifest(spec=spec, index=index))
        if spec.real_nodes:
            port = int(read_json(cluster.cluster_file)["ports"]["apiserver"])
            for resource, obj in realplan.api_objects(apiserver_port=port):
                await client.apply(resource, obj)
        progress(f"waiting for {spec.all_nodes} node(s) to be Ready")
        problems: list[str] = []

        async def ready() -> bool:
            count = await _ready_nodes(client) + await _ready_nodes(client, kind="real")
            missing_sa = await _missing_default_service_account(client)
            unhealthy = _unhealthy(_read_status(cluster).get("components", {}))
            problems[:] = [f"{count}/{spec.all_nodes} nodes Ready"]
            problems.extend(["no default ServiceAccount yet"] * missing_sa)
            problems.extend([f"unhealthy: {', '.join(unhealthy)}"] * bool(unhealthy))
            return count >= spec.all_nodes and not missing_sa and not unhealthy

        try:
            await poll_until(ready, timeout=NODES_DEADLINE, interval=POLL, message=f"cluster {spec.name} ready")
        except WaitTimeout:
            raise ClusterError(
                f"cluster {spec.name} not ready after {NODES_DEADLINE:.0f}s ({'; '.join(problems)}); "
                f"see `liqoctl local list` and the logs in {cluster.logs}"
            ) from None
        if spec.real_nodes > 1:
            await _route_pods_between_real_nodes(client, cluster)


def _unhealthy(components: dict[str, Any]) -> list[str]:
    """Components that should run and are not healthy; user-stopped ones are marked as such."""
    return [
        name if c.get("enabled", True) else f"{name}(stopped)"
        for name, c in components.items()
        if not c.get("enabled", True) or not c.get("healthy")
    ]


async def _wait_api(cluster: ClusterDir) -> None:
    """Wait until the supervisor reports the API server healthy; fail early if the supervisor died."""
    components: dict[str, Any] = {}

    async def healthy() -> bool:
        status = _read_status(cluster)
        components.clear()
        components.update(status.get("components", {}))
        if status and supervisor_ref(cluster) is None:
            raise ClusterError(f"the supervisor of {cluster.name} exited; see {cluster.supervisor_log}")
        return bool(components.get("kube-apiserver", {}).get("healthy"))

    try:
        await poll_until(healthy, timeout=API_DEADLINE, interval=POLL, message=f"the API server of {cluster.name}")
    except WaitTimeout:
        problems = [f"{name}: {c.get('phase')} {c.get('probeError') or ''}".strip() for name, c in components.items()]
        raise ClusterError(
            f"the API server of {cluster.name} was not healthy within {API_DEADLINE:.0f}s "
            f"({'; '.join(problems) or 'supervisor not reporting'}); logs: {cluster.logs}"
        ) from None


async def _route_pods_between_real_nodes(client: KubeClient, cluster: ClusterDir) -> None:
    """Each real node routes the others' pod CIDRs via their underlay address (all share one link)."""
    found, _ = await client.list_all(NODES, label_selector="type=real")
    cidrs = {node["metadata"]["name"]: node["spec"]["podCIDR"] for node in found if node["spec"].get("podCIDR")}
    nodes = _real_nodes(cluster)
    routes = pod_routes(nodes, cidrs)
    for node in nodes:
        await asyncio.to_thread(host.route_pods, node, routes[node.name])


async def _ready_nodes(client: KubeClient, *, kind: str = "kwok") -> int:
    nodes, _ = await client.list_all(NODES, label_selector=f"type={kind}")
    return sum(1 for node in nodes if _condition(node, "Ready") == "True")


async def _missing_default_service_account(client: KubeClient) -> bool:
    try:
        await client.get(SERVICE_ACCOUNTS, "default", namespace="default")
    except NotFoundError:
        return True
    return False


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


# -- down ----------------------------------------------------------------------------------------------


def down(name: str, *, purge: bool = False) -> list[ProcessRef]:
    """Stop every process of cluster ``name`` (and delete its data with ``purge``); return what was stopped.

    Raises:
        ClusterNotFoundError: no such cluster.
        ClusterError: a process would not die.
    """
    cluster = _existing(name)
    with _cluster_lock(cluster):
        stopped = _stop_processes(cluster)
        _teardown_real_nodes(cluster)
        if purge:
            remove_cluster(cluster)
    return stopped


def _stop_processes(cluster: ClusterDir) -> list[ProcessRef]:
    status = _read_status(cluster)
    refs = [
        ref
        for ref in (ProcessRef.from_dict(c.get("process")) for c in status.get("components", {}).values())
        if ref is not None
    ]
    stopped: list[ProcessRef] = []
    supervisor = supervisor_ref(cluster)
    if supervisor is not None:
        # The supervisor stops its components in reverse order and waits for each.
        terminate(supervisor, timeout=DOWN_DEADLINE)
        stopped.append(supervisor)
    for ref in refs:
        if is_alive(ref):
            terminate(ref, timeout=10.0)
        if not wait_gone(ref, timeout=5.0):
            raise ClusterError(f"process {ref.pid} of cluster {cluster.name} would not stop")
        stopped.append(ref)
    return stopped


# -- list / env / components ----------------------------------------------------------------------------


def names() -> list[str]:
    """Every local cluster, by name."""
    return list(records(clusters_root()))


def listing() -> list[ClusterInfo]:
    """The state of every cluster; one purged while this reads is left out."""
    found = []
    for name in names():
        with suppress(ClusterNotFoundError):
            found.append(info(name))
    return found


def stored_spec(name: str) -> ClusterSpec:
    """The spec cluster ``name`` was made with (its CIDRs are what ``liqoctl install`` records there)."""
    return ClusterSpec.from_dict(_record(name)["spec"])


@dataclass(frozen=True)
class PodNetwork:
    """How pods on a cluster's real nodes, and the cluster's API server, reach each other and peers.

    The API server is a host process on loopback and cannot reach pod or Service addresses (pod CIDRs of
    different local clusters may even be the same): it reaches pods through node ports on the real nodes'
    addresses. Pods reach it — and peers' pods reach it — at the underlay's host address, which the
    cluster's nftables table forwards to loopback (its serving certificate names that address).
    """

    api_server_url: str
    node_addresses: tuple[str, ...]


def pod_network(name: str) -> PodNetwork | None:
    """The pod network of local cluster ``name``; None when it has no real node (nothing runs as a pod)."""
    cluster = _existing(name)
    stored = _record(name)
    nodes = [node for node in _real_nodes(cluster) if node.index <= ClusterSpec.from_dict(stored["spec"]).real_nodes]
    if not nodes:
        return None
    return PodNetwork(
        api_server_url=f"https://{UNDERLAY_HOST}:{stored['ports']['apiserver']}",
        node_addresses=tuple(node.ip for node in nodes),
    )


def info(name: str) -> ClusterInfo:
    """The state of one cluster, from its files (and a quick look at its nodes when it runs)."""
    cluster = _existing(name)
    stored = _record(name)
    spec = ClusterSpec.from_dict(stored["spec"])
    status = _read_status(cluster)
    components: dict[str, Any] = status.get("components", {})
    running = supervisor_ref(cluster) is not None
    unhealthy = _unhealthy(components) if running else []
    if not running:
        state = "Stopped" if not status or status.get("supervisor") is None else "Crashed"
    else:
        state = "Degraded" if unhealthy else "Running"
    nodes, real = f"?/{spec.nodes}", f"?/{spec.real_nodes}"
    if running and components.get("kube-apiserver", {}).get("healthy"):
        # KubeconfigError: purged since the supervisor was seen running (list shows it Running, nodes unknown).
        with suppress(KubeError, KubeconfigError, aiohttp.ClientError, OSError):
            fake_ready, real_ready = asyncio.run(_count_ready(cluster))
            nodes, real = f"{fake_ready}/{spec.nodes}", f"{real_ready}/{spec.real_nodes}"
    return ClusterInfo(
        name=name,
        api_url=f"https://127.0.0.1:{stored['ports']['apiserver']}",
        state=state,
        kubeconfig=str(cluster.kubeconfig),
        nodes=nodes,
        real_nodes=real,
        cpus=spec.cpus,
        unhealthy=unhealthy,
        components=components,
    )


async def _count_ready(cluster: ClusterDir) -> tuple[int, int]:
    async with KubeClient.from_kubeconfig(cluster.kubeconfig) as client:
        async with asyncio.timeout(3):
            return await _ready_nodes(client), await _ready_nodes(client, kind="real")


def env(name: str) -> dict[str, str]:
    """The environment that points kubectl at cluster ``name``: KUBECONFIG and a PATH with our kubectl."""
    cluster = _existing(name)
    bin_dir = _record(name).get("binDir") or str(toolchain.bin_dir())
    return {"KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def set_components(name: str, components: list[str], *, enabled: bool, timeout: float = 60.0) -> None:
    """Stop or start single components of a running cluster (for fault drills) and wait for the result."""

    def toggle(current: list[dict[str, Any]]) -> list[dict[str, Any]]:
        known = {item["name"] for item in current}
        unknown = sorted(set(components) - known)
        if unknown:
            raise ClusterError(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return [item | ({"enabled": enabled} if item["name"] in components else {}) for item in current]

    _change_components(
        name,
        toggle,
        settled=lambda observed: all(_settled(observed.get(c, {}), enabled=enabled) for c in components),
        what=f"components {', '.join(components)} did not {'start' if enabled else 'stop'}",
        timeout=timeout,
    )


def add_components(name: str, components: list[Component], *, timeout: float = 60.0) -> None:
    """Run extra processes under the cluster's supervisor (liqo's own components) and wait until healthy.

    A component with the name of an existing one replaces it (the supervisor restarts it if its command
    line changed: then the wait is for the new process, the old one's health meaning nothing). Extra
    components survive ``down``/``up``.
    """
    names = {c.name for c in components}
    cluster = _existing(name)
    before = {item["name"]: item["argv"] for item in read_json(cluster.components_file)}
    processes = {n: status.get("process") for n, status in _read_status(cluster).get("components", {}).items()}
    restarted = {c.name: processes.get(c.name) for c in components if before.get(c.name, c.argv) != c.argv}

    def merge(current: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [item for item in current if item["name"] not in names] + [c.to_dict() for c in components]

    def settled(observed: dict[str, Any]) -> bool:
        return all(
            _settled(observed.get(n, {}), enabled=True)
            and (n not in restarted or observed[n].get("process") != restarted[n])
            for n in names
        )

    _change_components(
        name,
        merge,
        settled=settled,
        what=f"components {', '.join(sorted(names))} did not become healthy",
        timeout=timeout,
    )


def remove_components(name: str, names: list[str], *, timeout: float = 60.0) -> None:
    """Stop and forget extra components (their processes are stopped first)."""
    _change_components(
        name,
        lambda current: [item for item in current if item["name"] not in names],
        settled=lambda observed: not set(names) & set(observed),
        what=f"components {', '.join(names)} did not stop",
        timeout=timeout,
    )


def _change_components(
    name: str,
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    *,
    settled: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float,
) -> None:
    """Rewrite ``components.json``, tell the supervisor, and wait until ``settled(observed components)``."""
    cluster = _existing(name)
    with _cluster_lock(cluster):
        supervisor = supervisor_ref(cluster)
        if supervisor is None:
            raise ClusterError(f"cluster {name} is not running; start it with `liqoctl local up {name}`")
        write_json(cluster.components_file, change(read_json(cluster.components_file)))
        os.kill(supervisor.pid, signal.SIGHUP)
    if not block_until(lambda: settled(_read_status(cluster).get("components", {})), timeout=timeout, interval=POLL):
        raise ClusterError(f"{what} within {timeout:.0f}s; see {cluster.logs}")


def _settled(status: dict[str, Any], *, enabled: bool) -> bool:
    if enabled:
        return bool(status.get("healthy"))
    return status.get("phase") == "Stopped" and not status.get("process")


def components(name: str) -> list[Component]:
    """What the supervisor of cluster ``name`` is asked to run."""
    return [Component.from_dict(item) for item in read_json(_existing(name).components_file)]


def issue_client_kubeconfig(name: str, *, user: str, path: Path) -> None:
    """Write a kubeconfig for ``user`` of cluster ``name``, signed by the cluster's CA (mode 0600)."""
    cluster = _existing(name)
    ca = pki.KeyPair((cluster.pki / "ca.crt").read_bytes(), (cluster.pki / "ca.key").read_bytes())
    pair = pki.issue(ca, common_name=user, client=True)
    server = f"https://127.0.0.1:{_record(name)['ports']['apiserver']}"
    config = pki.kubeconfig(cluster=name, server=server, ca=ca.cert, user=user, cert=pair.cert, key=pair.key)
    pki.write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


def issue_serving_pair(name: str, *, cert: Path, key: Path) -> None:
    """Write a loopback serving certificate signed by the cluster's CA (for liqo's HTTPS endpoints)."""
    cluster = _existing(name)
    ca = pki.KeyPair((cluster.pki / "ca.crt").read_bytes(), (cluster.pki / "ca.key").read_bytes())
    pair = pki.issue(ca, common_name="localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True)
    pki.write_private(key, pair.key)
    cert.write_bytes(pair.cert)


def load_image(name: str, archive: Path) -> list[str]:
    """Import an OCI or docker image archive into every real node of cluster ``name``; return its image names.

    The archive is kept with the cluster, so nodes started later (or again) import it too.

    Raises:
        ClusterError: the cluster has no real nodes or is not running, or a node refused the archive.
        ImageError: the file is not an image archive.
    """
    cluster = _existing(name)
    nodes = _real_nodes(cluster)
    if not nodes:
        raise ClusterError(f"cluster {name} has no real nodes: images only matter there (`local up --real-nodes N`)")
    image_names = list(images.archive_images(archive))
    if not image_names:
        raise images.ImageError(f"{archive} names no image (a docker archive needs RepoTags, an OCI one a name)")
    with _cluster_lock(cluster):
        if supervisor_ref(cluster) is None:
            raise ClusterError(f"cluster {name} is not running; start it with `liqoctl local up {name}`")
        kept = realplan.images_dir(cluster.root) / f"{hashlib.sha256(str(image_names).encode()).hexdigest()[:12]}.tar"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, kept)
        ctr = str(Path(_record(name)["nodeBinDir"]) / "ctr")
        for node in nodes:
            try:
                host.run_in_node(node, ctr, "--namespace", "k8s.io", "images", "import", str(kept))
            except host.HostError as exc:
                raise ClusterError(f"node {node.name} could not import {archive}: {exc}") from exc
    return image_names


def find_by_server(server: str) -> str | None:
    """The local cluster whose API server is at ``server`` (a kubeconfig's server URL), if any."""
    for candidate, stored in records(clusters_root()).items():
        if server.rstrip("/") == f"https://127.0.0.1:{stored['ports']['apiserver']}":
            return candidate
    return None


# -- helpers -------------------------------------------------------------------------------------------


def supervisor_ref(cluster: ClusterDir) -> ProcessRef | None:
    """The running supervisor of ``cluster``, if any."""
    ref = ProcessRef.from_dict(_read_status(cluster).get("supervisor"))
    return ref if ref is not None and is_alive(ref) else None


def _read_status(cluster: ClusterDir) -> dict[str, Any]:
    try:
        status: dict[str, Any] = read_json(cluster.status_file)
    except (FileNotFoundError, ValueError):
        return {}
    return status


def _existing(name: str) -> ClusterDir:
    check_name(name)
    cluster = ClusterDir.named(name)
    if not cluster.exists():
        raise _not_found(name)
    return cluster


def _not_found(name: str) -> ClusterNotFoundError:
    known = ", ".join(names()) or "none"
    return ClusterNotFoundError(f"no local cluster named {name!r} (known: {known})")


def _record(name: str) -> dict[str, Any]:
    """The ``cluster.json`` of an existing cluster; not found also when it is purged while this reads."""
    record = read_record(_existing(name))
    if record is None:
        raise _not_found(name)
    return record


@contextmanager
def _cluster_lock(cluster: ClusterDir, *, create: bool = False) -> Iterator[None]:
    """The lock of one cluster's commands; ``create`` for ``up``, the others need the cluster to exist.

    Raises:
        ClusterNotFoundError: (without ``create``) the cluster is gone, perhaps purged while this waited.
    """
    with ExitStack() as held:
        try:
            held.enter_context(locked(cluster.root / ".lock", make_parent=create))
        except FileNotFoundError:
            raise _not_found(cluster.name) from None
        if not create and not cluster.exists():
            raise _not_found(cluster.name)
        yield
