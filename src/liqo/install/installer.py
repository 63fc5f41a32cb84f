"""``liqoctl install`` / ``uninstall``: apply the manifests, then start the manager with the right launcher.

The cluster ID is the UID of the ``kube-system`` namespace: stable for the life of the cluster, the same
after an uninstall and re-install, and needing no storage of its own. A re-install keeps the
authentication token and the cluster key, so peers holding the one or pinning the other keep working.

The cluster's network (pod and service CIDRs) is recorded in the identity too, and told to peers at
authentication. It is never guessed: a local cluster's comes from its own spec; elsewhere ``--pod-cidr`` and
``--service-cidr`` are required the first time, and a re-install keeps what was recorded. Nodes'
``spec.podCIDRs`` are only per-node slices (and unused by many CNIs), the ``kubernetes`` Service holds one
address of the service CIDR: a network inferred from them could be too narrow or plain wrong, and a peer
trusting it would dial the wrong pods — exactly what recording the network is meant to prevent.

Launchers: on a local cluster (recognised by its API server URL) the manager is a component of the
cluster's supervisor, with a client certificate for the user ``liqo-manager``, a loopback HTTPS port for
authentication and another for the webhooks (which accepts only the API server's webhook client
certificate); elsewhere it is the Deployment of the manifests. Locally, the manager and the virtual kubelet
each serve metrics on a loopback port of their own, so that local clusters on one machine never share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_network
from pathlib import Path
from typing import Any

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.clusterkey import ClusterKey
from liqo.api.crds import crd_name
from liqo.api.identity import ClusterIdentity, read_cluster_key, read_identity
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork
from liqo.install import manifests
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRDS,
    CSRS,
    DEPLOYMENTS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)
from liqo.kube.waiting import poll_until
from liqo.local import clusters
from liqo.local.components import WEBHOOK_CLIENT_CA, Component, Probe
from liqo.local.layout import ClusterDir, free_ports
from liqo.offloading.registration import REGISTRATIONS
from liqo.peering.tokens import new_token, token_of

Progress = Callable[[str], None]

_KINDS = (
    CRDS,
    NAMESPACES,
    SERVICE_ACCOUNTS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    ROLES,
    ROLE_BINDINGS,
    CONFIGMAPS,
    SECRETS,
    DEPLOYMENTS,
)
BY_KIND: dict[str, Resource] = {
    r.kind: r
    for r in (
        *_KINDS,
        SERVICES,
        MUTATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING_ADMISSION_POLICIES,
        VALIDATING_ADMISSION_POLICY_BINDINGS,
    )
}
CRD_DEADLINE = 60.0
MANAGER_DEADLINE = 60.0
UNINSTALL_DEADLINE = 120.0


class InstallError(RuntimeError):
    """Install or uninstall cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class InstallOptions:
    """The flags of ``liqoctl install``."""

    cluster_name: str | None = None
    cluster_labels: dict[str, str] = field(default_factory=dict)
    api_server_url: str | None = None
    auth_url: str | None = None
    image: str = manifests.DEFAULT_IMAGE
    identity_ttl: int = 7200
    reserved_namespaces: tuple[str, ...] = ()
    pod_cidr: IPNetwork | None = None
    service_cidr: IPNetwork | None = None


def resolve_network(
    *,
    pod_cidr: IPNetwork | None,
    service_cidr: IPNetwork | None,
    local: ClusterNetwork | None,
    previous: ClusterNetwork | None,
) -> ClusterNetwork:
    """The network install records (pure): a local cluster's own, else the flags, else the previous install's.

    Raises:
        InstallError: a flag contradicts a local cluster's spec, a CIDR is missing on a cluster that is not
            local and was never installed with one, or together they are no network a cluster may claim.
    """
    if local is not None:
        for flag, given, actual in (
            ("--pod-cidr", pod_cidr, local.pod_cidr),
            ("--service-cidr", service_cidr, local.service_cidr),
        ):
            if given is not None and given != actual:
                raise InstallError(f"{flag} {given} is not this local cluster's: it was made with {actual}")
        return local
    pods = pod_cidr or (previous.pod_cidr if previous else None)
    services = service_cidr or (previous.service_cidr if previous else None)
    missing = [flag for flag, value in (("--pod-cidr", pods), ("--service-cidr", services)) if value is None]
    if pods is None or services is None:
        raise InstallError(
            f"{' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} required: this cluster's network is not"
            " recorded yet, and liqo does not guess it (peers would dial the wrong pods). The pod CIDR is"
            " kube-controller-manager's --cluster-cidr or your CNI's IP pool, the service CIDR kube-apiserver's"
            " --service-cluster-ip-range; a re-install keeps them"
        )
    try:
        return ClusterNetwork(pod_cidr=pods, service_cidr=services)
    except InvalidNetwork as exc:
        raise InstallError(f"this cluster's network (--pod-cidr {pods}, --service-cidr {services}): {exc}") from None


