"""The CRDs against a real API server: accepted, served, and refusing bad objects with readable messages.

The CRDs are cluster-scoped and the session cluster is shared, so every test applies them (server-side
apply is idempotent) and none deletes them; the instances they create have unique names and go away.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from liqo.api.crds.schema import MAX_ALLOWED_KEYS, MAX_ALLOWED_TWIN_NAMES, MAX_NAMESPACE_MAPPINGS
from liqo.api.resources import (
    FOREIGN_CLUSTERS,
    NAMESPACE_MAPS,
    NAMESPACE_OFFLOADINGS,
    RESOURCE_OFFERS,
    RESOURCE_REQUESTS,
    SHADOW_PODS,
    SHARING_POLICIES,
    VIRTUAL_NODES,
)
from liqo.kube.client import KubeClient
from liqo.kube.errors import InvalidError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import Resource
from tests.integration.helpers import LocalCluster, unique

Created = list[tuple[Resource, str]]


def obj(resource: Resource, name: str, spec: Obj, *, namespace: str | None = None) -> Obj:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata, "spec": spec}


def foreign_cluster(name: str, **spec: Any) -> Obj:
    return obj(FOREIGN_CLUSTERS, name, {"clusterID": str(uuid.uuid4()), "clusterName": name, **spec})


def network(pod_cidr: str, service_cidr: str = "10.96.0.0/16") -> Obj:
    return {"podCIDR": pod_cidr, "serviceCIDR": service_cidr}


def resource_request(namespace: str, **spec: Any) -> Obj:
    consumer = str(uuid.uuid4())
    return obj(RESOURCE_REQUESTS, consumer, {"consumerClusterID": consumer, **spec}, namespace=namespace)


def resource_offer(namespace: str, **spec: Any) -> Obj:
    provider = str(uuid.uuid4())
    base = {
        "providerClusterID": provider,
        "providerClusterName": "provider",
        "resources": {"cpu": "4", "memory": "8Gi", "pods": 110, "nvidia.com/gpu": 1},
        "expiry": "2030-01-01T00:00:00Z",
    }
    return obj(RESOURCE_OFFERS, provider, base | spec, namespace=namespace)


def sharing_policy(name: str, **spec: Any) -> Obj:
    return obj(SHARING_POLICIES, name, {"action": "Share", "percentage": 50, **spec})


def virtual_node(namespace: str, name: str, **spec: Any) -> Obj:
    base = {
        "clusterID": str(uuid.uuid4()),
        "clusterName": "provider",
        "resources": {"cpu": "2", "memory": "4Gi"},
        "kubeconfigSecretRef": {"name": "liqo-identity"},
    }
    return obj(VIRTUAL_NODES, name, base | spec, namespace=namespace)


def shadow_pod(namespace: str, **pod: Any) -> Obj:
    spec = {"pod": {"containers": [{"name": "c", "image": "nginx"}]} | pod}
    return obj(SHADOW_PODS, unique("shp"), spec, namespace=namespace)


def privileged(container: str = "containers") -> dict[str, Any]:
    return {container: [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}


def namespace_offloading(namespace: str, name: str = "offloading", **spec: Any) -> Obj:
    return obj(NAMESPACE_OFFLOADINGS, name, spec, namespace=namespace)


def namespace_map(namespace: str, mappings: dict[str, str]) -> Obj:
    return obj(NAMESPACE_MAPS, unique("nm"), {"consumerClusterID": "c1", "mappings": mappings}, namespace=namespace)


def without(document: Obj, field: str) -> Obj:
    document["spec"].pop(field)
    return document


def without_spec(document: Obj) -> Obj:
    return {key: value for key, value in document.items() if key != "spec"}


@pytest.fixture
async def cluster_scoped(kube: KubeClient) -> AsyncIterator[Created]:
    """Cluster-scoped objects a test created: deleted afterwards (namespaced ones go with their namespace)."""
    created: Created = []
    yield created
    for resource, name in created:
        with contextlib.suppress(NotFoundError):
            await kube.delete(resource, name)


async def kubectl(cluster: LocalCluster, cache: Path, *args: str) -> str:
    # A private discovery cache: a stale shared one could predate the CRDs and miss the category.
    command = [*cluster.kubectl(), f"--cache-dir={cache}", *args]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


POD_NETWORK = {
    "egress": [{"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}, {"namespace": "db"}],
    "ingress": [{"namespace": "ingress-nginx"}, {"cidr": "fc00::/7"}],
}


@pytest.mark.usefixtures("crds")
async def test_valid_objects_of_every_kind_are_accepted_and_defaulted(
    kube: KubeClient, namespace: str, cluster_scoped: Created
) -> None:
    fc = await kube.create(
        FOREIGN_CLUSTERS,
        foreign_cluster(unique("fc"), authURL="https://peer.example:8443", network=network("10.244.0.0/16")),
    )
    cluster_scoped.append((FOREIGN_CLUSTERS, fc["metadata"]["name"]))
    v6 = await kube.create(
        FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network=network("fd00:10::/56", "fd00::/112"))
    )
    cluster_scoped.append((FOREIGN_CLUSTERS, v6["metadata"]["name"]))
    sp = await kube.create(
        SHARING_POLICIES,
        sharing_policy(
            unique("sp"),
            limits={"cpu": "2", "memory": "1Gi"},
            allowedTwinNames=["payments", "team-a-*"],
            podNetwork=POD_NETWORK,
            podSecurity={
                "allowedLabelKeys": ["example.com/team", "tier"],
                "allowedAnnotationKeys": ["prometheus.io/*"],
            },
        ),
    )
    cluster_scoped.append((SHARING_POLICIES, sp["metadata"]["name"]))
    rr = await kube.create(RESOURCE_REQUESTS, resource_request(namespace, consumerClusterName="consumer"))
    named = await kube.create(RESOURCE_REQUESTS, resource_request(namespace, consumerClusterName="Milano città 1"))
    ro = await kube.create(RESOURCE_OFFERS, resource_offer(namespace, prices={"cpu": "0.05"}, labels={"zone": "a"}))
    vn = await kube.create(VIRTUAL_NODES, virtual_node(namespace, "liqo-provider", offer=ro["metadata"]["name"]))
    pod = {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": False}, "ports": [{"x": 1}]}]}
    shp = await kube.create(SHADOW_PODS, shadow_pod(namespace, **pod, hostNetwork=False, nodeSelector={"a": "b"}))
    nsof = await kube.create(NAMESPACE_OFFLOADINGS, namespace_offloading(namespace))
    nm = await kube.create(
        NAMESPACE_MAPS,
        obj(NAMESPACE_MAPS, "consumer", {"consumerClusterID": "c1", "mappings": {"a": "a-c1"}}, namespace=namespace),
    )

    assert fc["spec"]["outgoingPeeringEnabled"] == fc["spec"]["incomingPeeringEnabled"] == "Auto"
    assert fc["spec"]["network"] == {"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/16"}
    assert v6["spec"]["network"]["podCIDR"] == "fd00:10::/56"
    assert (sp["spec"]["refreshThresholdPercent"], sp["spec"]["offerTTLSeconds"]) == (10, 300)
    assert sp["spec"]["allowedTwinNames"] == ["payments", "team-a-*"]
    assert sp["spec"]["podNetwork"] == POD_NETWORK
    assert sp["spec"]["podSecurity"]["allowedAnnotationKeys"] == ["prometheus.io/*"]
    assert ro["spec"]["resources"] == {"cpu": "4", "memory": "8Gi", "pods": 110, "nvidia.com/gpu": 1}
    assert rr["spec"]["consumerClusterName"] == "consumer"
    assert named["spec"]["consumerClusterName"] == "Milano città 1"  # printable is not ASCII
    assert vn["spec"]["kubeconfigSecretRef"] == {"name": "liqo-identity"}
    assert shp["spec"]["pod"]["containers"][0]["ports"] == [{"x": 1}]  # the pod spec is kept whole
    assert shp["spec"]["pod"]["nodeSelector"] == {"a": "b"}
    assert nsof["spec"] == {"podOffloadingStrategy": "LocalAndRemote", "namespaceMappingStrategy": "DefaultName"}
    assert nm["spec"]["mappings"] == {"a": "a-c1"}

    # Status goes through the status subresource; conditions merge by type under server-side apply.
    condition = {"status": "Established", "reason": "Ok", "lastTransitionTime": "2030-01-01T00:00:00Z"}
    status = {"conditions": [{"type": "OutgoingPeering", **condition}], "tenantNamespace": {"local": "liqo-tenant-x"}}
    body = {**without_spec(obj(FOREIGN_CLUSTERS, fc["metadata"]["name"], {})), "status": status}
    await kube.apply(FOREIGN_CLUSTERS, body, subresource="status")
    body["status"] = {"conditions": [{"type": "IncomingPeering", "status": "None"}]}
    await kube.apply(FOREIGN_CLUSTERS, body, subresource="status", field_manager="another-writer")
    conditions = (await kube.get(FOREIGN_CLUSTERS, fc["metadata"]["name"]))["status"]["conditions"]
    assert {c["type"]: c["status"] for c in conditions} == {"OutgoingPeering": "Established", "IncomingPeering": "None"}


# (what to create, substrings the API server's message must contain)
INVALID: dict[str, tuple[Callable[[str], tuple[Resource, Obj]], tuple[str, ...]]] = {
    "peering-enum": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), outgoingPeeringEnabled="Maybe")),
        ('spec.outgoingPeeringEnabled: Unsupported value: "Maybe"', '"Yes", "No", "Auto"'),
    ),
    "action-enum": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), action="Allow")),
        ('spec.action: Unsupported value: "Allow"', '"Share", "Deny"'),
    ),
    "offer-mode-enum": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), offerPolicy={"mode": "Cheapest"})),
        ('spec.offerPolicy.mode: Unsupported value: "Cheapest"', '"Auto", "Manual", "PriceLimit"'),
    ),
    "percentage-0": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), percentage=0)),
        ("spec.percentage: Invalid value: 0", "should be greater than or equal to 1"),
    ),
    "percentage-101": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), percentage=101)),
        ("spec.percentage: Invalid value: 101", "should be less than or equal to 100"),
    ),
    "quantity-limit": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), limits={"cpu": "lots"})),
        ('spec.limits.cpu: Invalid value: "lots"', "should match"),
    ),
    "quantity-offer": (
        lambda ns: (RESOURCE_OFFERS, resource_offer(ns, resources={"memory": "8GB"})),
        ('spec.resources.memory: Invalid value: "8GB"', "should match"),
    ),
    "timestamp-not-rfc3339": (
        lambda ns: (RESOURCE_OFFERS, resource_offer(ns, expiry="tomorrow")),
        ('spec.expiry: Invalid value: "tomorrow"', "must be of type date-time"),
    ),
    "twin-names-everything": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), allowedTwinNames=["*"])),
        ('spec.allowedTwinNames[0]: Invalid value: "*"', "should match"),
    ),
    "twin-names-not-a-namespace": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), allowedTwinNames=["ok", "Team_A*"])),
        ('spec.allowedTwinNames[1]: Invalid value: "Team_A*"', "should match"),
    ),
    "twin-names-star-inside": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), allowedTwinNames=["team-*-web"])),
        ('spec.allowedTwinNames[0]: Invalid value: "team-*-web"', "should match"),
    ),
    "twin-names-too-many": (
        lambda _ns: (
            SHARING_POLICIES,
            sharing_policy(unique("sp"), allowedTwinNames=[f"n{i}" for i in range(MAX_ALLOWED_TWIN_NAMES + 1)]),
        ),
        (f"spec.allowedTwinNames: Too many: {MAX_ALLOWED_TWIN_NAMES + 1}",),
    ),
    "pod-network-both": (
        lambda _ns: (
            SHARING_POLICIES,
            sharing_policy(unique("sp"), podNetwork={"egress": [{"cidr": "10.0.0.0/8", "namespace": "db"}]}),
        ),
        ("spec.podNetwork.egress[0]: Invalid value", "give either cidr or namespace"),
    ),
    "pod-network-host-bits": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), podNetwork={"ingress": [{"cidr": "10.0.0.1/8"}]})),
        ("spec.podNetwork.ingress[0].cidr", "must be a network address"),
    ),
    "pod-network-except-alone": (
        lambda _ns: (
            SHARING_POLICIES,
            sharing_policy(unique("sp"), podNetwork={"egress": [{"namespace": "db", "except": ["10.0.0.0/8"]}]}),
        ),
        ("spec.podNetwork.egress[0]: Invalid value", "except goes with cidr"),
    ),
    "pod-keys-everything": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), podSecurity={"allowedAnnotationKeys": ["*"]})),
        ('spec.podSecurity.allowedAnnotationKeys[0]: Invalid value: "*"', "should match"),
    ),
    "pod-keys-star-inside-a-name": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), podSecurity={"allowedLabelKeys": ["istio.io/r*"]})),
        ('spec.podSecurity.allowedLabelKeys[0]: Invalid value: "istio.io/r*"', "should match"),
    ),
    "pod-keys-too-many": (
        lambda _ns: (
            SHARING_POLICIES,
            sharing_policy(
                unique("sp"), podSecurity={"allowedLabelKeys": [f"k{i}.io/*" for i in range(MAX_ALLOWED_KEYS + 1)]}
            ),
        ),
        (f"spec.podSecurity.allowedLabelKeys: Too many: {MAX_ALLOWED_KEYS + 1}",),
    ),
    "ingress-host-everything": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), ingress={"hosts": ["*"]})),
        ('spec.ingress.hosts[0]: Invalid value: "*"', "should match"),
    ),
    "ingress-annotation-with-a-comma": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), ingress={"annotations": ["a.io/b,c"]})),
        ('spec.ingress.annotations[0]: Invalid value: "a.io/b,c"', "should match"),
    ),
    "ingress-class-uppercase": (
        lambda _ns: (SHARING_POLICIES, sharing_policy(unique("sp"), ingress={"classes": ["Public"]})),
        ('spec.ingress.classes[0]: Invalid value: "Public"', "should match"),
    ),
    "missing-action": (
        lambda _ns: (SHARING_POLICIES, without(sharing_policy(unique("sp")), "action")),
        ("spec.action: Required value",),
    ),
    "missing-consumer-id": (
        lambda ns: (RESOURCE_REQUESTS, without(resource_request(ns), "consumerClusterID")),
        ("spec.consumerClusterID: Required value",),
    ),
    "missing-spec": (
        lambda ns: (VIRTUAL_NODES, without_spec(obj(VIRTUAL_NODES, "vn", {}, namespace=ns))),
        ("spec: Required value",),
    ),
    "cluster-id-not-a-label": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), clusterID="Cluster_A")),
        ('spec.clusterID: Invalid value: "Cluster_A"', "should match"),
    ),
    "auth-url-not-https": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), authURL="peer.example:8443")),
        ('spec.authURL: Invalid value: "peer.example:8443"', "should match '^https://'"),
    ),
    "network-host-bits": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network=network("10.244.1.0/16"))),
        ("spec.network.podCIDR: Invalid value", "must be a network address: no host bits set"),
    ),
    "network-not-a-cidr": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network=network("10.244.0.0/99"))),
        ("spec.network.podCIDR: Invalid value", "must be of type cidr"),
    ),
    "network-uppercase": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network=network("FD00::/48"))),
        ('spec.network.podCIDR: Invalid value: "FD00::/48"', "should match"),
    ),
    "network-too-long": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network=network("1" * 41 + "/16"))),
        ("spec.network.podCIDR: Too long: may not be more than 43",),
    ),
    "network-incomplete": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), network={"podCIDR": "10.244.0.0/16"})),
        ("spec.network.serviceCIDR: Required value",),
    ),
    "price-limit-without-prices": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), offerPolicy={"mode": "PriceLimit"})),
        ("spec.offerPolicy: Invalid value", "offerPolicy.maxPrices is required in PriceLimit mode"),
    ),
    "shadow-host-network": (
        lambda ns: (SHADOW_PODS, shadow_pod(ns, hostNetwork=True)),
        ("spec.pod: Invalid value", "hostNetwork pods are refused by this provider"),
    ),
    "shadow-host-pid": (
        lambda ns: (SHADOW_PODS, shadow_pod(ns, hostPID=True)),
        ("hostPID pods are refused by this provider",),
    ),
    "shadow-privileged": (
        lambda ns: (SHADOW_PODS, shadow_pod(ns, **privileged())),
        ("privileged containers are refused by this provider",),
    ),
    "shadow-privileged-init": (
        lambda ns: (SHADOW_PODS, shadow_pod(ns, **privileged("initContainers"))),
        ("privileged containers are refused by this provider",),
    ),
    "namespace-map-oversize": (
        lambda ns: (
            NAMESPACE_MAPS,
            namespace_map(ns, {f"ns-{i}": f"ns-{i}-c1" for i in range(MAX_NAMESPACE_MAPPINGS + 1)}),
        ),
        ("spec.mappings: Too many: 1001: must have at most 1000 items",),
    ),
    "namespace-map-bad-home": (
        lambda ns: (NAMESPACE_MAPS, namespace_map(ns, {"Kube_System": "a-c1"})),
        ("spec.mappings: Invalid value", "every home namespace (key) must be a namespace name"),
    ),
    "namespace-map-long-home": (
        lambda ns: (NAMESPACE_MAPS, namespace_map(ns, {"a" * 64: "a-c1"})),
        ("spec.mappings: Invalid value", "at most 63 characters"),
    ),
    "namespace-map-bad-twin": (
        lambda ns: (NAMESPACE_MAPS, namespace_map(ns, {"shop": "../etc"})),
        ('spec.mappings.shop: Invalid value: "../etc"', "should match"),
    ),
    "namespace-map-long-twin": (
        lambda ns: (NAMESPACE_MAPS, namespace_map(ns, {"shop": "a" * 64})),
        ("spec.mappings.shop: Too long: may not be more than 63",),
    ),
    # Names a peer claims are shown (kubectl's columns, logs): printable text, bounded.
    "cluster-name-newline": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), clusterName="evil\n2026-01-01 INFO forged")),
        ("spec.clusterName: Invalid value", "should match"),
    ),
    "cluster-name-too-long": (
        lambda _ns: (FOREIGN_CLUSTERS, foreign_cluster(unique("fc"), clusterName="n" * 254)),
        ("spec.clusterName: Too long: may not be more than 253",),
    ),
    "consumer-name-escape": (
        lambda ns: (RESOURCE_REQUESTS, resource_request(ns, consumerClusterName="rome\x1b[2J")),
        ("spec.consumerClusterName: Invalid value", "should match"),
    ),
    "provider-name-bidi-override": (
        lambda ns: (RESOURCE_OFFERS, resource_offer(ns, providerClusterName="nalim\u202e")),
        ("spec.providerClusterName: Invalid value", "should match"),
    ),
    "offloading-name": (
        lambda ns: (NAMESPACE_OFFLOADINGS, namespace_offloading(ns, "mine")),
        ("a NamespaceOffloading must be named 'offloading'",),
    ),
    "offloading-strategy": (
        lambda ns: (NAMESPACE_OFFLOADINGS, namespace_offloading(ns, podOffloadingStrategy="Anywhere")),
        ('spec.podOffloadingStrategy: Unsupported value: "Anywhere"', '"Local", "Remote", "LocalAndRemote"'),
    ),
}


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize("case", INVALID)
async def test_invalid_objects_are_refused_with_a_readable_message(
    kube: KubeClient, namespace: str, cluster_scoped: Created, case: str
) -> None:
    build, expected = INVALID[case]
    resource, document = build(namespace)
    if not resource.namespaced:  # it should never exist; if it does, it must not outlive the test
        cluster_scoped.append((resource, document["metadata"]["name"]))
    with pytest.raises(InvalidError) as refused:
        await kube.create(resource, document)
    assert refused.value.status == 422
    for substring in expected:
        assert substring in refused.value.message


@pytest.mark.usefixtures("crds")
async def test_a_namespace_map_at_its_bound_is_accepted(kube: KubeClient, namespace: str) -> None:
    """The bound is usable: 1000 entries of the longest names fit (and CEL's runtime cost allows checking them)."""
    mappings = {f"{i:04d}".ljust(63, "x"): f"{i:04d}".ljust(63, "y") for i in range(MAX_NAMESPACE_MAPPINGS)}
    created = await kube.create(NAMESPACE_MAPS, namespace_map(namespace, mappings))
    assert len(created["spec"]["mappings"]) == MAX_NAMESPACE_MAPPINGS


@pytest.mark.usefixtures("crds")
async def test_cluster_id_cannot_change(kube: KubeClient, namespace: str, cluster_scoped: Created) -> None:
    fc = await kube.create(FOREIGN_CLUSTERS, foreign_cluster(unique("fc")))
    cluster_scoped.append((FOREIGN_CLUSTERS, fc["metadata"]["name"]))
    vn = await kube.create(VIRTUAL_NODES, virtual_node(namespace, "liqo-provider"))

    for resource, current in ((FOREIGN_CLUSTERS, fc), (VIRTUAL_NODES, vn)):
        meta = current["metadata"]
        with pytest.raises(InvalidError) as refused:
            await kube.patch(
                resource, meta["name"], {"spec": {"clusterID": "another"}}, namespace=meta.get("namespace")
            )
        assert "spec.clusterID: Invalid value" in refused.value.message
        assert "clusterID is immutable" in refused.value.message
        # Anything else may still change.
        patched = await kube.patch(
            resource, meta["name"], {"spec": {"clusterName": "renamed"}}, namespace=meta.get("namespace")
        )
        assert patched["spec"]["clusterID"] == current["spec"]["clusterID"]


@pytest.mark.usefixtures("crds")
async def test_namespace_mapping_strategy_cannot_change(kube: KubeClient, namespace: str) -> None:
    await kube.create(NAMESPACE_OFFLOADINGS, namespace_offloading(namespace))
    with pytest.raises(InvalidError) as refused:
        await kube.patch(
            NAMESPACE_OFFLOADINGS,
            "offloading",
            {"spec": {"namespaceMappingStrategy": "EnforceSameName"}},
            namespace=namespace,
        )
    assert "namespaceMappingStrategy is immutable" in refused.value.message
    patched = await kube.patch(
        NAMESPACE_OFFLOADINGS, "offloading", {"spec": {"podOffloadingStrategy": "Remote"}}, namespace=namespace
    )
    assert patched["spec"]["podOffloadingStrategy"] == "Remote"


@pytest.mark.usefixtures("crds")
async def test_kubectl_lists_every_kind_in_the_liqo_category(
    cluster: LocalCluster, kube: KubeClient, namespace: str, cluster_scoped: Created, tmp_path: Path
) -> None:
    fc_name = unique("fc")
    fc = await kube.create(FOREIGN_CLUSTERS, foreign_cluster(fc_name))
    cluster_scoped.append((FOREIGN_CLUSTERS, fc_name))
    sp_name = unique("sp")
    peer_id = str(uuid.uuid4())
    await kube.create(SHARING_POLICIES, sharing_policy(sp_name, peers=[peer_id]))
    cluster_scoped.append((SHARING_POLICIES, sp_name))
    rr = await kube.create(RESOURCE_REQUESTS, resource_request(namespace))
    ro = await kube.create(RESOURCE_OFFERS, resource_offer(namespace))
    ro_name = ro["metadata"]["name"]
    status = {**without_spec(obj(RESOURCE_OFFERS, ro_name, {}, namespace=namespace)), "status": {"phase": "Accepted"}}
    await kube.apply(RESOURCE_OFFERS, status, subresource="status")
    await kube.create(VIRTUAL_NODES, virtual_node(namespace, "liqo-provider"))

    listed = set((await kubectl(cluster, tmp_path, "get", "liqo", "--all-namespaces", "-o", "name")).split())
    assert {
        f"foreigncluster.discovery.liqo.io/{fc_name}",
        f"sharingpolicy.sharing.liqo.io/{sp_name}",
        f"resourcerequest.discovery.liqo.io/{rr['metadata']['name']}",
        f"resourceoffer.sharing.liqo.io/{ro_name}",
        "virtualnode.virtualkubelet.liqo.io/liqo-provider",
    } <= listed

    table = (await kubectl(cluster, tmp_path, "get", "fc", fc_name)).splitlines()
    assert table[0].split() == [
        "NAME",
        "CLUSTER",
        "NAME",
        "CLUSTER",
        "ID",
        "OUTGOING",
        "INCOMING",
        "AUTHENTICATION",
        "AGE",
    ]
    assert table[1].split()[:3] == [fc_name, fc_name, fc["spec"]["clusterID"]]

    table = (await kubectl(cluster, tmp_path, "get", "ro", "-n", namespace)).splitlines()
    assert table[0].split() == ["NAME", "PROVIDER", "PHASE", "CPU", "MEMORY", "PODS", "EXPIRY", "AGE"]
    assert table[1].split()[:7] == [ro_name, "provider", "Accepted", "4", "8Gi", "110", "2030-01-01T00:00:00Z"]

    table = (await kubectl(cluster, tmp_path, "get", "sp", sp_name)).splitlines()
    assert table[0].split() == ["NAME", "ACTION", "PERCENTAGE", "PEERS", "AGE"]
    assert table[1].split()[:4] == [sp_name, "Share", "50", f'["{peer_id}"]']
