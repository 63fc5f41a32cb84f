"""``liqoctl install`` / ``uninstall``: render the values, apply the manifests, start liqo where the caller says.

The install writes what it is told (``liqo-settings``); the manager makes the cluster identity, key and token
from it at start-up (:mod:`liqo.peering.bootstrap`), so ``helm install`` and ``liqoctl install`` are the same
act. A re-install keeps the token and the key (the manager never replaces them) and the settings recorded
before, for every flag not given again.

The cluster's network (pod and service CIDRs) is never guessed: a local cluster's comes from its own spec;
elsewhere ``--pod-cidr`` and ``--service-cidr`` are required the first time, and a re-install keeps what was
recorded. Nodes' ``spec.podCIDRs`` are only per-node slices (and unused by many CNIs), the ``kubernetes``
Service holds one address of the service CIDR: a network inferred from them could be too narrow or plain
wrong, and a peer trusting it would dial the wrong pods — exactly what recording the network is meant to
prevent.

Where liqo runs is the caller's choice (:class:`Launch`): by default as the Deployments of the manifests
(:data:`IN_CLUSTER`, any cluster); the CLI hands a local cluster's launch instead
(:mod:`liqo.localclusters.launch`: pods on its real nodes through node ports, or host processes of its
supervisor). The product install never looks for local clusters itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.components import (
    AUTH_SERVICE,
    DISCOVERY,
    GATEWAY,
    MANAGER,
    NETWORK_AGENT,
    VIRTUAL_KUBELET,
    WEBHOOK_SERVICE,
)
from liqo.api.crds.schema import crd_name
from liqo.api.foreignclusters import ConditionStatus, ConditionType, cluster_id
from liqo.api.identity import ClusterIdentity, read_identity
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork
from liqo.install import manifests
from liqo.install.values import DEFAULT_IMAGE, Values
from liqo.kube import podstate
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.printable import printable
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRDS,
    CSI_DRIVERS,
    CSRS,
    DAEMON_SETS,
    DEPLOYMENTS,
    MUTATING_ADMISSION_POLICIES,
    MUTATING_ADMISSION_POLICY_BINDINGS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    POD_TEMPLATES,
    PODS,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    STORAGE_CLASSES,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)
from liqo.kube.waiting import WaitTimeout, changes_only, poll_until
from liqo.offloading import placementpolicy, registration
from liqo.offloading.registration import REGISTRATIONS
from liqo.peering.authserver import RateLimit
from liqo.peering.bootstrap import read_settings
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
_COMPONENTS_WITH_CLUSTER_ROLES = (MANAGER, VIRTUAL_KUBELET, GATEWAY, DISCOVERY)
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
        STORAGE_CLASSES,
        CSI_DRIVERS,
    )
}
PLACEMENT_POLICY = (
    (MUTATING_ADMISSION_POLICY_BINDINGS, placementpolicy.NAME),
    (MUTATING_ADMISSION_POLICIES, placementpolicy.NAME),
)
"""The pod placement policy's objects, in deletion order."""
CRD_DEADLINE = 60.0
DEFAULT_TIMEOUT = 300.0
"""How long an install waits for liqo to run: pulling an image on a slow link takes minutes (helm's default)."""
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
    timeout: float = DEFAULT_TIMEOUT
    """Seconds to wait for liqo to run (images pulled, pods ready, the identity made) before giving up."""
    lan_discovery: bool | None = None
    """Announce and listen on the nodes' LAN (None: as the previous install did; off on a first one)."""


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
class Pods:
    """liqo as the Deployments of the manifests."""

    reachable: tuple[str, ...] = ()
    """URLs this machine can reach and should, before install returns (a local cluster's node ports)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds each wait may take: a Deployment to become available, the URLs to accept connections."""

    deployments: tuple[str, ...] = (MANAGER, VIRTUAL_KUBELET)
    """The Deployments the manifests hold (:func:`deployments_of`)."""

    async def start(self, client: KubeClient, progress: Progress) -> None:
        """Wait until the Deployments are rolled out, and every URL of :attr:`reachable` accepts connections.

        A node port refuses connections until the node's proxy has programmed a ready endpoint behind it,
        a moment after the pods became ready: a peer (or the API server calling a webhook) must not be the
        first to find out.
        """
        for name in self.deployments:
            progress(f"waiting for the {name} Deployment")
            await _wait_deployment(client, name, timeout=self.timeout, progress=progress)
        if self.reachable:
            progress(f"waiting for {', '.join(self.reachable)} to accept connections")
            await poll_until(
                lambda: _all_accept(self.reachable),
                timeout=self.timeout,
                interval=0.2,
                message=f"{', '.join(self.reachable)} refuse connections: kubectl -n {names.LIQO_NAMESPACE} get"
                " pods,services,endpointslices",
            )