@dataclass(frozen=True)
class LocalManager:
    """Where the manager of a local cluster keeps its files, and the ports it and the virtual kubelet serve."""

    cluster: str
    directory: Path
    port: int
    kubelet_port: int
    webhook_port: int
    metrics_port: int
    kubelet_metrics_port: int

    @property
    def auth_url(self) -> str:
        """The authentication endpoint on loopback."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def webhook_url(self) -> str:
        """The webhook listener on loopback."""
        return f"https://127.0.0.1:{self.webhook_port}"

    def webhook_client_config(self, path: str) -> dict[str, Any]:
        """The webhook at ``path`` on the loopback listener, whose certificate the cluster's CA signs."""
        ca = (ClusterDir.named(self.cluster).pki / "ca.crt").read_bytes()
        return manifests.webhook_url_client_config(webhook_url=self.webhook_url, ca_pem=ca, path=path)

    def component(self, *, identity_ttl: int, reserved_namespaces: tuple[str, ...] = ()) -> Component:
        """The manager as a component of the cluster's supervisor."""
        pki = ClusterDir.named(self.cluster).pki
        return Component(
            name=manifests.MANAGER,
            argv=[
                sys.executable,
                "-m",
                "liqo.apps.manager",
                f"--kubeconfig={self.directory / 'manager.kubeconfig'}",
                f"--auth-address=127.0.0.1:{self.port}",
                f"--auth-cert={self.directory / 'auth.crt'}",
                f"--auth-key={self.directory / 'auth.key'}",
                f"--webhook-address=127.0.0.1:{self.webhook_port}",
                f"--webhook-cert={self.directory / 'webhook.crt'}",
                f"--webhook-key={self.directory / 'webhook.key'}",
                f"--webhook-client-ca={pki / f'{WEBHOOK_CLIENT_CA}.crt'}",
                f"--metrics-address=127.0.0.1:{self.metrics_port}",
                *manifests.manager_flags(identity_ttl=identity_ttl, reserved_namespaces=reserved_namespaces),
            ],
            probe=Probe(url=f"{self.auth_url}/healthz", ca=str(pki / "ca.crt")),
            after=["kube-apiserver"],
        )

    def virtual_kubelet_component(self) -> Component:
        """The virtual kubelet as a component of the cluster's supervisor, its kubelet API on loopback.

        The API server verifies kubelets with the cluster CA, hence a serving pair from that CA; the API
        server's own client certificate (same CA) is what the kubelet API requires in turn.
        """
        ca = str(ClusterDir.named(self.cluster).pki / "ca.crt")
        return Component(
            name=manifests.VIRTUAL_KUBELET,
            argv=[
                sys.executable,
                "-m",
                "liqo.apps.virtualkubelet",
                f"--kubeconfig={self.directory / 'virtual-kubelet.kubeconfig'}",
                f"--listen=127.0.0.1:{self.kubelet_port}",
                "--node-address=127.0.0.1",
                f"--cert={self.directory / 'kubelet.crt'}",
                f"--key={self.directory / 'kubelet.key'}",
                f"--client-ca={ca}",
                f"--metrics-address=127.0.0.1:{self.kubelet_metrics_port}",
            ],
            probe=Probe(url=f"https://127.0.0.1:{self.kubelet_port}/healthz", ca=ca),
            after=["kube-apiserver"],
        )


