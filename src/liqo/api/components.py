"""The names and ports of liqo's own components: what the install renders and the running processes use.

Here rather than beside the renderer (:mod:`liqo.install.manifests`), so that a running process knows its own
name, Services and ports without importing how an install is drawn.
"""

from __future__ import annotations

MANAGER = "liqo-manager"
"""Name of the manager's ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, and local user."""
VIRTUAL_KUBELET = "liqo-virtual-kubelet"
"""Name of the virtual kubelet's ServiceAccount, ClusterRole, binding, Deployment, and local user."""
GATEWAY = "liqo-gateway"
"""The gateways' ServiceAccount, ClusterRole and binding, and their PodTemplate."""
NETWORK_AGENT = "liqo-network-agent"
"""The node agent's ServiceAccount, Role, binding and DaemonSet."""
DISCOVERY = "liqo-discovery"
"""The discovery listener: announces this cluster on its LAN and hears the others."""

KUBELET_PORT = 10250
AUTH_SERVICE = "liqo-auth"
AUTH_PORT = 8443
WEBHOOK_SERVICE = "liqo-webhook"
"""The ClusterIP Service through which the API server calls the webhooks (never the peers' ``liqo-auth``)."""
WEBHOOK_PORT = 9443
METRICS_PORT = 8080
"""Every component's ``/metrics``, ``/healthz`` and ``/readyz`` (plain HTTP)."""
