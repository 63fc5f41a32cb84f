"""What an install is parameterised by: the chart's ``values.yaml``, as one typed record (pure, no I/O).

``liqoctl install`` and ``helm install charts/liqo`` must put the same objects on a cluster. Both start
from these values: liqoctl fills them from its flags (and what the cluster already records), Helm from
``values.yaml`` and ``--set``; :mod:`liqo.install.manifests` renders them in Python, the chart's templates
in Go. :meth:`Values.to_helm` is the bridge: ``liqoctl install --dry-run -o values`` prints it, and the
test that holds the two renderings equal feeds it to ``helm template``.

Nothing secret or generated is a value. The cluster ID (the ``kube-system`` namespace's UID), the cluster
key and the authentication token are made by the manager itself at start-up (:mod:`liqo.peering.bootstrap`),
so a plain ``helm install`` needs no liqoctl, and neither a re-install nor ``helm upgrade`` can replace
what peers pin or hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from liqo.api.bounds import DEFAULT_TENANT_QUOTA, DEFAULT_TWIN_QUOTA
from liqo.peering.authserver import RateLimit
from liqo.peering.enrolment import TenantLimits

DEFAULT_IMAGE = "ghcr.io/liqo-python/liqo:0.1.0"
RESOURCES_MANAGER: Mapping[str, Any] = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
RESOURCES_GATEWAY: Mapping[str, Any] = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
RESOURCES_NETWORK_AGENT: Mapping[str, Any] = {
    "requests": {"cpu": "10m", "memory": "48Mi"},
    "limits": {"memory": "128Mi"},
}
RESOURCES_DISCOVERY: Mapping[str, Any] = {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}}
RESOURCES_VIRTUAL_KUBELET: Mapping[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "1Gi"},
}


@dataclass(frozen=True)
class Values:
    """One install's parameters; each field's comment names its key in ``values.yaml``."""

    api_server_url: str
    """``apiServer.url``: the API server as peers reach it (required)."""
    pod_cidr: str
    """``network.podCIDR`` (required: liqo never guesses a network, docs/operations.md says why)."""
    service_cidr: str
    """``network.serviceCIDR`` (required)."""
    reserved_subnets: tuple[str, ...] = ()
    """``network.reservedSubnets``: where peers' pods may never be seen (the nodes' own network, a VPN...)."""
    peer_pools: tuple[str, ...] = ()
    """``network.peerPools``: IPv4 CIDRs where peers' pods are named and routed, and nowhere else; empty: the
    private ranges of RFC 1918. The manager, the gateways and the node agents are all given them."""
    network_fabric: bool = True
    """``network.fabric.enabled``: a gateway per peer and a node agent per node (pods with ``NET_ADMIN``)."""
    gateway_resources: Mapping[str, Any] = field(default_factory=lambda: dict(RESOURCES_GATEWAY))
    """``network.fabric.gatewayResources``."""
    network_agent_resources: Mapping[str, Any] = field(default_factory=lambda: dict(RESOURCES_NETWORK_AGENT))
    """``network.fabric.agentResources``."""
    cluster_name: str = ""
    """``cluster.name``; empty: ``cluster-`` and the first 8 characters of the cluster ID."""
    cluster_labels: Mapping[str, str] = field(default_factory=dict)
    """``cluster.labels``: what peers select this cluster by."""
    auth_url: str = ""
    """``auth.url``: the authentication endpoint as peers reach it; empty: the ``liqo-auth`` Service's name."""
    auth_service_type: str = "LoadBalancer"
    """``auth.service.type``: how peers reach the endpoint."""
    auth_node_port: int | None = None
    """``auth.service.nodePort``: a fixed node port for it (the auth URL must be known before install)."""
    auth_rate_limit: RateLimit = field(default_factory=RateLimit)
    """``auth.rateLimit.burst``, ``auth.rateLimit.perSecond``: the requests to ``/nonce`` and ``/identity`` each
    source address may make at once, and a second after that (beyond, 429 with ``Retry-After``)."""
    image: str = DEFAULT_IMAGE
    """``image.ref``: one image for every component."""
    image_pull_policy: str = "IfNotPresent"
    """``image.pullPolicy``."""
    manager_replicas: int = 2
    """``manager.replicas``: every replica serves the webhooks; one, elected, runs the controllers."""
    identity_ttl: int = 7200
    """``manager.identityTTL``: lifetime of the identities issued to consumers, seconds (>= 600)."""
    reserved_namespaces: tuple[str, ...] = ()
    """``manager.reservedNamespaces``: names (or ``prefix-*``) no consumer's twin may take."""
    twin_quota: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_TWIN_QUOTA))
    """``manager.twinQuota``: how many objects of each kind a consumer's twin may hold (``count/<resource>``)."""
    tenant_quota: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_TENANT_QUOTA))
    """``manager.tenantQuota``: how many objects of each kind a consumer's tenant namespace may hold."""
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    """``manager.maxTenants``, ``manager.maxPendingTenants``: consumers enrolled at most, in all and without an
    accepted offer (further enrolments are refused, saying which)."""
    manager_resources: Mapping[str, Any] = field(default_factory=lambda: dict(RESOURCES_MANAGER))
    """``manager.resources``."""
    webhook_url: str = ""
    """``webhook.url``: where the API server calls the webhooks; empty: through the ``liqo-webhook`` Service."""
    webhook_node_port: int | None = None
    """``webhook.nodePort``: with ``webhook.url``, the node port behind it."""
    virtual_kubelet_node_port: int | None = None
    """``virtualKubelet.nodePort``: virtual nodes then advertise their host's IP and this port, not the pod's."""
    virtual_kubelet_resources: Mapping[str, Any] = field(default_factory=lambda: dict(RESOURCES_VIRTUAL_KUBELET))
    """``virtualKubelet.resources``."""
    lan_discovery: bool = False
    """``discovery.lan.enabled``: announce this cluster on the nodes' LAN and hear the others there (the source
    ``lan`` and its listener, a host-network pod). Off by default: announcing is the operator's choice."""
    discovery_resources: Mapping[str, Any] = field(default_factory=lambda: dict(RESOURCES_DISCOVERY))
    """``discovery.lan.resources``: the listener's."""
    default_sharing_policy: Mapping[str, Any] = field(default_factory=dict)
    """``sharing.defaultPolicy``: the ``spec`` of a SharingPolicy ``default``; empty: none (share half)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """``nodeSelector`` of liqo's pods."""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """``tolerations`` of liqo's pods."""

    def to_helm(self) -> dict[str, Any]:
        """These values as ``values.yaml`` spells them (what ``helm install -f`` takes)."""
        return {
            "cluster": {"name": self.cluster_name, "labels": dict(self.cluster_labels)},
            "apiServer": {"url": self.api_server_url},
            "auth": {
                "url": self.auth_url,
                "service": {"type": self.auth_service_type, "nodePort": self.auth_node_port},
                "rateLimit": {"burst": self.auth_rate_limit.burst, "perSecond": self.auth_rate_limit.per_second},
            },
            "network": {
                "podCIDR": self.pod_cidr,
                "serviceCIDR": self.service_cidr,
                "reservedSubnets": list(self.reserved_subnets),
                "peerPools": list(self.peer_pools),
                "fabric": {
                    "enabled": self.network_fabric,
                    "gatewayResources": dict(self.gateway_resources),
                    "agentResources": dict(self.network_agent_resources),
                },
            },
            "image": {"ref": self.image, "pullPolicy": self.image_pull_policy},
            "manager": {
                "replicas": self.manager_replicas,
                "identityTTL": self.identity_ttl,
                "reservedNamespaces": list(self.reserved_namespaces),
                "twinQuota": dict(self.twin_quota),
                "tenantQuota": dict(self.tenant_quota),
                "maxTenants": self.tenant_limits.max_tenants,
                "maxPendingTenants": self.tenant_limits.max_pending,
                "resources": dict(self.manager_resources),
            },
            "webhook": {"url": self.webhook_url, "nodePort": self.webhook_node_port},
            "virtualKubelet": {
                "nodePort": self.virtual_kubelet_node_port,
                "resources": dict(self.virtual_kubelet_resources),
            },
            "discovery": {"lan": {"enabled": self.lan_discovery, "resources": dict(self.discovery_resources)}},
            "sharing": {"defaultPolicy": dict(self.default_sharing_policy)},
            "nodeSelector": dict(self.node_selector),
            "tolerations": [dict(t) for t in self.tolerations],
        }
