"""What ``liqoctl install`` puts on a cluster, as plain manifests (pure functions, no I/O).

The same list serves both launchers: applied as is on a real cluster (where the manager is a Deployment),
or, on a local cluster, applied without the Deployments and Services because the manager runs as a host
process under the cluster's supervisor. ``--dry-run`` prints exactly this list.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.clusterkey import ClusterKey
from liqo.api.crds import all_crds
from liqo.api.networks import ClusterNetwork
from liqo.offloading import registration
from liqo.offloading.twins import twin_rules
from liqo.peering.provisioning import peer_rules
from liqo.peering.tokens import token_secret

MANAGER = "liqo-manager"
"""Name of the manager's ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment, and local user."""
VIRTUAL_KUBELET = "liqo-virtual-kubelet"
"""Name of the virtual kubelet's ServiceAccount, ClusterRole, binding, Deployment, and local user."""
KUBELET_PORT = 10250
AUTH_SERVICE = "liqo-auth"
AUTH_PORT = 8443
WEBHOOK_SERVICE = "liqo-webhook"
"""The ClusterIP Service through which the API server calls the webhooks (never the peers' ``liqo-auth``)."""
WEBHOOK_PORT = 9443
METRICS_PORT = 8080
"""Both components' ``/metrics``, ``/healthz`` and ``/readyz`` (plain HTTP)."""
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


_RBAC = "rbac.authorization.k8s.io"
_READ = ["get", "list", "watch"]


def manager_rules() -> list[dict[str, Any]]:
    """What the manager may do cluster-wide; docs/security.md, "The manager's rights", justifies each right.

    Verbs are the ones the code uses (server-side apply is ``patch``, and ``create`` when the object is new).
    Rights needed in the ``liqo`` namespace only are in :func:`manager_namespace_rules`.
    """
    liqo_groups = sorted({r.group for r in liqo_resources.ALL})
    return [
        {"apiGroups": liqo_groups, "resources": ["*"], "verbs": [*_READ, "create", "update", "patch", "delete"]},
        # Tenant and twin namespaces: created (twins with a plain create), annotated, deleted.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": [*_READ, "create", "patch", "delete"]},
        # Identities and peer tokens in tenant namespaces (label-selected informer: RBAC cannot say so), the token.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": [*_READ, "create", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": _READ},
        # Pods: read for capacity; create and delete for the ShadowPods it runs as a provider.
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*_READ, "create", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        # Consumers' heartbeats, by name (a list or watch names it in a field selector), and the slices they
        # reflect into twins, set not-ready when a consumer goes silent (liqo.offloading.heartbeats).
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [names.CONSUMER_HEARTBEAT],
            "verbs": _READ,
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": [*_READ, "patch"]},
        # Peers' rights: RoleBindings to the two peer ClusterRoles only. No Role and no escalate: with bind
        # limited by name, the API server refuses a binding to any other role (RBAC's escalation check).
        {"apiGroups": [_RBAC], "resources": ["rolebindings"], "verbs": [*_READ, "create", "update", "patch", "delete"]},
        {
            "apiGroups": [_RBAC],
            "resources": ["clusterroles"],
            "resourceNames": [names.PEER_TENANT_ROLE, names.PEER_TWIN_ROLE],
            "verbs": ["bind"],
        },
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
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [registration.VALIDATING_CONFIGURATION],
            "verbs": ["get", "patch"],
        },
    ]


def manager_namespace_rules() -> list[dict[str, Any]]:
    """What the manager may do in the ``liqo`` namespace only: elect its leader, read its identity, renew its pair."""
    return [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        # The manager's Lease is named after it (liqo.apps.manager.LEASE).
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [MANAGER],
            "verbs": ["get", "update"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [names.CLUSTER_IDENTITY, "kube-root-ca.crt"],
            "verbs": ["get"],
        },
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [registration.SERVING_SECRET],
            "verbs": ["update"],
        },
    ]


