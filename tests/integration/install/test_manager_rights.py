"""The manager's rights as the API server grants them, on a cluster installed by ``liqoctl install``.

Asked with SubjectAccessReviews for the manager's user (the one its local launcher authenticates as, bound
like its ServiceAccount), and tried for real with a certificate for that user: docs/security.md, "The
manager's rights", lists each right next to these checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import MANAGER
from liqo.kube import pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError
from liqo.kube.resources import NAMESPACES, NETWORK_POLICIES, RESOURCE_QUOTAS, ROLE_BINDINGS, ROLES
from liqo.offloading.registration import SERVING_SECRET
from tests.integration.helpers import Site, stopped, unique

RBAC = "rbac.authorization.k8s.io"
Attributes = dict[str, str]


async def manager_may(admin: KubeClient, **attributes: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": MANAGER, "resourceAttributes": attributes},
    }
    answer = await admin.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


@pytest.fixture
async def as_manager(sites: dict[str, Site]) -> AsyncIterator[KubeClient]:
    """Milan's API server as its manager's user (a certificate of milan's CA for that user)."""
    milan_cluster = sites["milan"].cluster
    ca = pki.KeyPair((milan_cluster.dir.pki / "ca.crt").read_bytes(), (milan_cluster.dir.pki / "ca.key").read_bytes())
    leaf = pki.issue(ca, common_name=MANAGER, client=True)
    async with milan_cluster.client() as admin:
        server = admin.server
    config = pki.kubeconfig(cluster="c", server=server, ca=ca.cert, user=MANAGER, cert=leaf.cert, key=leaf.key)
    async with KubeClient.from_kubeconfig_dict(config, name="manager@milan") as client:
        yield client


DENIED: list[Attributes] = [
    # No escalation: it cannot grant what it does not hold, nor bind any role but the peers' two.
    {"verb": "escalate", "group": RBAC, "resource": "clusterroles"},
    {"verb": "escalate", "group": RBAC, "resource": "roles", "namespace": "default"},
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": "cluster-admin"},
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": "admin", "namespace": "default"},
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": MANAGER},
    {"verb": "bind", "group": RBAC, "resource": "roles", "name": MANAGER, "namespace": names.LIQO_NAMESPACE},
    # No Role nor ClusterRole of its own making.
    *({"verb": v, "group": RBAC, "resource": "roles", "namespace": "default"} for v in ("create", "update", "patch")),
    *({"verb": v, "group": RBAC, "resource": "clusterroles"} for v in ("create", "update", "patch", "delete")),
    # Leases only in liqo, and there only its own (the virtual kubelet's is not its business).
    {"verb": "create", "group": "coordination.k8s.io", "resource": "leases", "namespace": "default"},
    {"verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease"},
    {
        "verb": "update",
        "group": "coordination.k8s.io",
        "resource": "leases",
        "namespace": names.LIQO_NAMESPACE,
        "name": "liqo-virtual-kubelet",
    },
    # ConfigMaps: two, read, in liqo; nothing anywhere else.
    {"verb": "get", "resource": "configmaps", "namespace": "default", "name": "kube-root-ca.crt"},
    {"verb": "list", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE},
    {"verb": "create", "resource": "configmaps", "namespace": "default"},
    {"verb": "patch", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE, "name": names.CLUSTER_SETTINGS},
    # Secrets and namespaces: no replacing a whole object it did not write, no bulk deletion.
    {"verb": "update", "resource": "secrets", "namespace": "kube-system", "name": SERVING_SECRET},
    {"verb": "update", "resource": "secrets", "namespace": names.LIQO_NAMESPACE, "name": names.CLUSTER_KEY_SECRET},
    {"verb": "deletecollection", "resource": "secrets", "namespace": "default"},
    {"verb": "update", "resource": "namespaces", "name": "default"},
    {"verb": "deletecollection", "group": "discovery.liqo.io", "resource": "foreignclusters"},
    # Quotas and NetworkPolicies: liqo's own names only (its creates are held there by liqo-manager-peer-bounds).
    *(
        {"verb": v, "resource": "resourcequotas", "namespace": "default", "name": "compute"}
        for v in ("get", "update", "patch", "delete")
    ),
    {"verb": "delete", "resource": "resourcequotas", "namespace": "t", "name": names.PEER_QUOTA},
    {"verb": "deletecollection", "resource": "resourcequotas", "namespace": "t"},
    *(
        {"verb": v, "group": "networking.k8s.io", "resource": "networkpolicies", "namespace": "t", "name": "deny-all"}
        for v in ("update", "patch", "delete")
    ),
    {"verb": "delete", "group": "networking.k8s.io", "resource": "networkpolicies", "name": names.PEER_NETWORK_POLICY},
    # Nodes are the virtual kubelet's; pods it only creates and deletes (for ShadowPods), never changes.
    {"verb": "patch", "resource": "nodes", "name": "any"},
    {"verb": "update", "resource": "pods", "namespace": "default"},
    {"verb": "create", "resource": "pods", "subresource": "exec", "namespace": "default"},
]

ALLOWED: list[Attributes] = [
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": names.PEER_TENANT_ROLE, "namespace": "x"},
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": names.PEER_TWIN_ROLE, "namespace": "y"},
    {"verb": "bind", "group": RBAC, "resource": "clusterroles", "name": names.PEER_TWIN_WRITER_ROLE, "namespace": "y"},
    *(
        {"verb": v, "resource": "resourcequotas", "namespace": "t", "name": names.PEER_QUOTA}
        for v in ("get", "list", "watch", "patch")
    ),
    {"verb": "create", "resource": "resourcequotas", "namespace": "t"},
    *(
        {"verb": v, "group": "networking.k8s.io", "resource": "networkpolicies", "name": names.PEER_NETWORK_POLICY}
        for v in ("get", "list", "watch", "patch")
    ),
    {"verb": "create", "group": "networking.k8s.io", "resource": "networkpolicies", "namespace": "t"},
    *(
        {"verb": v, "group": RBAC, "resource": "rolebindings", "namespace": "any"}
        for v in ("get", "list", "watch", "create", "update", "patch", "delete")
    ),
    *(
        {
            "verb": v,
            "group": "coordination.k8s.io",
            "resource": "leases",
            "namespace": names.LIQO_NAMESPACE,
            "name": MANAGER,
        }
        for v in ("get", "update")
    ),
    {"verb": "create", "group": "coordination.k8s.io", "resource": "leases", "namespace": names.LIQO_NAMESPACE},
    {"verb": "get", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE, "name": names.CLUSTER_IDENTITY},
    *(
        {"verb": v, "resource": "configmaps", "namespace": names.LIQO_NAMESPACE, "name": names.CLUSTER_SETTINGS}
        for v in ("get", "list", "watch")
    ),
    {"verb": "patch", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE, "name": names.CLUSTER_IDENTITY},
    {"verb": "create", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE},
    {"verb": "get", "resource": "configmaps", "namespace": names.LIQO_NAMESPACE, "name": "kube-root-ca.crt"},
    {"verb": "update", "resource": "secrets", "namespace": names.LIQO_NAMESPACE, "name": SERVING_SECRET},
    *(
        {"verb": v, "resource": "secrets", "namespace": "t"}
        for v in ("get", "list", "watch", "create", "patch", "delete")
    ),
    *({"verb": v, "resource": "namespaces"} for v in ("get", "list", "watch", "create", "patch", "delete")),
    {"verb": "create", "resource": "pods", "subresource": "eviction", "namespace": "default"},
]


@pytest.mark.parametrize("attributes", DENIED, ids=lambda a: " ".join(a.values()))
async def test_the_manager_may_not(milan: KubeClient, attributes: Attributes) -> None:
    assert not await manager_may(milan, **attributes)


@pytest.mark.parametrize("attributes", ALLOWED, ids=lambda a: " ".join(a.values()))
async def test_the_manager_may(milan: KubeClient, attributes: Attributes) -> None:
    assert await manager_may(milan, **attributes)


def role_binding(namespace: str, role: str, kind: str = "ClusterRole") -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": unique("rb"), "namespace": namespace},
        "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "someone"}],
    }


