"""``liqoctl install`` / ``uninstall``: render the values, apply the manifests, start liqo with the launcher that fits.

The install writes what it is told (``liqo-settings``); the manager makes the cluster identity, key and token
from it at start-up (:mod:`liqo.install.bootstrap`), so ``helm install`` and ``liqoctl install`` are the same
act. A re-install keeps the token and the key (the manager never replaces them) and the settings recorded
before, for every flag not given again.

The cluster's network (pod and service CIDRs) is never guessed: a local cluster's comes from its own spec;
elsewhere ``--pod-cidr`` and ``--service-cidr`` are required the first time, and a re-install keeps what was
recorded. Nodes' ``spec.podCIDRs`` are only per-node slices (and unused by many CNIs), the ``kubernetes``
Service holds one address of the service CIDR: a network inferred from them could be too narrow or plain
wrong, and a peer trusting it would dial the wrong pods — exactly what recording the network is meant to
prevent.

Launchers:

- **pods** (:class:`Pods`): the Deployments of the manifests, from the liqo image. Any cluster, and a
  local cluster with real nodes, where the values route the API server's calls through node ports
  (:func:`local_pod_values`: it runs on loopback and reaches no pod address).
- **host processes** (:class:`HostProcesses`): a local cluster without real nodes (nothing could run a
  pod): the manager and the virtual kubelet are components of the cluster's supervisor, with client
  certificates for their users, and loopback ports for authentication, webhooks and the kubelet API.

Locally, the manager and the virtual kubelet each serve metrics on a loopback port of their own, so that
local clusters on one machine never share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.crds import crd_name
from liqo.api.foreignclusters import ConditionStatus, ConditionType
from liqo.api.identity import ClusterIdentity, read_identity
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork
from liqo.install import fabric, manifests
from liqo.install.bootstrap import read_settings
from liqo.install.values import DEFAULT_IMAGE, Values
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRDS,
    CSRS,
    DAEMON_SETS,
    DEPLOYMENTS,
    MUTATING_ADMISSION_POLICIES,
    MUTATING_ADMISSION_POLICY_BINDINGS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    POD_TEMPLATES,
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
from liqo.local.layout import ClusterDir
from liqo.local.realnodes import images
from liqo.local.realnodes.configs import NODE_LABEL
from liqo.local.realnodes.nodes import UNDERLAY_NETWORK
from liqo.offloading import placementpolicy, registration
from liqo.offloading.registration import REGISTRATIONS
from liqo.peering.authserver import RateLimit
from liqo.peering.enrolment import TenantLimits

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
    DAEMON_SETS,
    POD_TEMPLATES,
)
_COMPONENTS_WITH_CLUSTER_ROLES = (manifests.MANAGER, manifests.VIRTUAL_KUBELET, fabric.GATEWAY)
BY_KIND: dict[str, Resource] = {
    r.kind: r
    for r in (
        *_KINDS,
        SERVICES,
        MUTATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING_ADMISSION_POLICIES,
        VALIDATING_ADMISSION_POLICY_BINDINGS,
        MUTATING_ADMISSION_POLICIES,
        MUTATING_ADMISSION_POLICY_BINDINGS,
    )
}
PLACEMENT_POLICY = (
    (MUTATING_ADMISSION_POLICY_BINDINGS, placementpolicy.NAME),
    (MUTATING_ADMISSION_POLICIES, placementpolicy.NAME),
)
"""The pod placement policy's objects, in deletion order."""
CRD_DEADLINE = 60.0
MANAGER_DEADLINE = 60.0
UNINSTALL_DEADLINE = 120.0


class InstallError(RuntimeError):
    """Install or uninstall cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class InstallOptions:
    """The flags of ``liqoctl install`` (None: keep what the cluster records, else the default)."""

    cluster_name: str | None = None
    cluster_labels: dict[str, str] | None = None
    api_server_url: str | None = None
    auth_url: str | None = None
    image: str | None = None
    identity_ttl: int = 7200
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    auth_rate_limit: RateLimit = field(default_factory=RateLimit)
    reserved_namespaces: tuple[str, ...] = ()
    pod_cidr: IPNetwork | None = None
    service_cidr: IPNetwork | None = None
    replicas: int = 2
    peer_pools: tuple[str, ...] = ()
    """Where peers' pods are named and routed (empty: the default pools)."""


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


