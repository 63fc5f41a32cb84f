"""How liqo runs on a local cluster, handed by the CLI to the product install (:class:`LocalLaunch`).

The product install (:mod:`liqo.install.installer`) renders and applies whatever cluster it is given; only
here is a cluster recognised as local (its API server's URL, :func:`detect`), and only here does an install
know its real nodes, its supervisor and its loopback ports:

- **pods**: a local cluster with real nodes runs the Deployments of the manifests from the image every real
  node holds, with values that route the API server's calls through node ports (:func:`local_pod_values`:
  it runs on loopback and reaches no pod address).
- **host processes** (:class:`HostProcesses`): a local cluster without real nodes (nothing could run a
  pod): the manager and the virtual kubelet are components of the cluster's supervisor, with client
  certificates for their users, and loopback ports for authentication, webhooks and the kubelet API. Each
  serves metrics on a loopback port of its own, so that local clusters on one machine never share one.

A local cluster's network is its spec's, never a flag's (:attr:`LocalLaunch.network`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from dataclasses import dataclass, field
from ipaddress import ip_network
from pathlib import Path
from typing import Any

from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.networks import ClusterNetwork, InvalidNetwork
from liqo.install import manifests
from liqo.install.installer import (
    DEFAULT_TIMEOUT,
    IN_CLUSTER,
    InstallError,
    InstallOptions,
    Launch,
    Plan,
    Pods,
    Progress,
    deployments_of,
)
from liqo.install.values import Values
from liqo.kube.client import KubeClient
from liqo.localclusters import clusters
from liqo.localclusters.components import WEBHOOK_CLIENT_CA, Component, Probe
from liqo.localclusters.layout import ClusterDir
from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.configs import NODE_LABEL
from liqo.localclusters.realnodes.nodes import UNDERLAY_NETWORK
from liqo.peering.authserver import RateLimit
from liqo.peering.enrolment import TenantLimits


def detect(server: str) -> Launch:
    """The launch for the cluster whose API server is at ``server``: a local cluster's, else in-cluster.

    Raises:
        InstallError: the local cluster's spec holds a network liqo cannot tell peers about.
    """
    name = clusters.find_by_server(server)
    if name is None:
        return IN_CLUSTER
    return LocalLaunch(name=name, network=_local_network(name))


@dataclass(frozen=True)
class LocalLaunch:
    """liqo on local cluster ``name``: as pods where it has real nodes, else as host processes."""

    name: str
    network: ClusterNetwork

    def render(self, values: Values, *, options: InstallOptions, placement_policy: bool) -> Plan:
        """The manifests and launcher that fit this cluster's nodes (ports kept from a previous install)."""
        pods = clusters.pod_network(self.name)
        if pods is not None:
            values = local_pod_values(values, network=pods, image=options.image or local_image())
            node_ports = (
                values.auth_url,
                values.webhook_url,
                f"https://{pods.node_addresses[0]}:{LOCAL_NODE_PORTS['kubelet']}",
            )
            items = manifests.manifests(values, placement_policy=placement_policy)
            launcher = Pods(reachable=node_ports, timeout=options.timeout, deployments=deployments_of(items))
            return Plan(values=values, items=items, launcher=launcher)
        if values.lan_discovery:
            raise InstallError(
                f"LAN discovery needs a node to listen on, and local cluster {self.name} has none: make one with"
                f" real nodes (liqoctl local up NAME --real-nodes 1), or install without --discovery"
            )
        host = host_processes(self.name, options)
        # Without a real node nothing could run a gateway: no fabric (NetworkStatus says so on every peer).
        values = dataclasses.replace(values, auth_url=options.auth_url or host.auth_url, network_fabric=False)
        items = manifests.manifests(
            values, webhook_client_config=host.webhook_client_config, workloads=False, placement_policy=placement_policy
        )
        return Plan(values=values, items=items, launcher=host)

    async def stop(self, progress: Progress) -> None:
        """Take the manager and the virtual kubelet off the cluster's supervisor, if they run there."""
        if any(c.name in (MANAGER, VIRTUAL_KUBELET) for c in clusters.components(self.name)):
            progress(f"stopping the manager and the virtual kubelet of local cluster {self.name}")
            await asyncio.to_thread(clusters.remove_components, self.name, [MANAGER, VIRTUAL_KUBELET])


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
    timeout: float = DEFAULT_TIMEOUT
    """Seconds the supervisor may take to report the components ready."""

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
            name=MANAGER,
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
            name=VIRTUAL_KUBELET,
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
        for user, file in ((MANAGER, "manager"), (VIRTUAL_KUBELET, "virtual-kubelet")):
            clusters.issue_client_kubeconfig(self.cluster, user=user, path=self.directory / f"{file}.kubeconfig")
        for pair in ("auth", "webhook", "kubelet"):
            clusters.issue_serving_pair(
                self.cluster, cert=self.directory / f"{pair}.crt", key=self.directory / f"{pair}.key"
            )
        components = [self.component(), self.virtual_kubelet_component()]
        clusters.add_components(self.cluster, components, timeout=self.timeout)


def local_image() -> str:
    """The liqo image local clusters' real nodes hold (built from this checkout)."""
    return images.liqo_image_ref()


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
            "auth": _kept_port(name, MANAGER, "--auth-address=") or 0,
            "kubelet": _kept_port(name, VIRTUAL_KUBELET, "--listen=") or 0,
            "webhook": _kept_port(name, MANAGER, "--webhook-address=") or 0,
            "metrics": _kept_port(name, MANAGER, "--metrics-address=") or 0,
            "kubeletMetrics": _kept_port(name, VIRTUAL_KUBELET, "--metrics-address=") or 0,
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
        timeout=options.timeout,
    )


def _kept_port(name: str, component_name: str, flag: str) -> int | None:
    """The port a previous install chose (kept: peers' auth URLs, nodes' kubelet endpoints, scrape targets)."""
    for component in clusters.components(name):
        if component.name == component_name:
            for arg in component.argv:
                if arg.startswith(flag):
                    return int(arg.rsplit(":", 1)[1])
    return None