async def test_as_the_manager_binding_anything_but_the_peer_roles_is_refused_by_the_api_server(
    milan: KubeClient, as_manager: KubeClient
) -> None:
    namespace = unique("rights")
    await milan.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        # (Its own ClusterRole it could bind: RBAC lets anyone grant what they already hold. No escalation.)
        for role in ("cluster-admin", "admin", "edit"):
            with pytest.raises(ApiError) as refused:
                await as_manager.create(ROLE_BINDINGS, role_binding(namespace, role))
            assert refused.value.status == 403
            assert "attempting to grant RBAC permissions not currently held" in refused.value.message
        own: dict[str, Any] = {
            "apiVersion": f"{RBAC}/v1",
            "kind": "Role",
            "metadata": {"name": "mine", "namespace": namespace},
            "rules": [],
        }
        with pytest.raises(ApiError) as refused:
            await as_manager.create(ROLES, own)
        assert refused.value.status == 403
        for role in (names.PEER_TENANT_ROLE, names.PEER_TWIN_ROLE, names.PEER_TWIN_WRITER_ROLE):
            created = await as_manager.create(ROLE_BINDINGS, role_binding(namespace, role))
            assert created["roleRef"]["name"] == role
    finally:
        await milan.delete(NAMESPACES, namespace)


