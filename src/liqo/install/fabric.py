"""The network fabric's part of an install: the gateway template, the node agent, their rights (pure).

The fabric needs nodes that run pods with ``NET_ADMIN`` and ``/dev/net/tun`` (gateways) and in the node's
network (the agent), so it is part of an install that runs liqo as pods (``network.fabric.enabled``); a
local cluster without real nodes has no such node and leaves it out. The manager makes one gateway per
peer from the PodTemplate rendered here (:mod:`liqo.network.gateway_objects`): what a gateway pod looks like on
this cluster is the install's business, which peer it serves the manager's.

Rights, each the least its holder needs (docs/security.md, "The network fabric"):

- a gateway reads NetworkConfigs and writes their status (its connection check); its key comes in a
  mounted Secret, not through the API;
- the agent reads the gateway pods of the ``liqo`` namespace, nothing else;
- the manager writes gateways' Deployments, Services and key Secrets, in ``liqo`` only
  (:func:`manager_fabric_rules`), and reads the template;
- a peer writes only the NetworkConfig named after itself, in its tenant namespace, never a status: RBAC
  cannot say "this name" for a ClusterRole bound per peer, so the API server's admission policy does
  (:func:`peer_network_configs_policy`).
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.components import GATEWAY, NETWORK_AGENT
from liqo.install.podspec import placement
from liqo.install.values import Values
from liqo.network import gateway_objects
from liqo.network.links import WIREGUARD_PORT

TUN = "/dev/net/tun"
FORWARDING_SYSCTL = "net.ipv4.ip_forward"
"""Namespaced but *unsafe* to the kubelet: its nodes must allow it (``allowedUnsafeSysctls``)."""

Manifest = dict[str, Any]
_READ = ["get", "list", "watch"]


def gateway_rules() -> list[dict[str, Any]]:
    """A gateway's rights: the NetworkConfigs it builds its tunnel of, and their status (its verdict)."""
    return [
        {"apiGroups": [liqo_resources.NETWORKING], "resources": ["networkconfigs"], "verbs": _READ},
        {"apiGroups": [liqo_resources.NETWORKING], "resources": ["networkconfigs/status"], "verbs": ["patch"]},
    ]


def network_agent_namespace_rules() -> list[dict[str, Any]]:
    """The node agent's rights, in ``liqo`` only: the gateway pods (where they run, what they route)."""
    return [{"apiGroups": [""], "resources": ["pods"], "verbs": _READ}]


def manager_fabric_rules() -> list[dict[str, Any]]:
    """The manager's rights in ``liqo`` for the fabric: gateways' Deployments and Services, the template.

    (Their key Secrets and pods fall under rights it holds cluster-wide for peering and offloading.)
    """
    writes = [*_READ, "create", "patch", "delete"]
    return [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": writes},
        {"apiGroups": [""], "resources": ["services"], "verbs": writes},
        {"apiGroups": [""], "resources": ["podtemplates"], "resourceNames": [GATEWAY], "verbs": _READ},
    ]


PEER_NETWORK_CONFIGS_POLICY = "liqo-peer-network-configs"
PEER_NETWORK_CONFIG_RULES = (
    (
        f"request.userInfo.username == '{names.PEER_USER_PREFIX}' + "
        "(request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name)",
        "a peer may write only the NetworkConfig named after its own cluster ID (the other is this cluster's word)",
    ),
    (
        "request.operation == 'DELETE' || object.spec.clusterID == object.metadata.name",
        "spec.clusterID must be the NetworkConfig's name: a peer speaks for itself only",
    ),
    (
        "!has(request.subResource) || request.subResource != 'status'",
        "a peer writes no NetworkConfig's status: each is the report of its own cluster's gateway",
    ),
)
"""Each refusal in the API server's answer. Status writes are refused by RBAC already (the peer's role has
no ``networkconfigs/status``); the third rule keeps them refused should a role ever grant more."""


def peer_pools_flags(peer_pools: tuple[str, ...]) -> list[str]:
    """``--peer-pools``, the same for the manager, the gateways and the node agents (none: their default)."""
    return [f"--peer-pools={','.join(peer_pools)}"] if peer_pools else []


def _meta(name: str, *, namespace: str | None = names.LIQO_NAMESPACE) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _net_admin() -> dict[str, Any]:
    """Root with ``NET_ADMIN`` alone: a capability takes effect for root only, and nothing else is kept."""
    return {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
    }


def gateway_template(values: Values) -> Manifest:
    """The PodTemplate every gateway is made from (the manager adds the peer, its key and its route)."""
    container = {
        "name": gateway_objects.CONTAINER,
        "image": values.image,
        "imagePullPolicy": values.image_pull_policy,
        "command": ["python3", "-m", "liqo.apps.gateway"],
        "args": ["--metrics-address=", *peer_pools_flags(values.peer_pools)],
        "ports": [{"name": "wireguard", "containerPort": WIREGUARD_PORT, "protocol": "UDP"}],
        "resources": dict(values.gateway_resources),
        "securityContext": _net_admin(),
        "volumeMounts": [
            {"name": "tun", "mountPath": TUN},
            # wireguard-go's control socket (the kernel's WireGuard needs none).
            {"name": "run", "mountPath": "/var/run/wireguard"},
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": _meta(GATEWAY),
        "template": {
            "metadata": {"labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}},
            "spec": {
                "serviceAccountName": GATEWAY,
                "terminationGracePeriodSeconds": 5,
                "securityContext": {
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "sysctls": [{"name": FORWARDING_SYSCTL, "value": "1"}],
                },
                "containers": [container],
                "volumes": [
                    {"name": "tun", "hostPath": {"path": TUN, "type": "CharDevice"}},
                    {"name": "run", "emptyDir": {"medium": "Memory"}},
                ],
                **placement(values),
            },
        },
    }


def network_agent(values: Values) -> Manifest:
    """The node agent's DaemonSet: one pod per node, in the node's network."""
    labels = {"app.kubernetes.io/name": NETWORK_AGENT}
    container = {
        "name": "agent",
        "image": values.image,
        "imagePullPolicy": values.image_pull_policy,
        "command": ["python3", "-m", "liqo.apps.networkagent"],
        # In the node's network, a fixed port would collide with whatever the node runs: no listener.
        "args": ["--metrics-address=", *peer_pools_flags(values.peer_pools)],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": dict(values.network_agent_resources),
        "securityContext": _net_admin(),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(NETWORK_AGENT) | {"labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, **labels}},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NETWORK_AGENT,
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    **placement(values),
                },
            },
        },
    }


def fabric_workloads(values: Values) -> list[Manifest]:
    """The gateway template and the node agent, when the values enable the fabric."""
    if not values.network_fabric:
        return []
    return [gateway_template(values), network_agent(values)]