LOCAL_NODE_PORTS = {"auth": 30443, "webhook": 30944, "kubelet": 30250}
"""The node ports through which a local cluster's API server and peers reach liqo's pods on its real nodes."""


def local_pod_values(values: Values, *, network: clusters.PodNetwork, image: str) -> Values:
    """``values`` for a local cluster whose liqo runs as pods on its real nodes (pure).

    Its API server, a loopback host process, calls the webhooks and the kubelet API through node ports on
    the first real node's address (the serving certificates name it); peers' pods reach the authentication
    endpoint the same way, and the API server at the underlay's host address. Pods go to real nodes only
    (KWOK's fake nodes run nothing), from the image every real node holds. Peers' pods are never seen in
    the underlay (every local cluster's nodes are on it): the network fabric's allocations stay clear of it.
    """
    address = network.node_addresses[0]
    return dataclasses.replace(
        values,
        reserved_subnets=(*values.reserved_subnets, str(UNDERLAY_NETWORK)),
        api_server_url=network.api_server_url,
        auth_url=values.auth_url or f"https://{address}:{LOCAL_NODE_PORTS['auth']}",
        auth_service_type="NodePort",
        auth_node_port=LOCAL_NODE_PORTS["auth"],
        webhook_url=f"https://{address}:{LOCAL_NODE_PORTS['webhook']}",
        webhook_node_port=LOCAL_NODE_PORTS["webhook"],
        virtual_kubelet_node_port=LOCAL_NODE_PORTS["kubelet"],
        node_selector={NODE_LABEL: "real"},
        image=image,
    )


@dataclass(frozen=True)
class Pods:
    """liqo as the Deployments of the manifests."""

    reachable: tuple[str, ...] = ()
    """URLs this machine can reach and should, before install returns (a local cluster's node ports)."""

    async def start(self, client: KubeClient, progress: Progress) -> None:
        """Wait until both Deployments are available, and every URL of :attr:`reachable` accepts connections.

        A node port refuses connections until the node's proxy has programmed a ready endpoint behind it,
        a moment after the pods became ready: a peer (or the API server calling a webhook) must not be the
        first to find out.
        """
        for name in (manifests.MANAGER, manifests.VIRTUAL_KUBELET):
            progress(f"waiting for the {name} Deployment")
            await _wait_deployment(client, name)
        if self.reachable:
            progress(f"waiting for {', '.join(self.reachable)} to accept connections")
            await poll_until(
                lambda: _all_accept(self.reachable),
                timeout=MANAGER_DEADLINE,
                interval=0.2,
                message=f"{', '.join(self.reachable)} refuse connections: kubectl -n {names.LIQO_NAMESPACE} get"
                " pods,services,endpointslices",
            )


async def _all_accept(urls: tuple[str, ...]) -> bool:
    for url in urls:
        parts = urlsplit(url)
        try:
            async with asyncio.timeout(2):
                _, writer = await asyncio.open_connection(parts.hostname, parts.port or 443)
        except (OSError, TimeoutError):
            return False
        writer.close()
        await writer.wait_closed()
    return True


@dataclass(frozen=True)
class HostProcesses:
    """Where the manager of a local cluster keeps its files, and its authentication and webhook ports."""

    cluster: str
    directory: Path
    port: int
    kubelet_port: int
    webhook_port: int
    metrics_port: int
    kubelet_metrics_port: int
    identity_ttl: int = 7200
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    auth_rate_limit: RateLimit = field(default_factory=RateLimit)
    reserved_namespaces: tuple[str, ...] = ()

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

    def component(self) -> Component:
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
                *manifests.manager_flags(
                    identity_ttl=self.identity_ttl,
                    tenant_limits=self.tenant_limits,
                    rate_limit=self.auth_rate_limit,
                    reserved_namespaces=self.reserved_namespaces,
                ),
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

    async def start(self, client: KubeClient, progress: Progress) -> None:
        """Issue the components' credentials and hand them to the cluster's supervisor."""
        progress(f"starting the manager on local cluster {self.cluster} (auth endpoint {self.auth_url})")
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for user, file in ((manifests.MANAGER, "manager"), (manifests.VIRTUAL_KUBELET, "virtual-kubelet")):
            clusters.issue_client_kubeconfig(self.cluster, user=user, path=self.directory / f"{file}.kubeconfig")
        for pair in ("auth", "webhook", "kubelet"):
            clusters.issue_serving_pair(
                self.cluster, cert=self.directory / f"{pair}.crt", key=self.directory / f"{pair}.key"
            )
        components = [self.component(), self.virtual_kubelet_component()]
        clusters.add_components(self.cluster, components, timeout=MANAGER_DEADLINE)