async def plan(
    client: KubeClient, options: InstallOptions, *, local: LocalManager | None
) -> tuple[list[manifests.Manifest], ClusterIdentity]:
    """The manifests ``install`` would apply on the cluster behind ``client`` (for ``--dry-run`` too)."""
    cluster_id = (await client.get(NAMESPACES, "kube-system"))["metadata"]["uid"]
    previous = await read_identity(client)
    cluster_name = options.cluster_name or (previous.cluster_name if previous else None)
    cluster_name = cluster_name or (local.cluster if local else f"cluster-{cluster_id[:8]}")
    auth_url = options.auth_url or (local.auth_url if local else (previous.auth_url if previous else ""))
    if not auth_url:
        auth_url = f"https://{manifests.AUTH_SERVICE}.{names.LIQO_NAMESPACE}.svc"
    key = await read_cluster_key(client) or ClusterKey.generate()
    network = resolve_network(
        pod_cidr=options.pod_cidr,
        service_cidr=options.service_cidr,
        local=_local_network(local.cluster) if local else None,
        previous=previous.network if previous else None,
    )
    identity = ClusterIdentity(
        cluster_id=cluster_id,
        cluster_name=cluster_name,
        api_server_url=options.api_server_url or client.server,
        auth_url=auth_url,
        cluster_labels=options.cluster_labels,
        public_key=key.public_pem,
        key_fingerprint=key.fingerprint,
        network=network,
    )
    items = manifests.manifests(
        cluster_id=identity.cluster_id,
        cluster_name=identity.cluster_name,
        cluster_labels=options.cluster_labels,
        api_server_url=identity.api_server_url,
        auth_url=identity.auth_url,
        token=await _token(client),
        key=key,
        network=network,
        image=options.image,
        identity_ttl=options.identity_ttl,
        workload=local is None,
        webhook_client_config=local.webhook_client_config if local else manifests.webhook_service_client_config,
        reserved_namespaces=options.reserved_namespaces,
    )
    return items, identity


async def install(client: KubeClient, options: InstallOptions, *, progress: Progress) -> ClusterIdentity:
    """Install (or update) liqo on the cluster behind ``client`` and wait until its manager is ready."""
    local = local_manager(client)
    items, identity = await plan(client, options, local=local)
    progress(f"installing liqo on {identity.cluster_name} (cluster ID {identity.cluster_id})")
    for item in items:
        await client.apply(BY_KIND[item["kind"]], item)
    await wait_crds_established(client)
    if local is not None:
        progress(f"starting the manager on local cluster {local.cluster} (auth endpoint {local.auth_url})")
        await asyncio.to_thread(_start_local_manager, local, options)
    else:
        progress("waiting for the manager Deployment")
        await _wait_deployment(client)
    return identity


async def uninstall(client: KubeClient, *, purge: bool, progress: Progress) -> None:
    """Remove liqo from the cluster behind ``client``; ``purge`` also removes its CRDs and everything of liqo's.

    Raises:
        InstallError: peerings are still active (without ``purge``), or something would not go away.
    """
    if not purge:
        active = await _active_peers(client)
        if active:
            raise InstallError(
                f"peerings are still active ({', '.join(active)}): unpeer first, or uninstall with --purge"
            )
    # The webhooks go first: with failurePolicy Fail, once the manager is gone every pod created in a
    # namespace still labelled for offloading (every ShadowPod written in a twin) would be refused.
    for resource, name, _ in REGISTRATIONS:
        with contextlib.suppress(NotFoundError):
            await client.delete(resource, name)
    local = local_manager(client)
    if local is not None:
        progress(f"stopping the manager and the virtual kubelet of local cluster {local.cluster}")
        await asyncio.to_thread(
            clusters.remove_components, local.cluster, [manifests.MANAGER, manifests.VIRTUAL_KUBELET]
        )
    else:
        workloads = (
            (DEPLOYMENTS, manifests.MANAGER),
            (DEPLOYMENTS, manifests.VIRTUAL_KUBELET),
            (SERVICES, manifests.AUTH_SERVICE),
            (SERVICES, manifests.WEBHOOK_SERVICE),
        )
        for resource, name in workloads:
            with contextlib.suppress(NotFoundError):
                await client.delete(resource, name, namespace=names.LIQO_NAMESPACE)
    if purge:
        progress("deleting liqo resources, tenant and twin namespaces, virtual nodes and CRDs")
        await _purge(client)
    progress("deleting RBAC and the liqo namespace")
    for resource, name in (
        *((CLUSTER_ROLE_BINDINGS, component) for component in (manifests.MANAGER, manifests.VIRTUAL_KUBELET)),
        *((CLUSTER_ROLES, role) for role in (manifests.MANAGER, manifests.VIRTUAL_KUBELET)),
        *((CLUSTER_ROLES, role["metadata"]["name"]) for role in manifests.peer_cluster_roles()),
        (VALIDATING_ADMISSION_POLICY_BINDINGS, manifests.PEER_SERVICES_POLICY),
        (VALIDATING_ADMISSION_POLICIES, manifests.PEER_SERVICES_POLICY),
    ):
        with contextlib.suppress(NotFoundError):
            await client.delete(resource, name)
    with contextlib.suppress(NotFoundError):
        await client.delete(NAMESPACES, names.LIQO_NAMESPACE)
    await _wait_gone(client, NAMESPACES, names.LIQO_NAMESPACE)


