"""What ``liqoctl install`` and ``charts/liqo`` put on a cluster, as plain manifests (pure functions, no I/O).

One rendering of :class:`~liqo.install.values.Values`, in Python; the chart's templates are the other, and a
test holds ``helm template`` equal to :func:`chart` (``liqoctl install --dry-run`` prints :func:`manifests`).
The chart's static files (CRDs, RBAC, the admission policies) are written from here (:mod:`liqo.install.chart`).

The same list serves both launchers: applied as is where liqo runs as pods (any cluster, and local clusters
with real nodes), or, on a local cluster without real nodes, applied without the Deployments and Services
because the manager and the virtual kubelet run as host processes under the cluster's supervisor.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.bounds import DEFAULT_TENANT_QUOTA, DEFAULT_TWIN_QUOTA, quota_flag
from liqo.api.components import (
    AUTH_PORT,
    AUTH_SERVICE,
    DISCOVERY,
    GATEWAY,
    KUBELET_PORT,
    MANAGER,
    METRICS_PORT,
    NETWORK_AGENT,
    VIRTUAL_KUBELET,
    WEBHOOK_PORT,
    WEBHOOK_SERVICE,
)
from liqo.api.crds import all_crds
from liqo.api.storage import VIRTUAL_CLASS, VIRTUAL_PROVISIONER
from liqo.install import discovery, fabric, peerwrites
from liqo.install.podspec import placement, restricted_container
from liqo.install.values import Values
from liqo.kube import csr
from liqo.offloading import placementpolicy, podsecurity, registration
from liqo.offloading.twins import PEER_REFUSED_SECRET_TYPES, twin_rules, twin_writer_rules
from liqo.peering.authserver import RateLimit
from liqo.peering.enrolment import TenantLimits
from liqo.peering.provisioning import peer_rules

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
        # Claims: read, for the storage the consumers' claims hold (their budget); StorageClasses: read, since only
        # those waiting for a first consumer can be budgeted (liqo.sharing.offers).
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": _READ},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": _READ},
        # The virtual class's provisioner (liqo.storage): the PVs of its claims, made and deleted; a claim whose
        # selected node is gone has that annotation cleared, for the scheduler to place its pod again.
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": [*_READ, "create", "delete"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["patch"]},
        # A tether moves this cluster's pods to its peer and back through evictions (their budgets decide).
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
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
        # Peers' rights: RoleBindings to the three peer ClusterRoles only. No Role and no escalate: with bind
        # limited by name, the API server refuses a binding to any other role (RBAC's escalation check).
        {"apiGroups": [_RBAC], "resources": ["rolebindings"], "verbs": [*_READ, "create", "update", "patch", "delete"]},
        {
            "apiGroups": [_RBAC],
            "resources": ["clusterroles"],
            "resourceNames": [names.PEER_TENANT_ROLE, names.PEER_TWIN_ROLE, names.PEER_TWIN_WRITER_ROLE],
            "verbs": ["bind"],
        },
        # Peers' bounds, of liqo's names only: a quota of object counts in each twin and tenant namespace, a
        # NetworkPolicy in each twin. Read and patched by name (a list or watch names it in a field selector); a
        # create cannot be limited by name: the policy liqo-manager-peer-bounds holds it to those names and
        # namespaces, so the manager can neither lift nor add a quota or policy anywhere else.
        *(
            rule
            for group, plural, name in (
                ("", "resourcequotas", names.PEER_QUOTA),
                ("networking.k8s.io", "networkpolicies", names.PEER_NETWORK_POLICY),
            )
            for rule in (
                {"apiGroups": [group], "resources": [plural], "verbs": ["create"]},
                {"apiGroups": [group], "resources": [plural], "resourceNames": [name], "verbs": [*_READ, "patch"]},
            )
        ),
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
    """What the manager may do in the ``liqo`` namespace only: elect its leader, keep its identity, renew its pair."""
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
            "resourceNames": [names.CLUSTER_SETTINGS, names.CLUSTER_IDENTITY, "kube-root-ca.crt"],
            "verbs": ["get"],
        },
        # Watched by name (a metadata.name field selector): a changed install restarts the manager.
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [names.CLUSTER_SETTINGS],
            "verbs": ["list", "watch"],
        },
        # The identity it derives from the settings at start-up (liqo.peering.bootstrap): created once, then
        # applied by name. (Create cannot be limited by name; it is limited to this namespace.)
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [names.CLUSTER_IDENTITY], "verbs": ["patch"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [registration.SERVING_SECRET],
            "verbs": ["update"],
        },
        # The real claims holding the data of claims of the virtual class on this cluster's own nodes.
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["create", "delete"]},
        *fabric.manager_fabric_rules(),
    ]


def peer_cluster_roles() -> list[Manifest]:
    """The rights of every consumer's user, bound by the manager in its tenant namespace and in its twins.

    ClusterRoles installed here rather than Roles the manager writes: the manager then only binds these three
    (``bind`` by name), and cannot grant anything else.
    """
    return [
        {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole", "metadata": _meta(name, namespace=None), "rules": rules}
        for name, rules in (
            (names.PEER_TENANT_ROLE, peer_rules()),
            (names.PEER_TWIN_ROLE, twin_rules()),
            (names.PEER_TWIN_WRITER_ROLE, twin_writer_rules()),
        )
    ]


PEER_SERVICES_POLICY = "liqo-peer-services"
PEER_ENDPOINT_SLICES_POLICY = "liqo-peer-endpointslices"
PEER_INGRESSES_POLICY = "liqo-peer-ingresses"
_PEER_USERS = f"request.userInfo.username.startsWith('{names.PEER_USER_PREFIX}')"


def peer_services_policy() -> list[Manifest]:
    """What a peer's identity may say in a Service it writes in its twins (docs/security.md, "Services").

    The virtual kubelet's copies never carry these fields (:mod:`liqo.virtualkubelet.forge.services`), but a
    hostile peer runs none of our code: the API server itself refuses them from any ``liqo.io:peer:`` user, in
    any namespace, before anything is stored (:mod:`liqo.install.peerwrites`).
    """
    return _admission_policy(
        PEER_SERVICES_POLICY,
        rule={"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["services"]},
        users=_PEER_USERS,
        validations=peerwrites.SERVICE_RULES,
    )


def peer_endpoint_slices_policy() -> list[Manifest]:
    """A peer's EndpointSlices list only where this cluster sees its pods (docs/security.md, "Endpoints")."""
    return _admission_policy(
        PEER_ENDPOINT_SLICES_POLICY,
        rule={
            "apiGroups": ["discovery.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["endpointslices"],
        },
        users=_PEER_USERS,
        variables=peerwrites.ENDPOINT_SLICE_VARIABLES,
        validations=peerwrites.ENDPOINT_SLICE_RULES,
    )


def peer_ingresses_policy() -> list[Manifest]:
    """A peer's Ingresses say only what the provider's policy offers it (docs/security.md, "Ingresses")."""
    return _admission_policy(
        PEER_INGRESSES_POLICY,
        rule={
            "apiGroups": ["networking.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["ingresses"],
        },
        users=_PEER_USERS,
        variables=peerwrites.INGRESS_VARIABLES,
        validations=peerwrites.INGRESS_RULES,
    )


PEER_CLAIMS_POLICY = "liqo-peer-claims"


def peer_claims_policy() -> list[Manifest]:
    """A peer's claims name only the storage the provider's policy offers it (docs/security.md, "Storage")."""
    return _admission_policy(
        PEER_CLAIMS_POLICY,
        rule={
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["persistentvolumeclaims"],
        },
        users=_PEER_USERS,
        variables=peerwrites.CLAIM_VARIABLES,
        validations=peerwrites.CLAIM_VALIDATIONS,
    )


PEER_SECRETS_POLICY = "liqo-peer-secrets"


def peer_secrets_policy() -> list[Manifest]:
    """No peer writes a Secret of a type this cluster's controllers act on (docs/security.md, "Twins' bounds").

    A ``kubernetes.io/service-account-token`` Secret in a twin would have the token controller mint a token that
    never expires for a ServiceAccount there (:data:`~liqo.offloading.twins.PEER_REFUSED_SECRET_TYPES` says which
    types and why). The virtual kubelet never copies one; a hostile peer runs none of our code.
    """
    refused = orjson.dumps(list(PEER_REFUSED_SECRET_TYPES)).decode()
    return _admission_policy(
        PEER_SECRETS_POLICY,
        rule={"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]},
        users=_PEER_USERS,
        validations=(
            (
                f"!has(object.type) || !(object.type in {refused})",
                f"type: a peer may not write Secrets of type {' or '.join(PEER_REFUSED_SECRET_TYPES)} here (this"
                " cluster's controllers act on them: the first gets a token of this cluster that never expires)",
            ),
        ),
    )


MANAGER_PEER_BOUNDS_POLICY = "liqo-manager-peer-bounds"
_LABELS = "namespaceObject.metadata.labels"


def _labelled(key: str, value: str | None = None) -> str:
    """CEL: the request's namespace carries label ``key`` (with ``value``)."""
    present = f"has({_LABELS}) && '{key}' in {_LABELS}"
    return present if value is None else f"{present} && {_LABELS}['{key}'] == '{value}'"


_TWIN_NAMESPACE = " && ".join(
    (
        _labelled(names.MANAGED_BY, names.MANAGED_BY_VALUE),
        _labelled(names.REMOTE_CLUSTER_ID),
        _labelled(names.ORIGIN_NAMESPACE),
        "!namespaceObject.metadata.name.startsWith('kube-') && namespaceObject.metadata.name != 'default'",
    )
)
_TENANT_NAMESPACE = " && ".join(
    (
        f"namespaceObject.metadata.name.startsWith('{names.TENANT_NAMESPACE_PREFIX}')",
        _labelled(names.MANAGED_BY, names.MANAGED_BY_VALUE),
        _labelled(names.TENANT, "true"),
    )
)


def manager_peer_bounds_policy() -> list[Manifest]:
    """liqo's manager writes ResourceQuotas and NetworkPolicies only as peers' bounds.

    docs/security.md, "The manager's rights".

    RBAC cannot limit a create by name or namespace, and a quota or a NetworkPolicy is a lever: deleting or
    raising a quota lifts it, a NetworkPolicy allowing traffic adds to whatever else allows it. So the API server
    lets the manager's users write only liqo's quota (in twins and tenant namespaces) and liqo's NetworkPolicy (in
    twins), judged by the namespace's labels, which the manager writes and peers cannot (they write no namespace).
    """
    quota = "request.resource.resource == 'resourcequotas'"
    return _admission_policy(
        MANAGER_PEER_BOUNDS_POLICY,
        rule={
            "apiGroups": ["", "networking.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["resourcequotas", "networkpolicies"],
        },
        users=f"request.userInfo.username in {orjson.dumps(_users(MANAGER)).decode()}",
        validations=(
            (
                f"request.name == ({quota} ? '{names.PEER_QUOTA}' : '{names.PEER_NETWORK_POLICY}')",
                f"liqo's manager writes only the ResourceQuota {names.PEER_QUOTA} and the NetworkPolicy"
                f" {names.PEER_NETWORK_POLICY}",
            ),
            (
                f"({_TWIN_NAMESPACE}) || ({quota} && {_TENANT_NAMESPACE})",
                "liqo's manager writes peers' bounds only in their twins (a quota and a NetworkPolicy) and tenant"
                " namespaces (a quota)",
            ),
        ),
    )


def _users(*components: str) -> list[str]:
    """The users ``components`` act as: their ServiceAccounts, and the local launcher's users of their names."""
    return [f"system:serviceaccount:{names.LIQO_NAMESPACE}:{component}" for component in components] + list(components)


OWN_APPROVALS_POLICY = "liqo-own-approvals"


def own_approvals_policy() -> list[Manifest]:
    """The API server refuses liqo's components any approval of a CSR they did not create themselves.

    RBAC grants approval per signer, not per requester: the manager may approve any client certificate
    request, the virtual kubelet any kubelet-serving one (a certificate for a real node's address). Their
    code approves only requests it made (:mod:`liqo.kube.csr`); this policy makes it a rule of the API
    server, which holds even for a stolen credential.
    """
    users = _users(MANAGER, VIRTUAL_KUBELET)
    return _admission_policy(
        OWN_APPROVALS_POLICY,
        rule={
            "apiGroups": ["certificates.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["certificatesigningrequests/approval"],
        },
        users=f"request.userInfo.username in {orjson.dumps(users).decode()}",
        validations=(
            (
                "object.spec.username == request.userInfo.username",
                "liqo's components may approve only the certificate requests they made themselves",
            ),
        ),
    )


def peer_network_configs_policy() -> list[Manifest]:
    """A peer's identity writes only its own NetworkConfig (docs/security.md, "The network fabric")."""
    return _admission_policy(
        fabric.PEER_NETWORK_CONFIGS_POLICY,
        rule={
            "apiGroups": [liqo_resources.NETWORKING],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["networkconfigs", "networkconfigs/status"],
        },
        users=_PEER_USERS,
        validations=fabric.PEER_NETWORK_CONFIG_RULES,
    )


PEER_TENANT_WRITES_POLICY = "liqo-peer-tenant-writes"
_PEER_ID = f"request.userInfo.username.substring({len(names.PEER_USER_PREFIX)})"


def peer_tenant_writes_policy() -> list[Manifest]:
    """In its tenant namespace a peer writes its own request and map, and verdicts on the offers made to it, only.

    RBAC grants per kind, not per name. In a bidirectional peering the tenant namespace ``liqo-tenant-<peer>``
    holds both conversations: the peer's request (named after it) and our offer to it (named after us), but
    also our request to it (named after us) and the replica of its offer to us (named after it), whose status is
    *our* verdict — in ``Manual`` mode, our admin's. Without this policy the peer could accept its own offer on
    our behalf, and our pods would go to it. Its NamespaceMap is the one named after it (the only one this cluster
    reads): held to that name, a peer's request, map and NetworkConfig there are one each, and the tenant's quota
    need count no custom resource (:mod:`liqo.api.bounds` says why that matters).
    """
    return _admission_policy(
        PEER_TENANT_WRITES_POLICY,
        rule={
            "apiGroups": [liqo_resources.DISCOVERY, liqo_resources.SHARING, liqo_resources.OFFLOADING],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourcerequests", "resourceoffers/status", "namespacemaps"],
        },
        users=_PEER_USERS,
        validations=(
            (
                f"request.resource.resource != 'resourcerequests' || request.name == {_PEER_ID}",
                "a peer writes only its own ResourceRequest, named after its cluster ID",
            ),
            (
                f"request.resource.resource != 'resourceoffers' || request.name != {_PEER_ID}",
                "the verdict on a peer's offer is this cluster's: a peer may accept only the offers made to it",
            ),
            (
                f"request.resource.resource != 'namespacemaps' || request.name == {_PEER_ID}",
                "a peer writes only its own NamespaceMap, named after its cluster ID",
            ),
        ),
    )


def _admission_policy(
    name: str,
    *,
    rule: dict[str, Any],
    users: str,
    validations: Iterable[tuple[str, str] | peerwrites.Validation],
    variables: Iterable[tuple[str, str]] = (),
) -> list[Manifest]:
    """A ValidatingAdmissionPolicy (requests matching ``rule`` by users matching ``users``) and its binding.

    Policies rather than webhooks: no server of ours is on the path, so they hold while the manager is down.
    ``variables`` (name, CEL) are worked out once per request, for every validation.
    """
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [rule]},
        "matchConditions": [{"name": "users", "expression": users}],
    }
    if variables:
        spec["variables"] = [{"name": variable, "expression": expression} for variable, expression in variables]
    spec["validations"] = [_validation(peerwrites.Validation(*validation)) for validation in validations]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name, namespace=None),
        "spec": spec,
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name, namespace=None),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _validation(validation: peerwrites.Validation) -> dict[str, str]:
    rendered = {"expression": validation.expression, "message": validation.message, "reason": "Forbidden"}
    if validation.message_expression:
        rendered["messageExpression"] = validation.message_expression
    return rendered


def virtual_kubelet_rules() -> list[dict[str, Any]]:
    """What the virtual kubelet may do: its Nodes and their Leases, the pods bound to them, and read its inputs.

    Secrets are read for the identities on providers (label-selected, but RBAC cannot express that) and, with
    ConfigMaps, Services, Ingresses, EndpointSlices and claims of the virtual storage class, to copy offloaded
    namespaces' into their twins (and
    ForeignClusters and NetworkConfigs, for the providers' networks and where each side sees the other's pods);
    tokens are requested for offloaded pods' ServiceAccounts; Events are written (mirrored from providers with
    server-side apply, hence ``patch``). Its serving certificate, as a pod, comes from a CertificateSigningRequest
    it approves itself, for the kubelet-serving signer only (:mod:`liqo.kube.csr`; docs/security.md says what that
    lets it do).
    """
    read = ["get", "list", "watch"]
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*read, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*read, "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {
            "apiGroups": [""],
            "resources": ["secrets", "configmaps", "services", "persistentvolumeclaims"],
            "verbs": read,
        },
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
        # Where each side sees the other's pods (the network fabric), to translate addresses.
        {"apiGroups": [liqo_resources.NETWORKING], "resources": ["networkconfigs"], "verbs": read},
        # A provider's twins here, by their labels: where a pod it sent back runs, to give its own address home.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
        # The Registered condition: whether the Node of that name is ours (server-side apply is a patch).
        {"apiGroups": [liqo_resources.VIRTUAL_KUBELET], "resources": ["virtualnodes/status"], "verbs": ["patch"]},
        # Its own CSR: created, watched by name until signed, deleted (names are generated: no resourceNames).
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "watch", "delete"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests/approval"],
            "verbs": ["update"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["signers"],
            "resourceNames": [csr.KUBELET_SERVING_SIGNER],
            "verbs": ["approve"],
        },
    ]