Launcher = Pods | HostProcesses


@dataclass(frozen=True)
class Plan:
    """What an install applies, from which values, and who then starts liqo."""

    values: Values
    items: list[manifests.Manifest]
    launcher: Launcher


async def plan(client: KubeClient, options: InstallOptions) -> Plan:
    """What ``install`` would do on the cluster behind ``client`` (``--dry-run`` prints its manifests).

    Raises:
        InstallError: see :func:`resolve_network`.
    """
    local = clusters.find_by_server(client.server)
    previous = await read_settings(client) or {}
    recorded = _recorded_network(previous)
    network = resolve_network(
        pod_cidr=options.pod_cidr,
        service_cidr=options.service_cidr,
        local=_local_network(local) if local else None,
        previous=recorded,
    )
    policy = await client.serves(MUTATING_ADMISSION_POLICIES)
    labels = options.cluster_labels
    if labels is None:
        labels = orjson.loads(previous.get("clusterLabels") or "{}")
    values = Values(
        api_server_url=options.api_server_url or previous.get("apiServerURL") or client.server,
        pod_cidr=str(network.pod_cidr),
        service_cidr=str(network.service_cidr),
        cluster_name=options.cluster_name or previous.get("clusterName") or (local or ""),
        cluster_labels=labels,
        auth_url=options.auth_url or previous.get("authURL", ""),
        image=options.image or DEFAULT_IMAGE,
        manager_replicas=options.replicas,
        identity_ttl=options.identity_ttl,
        tenant_limits=options.tenant_limits,
        auth_rate_limit=options.auth_rate_limit,
        reserved_namespaces=options.reserved_namespaces,
        peer_pools=options.peer_pools,
    )
    if local is None:
        return Plan(values=values, items=manifests.manifests(values, placement_policy=policy), launcher=Pods())
    pods = clusters.pod_network(local)
    if pods is not None:
        values = local_pod_values(values, network=pods, image=options.image or local_image())
        node_ports = (
            values.auth_url,
            values.webhook_url,
            f"https://{pods.node_addresses[0]}:{LOCAL_NODE_PORTS['kubelet']}",
        )
        items = manifests.manifests(values, placement_policy=policy)
        return Plan(values=values, items=items, launcher=Pods(reachable=node_ports))
    host = host_processes(local, options)
    # Without a real node nothing could run a gateway: no fabric (NetworkStatus says so on every peer).
    values = dataclasses.replace(values, auth_url=options.auth_url or host.auth_url, network_fabric=False)
    items = manifests.manifests(
        values, webhook_client_config=host.webhook_client_config, workloads=False, placement_policy=policy
    )
    return Plan(values=values, items=items, launcher=host)


def local_image() -> str:
    """The liqo image local clusters' real nodes hold (built from this checkout)."""
    return images.liqo_image_ref()


async def install(client: KubeClient, options: InstallOptions, *, progress: Progress) -> ClusterIdentity:
    """Install (or update) liqo on the cluster behind ``client`` and wait until its manager made the identity."""
    planned = await plan(client, options)
    name = planned.values.cluster_name or "this cluster"
    progress(f"installing liqo on {name}")
    for item in planned.items:
        await client.apply(BY_KIND[item["kind"]], item)
    await _drop_other_placement(client, planned.items)
    await wait_crds_established(client)
    await planned.launcher.start(client, progress)
    return await _wait_identity(client, planned.values)