def quota(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": {"count/secrets": "1"}},
    }


def network_policy(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]},
    }


async def test_as_the_manager_quotas_and_network_policies_are_refused_but_liqos_own_in_twins_and_tenants(
    sites: dict[str, Site], milan: KubeClient, as_manager: KubeClient
) -> None:
    """Creating a quota or a NetworkPolicy anywhere is the manager's RBAC; where and under which name, the policy's.

    A NetworkPolicy allowing everything in someone else's namespace would lift its isolation; a quota there would
    starve it. Namespace labels decide, and only the manager and admins write namespaces. Milan's manager is
    stopped: it would delete a twin no NamespaceMap wants, and the API server's rule holds without it.
    """
    plain, twin = unique("rights"), unique("twin")
    tenant = names.tenant_namespace(unique("c"))
    labels = {
        plain: {},
        twin: names.peer_labels("c") | {names.ORIGIN_NAMESPACE: "home"},
        tenant: names.peer_labels("c") | {names.TENANT: "true"},
    }
    async with stopped(sites["milan"], MANAGER):
        for namespace, namespace_labels in labels.items():
            body = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": namespace_labels},
            }
            await milan.create(NAMESPACES, body)
        try:
            await _quotas_and_network_policies_as_the_manager(milan, as_manager, plain=plain, twin=twin, tenant=tenant)
        finally:
            for namespace in labels:
                await milan.delete(NAMESPACES, namespace)


async def _quotas_and_network_policies_as_the_manager(
    milan: KubeClient, as_manager: KubeClient, *, plain: str, twin: str, tenant: str
) -> None:
    refused = [
        (RESOURCE_QUOTAS, quota(names.PEER_QUOTA, plain), "only in their twins"),
        (RESOURCE_QUOTAS, quota(names.PEER_QUOTA, "kube-system"), "only in their twins"),
        (RESOURCE_QUOTAS, quota("compute", twin), f"writes only the ResourceQuota {names.PEER_QUOTA}"),
        (NETWORK_POLICIES, network_policy(names.PEER_NETWORK_POLICY, plain), "only in their twins"),
        (NETWORK_POLICIES, network_policy(names.PEER_NETWORK_POLICY, tenant), "only in their twins"),
        (NETWORK_POLICIES, network_policy("allow-all", twin), f"the NetworkPolicy {names.PEER_NETWORK_POLICY}"),
    ]
    for resource, body, why in refused:
        with pytest.raises(ApiError) as caught:
            await as_manager.create(resource, body)
        assert caught.value.status == 403, body
        assert why in caught.value.message, caught.value.message
    await as_manager.create(RESOURCE_QUOTAS, quota(names.PEER_QUOTA, twin))
    await as_manager.create(RESOURCE_QUOTAS, quota(names.PEER_QUOTA, tenant))
    await as_manager.create(NETWORK_POLICIES, network_policy(names.PEER_NETWORK_POLICY, twin))
    # A quota an admin made under liqo's name elsewhere is not the manager's to change either.
    await milan.create(RESOURCE_QUOTAS, quota(names.PEER_QUOTA, plain))
    with pytest.raises(ApiError) as caught:
        await as_manager.patch(
            RESOURCE_QUOTAS, names.PEER_QUOTA, {"spec": {"hard": {"count/secrets": "9"}}}, namespace=plain
        )
    assert caught.value.status == 403