def component_rbac(
    name: str, rules: list[dict[str, Any]], namespace_rules: list[dict[str, Any]] | None = None
) -> list[Manifest]:
    """ServiceAccount, ClusterRole and its binding (to the ServiceAccount, and to the local-mode user).

    No ClusterRole without ``rules``. With ``namespace_rules``, also a Role holding them in the ``liqo``
    namespace, bound to the same subjects.
    """
    subjects = [
        {"kind": "ServiceAccount", "name": name, "namespace": names.LIQO_NAMESPACE},
        # On a local cluster the component is a host process with a certificate for this user.
        {"apiGroup": _RBAC, "kind": "User", "name": name},
    ]
    manifests: list[Manifest] = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)}]
    if rules:
        manifests += [
            {
                "apiVersion": f"{_RBAC}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(name, namespace=None),
                "rules": rules,
            },
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


def settings(values: Values) -> Manifest:
    """The ConfigMap of what the install was told; the manager derives the cluster identity from it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(names.CLUSTER_SETTINGS),
        "data": {
            "clusterName": values.cluster_name,
            "clusterLabels": orjson.dumps(dict(values.cluster_labels), option=orjson.OPT_SORT_KEYS).decode(),
            "apiServerURL": values.api_server_url,
            "authURL": values.auth_url,
            "podCIDR": values.pod_cidr,
            "serviceCIDR": values.service_cidr,
            "lanDiscovery": "true" if values.lan_discovery else "false",
        },
    }


def manager_flags(
    *,
    identity_ttl: int,
    tenant_limits: TenantLimits,
    rate_limit: RateLimit,
    reserved_namespaces: tuple[str, ...] = (),
    reserved_subnets: tuple[str, ...] = (),
    peer_pools: tuple[str, ...] = (),
    twin_quota: Mapping[str, int] = DEFAULT_TWIN_QUOTA,
    tenant_quota: Mapping[str, int] = DEFAULT_TENANT_QUOTA,
) -> list[str]:
    """The manager's flags that ``liqoctl install`` sets, the same for both launchers."""
    flags = [
        f"--identity-ttl={identity_ttl}",
        f"--max-tenants={tenant_limits.max_tenants}",
        f"--max-pending-tenants={tenant_limits.max_pending}",
        f"--auth-burst={rate_limit.burst}",
        f"--auth-rate={rate_limit.per_second:g}",  # as Helm prints a number
    ]
    if reserved_namespaces:
        flags.append(f"--reserved-namespaces={','.join(reserved_namespaces)}")
    if reserved_subnets:
        flags.append(f"--reserved-subnets={','.join(reserved_subnets)}")
    flags += [f"--twin-quota={quota_flag(twin_quota)}", f"--tenant-quota={quota_flag(tenant_quota)}"]
    return [*flags, *fabric.peer_pools_flags(peer_pools)]


def _probes() -> dict[str, Any]:
    """Ready once the process serves (every replica: the Services send to any); alive while its loop answers."""
    return {
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 2},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
    }