def peer_cluster_roles() -> list[Manifest]:
    """The rights of every consumer's user, bound by the manager in its tenant namespace and in its twins.

    ClusterRoles installed here rather than Roles the manager writes: the manager then only binds these two
    (``bind`` by name), and cannot grant anything else.
    """
    return [
        {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole", "metadata": _meta(name, namespace=None), "rules": rules}
        for name, rules in ((names.PEER_TENANT_ROLE, peer_rules()), (names.PEER_TWIN_ROLE, twin_rules()))
    ]


PEER_SERVICES_POLICY = "liqo-peer-services"
_PEER_SERVICE_RULES = (
    (
        "!has(object.spec.type) || object.spec.type in ['ClusterIP', 'ExternalName']",
        "spec.type: a peer's Service must be ClusterIP or ExternalName (NodePort and LoadBalancer open this"
        " cluster's nodes and load balancers)",
    ),
    (
        "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
        "spec.externalIPs: a peer may not claim addresses for its Service (they would capture this cluster's"
        " traffic to them)",
    ),
    (
        "!has(object.spec.loadBalancerIP) && !has(object.spec.loadBalancerSourceRanges)"
        " && !has(object.spec.loadBalancerClass)",
        "spec.loadBalancer*: a peer's Service has no load balancer here",
    ),
)


def peer_services_policy() -> list[Manifest]:
    """What a peer's identity may say in a Service it writes in its twins (docs/security.md, "Services").

    The virtual kubelet's copies never carry these fields (:mod:`liqo.virtualkubelet.forge.services`), but a
    hostile peer runs none of our code: the API server itself refuses them from any ``liqo.io:peer:`` user, in
    any namespace, before anything is stored. A ValidatingAdmissionPolicy rather than a webhook: it needs no
    server of ours on the path, so it holds even while the manager is down.
    """
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(PEER_SERVICES_POLICY, namespace=None),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["services"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "peer", "expression": f"request.userInfo.username.startsWith('{names.PEER_USER_PREFIX}')"}
            ],
            "validations": [
                {"expression": expression, "message": message, "reason": "Forbidden"}
                for expression, message in _PEER_SERVICE_RULES
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(PEER_SERVICES_POLICY, namespace=None),
        "spec": {"policyName": PEER_SERVICES_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def virtual_kubelet_rules() -> list[dict[str, Any]]:
    """What the virtual kubelet may do: its Nodes and their Leases, the pods bound to them, and read its inputs.

    Secrets are read for the identities on providers (label-selected, but RBAC cannot express that) and, with
    ConfigMaps, Services, Ingresses and EndpointSlices, to copy offloaded namespaces' into their twins (and
    ForeignClusters, for the providers' networks); tokens are requested
    for offloaded pods' ServiceAccounts; Events are written (mirrored from providers with server-side apply,
    hence ``patch``).
    """
    read = ["get", "list", "watch"]
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*read, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*read, "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["secrets", "configmaps", "services"], "verbs": read},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": read},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": [*read, "create", "update", "patch"]},
        {
            "apiGroups": [liqo_resources.VIRTUAL_KUBELET, liqo_resources.OFFLOADING, liqo_resources.DISCOVERY],
            "resources": ["virtualnodes", "namespaceoffloadings", "foreignclusters"],
            "verbs": read,
        },
        # The Registered condition: whether the Node of that name is ours (server-side apply is a patch).
        {"apiGroups": [liqo_resources.VIRTUAL_KUBELET], "resources": ["virtualnodes/status"], "verbs": ["patch"]},
    ]


def component_rbac(
    name: str, rules: list[dict[str, Any]], namespace_rules: list[dict[str, Any]] | None = None
) -> list[Manifest]:
    """ServiceAccount, ClusterRole and its binding (to the ServiceAccount, and to the local-mode user).

    With ``namespace_rules``, also a Role holding them in the ``liqo`` namespace, bound to the same subjects.
    """
    subjects = [
        {"kind": "ServiceAccount", "name": name, "namespace": names.LIQO_NAMESPACE},
        # On a local cluster the component is a host process with a certificate for this user.
        {"apiGroup": _RBAC, "kind": "User", "name": name},
    ]
    manifests: list[Manifest] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)},
        {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole", "metadata": _meta(name, namespace=None), "rules": rules},
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name, namespace=None),
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        },
    ]
    if namespace_rules:
        manifests += [
            {"apiVersion": f"{_RBAC}/v1", "kind": "Role", "metadata": _meta(name), "rules": namespace_rules},
            {
                "apiVersion": f"{_RBAC}/v1",
                "kind": "RoleBinding",
                "metadata": _meta(name),
                "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": name},
                "subjects": subjects,
            },
        ]
    return manifests


def cluster_identity(
    *,
    cluster_id: str,
    cluster_name: str,
    cluster_labels: dict[str, str],
    api_server_url: str,
    auth_url: str,
    key: ClusterKey,
    network: ClusterNetwork,
) -> Manifest:
    """The ConfigMap every component reads to know which cluster it runs in (with the key's public half)."""
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
            "publicKey": key.public_pem,
            "keyFingerprint": key.fingerprint,
            **network.to_message(),
        },
    }


def cluster_key_secret(key: ClusterKey) -> Manifest:
    """The Secret holding this cluster's private key (the manager signs with it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names.CLUSTER_KEY_SECRET),
        "type": "Opaque",
        "stringData": {"privateKey": key.private_pem()},
    }


def manager_flags(*, identity_ttl: int, reserved_namespaces: tuple[str, ...] = ()) -> list[str]:
    """The manager's flags that ``liqoctl install`` sets, the same for both launchers."""
    flags = [f"--identity-ttl={identity_ttl}"]
    if reserved_namespaces:
        flags.append(f"--reserved-namespaces={','.join(reserved_namespaces)}")
    return flags