def deployments_of(items: list[manifests.Manifest]) -> tuple[str, ...]:
    """The names of the Deployments among ``items``, in their order (pure)."""
    return tuple(item["metadata"]["name"] for item in items if item["kind"] == DEPLOYMENTS.kind)


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


class Launcher(Protocol):
    """Starts liqo once its manifests are applied, and returns when it runs."""

    async def start(self, client: KubeClient, progress: Progress) -> None:
        """Start liqo (or wait until it started) on the cluster behind ``client``."""


@dataclass(frozen=True)
class Plan:
    """What an install applies, from which values, and who then starts liqo."""

    values: Values
    items: list[manifests.Manifest]
    launcher: Launcher


class Launch(Protocol):
    """How liqo runs on one kind of cluster: what it knows of the cluster, how it renders, how it stops."""

    @property
    def name(self) -> str:
        """The cluster's name when no flag nor previous install gives one ("": none)."""

    @property
    def network(self) -> ClusterNetwork | None:
        """The cluster's own network when known for sure (flags must agree with it); None: flags decide."""

    def render(self, values: Values, *, options: InstallOptions, placement_policy: bool) -> Plan:
        """The manifests for ``values`` on this kind of cluster, and who starts liqo."""

    async def stop(self, progress: Progress) -> None:
        """Stop whatever runs liqo outside the cluster's own objects (uninstall)."""


@dataclass(frozen=True)
class InCluster:
    """liqo as the Deployments of the manifests: any cluster."""

    name: str = ""
    network: ClusterNetwork | None = None

    def render(self, values: Values, *, options: InstallOptions, placement_policy: bool) -> Plan:
        """Every manifest, started by the cluster (:class:`Pods`)."""
        return Plan(
            values=values,
            items=(items := manifests.manifests(values, placement_policy=placement_policy)),
            launcher=Pods(timeout=options.timeout, deployments=deployments_of(items)),
        )

    async def stop(self, progress: Progress) -> None:
        """Nothing runs outside the cluster: its Deployments go with the uninstall."""


IN_CLUSTER = InCluster()


async def plan(client: KubeClient, options: InstallOptions, *, launch: Launch = IN_CLUSTER) -> Plan:
    """What ``install`` would do on the cluster behind ``client`` (``--dry-run`` prints its manifests).

    Raises:
        InstallError: see :func:`resolve_network`.
    """
    previous = await read_settings(client) or {}
    recorded = _recorded_network(previous)
    network = resolve_network(
        pod_cidr=options.pod_cidr, service_cidr=options.service_cidr, local=launch.network, previous=recorded
    )
    policy = await client.serves(MUTATING_ADMISSION_POLICIES)
    labels = options.cluster_labels
    if labels is None:
        labels = orjson.loads(previous.get("clusterLabels") or "{}")
    values = Values(
        api_server_url=options.api_server_url or previous.get("apiServerURL") or client.server,
        pod_cidr=str(network.pod_cidr),
        service_cidr=str(network.service_cidr),
        cluster_name=options.cluster_name or previous.get("clusterName") or launch.name,
        cluster_labels=labels,
        auth_url=options.auth_url or previous.get("authURL", ""),
        image=options.image or DEFAULT_IMAGE,
        manager_replicas=options.replicas,
        identity_ttl=options.identity_ttl,
        tenant_limits=options.tenant_limits,
        auth_rate_limit=options.auth_rate_limit,
        reserved_namespaces=options.reserved_namespaces,
        peer_pools=options.peer_pools,
        lan_discovery=(
            options.lan_discovery if options.lan_discovery is not None else previous.get("lanDiscovery") == "true"
        ),
    )
    return launch.render(values, options=options, placement_policy=policy)


async def install(
    client: KubeClient, options: InstallOptions, *, progress: Progress, launch: Launch = IN_CLUSTER
) -> ClusterIdentity:
    """Install (or update) liqo on the cluster behind ``client`` and wait until its manager made the identity."""
    planned = await plan(client, options, launch=launch)
    name = planned.values.cluster_name or "this cluster"
    progress(f"installing liqo on {name}")
    # liqo's own kinds (the source `lan`, a default SharingPolicy) once their CRDs serve them.
    ours = {r.kind: r for r in liqo_resources.ALL}
    for item in planned.items:
        if item["kind"] not in ours:
            await client.apply(BY_KIND[item["kind"]], item)
    await _drop_other_placement(client, planned.items)
    if not planned.values.lan_discovery:
        # Switched off: the listener goes (saying goodbye); the source stays, with the operator's policy in it.
        await client.delete(DEPLOYMENTS, DISCOVERY, namespace=names.LIQO_NAMESPACE, missing_ok=True)
    await wait_crds_established(client)
    for item in planned.items:
        if item["kind"] in ours:
            await client.apply(ours[item["kind"]], item)
    await planned.launcher.start(client, progress)
    return await _wait_identity(client, planned.values, timeout=options.timeout)


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