async def _drop_other_placement(client: KubeClient, items: list[dict[str, Any]]) -> None:
    """Delete the pod webhook's registration if the policy now places pods, or the policy if the webhook does.

    An install made before the API server served MutatingAdmissionPolicy (or by an older liqo) registered the
    webhook; left there, it would be called for every pod the policy already placed.
    """
    if any(item["kind"] == MUTATING_ADMISSION_POLICIES.kind for item in items):
        stale = [(MUTATING_WEBHOOK_CONFIGURATIONS, registration.WEBHOOK_CONFIGURATION)]
    else:
        stale = list(PLACEMENT_POLICY)
    for resource, name in stale:
        await client.delete(resource, name, missing_ok=True)


async def _wait_identity(client: KubeClient, values: Values) -> ClusterIdentity:
    """The identity once a manager derived it from these values (not a previous install's)."""

    async def current() -> ClusterIdentity | None:
        identity = await read_identity(client)
        if identity is None or identity.api_server_url != values.api_server_url:
            return None
        if values.cluster_name and identity.cluster_name != values.cluster_name:
            return None
        return identity

    return await poll_until(
        current,
        timeout=MANAGER_DEADLINE,
        interval=0.2,
        message=f"the manager did not record this cluster's identity: kubectl -n {names.LIQO_NAMESPACE} logs"
        f" deployment/{manifests.MANAGER}",
    )


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
    for resource, name in (*PLACEMENT_POLICY, *((r, n) for r, n, _ in REGISTRATIONS)):
        await client.delete(resource, name, missing_ok=True)
    local = clusters.find_by_server(client.server)
    if local is not None and any(
        c.name in (manifests.MANAGER, manifests.VIRTUAL_KUBELET) for c in clusters.components(local)
    ):
        progress(f"stopping the manager and the virtual kubelet of local cluster {local}")
        await asyncio.to_thread(clusters.remove_components, local, [manifests.MANAGER, manifests.VIRTUAL_KUBELET])
    workloads = (
        (DAEMON_SETS, fabric.NETWORK_AGENT),
        (POD_TEMPLATES, fabric.GATEWAY),
        (DEPLOYMENTS, manifests.MANAGER),
        (DEPLOYMENTS, manifests.VIRTUAL_KUBELET),
        (SERVICES, manifests.AUTH_SERVICE),
        (SERVICES, manifests.WEBHOOK_SERVICE),
        (SERVICES, manifests.VIRTUAL_KUBELET),
    )
    for resource, name in workloads:
        await client.delete(resource, name, namespace=names.LIQO_NAMESPACE, missing_ok=True)
    if purge:
        progress("deleting liqo resources, tenant and twin namespaces, virtual nodes and CRDs")
        await _purge(client)
    progress("deleting RBAC and the liqo namespace")
    for resource, name in (
        *((CLUSTER_ROLE_BINDINGS, component) for component in _COMPONENTS_WITH_CLUSTER_ROLES),
        *((CLUSTER_ROLES, role) for role in _COMPONENTS_WITH_CLUSTER_ROLES),
        *((CLUSTER_ROLES, role["metadata"]["name"]) for role in manifests.peer_cluster_roles()),
        *_admission_policies(),
    ):
        await client.delete(resource, name, missing_ok=True)
    if not purge:
        await _delete_installed_default_policy(client)
    await client.delete(NAMESPACES, names.LIQO_NAMESPACE, missing_ok=True)
    await _wait_gone(client, NAMESPACES, names.LIQO_NAMESPACE)


def _admission_policies() -> list[tuple[Resource, str]]:
    """Every admission policy and binding the install renders, bindings first."""
    kinds = (VALIDATING_ADMISSION_POLICY_BINDINGS, VALIDATING_ADMISSION_POLICIES)
    rendered = [(BY_KIND[m["kind"]], m["metadata"]["name"]) for m in manifests.rights()]
    return sorted(((r, name) for r, name in rendered if r in kinds), key=lambda pair: kinds.index(pair[0]))


async def _delete_installed_default_policy(client: KubeClient) -> None:
    """The SharingPolicy ``default`` if the install made it (values ``sharing.defaultPolicy``), not a user's."""
    with contextlib.suppress(NotFoundError):
        policy = await client.get(liqo_resources.SHARING_POLICIES, "default")
        if (policy["metadata"].get("labels") or {}).get(names.MANAGED_BY) == names.MANAGED_BY_VALUE:
            await client.delete(liqo_resources.SHARING_POLICIES, "default")


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
            await client.delete(resource, item["metadata"]["name"], missing_ok=True)
    for resource in liqo_resources.ALL:
        await client.delete(CRDS, crd_name(resource), missing_ok=True)
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
            condition.get("type") in (ConditionType.OUTGOING, ConditionType.INCOMING)
            and condition.get("status") in (ConditionStatus.PENDING, ConditionStatus.ESTABLISHED)
            for condition in (peer.get("status") or {}).get("conditions") or []
        )
    ]


