"""What ``liqoctl install`` puts on a cluster, as plain manifests (pure functions, no I/O).

The same list serves both launchers: applied as is on a real cluster (where the manager is a Deployment),
or, on a local cluster, applied without the Deployment and Service because the manager runs as a host
process under the cluster's supervisor. ``--dry-run`` prints exactly this list.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.crds import all_crds
from liqo.offloading import registration

MANAGER = "liqo-manager"
"""Name of the manager's ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, and local user."""
VIRTUAL_KUBELET = "liqo-virtual-kubelet"
"""Name of the virtual kubelet's ServiceAccount, ClusterRole, binding, Deployment, and local user."""
KUBELET_PORT = 10250
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
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        # Pods: read for capacity; create and delete for the ShadowPods it runs as a provider.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
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
        {
            # Its own webhook registration only: it publishes its serving CA there (real clusters).
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [registration.WEBHOOK_CONFIGURATION],
            "verbs": ["get", "patch"],
        },
    ]


def virtual_kubelet_rules() -> list[dict[str, Any]]:
    """What the virtual kubelet may do: its Nodes and their Leases, the pods bound to them, and read its inputs.

    Secrets are read for the identities on providers (label-selected, but RBAC cannot express that) and, with
    ConfigMaps, to copy offloaded namespaces' into their twins; tokens are requested for offloaded pods'
    ServiceAccounts; Events are written (mirrored from providers with server-side apply, hence ``patch``).
    """
    read = ["get", "list", "watch"]
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*read, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*read, "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": read},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": [*read, "create", "update", "patch"]},
        {
            "apiGroups": [liqo_resources.VIRTUAL_KUBELET, liqo_resources.OFFLOADING],
            "resources": ["virtualnodes", "namespaceoffloadings"],
            "verbs": read,
        },
    ]


def component_rbac(name: str, rules: list[dict[str, Any]]) -> list[Manifest]:
    """ServiceAccount, ClusterRole and its binding (to the ServiceAccount, and to the local-mode user)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name, namespace=None),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name, namespace=None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": names.LIQO_NAMESPACE},
                # On a local cluster the component is a host process with a certificate for this user.
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name},
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


def manager_flags(*, identity_ttl: int, reserved_namespaces: tuple[str, ...] = ()) -> list[str]:
    """The manager's flags that ``liqoctl install`` sets, the same for both launchers."""
    flags = [f"--identity-ttl={identity_ttl}"]
    if reserved_namespaces:
        flags.append(f"--reserved-namespaces={','.join(reserved_namespaces)}")
    return flags


def manager_workload(*, image: str, identity_ttl: int, reserved_namespaces: tuple[str, ...] = ()) -> list[Manifest]:
    """The manager as a Deployment plus the Service exposing its authentication endpoint (real clusters)."""
    labels = {"app.kubernetes.io/name": MANAGER}
    container = {
        "name": "manager",
        "image": image,
        "command": ["python", "-m", "liqo.apps.manager"],
        "args": [
            f"--auth-address=0.0.0.0:{AUTH_PORT}",
            *manager_flags(identity_ttl=identity_ttl, reserved_namespaces=reserved_namespaces),
        ],
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


def virtual_kubelet_workload(*, image: str) -> Manifest:
    """The virtual kubelet as a Deployment (real clusters): the API server reaches it at its pod IP."""
    labels = {"app.kubernetes.io/name": VIRTUAL_KUBELET}
    container = {
        "name": "virtual-kubelet",
        "image": image,
        "command": ["python", "-m", "liqo.apps.virtualkubelet"],
        "args": [f"--listen=0.0.0.0:{KUBELET_PORT}", "--node-address=$(POD_IP)"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "kubelet", "containerPort": KUBELET_PORT}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(VIRTUAL_KUBELET) | {"labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, **labels}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"serviceAccountName": VIRTUAL_KUBELET, "containers": [container]},
            },
        },
    }


def webhook_service_client_config() -> dict[str, Any]:
    """How the API server reaches the pod webhook on a real cluster: the manager's Service.

    No ``caBundle``: each manager publishes its serving CA at start-up (:mod:`liqo.offloading.registration`).
    """
    return {
        "service": {"namespace": names.LIQO_NAMESPACE, "name": AUTH_SERVICE, "path": registration.PATH, "port": 443}
    }


def webhook_url_client_config(*, auth_url: str, ca_pem: bytes) -> dict[str, Any]:
    """How the API server reaches the pod webhook of a local cluster: the manager's loopback endpoint."""
    return {"url": f"{auth_url.rstrip('/')}{registration.PATH}", "caBundle": base64.b64encode(ca_pem).decode()}


def pod_webhook_configuration(*, client_config: dict[str, Any]) -> Manifest:
    """The registration of the pod mutating webhook (docs/offloading.md, "Pod webhook").

    Called for pod creations in namespaces labelled for offloading only, so a manager that is down holds
    up those pods alone; ``Fail`` because an unplaced pod would silently ignore the namespace's strategy.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": _meta(registration.WEBHOOK_CONFIGURATION, namespace=None),
        "webhooks": [
            {
                "name": registration.WEBHOOK_NAME,
                "clientConfig": client_config,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {names.SCHEDULING_ENABLED: "true"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
                "reinvocationPolicy": "Never",
            }
        ],
    }


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
    webhook_client_config: dict[str, Any] | None = None,
    reserved_namespaces: tuple[str, ...] = (),
) -> list[Manifest]:
    """Everything, in apply order (CRDs and namespace first). ``workload`` adds the Deployment and Service.

    The pod webhook's registration comes last, once what serves it is in place; ``webhook_client_config``
    says how the API server reaches it (default: through the manager's Service).
    """
    identity = cluster_identity(
        cluster_id=cluster_id,
        cluster_name=cluster_name,
        cluster_labels=cluster_labels,
        api_server_url=api_server_url,
        auth_url=auth_url,
    )
    items = [
        *all_crds(),
        namespace(),
        *component_rbac(MANAGER, manager_rules()),
        *component_rbac(VIRTUAL_KUBELET, virtual_kubelet_rules()),
        identity,
        auth_token_secret(token),
    ]
    if workload:
        manager = manager_workload(image=image, identity_ttl=identity_ttl, reserved_namespaces=reserved_namespaces)
        items += [*manager, virtual_kubelet_workload(image=image)]
    items.append(pod_webhook_configuration(client_config=webhook_client_config or webhook_service_client_config()))
    return items
