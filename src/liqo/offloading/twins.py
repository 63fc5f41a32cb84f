"""Twin namespaces: the namespaces a provider creates for a consumer's offloaded ones, and the consumer's rights.

A twin carries the consumer's ID under ``REMOTE_CLUSTER_ID`` (so its pods count against that consumer's
budget and not as the provider's free capacity, and unpeer finds it) and its home namespace under
``ORIGIN_NAMESPACE``. The consumer's identity gets, in the twin only, what the virtual kubelet needs: its
ShadowPods and reflected objects, read access to the pods the provider made and to their logs and events,
and exec. It never gets to create pods directly: the provider decides what runs, from the ShadowPod.

A twin also carries the Pod Security Admission labels of the consumer's policy level (``enforce``, ``warn``
and ``audit``, version ``latest``): Kubernetes' own admission then checks the real pods too, a second
opinion on the provider's verdict that does not depend on liqo's code.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.resources import VIRTUAL_KUBELET

_RBAC = "rbac.authorization.k8s.io"
_ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
_READ = ["get", "list", "watch"]


PSA_MODES = ("enforce", "warn", "audit")


def pod_security_labels(level: str) -> dict[str, str]:
    """The Pod Security Admission labels enforcing ``level`` (``baseline`` or ``restricted``) (pure)."""
    labels = {}
    for mode in PSA_MODES:
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    return labels


def twin_namespace_manifest(*, name: str, consumer_id: str, home_namespace: str, level: str) -> dict[str, Any]:
    """The twin namespace ``name`` of ``consumer_id``'s ``home_namespace``, its pods held to ``level`` (pure)."""
    labels = names.peer_labels(consumer_id) | {names.ORIGIN_NAMESPACE: home_namespace} | pod_security_labels(level)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod_security_patch(namespace: dict[str, Any], *, level: str) -> dict[str, Any] | None:
    """The merge patch bringing a twin's PSA labels to ``level``, or None if they are there already (pure)."""
    current = namespace["metadata"].get("labels") or {}
    wanted = pod_security_labels(level)
    if all(current.get(key) == value for key, value in wanted.items()):
        return None
    return {"metadata": {"labels": wanted}}


def is_twin_of(namespace: dict[str, Any], *, consumer_id: str) -> bool:
    """Whether ``namespace`` is a twin this cluster made for ``consumer_id`` (never touch any other)."""
    labels = namespace["metadata"].get("labels") or {}
    return labels.get(names.REMOTE_CLUSTER_ID) == consumer_id and names.ORIGIN_NAMESPACE in labels


def twin_rules() -> list[dict[str, Any]]:
    """What a consumer's identity may do in its twins: ClusterRole ``liqo-peer-twin``, bound in each (pure)."""
    return [
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods"], "verbs": _ALL},
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"], "verbs": _ALL},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": _ALL},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _ALL},
        {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        # The kubelet API's streams (liqo.virtualkubelet.kubeletapi), opened as WebSockets: a GET, so "get", and
        # "create" as well since Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission).
        {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": _READ},
    ]


def twin_role_binding(*, namespace: str, consumer_id: str) -> dict[str, Any]:
    """The RoleBinding giving ``consumer_id``'s user :func:`twin_rules` in twin ``namespace`` (pure)."""
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": names.PEER_BINDING, "namespace": namespace, "labels": names.peer_labels(consumer_id)},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": names.PEER_TWIN_ROLE},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": names.peer_user(consumer_id)}],
    }
