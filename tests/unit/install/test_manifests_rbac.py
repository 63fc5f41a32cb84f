"""The install manifests' RBAC, without a cluster: least privilege by construction (the API server's view of it
is tested in tests/integration/install/test_manager_rights.py)."""

from __future__ import annotations

from typing import Any

from liqo.api import bounds, names
from liqo.api.components import DISCOVERY, GATEWAY, MANAGER
from liqo.api.discoverysources import LAN_SOURCE
from liqo.install import manifests
from liqo.install.installer import _admission_policies
from liqo.offloading.twins import twin_rules, twin_writer_rules
from liqo.peering.provisioning import peer_rules
from tests.unit.helpers import install_manifests

RBAC = "rbac.authorization.k8s.io"
READ = ("get", "list", "watch")


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or ["*"]
    }


def test_the_manager_holds_no_wildcard_verb_no_escalate_and_no_role_writing() -> None:
    rules = granted(manifests.manager_rules() + manifests.manager_namespace_rules())
    assert all(verb != "*" for _, _, verb, _ in rules)
    assert all(verb not in ("escalate", "deletecollection", "impersonate") for _, _, verb, _ in rules)
    rbac = {(resource, verb, name) for group, resource, verb, name in rules if group == RBAC}
    assert {r for r, _, _ in rbac} == {"rolebindings", "clusterroles"}
    assert {(verb, name) for resource, verb, name in rbac if resource == "clusterroles"} == {
        ("bind", names.PEER_TENANT_ROLE),
        ("bind", names.PEER_TWIN_ROLE),
        ("bind", names.PEER_TWIN_WRITER_ROLE),
    }


def test_quotas_and_network_policies_are_the_managers_under_liqos_names_only() -> None:
    """Read and patched by name; created (RBAC cannot name a create: liqo-manager-peer-bounds does); never updated
    whole nor deleted: the manager cannot lift a quota or a NetworkPolicy it did not write."""
    rules = granted(manifests.manager_rules() + manifests.manager_namespace_rules())
    for group, resource, name in (
        ("", "resourcequotas", names.PEER_QUOTA),
        ("networking.k8s.io", "networkpolicies", names.PEER_NETWORK_POLICY),
    ):
        assert {(verb, named) for g, r, verb, named in rules if (g, r) == (group, resource)} == {
            ("create", "*"),
            *((verb, name) for verb in (*READ, "patch")),
        }
    policies = {i["metadata"]["name"]: i for i in install_manifests() if i["kind"] == "ValidatingAdmissionPolicy"}
    policy = policies[manifests.MANAGER_PEER_BOUNDS_POLICY]["spec"]
    assert policy["failurePolicy"] == "Fail"
    assert {r for rule in policy["matchConstraints"]["resourceRules"] for r in rule["resources"]} == {
        "resourcequotas",
        "networkpolicies",
    }


def test_leases_configmaps_and_secret_updates_only_in_the_liqo_namespace() -> None:
    cluster = granted(manifests.manager_rules())
    assert not [r for r in cluster if r[1] == "configmaps"]
    # Cluster-wide, only the consumers' heartbeats, by name, read-only.
    assert {(verb, name) for _, resource, verb, name in cluster if resource == "leases"} == {
        (verb, names.CONSUMER_HEARTBEAT) for verb in ("get", "list", "watch")
    }
    assert not [r for r in cluster if r[1] == "secrets" and r[2] == "update"]
    local = granted(manifests.manager_namespace_rules())
    assert {(resource, verb, name) for _, resource, verb, name in local} == {
        ("leases", "create", "*"),
        ("leases", "get", MANAGER),
        ("leases", "update", MANAGER),
        ("configmaps", "get", names.CLUSTER_IDENTITY),
        ("configmaps", "get", "kube-root-ca.crt"),
        ("secrets", "update", "liqo-manager-tls"),
        # The identity the manager derives from the install's settings (liqo.peering.bootstrap).
        ("configmaps", "get", "liqo-settings"),
        # Watched by name: changed settings restart the manager (liqo.apps.manager).
        ("configmaps", "list", "liqo-settings"),
        ("configmaps", "watch", "liqo-settings"),
        ("configmaps", "create", "*"),
        ("configmaps", "patch", "liqo-cluster-identity"),
        # The real claims behind claims of the virtual class on this cluster's nodes (liqo.storage).
        ("persistentvolumeclaims", "create", "*"),
        ("persistentvolumeclaims", "delete", "*"),
        # Gateways (liqo.network.configs): their Deployments and Services, the template they are made of.
        *{
            (resource, verb, "*")
            for resource in ("deployments", "services")
            for verb in (*READ, "create", "patch", "delete")
        },
        *{("podtemplates", verb, GATEWAY) for verb in READ},
    }