async def _wait_identity(client: KubeClient, values: Values, *, timeout: float) -> ClusterIdentity:
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
        timeout=timeout,
        interval=0.2,
        message=f"the manager did not record this cluster's identity: kubectl -n {names.LIQO_NAMESPACE} logs"
        f" deployment/{MANAGER}",
    )


async def uninstall(client: KubeClient, *, purge: bool, progress: Progress, launch: Launch = IN_CLUSTER) -> None:
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
    await launch.stop(progress)
    workloads = (
        (DAEMON_SETS, NETWORK_AGENT),
        (POD_TEMPLATES, GATEWAY),
        (DEPLOYMENTS, MANAGER),
        (DEPLOYMENTS, VIRTUAL_KUBELET),
        (DEPLOYMENTS, DISCOVERY),
        (SERVICES, AUTH_SERVICE),
        (SERVICES, WEBHOOK_SERVICE),
        (SERVICES, VIRTUAL_KUBELET),
    )
    for resource, name in workloads:
        await client.delete(resource, name, namespace=names.LIQO_NAMESPACE, missing_ok=True)
    if purge:
        progress("deleting liqo resources, tenant and twin namespaces, virtual nodes and CRDs")
        await _purge(client)
    progress("deleting RBAC, the StorageClass liqo and the liqo namespace")
    for resource, name in (
        *((BY_KIND[m["kind"]], m["metadata"]["name"]) for m in manifests.virtual_storage()),
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
        peer["spec"].get("clusterName") or cluster_id(peer)
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


async def wait_crds_established(client: KubeClient) -> None:
    """Wait until every liqo CRD is Established (its resources can be created)."""
    for resource in liqo_resources.ALL:
        name = crd_name(resource)

        async def established(name: str = name) -> bool:
            conditions = ((await client.get(CRDS, name)).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await poll_until(established, timeout=CRD_DEADLINE, message=f"CRD {name} not Established", interval=0.05)


async def _wait_deployment(client: KubeClient, name: str, *, timeout: float, progress: Progress) -> None:
    """Wait until Deployment ``name`` :func:`rolled_out`, saying why not each time that changes.

    The last reason is in the error: "not available" alone would send the operator to ``kubectl describe``
    for the one fact they need (the image is not pulled, no node fits, the container crashes).
    """
    say, last = changes_only(progress), [""]

    async def done() -> bool:
        deployment = await client.get(DEPLOYMENTS, name, namespace=names.LIQO_NAMESPACE)
        if rolled_out(deployment):
            return True
        selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"].get("matchLabels", {}).items())
        pods = await client.list(PODS, namespace=names.LIQO_NAMESPACE, label_selector=selector)
        last[0] = rollout_trouble(deployment, pods["items"])
        say(f"{name}: {last[0]}")
        return False

    try:
        await poll_until(done, timeout=timeout, interval=0.5, message=f"the {name} Deployment did not roll out")
    except WaitTimeout as exc:
        raise InstallError(f"{exc}: {last[0]}; kubectl -n {names.LIQO_NAMESPACE} describe deployment {name}") from None


def rolled_out(deployment: Obj) -> bool:
    """Whether every replica of ``deployment`` runs its current template and is available (pure).

    ``kubectl rollout status``'s test: a re-install that changed the image returns once the new version
    serves, not while the old one still does.
    """
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    updated = status.get("updatedReplicas", 0)
    return bool(
        status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
        and updated >= wanted
        and status.get("replicas", 0) <= updated
        and status.get("availableReplicas", 0) >= updated
    )


def rollout_trouble(deployment: Obj, pods: list[Obj]) -> str:
    """Why ``deployment`` has not :func:`rolled_out` (pure): each unready pod's first cause, three at most."""
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    if status.get("observedGeneration", 0) < deployment["metadata"].get("generation", 0):
        return "the Deployment controller has not seen this version yet"
    if not pods:
        conditions = status.get("conditions") or []
        failure: Obj = next(
            (c for c in conditions if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), {}
        )
        refused = failure.get("message")
        return f"none of its {wanted} pods created yet" + (
            f": {printable(str(refused), limit=podstate.MAX_TEXT)}" if refused else ""
        )
    troubled = [
        (pod["metadata"]["name"], trouble) for pod in pods if (trouble := podstate.pod_trouble(pod)) is not None
    ]
    if not troubled:
        updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
        return f"{updated} of {wanted} pods updated, {available} available, {status.get('replicas', 0)} in all"
    more = f"; {len(troubled) - 3} more" if len(troubled) > 3 else ""
    return "; ".join(f"pod {pod}: {trouble}" for pod, trouble in troubled[:3]) + more


async def _wait_gone(client: KubeClient, resource: Resource, name: str) -> None:
    async def gone() -> bool:
        try:
            await client.get(resource, name)
        except NotFoundError:
            return True
        return False

    await poll_until(gone, timeout=UNINSTALL_DEADLINE, interval=0.2, message=f"{resource.kind} {name} still exists")