def _recorded_network(settings: dict[str, str]) -> ClusterNetwork | None:
    """The network a previous install recorded; None if none (or one no cluster may claim: ask again)."""
    try:
        return ClusterNetwork.parse(pod_cidr=settings["podCIDR"], service_cidr=settings["serviceCIDR"])
    except (KeyError, InvalidNetwork):
        return None


def _local_network(name: str) -> ClusterNetwork:
    spec = clusters.stored_spec(name)
    try:
        # The spec was validated when the cluster was made, but may be spelled otherwise than canonically.
        return ClusterNetwork(pod_cidr=ip_network(spec.pod_cidr), service_cidr=ip_network(spec.service_cidr))
    except InvalidNetwork as exc:
        raise InstallError(f"local cluster {name} has a network liqo cannot tell peers about: {exc}") from None


def host_processes(name: str, options: InstallOptions) -> HostProcesses:
    """The host-process launcher of local cluster ``name`` (ports kept from a previous install).

    The ports are reserved with the cluster (``clusters.reserve_ports``): no other cluster made or
    installed meanwhile can choose them before these processes listen on them.
    """
    ports = clusters.reserve_ports(
        name,
        {
            "auth": _kept_port(name, manifests.MANAGER, "--auth-address=") or 0,
            "kubelet": _kept_port(name, manifests.VIRTUAL_KUBELET, "--listen=") or 0,
            "webhook": _kept_port(name, manifests.MANAGER, "--webhook-address=") or 0,
            "metrics": _kept_port(name, manifests.MANAGER, "--metrics-address=") or 0,
            "kubeletMetrics": _kept_port(name, manifests.VIRTUAL_KUBELET, "--metrics-address=") or 0,
        },
    )
    return HostProcesses(
        cluster=name,
        directory=ClusterDir.named(name).root / "liqo",
        port=ports["auth"],
        kubelet_port=ports["kubelet"],
        webhook_port=ports["webhook"],
        metrics_port=ports["metrics"],
        kubelet_metrics_port=ports["kubeletMetrics"],
        identity_ttl=options.identity_ttl,
        tenant_limits=options.tenant_limits,
        auth_rate_limit=options.auth_rate_limit,
        reserved_namespaces=options.reserved_namespaces,
    )


def _kept_port(name: str, component_name: str, flag: str) -> int | None:
    """The port a previous install chose (kept: peers' auth URLs, nodes' kubelet endpoints, scrape targets)."""
    for component in clusters.components(name):
        if component.name == component_name:
            for arg in component.argv:
                if arg.startswith(flag):
                    return int(arg.rsplit(":", 1)[1])
    return None


async def wait_crds_established(client: KubeClient) -> None:
    """Wait until every liqo CRD is Established (its resources can be created)."""
    for resource in liqo_resources.ALL:
        name = crd_name(resource)

        async def established(name: str = name) -> bool:
            conditions = ((await client.get(CRDS, name)).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await poll_until(established, timeout=CRD_DEADLINE, message=f"CRD {name} not Established", interval=0.05)


async def _wait_deployment(client: KubeClient, name: str) -> None:
    async def available() -> bool:
        deployment = await client.get(DEPLOYMENTS, name, namespace=names.LIQO_NAMESPACE)
        return bool((deployment.get("status") or {}).get("availableReplicas"))

    await poll_until(
        available,
        timeout=MANAGER_DEADLINE,
        interval=0.5,
        message=f"the {name} Deployment is not available: kubectl -n {names.LIQO_NAMESPACE} describe deployment {name}",
    )


async def _wait_gone(client: KubeClient, resource: Resource, name: str) -> None:
    async def gone() -> bool:
        try:
            await client.get(resource, name)
        except NotFoundError:
            return True
        return False

    await poll_until(gone, timeout=UNINSTALL_DEADLINE, interval=0.2, message=f"{resource.kind} {name} still exists")