def manager_workload(*, image: str, identity_ttl: int, reserved_namespaces: tuple[str, ...] = ()) -> list[Manifest]:
    """The manager as a Deployment, with its Services: authentication for peers, webhooks for the API server.

    Two Services because peers reach one and must not reach the other: ``liqo-auth`` (LoadBalancer) serves
    the authentication listener only; ``liqo-webhook`` (ClusterIP) the webhook listener (real clusters).
    """
    labels = {"app.kubernetes.io/name": MANAGER}
    container = {
        "name": "manager",
        "image": image,
        "command": ["python", "-m", "liqo.apps.manager"],
        "args": [
            f"--auth-address=0.0.0.0:{AUTH_PORT}",
            f"--webhook-address=0.0.0.0:{WEBHOOK_PORT}",
            *manager_flags(identity_ttl=identity_ttl, reserved_namespaces=reserved_namespaces),
        ],
        "ports": [
            {"name": "auth", "containerPort": AUTH_PORT},
            {"name": "webhook", "containerPort": WEBHOOK_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
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
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(WEBHOOK_SERVICE),
            "spec": {
                "type": "ClusterIP",
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": "webhook"}],
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
        "ports": [
            {"name": "kubelet", "containerPort": KUBELET_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
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


def webhook_service_client_config(path: str) -> dict[str, Any]:
    """How the API server reaches the webhook at ``path`` on a real cluster: the manager's webhook Service.

    No ``caBundle``: each manager publishes its serving CA at start-up (:mod:`liqo.offloading.registration`).
    """
    return {"service": {"namespace": names.LIQO_NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": 443}}


def webhook_url_client_config(*, webhook_url: str, ca_pem: bytes, path: str) -> dict[str, Any]:
    """How the API server reaches the webhook at ``path`` of a local cluster: the manager's loopback listener."""
    return {"url": f"{webhook_url.rstrip('/')}{path}", "caBundle": base64.b64encode(ca_pem).decode()}


ClientConfig = Callable[[str], dict[str, Any]]
"""How the API server reaches the webhook served at a path."""


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


def shadow_pod_webhook_configuration(*, client_config: dict[str, Any]) -> Manifest:
    """The registration of the ShadowPod validating webhook (docs/security.md, "ShadowPod admission").

    Called for ShadowPod creations and updates in twin namespaces only (the labels only this cluster's
    manager writes), so nothing else in the cluster depends on the manager; ``Fail`` because a ShadowPod
    let through unchecked would be run by the provider (the controller checks again before making its pod).
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": _meta(registration.VALIDATING_CONFIGURATION, namespace=None),
        "webhooks": [
            {
                "name": registration.VALIDATING_WEBHOOK_NAME,
                "clientConfig": client_config,
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [liqo_resources.VIRTUAL_KUBELET],
                        "apiVersions": ["*"],
                        "resources": ["shadowpods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": names.REMOTE_CLUSTER_ID, "operator": "Exists"},
                        {"key": names.ORIGIN_NAMESPACE, "operator": "Exists"},
                    ]
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
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
    key: ClusterKey,
    network: ClusterNetwork,
    image: str,
    identity_ttl: int,
    workload: bool,
    webhook_client_config: ClientConfig = webhook_service_client_config,
    reserved_namespaces: tuple[str, ...] = (),
) -> list[Manifest]:
    """Everything, in apply order (CRDs and namespace first). ``workload`` adds the Deployments and Services.

    The webhooks' registrations come last, once what serves them is in place; ``webhook_client_config``
    says how the API server reaches a webhook's path (default: through the manager's webhook Service).
    """
    identity = cluster_identity(
        cluster_id=cluster_id,
        cluster_name=cluster_name,
        cluster_labels=cluster_labels,
        api_server_url=api_server_url,
        auth_url=auth_url,
        key=key,
        network=network,
    )
    items = [
        *all_crds(),
        namespace(),
        *peer_cluster_roles(),
        *peer_services_policy(),
        *component_rbac(MANAGER, manager_rules(), manager_namespace_rules()),
        *component_rbac(VIRTUAL_KUBELET, virtual_kubelet_rules()),
        identity,
        token_secret(token),
        cluster_key_secret(key),
    ]
    if workload:
        manager = manager_workload(image=image, identity_ttl=identity_ttl, reserved_namespaces=reserved_namespaces)
        items += [*manager, virtual_kubelet_workload(image=image)]
    items.append(pod_webhook_configuration(client_config=webhook_client_config(registration.PATH)))
    items.append(shadow_pod_webhook_configuration(client_config=webhook_client_config(registration.VALIDATE_PATH)))
    return items