async def _purge(client: KubeClient) -> None:
    # Our finalizers would wait for a manager that is gone: drop them, then delete.
    for resource in liqo_resources.ALL:
        with contextlib.suppress(NotFoundError):
            items, _ = await client.list_all(resource)
            for item in items:
                meta = item["metadata"]
                if meta.get("finalizers"):
                    await client.patch(
                        resource, meta["name"], {"metadata": {"finalizers": None}}, namespace=meta.get("namespace")
                    )
    # Then whatever else is ours, found by label: tenant namespaces, twins (the consumers' pods and Secrets are
    # in them), virtual Nodes (their virtual kubelet is gone), CSRs a failed handshake may have left.
    ours = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"
    namespaces, _ = await client.list_all(NAMESPACES, label_selector=ours)
    namespaces = [ns for ns in namespaces if ns["metadata"]["name"] != names.LIQO_NAMESPACE]  # last, by uninstall
    nodes, _ = await client.list_all(NODES, label_selector=f"{ours},{names.VIRTUAL_NODE_TYPE}={names.VIRTUAL_NODE}")
    csrs, _ = await client.list_all(CSRS, label_selector=ours)
    for resource, items in ((NAMESPACES, namespaces), (NODES, nodes), (CSRS, csrs)):
        for item in items:
            with contextlib.suppress(NotFoundError):
                await client.delete(resource, item["metadata"]["name"])
    for resource in liqo_resources.ALL:
        with contextlib.suppress(NotFoundError):
            await client.delete(CRDS, crd_name(resource))
    for resource in liqo_resources.ALL:
        await _wait_gone(client, CRDS, crd_name(resource))
    for namespace in namespaces:
        await _wait_gone(client, NAMESPACES, namespace["metadata"]["name"])


async def _active_peers(client: KubeClient) -> list[str]:
    try:
        peers, _ = await client.list_all(liqo_resources.FOREIGN_CLUSTERS)
    except NotFoundError:
        return []
    return [
        peer["spec"].get("clusterName") or peer["spec"]["clusterID"]
        for peer in peers
        if any(
            condition.get("type") in ("OutgoingPeering", "IncomingPeering")
            and condition.get("status") in ("Pending", "Established")
            for condition in (peer.get("status") or {}).get("conditions") or []
        )
    ]


async def _token(client: KubeClient) -> str:
    """The existing token (a re-install must not invalidate what peers hold), or a new one."""
    try:
        token = token_of(await client.get(SECRETS, names.AUTH_TOKEN_SECRET, namespace=names.LIQO_NAMESPACE))
    except NotFoundError:
        token = None
    return token or new_token()