SHUTDOWN_DELAY = 5
"""Seconds a terminating manager keeps answering (well within the pod's grace period)."""
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
"""The cluster CA as every pod sees it: what the API server's client certificates chain to."""


def _deployment(
    name: str, values: Values, *, replicas: int, container: dict[str, Any], strategy: dict[str, Any]
) -> Manifest:
    labels = {"app.kubernetes.io/name": name}
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        # Long enough for a manager to drain (it keeps answering webhooks while its endpoint is withdrawn).
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": name.removeprefix("liqo-"),
                "image": values.image,
                "imagePullPolicy": values.image_pull_policy,
                **container,
                "securityContext": restricted_container(),
            }
        ],
    }
    pod |= placement(values)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name) | {"labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, **labels}},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _service(name: str, *, selector: str, port: str, service_type: str, node_port: int | None) -> Manifest:
    service_port: dict[str, Any] = {"name": "https", "port": 443, "targetPort": port}
    if node_port is not None:
        service_port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name),
        "spec": {"type": service_type, "selector": {"app.kubernetes.io/name": selector}, "ports": [service_port]},
    }


def manager_workload(values: Values) -> list[Manifest]:
    """The manager as a Deployment, with its Services: authentication for peers, webhooks for the API server.

    Two Services because peers reach one and must not reach the other: ``liqo-auth`` serves the
    authentication listener only; ``liqo-webhook`` the webhook listener. Every replica serves both, and a
    rolling update adds a ready replica before removing one, so the webhooks always have an endpoint.
    """
    container = {
        "command": ["python3", "-m", "liqo.apps.manager"],
        "args": [
            f"--auth-address=0.0.0.0:{AUTH_PORT}",
            f"--webhook-address=0.0.0.0:{WEBHOOK_PORT}",
            f"--shutdown-delay={SHUTDOWN_DELAY}",
            *manager_flags(
                identity_ttl=values.identity_ttl,
                tenant_limits=values.tenant_limits,
                rate_limit=values.auth_rate_limit,
                reserved_namespaces=values.reserved_namespaces,
                reserved_subnets=values.reserved_subnets,
                peer_pools=values.peer_pools,
                twin_quota=values.twin_quota,
                tenant_quota=values.tenant_quota,
            ),
        ],
        "ports": [
            {"name": "auth", "containerPort": AUTH_PORT},
            {"name": "webhook", "containerPort": WEBHOOK_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        **_probes(),
        "resources": dict(values.manager_resources),
    }
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    webhook_type = "NodePort" if values.webhook_node_port is not None else "ClusterIP"
    return [
        _deployment(MANAGER, values, replicas=values.manager_replicas, container=container, strategy=rolling),
        _service(
            AUTH_SERVICE,
            selector=MANAGER,
            port="auth",
            service_type=values.auth_service_type,
            node_port=values.auth_node_port,
        ),
        _service(
            WEBHOOK_SERVICE,
            selector=MANAGER,
            port="webhook",
            service_type=webhook_type,
            node_port=values.webhook_node_port,
        ),
    ]


def virtual_kubelet_workload(values: Values) -> list[Manifest]:
    """The virtual kubelet as a Deployment: the API server reaches it at its pod IP, or at a node port.

    With ``virtualKubelet.nodePort`` the virtual nodes advertise the address of the node the pod runs on
    and that port (a Service's), for clusters whose API server cannot reach pod IPs.
    """
    behind_node_port = values.virtual_kubelet_node_port is not None
    address, address_field = ("HOST_IP", "hostIP") if behind_node_port else ("POD_IP", "podIP")
    args = [f"--listen=0.0.0.0:{KUBELET_PORT}", f"--node-address=$({address})", f"--client-ca={SERVICE_ACCOUNT_CA}"]
    if behind_node_port:
        args.append(f"--node-port={values.virtual_kubelet_node_port}")
    container = {
        "command": ["python3", "-m", "liqo.apps.virtualkubelet"],
        "args": args,
        "env": [{"name": address, "valueFrom": {"fieldRef": {"fieldPath": f"status.{address_field}"}}}],
        "ports": [
            {"name": "kubelet", "containerPort": KUBELET_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        **_probes(),
        "resources": dict(values.virtual_kubelet_resources),
    }
    # One replica leads; a second would only wait for the Lease.
    items = [_deployment(VIRTUAL_KUBELET, values, replicas=1, container=container, strategy={"type": "Recreate"})]
    if behind_node_port:
        items.append(
            _service(
                VIRTUAL_KUBELET,
                selector=VIRTUAL_KUBELET,
                port="kubelet",
                service_type="NodePort",
                node_port=values.virtual_kubelet_node_port,
            )
        )
    return items


def default_sharing_policy(values: Values) -> list[Manifest]:
    """The SharingPolicy ``default`` (naming no consumer) when values give one; none means: share half."""
    if not values.default_sharing_policy:
        return []
    return [
        {
            "apiVersion": f"{liqo_resources.SHARING_POLICIES.group}/{liqo_resources.SHARING_POLICIES.version}",
            "kind": liqo_resources.SHARING_POLICIES.kind,
            "metadata": _meta("default", namespace=None),
            "spec": dict(values.default_sharing_policy),
        }
    ]


def webhook_service_client_config(path: str) -> dict[str, Any]:
    """How the API server reaches the webhook at ``path`` on a real cluster: the manager's webhook Service.

    No ``caBundle``: each manager publishes its serving CA at start-up (:mod:`liqo.offloading.registration`).
    """
    return {"service": {"namespace": names.LIQO_NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": 443}}


def webhook_url_client_config(*, webhook_url: str, path: str, ca_pem: bytes | None = None) -> dict[str, Any]:
    """How the API server reaches the webhook at ``path`` by URL (a local cluster's host process, a node port).

    With ``ca_pem`` (the host-process launcher's certificate comes from the cluster CA) the bundle is written
    here; without, each manager publishes its serving CA at start-up, as for a Service.
    """
    config: dict[str, Any] = {"url": f"{webhook_url.rstrip('/')}{path}"}
    if ca_pem is not None:
        config["caBundle"] = base64.b64encode(ca_pem).decode()
    return config


ClientConfig = Callable[[str], dict[str, Any]]
"""How the API server reaches the webhook served at a path."""


def pod_webhook_configuration(*, client_config: dict[str, Any]) -> Manifest:
    """The registration of the pod mutating webhook (docs/offloading.md, "Pod placement").

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


def pod_placement_policy() -> list[Manifest]:
    """The pod webhook's placement as a MutatingAdmissionPolicy (:mod:`liqo.offloading.placementpolicy`).

    The same namespaces as the webhook (labelled for offloading), the namespace's NamespaceOffloading as the
    parameter (none: the pod is left alone, as the webhook leaves it), ``Fail`` for the same reason.
    """
    offloadings = liqo_resources.NAMESPACE_OFFLOADINGS
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": _meta(placementpolicy.NAME, namespace=None),
        "spec": {
            "paramKind": {"apiVersion": offloadings.api_version, "kind": offloadings.kind},
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "variables": placementpolicy.variables(),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": placementpolicy.patch_expression()}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": _meta(placementpolicy.NAME, namespace=None),
        "spec": {
            "policyName": placementpolicy.NAME,
            "paramRef": {"name": names.OFFLOADING, "parameterNotFoundAction": "Allow"},
            "matchResources": {"namespaceSelector": {"matchLabels": {names.SCHEDULING_ENABLED: "true"}}},
        },
    }
    return [policy, binding]


def _cel_annotations_changed(keep_out: Iterable[str]) -> str:
    """CEL: whether an annotation other than ``keep_out`` was added, changed or removed (an absent map is empty)."""
    now = "(has(object.metadata.annotations) ? object.metadata.annotations : {})"
    before = "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})"
    judged = f"!(k in [{', '.join(repr(k) for k in keep_out)}])"
    return (
        f"{now}.exists(k, {judged} && !(k in {before} && {before}[k] == {now}[k]))"
        f" || {before}.exists(k, {judged} && !(k in {now}))"
    )


SHADOW_POD_JUDGED_CHANGE = (
    "request.operation != 'UPDATE' || has(object.spec) != has(oldObject.spec)"
    " || (has(object.spec) && object.spec != oldObject.spec)"
    f" || {_cel_annotations_changed(podsecurity.BOOKKEEPING_ANNOTATIONS)}"
)
"""The ShadowPod webhook's match condition: a create, or an update of what the verdict judges (the pod, an
annotation other than liqo's bookkeeping; never the labels: a key off the allowlist is left off the pod, not
refused). :func:`liqo.offloading.shadowpod_webhook.unchanged` in CEL, so that the API server does not call the webhook
for the provider's own bookkeeping (a finalizer removed at every ShadowPod's deletion), for the consumer's (the
grace period its virtual kubelet writes before deleting one), nor for labels, which then also succeed while
the manager is down."""


def shadow_pod_webhook_configuration(*, client_config: dict[str, Any]) -> Manifest:
    """The registration of the ShadowPod validating webhook (docs/security.md, "ShadowPod admission").

    Called for ShadowPod creations and updates in twin namespaces only (the labels only this cluster's
    manager writes), so nothing else in the cluster depends on the manager; ``Fail`` because a ShadowPod
    let through unchecked would be run by the provider (the controller checks again before making its pod).
    An update that leaves the pod and the annotations but liqo's bookkeeping as they were is not sent
    (:data:`SHADOW_POD_JUDGED_CHANGE`).
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
                "matchConditions": [{"name": "judged-fields-change", "expression": SHADOW_POD_JUDGED_CHANGE}],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }


def _client_config_of(values: Values) -> ClientConfig:
    """How the API server reaches the webhooks the values describe: by URL if they give one, else the Service."""
    url = values.webhook_url
    if not url:
        return webhook_service_client_config
    return lambda path: webhook_url_client_config(webhook_url=url, path=path)


def rights() -> list[Manifest]:
    """Every right liqo's components and peers hold, and the admission policies bounding them (no values)."""
    return [
        *peer_cluster_roles(),
        *peer_services_policy(),
        *peer_secrets_policy(),
        *manager_peer_bounds_policy(),
        *peer_endpoint_slices_policy(),
        *peer_ingresses_policy(),
        *peer_claims_policy(),
        *own_approvals_policy(),
        *peer_network_configs_policy(),
        *peer_tenant_writes_policy(),
        *component_rbac(MANAGER, manager_rules(), manager_namespace_rules()),
        *component_rbac(VIRTUAL_KUBELET, virtual_kubelet_rules()),
        *component_rbac(GATEWAY, fabric.gateway_rules()),
        *component_rbac(NETWORK_AGENT, [], fabric.network_agent_namespace_rules()),
        *component_rbac(DISCOVERY, discovery.discovery_rules(), discovery.discovery_namespace_rules()),
    ]


def chart(
    values: Values,
    *,
    webhook_client_config: ClientConfig | None = None,
    workloads: bool = True,
    placement_policy: bool = True,
) -> list[Manifest]:
    """What ``charts/liqo`` renders for ``values`` (its CRDs included), in apply order.

    The webhooks' registrations come last, once what serves them is in place. ``workloads=False`` leaves
    out the Deployments and Services (the host-process launcher runs the manager and the virtual kubelet
    itself, and says with ``webhook_client_config`` how the API server reaches them). New pods are placed by
    the MutatingAdmissionPolicy if ``placement_policy`` (the API server serves that kind), else by the pod
    webhook: never both.
    """
    client_config = webhook_client_config or _client_config_of(values)
    items = [
        *all_crds(),
        *rights(),
        settings(values),
        *default_sharing_policy(values),
        *virtual_storage(),
        *([discovery.lan_source()] if values.lan_discovery else []),
    ]
    if workloads:
        items += [*manager_workload(values), *virtual_kubelet_workload(values), *fabric.fabric_workloads(values)]
        items += [discovery.lan_listener(values)] if values.lan_discovery else []
    items += pod_placement(client_config=client_config, policy=placement_policy)
    items.append(shadow_pod_webhook_configuration(client_config=client_config(registration.VALIDATE_PATH)))
    return items


def virtual_storage() -> list[Manifest]:
    """The virtual StorageClass ``liqo`` and its CSI driver's registration.

    :mod:`liqo.storage` provisions the class's claims where their first pod lands. The PVs standing for volumes
    on providers name the driver, and nothing attaches or mounts them.
    """
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": VIRTUAL_CLASS},
            "provisioner": VIRTUAL_PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
            "allowVolumeExpansion": False,
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": VIRTUAL_PROVISIONER},
            "spec": {"attachRequired": False, "podInfoOnMount": False, "volumeLifecycleModes": ["Persistent"]},
        },
    ]


def pod_placement(*, client_config: ClientConfig, policy: bool) -> list[Manifest]:
    """What places new pods of offloaded namespaces: the admission policy, or the pod webhook's registration."""
    if policy:
        return pod_placement_policy()
    return [pod_webhook_configuration(client_config=client_config(registration.PATH))]


def manifests(
    values: Values,
    *,
    webhook_client_config: ClientConfig | None = None,
    workloads: bool = True,
    placement_policy: bool = True,
) -> list[Manifest]:
    """Everything ``liqoctl install`` applies: the liqo namespace, then :func:`chart`.

    The chart leaves the namespace out because Helm makes it (``--create-namespace``) and owns none of it.
    """
    return [
        namespace(),
        *chart(
            values,
            webhook_client_config=webhook_client_config,
            workloads=workloads,
            placement_policy=placement_policy,
        ),
    ]
