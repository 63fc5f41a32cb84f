"""The objects of one peer's gateway: its key, its Deployment and (serving) its Service (pure forges).

A gateway is a pod of liqo's image in the ``liqo`` namespace, one per peer, made from the PodTemplate
``liqo-gateway`` the install renders (image, security context, placement, resources): the install says
*how* a gateway runs on this cluster, the manager only *which* peer it serves. No template, no fabric: a
cluster whose install left it out (a local cluster without real nodes) has no node a gateway could run on.

The private key is made by the manager, kept in a Secret the gateway mounts, and never leaves this
cluster: peers get its public half in our NetworkConfig. The gateway itself reads no Secret through the
API (its ServiceAccount may not), so a compromised gateway holds its own key and nothing else.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from liqo.api import names
from liqo.api.components import GATEWAY
from liqo.network.links import WIREGUARD_PORT

GATEWAY_TEMPLATE = GATEWAY
"""The PodTemplate in the ``liqo`` namespace every gateway is made from."""
PEER_CIDR = "network.liqo.io/peer-cidr"
"""On a gateway pod: where we see the peer's pods. Node agents route it to the pod (liqo.network.agent)."""
KEY_FILE = "privateKey"
KEY_DIR = "/etc/liqo/gateway"
ENV_LOCAL_ID = "LIQO_LOCAL_ID"
ENV_PEER_ID = "LIQO_PEER_ID"
CONTAINER = "gateway"


def gateway_name(peer_id: str) -> str:
    """The name of the Deployment, Service and Secret of ``peer_id``'s gateway (at most 54 characters)."""
    return f"gw-{peer_id}"


def _meta(peer_id: str) -> dict[str, Any]:
    return {"name": gateway_name(peer_id), "namespace": names.LIQO_NAMESPACE, "labels": names.gateway_labels(peer_id)}


def key_secret(*, peer_id: str, private_key: str) -> dict[str, Any]:
    """The Secret holding the gateway's WireGuard private key."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(peer_id), "stringData": {KEY_FILE: private_key}}


def deployment(template: Mapping[str, Any], *, peer_id: str, local_id: str, peer_cidr: str) -> dict[str, Any]:
    """The gateway Deployment of ``peer_id``: the install's pod template, told which peer and key.

    ``Recreate``: two gateways of one peer would fight over the tunnel and the nodes' routes.
    """
    pod = copy.deepcopy(dict(template.get("template") or {}))
    metadata = pod.setdefault("metadata", {})
    labels = names.gateway_labels(peer_id)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), PEER_CIDR: peer_cidr}
    spec = pod.setdefault("spec", {})
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": "key", "secret": {"secretName": gateway_name(peer_id), "defaultMode": 0o400}},
    ]
    for container in spec.get("containers") or []:
        if container.get("name") != CONTAINER:
            continue
        container["env"] = [
            *(container.get("env") or []),
            {"name": ENV_LOCAL_ID, "value": local_id},
            {"name": ENV_PEER_ID, "value": peer_id},
        ]
        container["volumeMounts"] = [
            *(container.get("volumeMounts") or []),
            {"name": "key", "mountPath": KEY_DIR, "readOnly": True},
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(peer_id),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": pod,
        },
    }


def service(*, peer_id: str) -> dict[str, Any]:
    """A server's Service: a UDP node port to its WireGuard port (clients roam: no source is pinned)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(peer_id),
        "spec": {
            "type": "NodePort",
            "selector": names.gateway_labels(peer_id),
            "ports": [{"name": "wireguard", "protocol": "UDP", "port": WIREGUARD_PORT, "targetPort": WIREGUARD_PORT}],
        },
    }


def node_port(svc: Mapping[str, Any] | None) -> int | None:
    """The node port a server's Service got; None before the API server allocated it."""
    for port in ((svc or {}).get("spec") or {}).get("ports") or []:
        if port.get("name") == "wireguard" and port.get("nodePort"):
            return int(port["nodePort"])
    return None


def running_host(pods: list[Mapping[str, Any]]) -> str | None:
    """The address of the node a running gateway pod is on (what a client dials); None if none runs."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            host = status.get("hostIP")
            if host:
                return str(host)
    return None
