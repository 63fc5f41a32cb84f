"""Twin namespaces: the namespaces a provider creates for a consumer's offloaded ones, and the consumer's rights.

A twin carries the consumer's ID under ``REMOTE_CLUSTER_ID`` (so its pods count against that consumer's
budget and not as the provider's free capacity, and unpeer finds it) and its home namespace under
``ORIGIN_NAMESPACE``. The consumer's identity gets, in the twin only, what the virtual kubelet needs: its
ShadowPods and reflected objects, read access to the pods the provider made and to their logs and events,
and exec. It never gets to create pods directly: the provider decides what runs, from the ShadowPod.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.resources import VIRTUAL_KUBELET

TWIN_ROLE = "liqo-peer"
_RBAC = "rbac.authorization.k8s.io"
_ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
_READ = ["get", "list", "watch"]


def twin_namespace_manifest(*, name: str, consumer_id: str, home_namespace: str) -> dict[str, Any]:
    """The twin namespace ``name`` of ``consumer_id``'s ``home_namespace`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": names.peer_labels(consumer_id) | {names.ORIGIN_NAMESPACE: home_namespace},
        },
    }


def is_twin_of(namespace: dict[str, Any], *, consumer_id: str) -> bool:
    """Whether ``namespace`` is a twin this cluster made for ``consumer_id`` (never touch any other)."""
    labels = namespace["metadata"].get("labels") or {}
    return labels.get(names.REMOTE_CLUSTER_ID) == consumer_id and names.ORIGIN_NAMESPACE in labels


def twin_rules() -> list[dict[str, Any]]:
    """What a consumer's identity may do in its twin namespaces (pure)."""
    return [
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods"], "verbs": _ALL},
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": _ALL},
        {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": _READ},
    ]


def twin_rbac(*, namespace: str, consumer_id: str) -> list[dict[str, Any]]:
    """The Role and RoleBinding giving ``consumer_id``'s user :func:`twin_rules` in ``namespace`` (pure)."""
    metadata = {"name": TWIN_ROLE, "namespace": namespace, "labels": names.peer_labels(consumer_id)}
    return [
        {"apiVersion": f"{_RBAC}/v1", "kind": "Role", "metadata": metadata, "rules": twin_rules()},
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": TWIN_ROLE},
            "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": names.peer_user(consumer_id)}],
        },
    ]
