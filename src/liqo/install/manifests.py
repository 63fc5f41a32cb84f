"""What ``liqoctl install`` puts on a cluster, as plain manifests (pure functions, no I/O).

The same list serves both launchers: applied as is on a real cluster (where the manager is a Deployment),
or, on a local cluster, applied without the Deployment and Service because the manager runs as a host
process under the cluster's supervisor. ``--dry-run`` prints exactly this list.
"""

from __future__ import annotations

from typing import Any

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.crds import all_crds

MANAGER = "liqo-manager"
"""Name of the manager's ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, and local user."""
AUTH_SERVICE = "liqo-auth"
AUTH_PORT = 8443
DEFAULT_IMAGE = "ghcr.io/liqo-python/liqo:0.1.0"

Manifest = dict[str, Any]


def _meta(name: str, *, namespace: str | None = names.LIQO_NAMESPACE, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}}
    if namespace:
        meta["namespace"] = namespace
    return meta | extra


def namespace() -> Manifest:
    """The ``liqo`` namespace."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(names.LIQO_NAMESPACE, namespace=None)}


def manager_rules() -> list[dict[str, Any]]:
    """What the manager may do: its own resources, tenant namespaces and RBAC, CSRs, capacity, quotas."""
    liqo_groups = sorted({r.group for r in liqo_resources.ALL})
    return [
        {"apiGroups": liqo_groups, "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["namespaces", "secrets", "resourcequotas", "configmaps"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["*"]},
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests/approval"],
            "verbs": ["update"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["signers"],
            "resourceNames": ["kubernetes.io/kube-apiserver-client"],
            "verbs": ["approve"],
        },
    ]


def manager_rbac() -> list[Manifest]:
    """ServiceAccount, ClusterRole and its binding (to the ServiceAccount, and to the local-mode user)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(MANAGER)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(MANAGER, namespace=None),
            "rules": manager_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(MANAGER, namespace=None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MANAGER},
            "subjects": [
                {"kind": "ServiceAccount", "name": MANAGER, "namespace": names.LIQO_NAMESPACE},
                # On a local cluster the manager is a host process with a certificate for this user.
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MANAGER},
            ],
        },
    ]


def cluster_identity(
    *, cluster_id: str, cluster_name: str, cluster_labels: dict[str, str], api_server_url: str, auth_url: str
) -> Manifest:
    """The ConfigMap every component reads to know which cluster it runs in."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(names.CLUSTER_IDENTITY),
        "data": {
            "clusterID": cluster_id,
            "clusterName": cluster_name,
            "clusterLabels": orjson.dumps(cluster_labels, option=orjson.OPT_SORT_KEYS).decode(),
            "apiServerURL": api_server_url,
            "authURL": auth_url,
        },
    }


def auth_token_secret(token: str) -> Manifest:
    """The Secret holding the token consumers must prove they know."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names.AUTH_TOKEN_SECRET),
        "type": "Opaque",
        "stringData": {"token": token},
    }


def manager_workload(*, image: str, identity_ttl: int) -> list[Manifest]:
    """The manager as a Deployment plus the Service exposing its authentication endpoint (real clusters)."""
    labels = {"app.kubernetes.io/name": MANAGER}
    container = {
        "name": "manager",
        "image": image,
        "command": ["python", "-m", "liqo.apps.manager"],
        "args": [f"--auth-address=0.0.0.0:{AUTH_PORT}", f"--identity-ttl={identity_ttl}"],
        "ports": [{"name": "auth", "containerPort": AUTH_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "auth", "scheme": "HTTPS"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(MANAGER) | {"labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, **labels}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"serviceAccountName": MANAGER, "containers": [container]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(AUTH_SERVICE),
            "spec": {
                "type": "LoadBalancer",
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": "auth"}],
            },
        },
    ]


def manifests(
    *,
    cluster_id: str,
    cluster_name: str,
    cluster_labels: dict[str, str],
    api_server_url: str,
    auth_url: str,
    token: str,
    image: str,
    identity_ttl: int,
    workload: bool,
) -> list[Manifest]:
    """Everything, in apply order (CRDs and namespace first). ``workload`` adds the Deployment and Service."""
    identity = cluster_identity(
        cluster_id=cluster_id,
        cluster_name=cluster_name,
        cluster_labels=cluster_labels,
        api_server_url=api_server_url,
        auth_url=auth_url,
    )
    items = [*all_crds(), namespace(), *manager_rbac(), identity, auth_token_secret(token)]
    if workload:
        items += manager_workload(image=image, identity_ttl=identity_ttl)
    return items