def test_install_puts_the_peer_cluster_roles_and_the_managers_role_in_liqo() -> None:
    items = install_manifests()
    roles = {i["metadata"]["name"]: i for i in items if i["kind"] == "ClusterRole"}
    assert roles[names.PEER_TENANT_ROLE]["rules"] == peer_rules()
    assert roles[names.PEER_TWIN_ROLE]["rules"] == twin_rules()
    assert roles[names.PEER_TWIN_WRITER_ROLE]["rules"] == twin_writer_rules()
    [role] = [i for i in items if i["kind"] == "Role" and i["metadata"]["name"] == MANAGER]
    [binding] = [i for i in items if i["kind"] == "RoleBinding" and i["metadata"]["name"] == MANAGER]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == names.LIQO_NAMESPACE
    assert role["rules"] == manifests.manager_namespace_rules()
    [cluster_binding] = [i for i in items if i["kind"] == "ClusterRoleBinding" and i["metadata"]["name"] == MANAGER]
    assert binding["subjects"] == cluster_binding["subjects"]
    assert binding["roleRef"] == {"apiGroup": RBAC, "kind": "Role", "name": MANAGER}
    # The namespace exists before the Role in it; the peer ClusterRoles before the manager that binds them.
    kinds = [(i["kind"], i["metadata"]["name"]) for i in items]
    assert kinds.index(("Namespace", names.LIQO_NAMESPACE)) < kinds.index(("Role", MANAGER))
    assert kinds.index(("ClusterRole", names.PEER_TWIN_ROLE)) < kinds.index(("Deployment", MANAGER))


def test_the_reserved_namespaces_reach_the_managers_deployment() -> None:
    [deployment] = [
        i
        for i in install_manifests(reserved_namespaces=("cert-manager", "team-*"))
        if i["kind"] == "Deployment" and i["metadata"]["name"] == MANAGER
    ]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--reserved-namespaces=cert-manager,team-*" in args
    assert "--identity-ttl=7200" in args
    [plain] = [i for i in install_manifests() if i["kind"] == "Deployment" and i["metadata"]["name"] == MANAGER]
    assert not [a for a in plain["spec"]["template"]["spec"]["containers"][0]["args"] if "reserved" in a]


def test_the_quotas_reach_the_managers_deployment_and_read_back_over_the_defaults() -> None:
    quota = {"count/secrets": 5000}
    [deployment] = [
        i
        for i in install_manifests(twin_quota=dict(bounds.DEFAULT_TWIN_QUOTA) | quota)
        if i["kind"] == "Deployment" and i["metadata"]["name"] == MANAGER
    ]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    [twin] = [a.removeprefix("--twin-quota=") for a in args if a.startswith("--twin-quota=")]
    [tenant] = [a.removeprefix("--tenant-quota=") for a in args if a.startswith("--tenant-quota=")]
    assert bounds.parse_quota(twin, flag="--twin-quota", defaults={}) == dict(bounds.DEFAULT_TWIN_QUOTA) | quota
    assert bounds.parse_quota(tenant, flag="--tenant-quota", defaults={}) == bounds.DEFAULT_TENANT_QUOTA


def test_every_admission_policy_is_bound_and_removed_by_uninstall_bindings_first() -> None:
    """Uninstall deletes what ``rights()`` renders: a policy left out would outlive liqo."""
    items = manifests.rights()
    policies = {i["metadata"]["name"] for i in items if i["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {i["spec"]["policyName"] for i in items if i["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert policies == bindings
    assert {
        manifests.PEER_ENDPOINT_SLICES_POLICY,
        manifests.PEER_INGRESSES_POLICY,
        manifests.PEER_TENANT_WRITES_POLICY,
        manifests.PEER_SECRETS_POLICY,
        manifests.MANAGER_PEER_BOUNDS_POLICY,
    } <= policies
    removed = _admission_policies()
    kinds = [resource.kind for resource, _ in removed]
    assert kinds == sorted(kinds, key=lambda kind: kind != "ValidatingAdmissionPolicyBinding")
    assert {name for _, name in removed} == policies
    assert len(removed) == 2 * len(policies)


def test_the_discovery_listener_may_read_the_sources_and_identity_and_write_their_status_only() -> None:
    items = install_manifests()
    [cluster_role] = [i for i in items if i["kind"] == "ClusterRole" and i["metadata"]["name"] == DISCOVERY]
    [role] = [i for i in items if i["kind"] == "Role" and i["metadata"]["name"] == DISCOVERY]
    assert granted(cluster_role["rules"]) == {
        *(("discovery.liqo.io", "discoverysources", verb, "*") for verb in READ),
        ("discovery.liqo.io", "discoverysources/status", "patch", "*"),
    }
    assert granted(role["rules"]) == {("", "configmaps", verb, names.CLUSTER_IDENTITY) for verb in READ}
    assert role["metadata"]["namespace"] == names.LIQO_NAMESPACE


def test_discovery_is_off_unless_asked_and_then_a_host_network_pod_bound_to_its_node() -> None:
    workloads = {"DiscoverySource", "Deployment"}
    assert not [
        i for i in install_manifests() if i["kind"] in workloads and i["metadata"]["name"] in (DISCOVERY, LAN_SOURCE)
    ]
    items = install_manifests(lan_discovery=True, node_selector={"a": "b"})
    [source] = [i for i in items if i["kind"] == "DiscoverySource"]
    assert source["spec"] == {"type": "LAN"}  # the policy fields are the operator's
    [deployment] = [i for i in items if i["kind"] == "Deployment" and i["metadata"]["name"] == DISCOVERY]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["nodeSelector"] == {"a": "b"}
    [container] = pod["containers"]
    assert "--address=$(HOST_IP)" in container["args"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two announcing at once