def _local_network(name: str) -> ClusterNetwork:
    spec = clusters.stored_spec(name)
    try:
        # The spec was validated when the cluster was made, but may be spelled otherwise than canonically.
        return ClusterNetwork(pod_cidr=ip_network(spec.pod_cidr), service_cidr=ip_network(spec.service_cidr))
    except InvalidNetwork as exc:
        raise InstallError(f"local cluster {name} has a network liqo cannot tell peers about: {exc}") from None


def local_manager(client: KubeClient) -> LocalManager | None:
    """The manager layout if ``client`` talks to a local cluster of ours."""
    name = clusters.find_by_server(client.server)
    if name is None:
        return None
    directory = ClusterDir.named(name).root / "liqo"
    auth = _kept_port(name, manifests.MANAGER, "--auth-address=")
    kubelet = _kept_port(name, manifests.VIRTUAL_KUBELET, "--listen=")
    webhook = _kept_port(name, manifests.MANAGER, "--webhook-address=")
    metrics = _kept_port(name, manifests.MANAGER, "--metrics-address=")
    kubelet_metrics = _kept_port(name, manifests.VIRTUAL_KUBELET, "--metrics-address=")
    fresh = iter(free_ports(5))
    return LocalManager(
        cluster=name,
        directory=directory,
        port=auth or next(fresh),
        kubelet_port=kubelet or next(fresh),
        webhook_port=webhook or next(fresh),
        metrics_port=metrics or next(fresh),
        kubelet_metrics_port=kubelet_metrics or next(fresh),
    )


def _kept_port(name: str, component_name: str, flag: str) -> int | None:
    """The port a previous install chose (kept: peers' auth URLs, nodes' kubelet endpoints, scrape targets)."""
    for component in clusters.components(name):
        if component.name == component_name:
            for arg in component.argv:
                if arg.startswith(flag):
                    return int(arg.rsplit(":", 1)[1])
    return None


def _start_local_manager(local: LocalManager, options: InstallOptions) -> None:
    local.directory.mkdir(parents=True, exist_ok=True)
    clusters.issue_client_kubeconfig(local.cluster, user=manifests.MANAGER, path=local.directory / "manager.kubeconfig")
    clusters.issue_serving_pair(local.cluster, cert=local.directory / "auth.crt", key=local.directory / "auth.key")
    clusters.issue_serving_pair(
        local.cluster, cert=local.directory / "webhook.crt", key=local.directory / "webhook.key"
    )
    clusters.issue_client_kubeconfig(
        local.cluster, user=manifests.VIRTUAL_KUBELET, path=local.directory / "virtual-kubelet.kubeconfig"
    )
    clusters.issue_serving_pair(
        local.cluster, cert=local.directory / "kubelet.crt", key=local.directory / "kubelet.key"
    )
    manager = local.component(identity_ttl=options.identity_ttl, reserved_namespaces=options.reserved_namespaces)
    components = [manager, local.virtual_kubelet_component()]
    clusters.add_components(local.cluster, components, timeout=MANAGER_DEADLINE)


async def wait_crds_established(client: KubeClient) -> None:
    """Wait until every liqo CRD is Established (its resources can be created)."""
    for resource in liqo_resources.ALL:
        name = crd_name(resource)

        async def established(name: str = name) -> bool:
            conditions = ((await client.get(CRDS, name)).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await poll_until(established, timeout=CRD_DEADLINE, message=f"CRD {name} not Established", interval=0.05)


async def _wait_deployment(client: KubeClient) -> None:
    async def available() -> bool:
        deployment = await client.get(DEPLOYMENTS, manifests.MANAGER, namespace=names.LIQO_NAMESPACE)
        return bool((deployment.get("status") or {}).get("availableReplicas"))

    await poll_until(
        available,
        timeout=MANAGER_DEADLINE,
        interval=0.5,
        message=f"the {manifests.MANAGER} Deployment is not available: "
        f"kubectl -n {names.LIQO_NAMESPACE} describe deployment {manifests.MANAGER}",
    )


async def _wait_gone(client: KubeClient, resource: Resource, name: str) -> None:
    async def gone() -> bool:
        try:
            await client.get(resource, name)
        except NotFoundError:
            return True
        return False

    await poll_until(gone, timeout=UNINSTALL_DEADLINE, interval=0.2, message=f"{resource.kind} {name} still exists")
