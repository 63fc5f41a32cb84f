"""Service and Ingress copies: what goes to the provider, what never does, and when a copy is current (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.virtualkubelet.forge import ingresses, services

HOME_ID = "rome-id"

ports = st.lists(
    st.fixed_dictionaries(
        {"port": st.integers(1, 65535), "protocol": st.sampled_from(["TCP", "UDP"])},
        optional={"nodePort": st.integers(30000, 32767), "name": st.sampled_from(["http", "dns"])},
    ),
    max_size=3,
)
home_specs = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
        "clusterIP": st.sampled_from(["10.96.0.12", "None"]),
        "clusterIPs": st.just(["10.96.0.12"]),
        "selector": st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["web", "db"]), max_size=2),
        "ports": ports,
        "externalIPs": st.just(["192.0.2.1"]),
        "loadBalancerIP": st.just("192.0.2.2"),
        "loadBalancerSourceRanges": st.just(["0.0.0.0/0"]),
        "loadBalancerClass": st.just("metal"),
        "healthCheckNodePort": st.integers(30000, 32767),
        "externalTrafficPolicy": st.sampled_from(["Cluster", "Local"]),
        "ipFamilies": st.just(["IPv4"]),
        "ipFamilyPolicy": st.just("SingleStack"),
        "sessionAffinity": st.sampled_from(["None", "ClientIP"]),
        "publishNotReadyAddresses": st.booleans(),
        "internalTrafficPolicy": st.sampled_from(["Cluster", "Local"]),
    },
)


def home_service(spec: Obj, **metadata: Any) -> Obj:
    meta = {"name": "web", "namespace": "demo", "uid": "u1", "resourceVersion": "3", **metadata}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


@given(home_specs)
def test_a_copy_never_carries_home_addresses_nor_opens_the_providers_nodes(spec: Obj) -> None:
    copy = services.reflected_service(home_service(spec), namespace="demo-rome", home_cluster_id=HOME_ID)
    remote = copy["spec"]
    assert copy["metadata"]["namespace"] == "demo-rome"
    assert copy["metadata"]["labels"][names.ORIGIN] == HOME_ID
    assert remote.get("clusterIP") in (None, "None")
    assert remote.get("clusterIP") == ("None" if spec.get("clusterIP") == "None" else None)
    for field in ("clusterIPs", "externalIPs", "loadBalancerIP", "loadBalancerSourceRanges", "loadBalancerClass"):
        assert field not in remote
    for field in ("healthCheckNodePort", "externalTrafficPolicy", "ipFamilies", "ipFamilyPolicy"):
        assert field not in remote
    assert remote.get("type") in (None, "ClusterIP")
    assert "externalName" not in remote
    assert all("nodePort" not in port for port in remote.get("ports", []))
    # What the pods rely on is kept.
    assert remote.get("selector") == spec.get("selector")
    assert [p["port"] for p in remote.get("ports", [])] == [p["port"] for p in spec.get("ports", [])]
    assert remote.get("sessionAffinity") == spec.get("sessionAffinity")


@given(home_specs)
def test_an_external_name_is_never_copied_and_says_why(spec: Obj) -> None:
    refusal = services.refusal(home_service(spec))
    assert (refusal is not None) == (spec.get("type") == "ExternalName")
    if refusal is not None:
        assert "ExternalName" in refusal


def test_the_kubernetes_service_and_copies_are_never_copied() -> None:
    assert services.reflectable(home_service({}))
    assert not services.reflectable(home_service({}, name="kubernetes", namespace="default"))
    assert not services.reflectable(home_service({}, labels={names.ORIGIN: "someone"}))
    assert not services.reflectable(home_service({}, annotations={names.SKIP_REFLECTION: "true"}))


def test_a_copy_the_provider_filled_in_is_current_until_home_changes() -> None:
    spec = {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}
    desired = services.reflected_service(home_service(spec), namespace="demo-rome", home_cluster_id=HOME_ID)
    read = {
        "metadata": dict(desired["metadata"]) | {"uid": "r1", "resourceVersion": "9"},
        "spec": desired["spec"] | {"clusterIP": "10.200.0.7", "clusterIPs": ["10.200.0.7"], "ipFamilies": ["IPv4"]},
    }
    assert services.service_is_current(read, desired)
    moved = dict(spec) | {"ports": [{"port": 81, "protocol": "TCP", "targetPort": 8080}]}
    desired_moved = services.reflected_service(home_service(moved), namespace="demo-rome", home_cluster_id=HOME_ID)
    assert not services.service_is_current(read, desired_moved)
    assert not services.must_replace(read, desired_moved)
    headless = services.reflected_service(
        home_service(spec | {"clusterIP": "None"}), namespace="demo-rome", home_cluster_id=HOME_ID
    )
    assert services.must_replace(read, headless)  # a Service never turns headless in place


def test_an_ingress_copy_maps_or_keeps_its_class_and_drops_the_legacy_annotation() -> None:
    home: Obj = {
        "metadata": {
            "name": "site",
            "namespace": "demo",
            "annotations": {"kubernetes.io/ingress.class": "nginx", "team": "web"},
        },
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "a.example.com"}]},
    }
    assert ingresses.refusal(home) is None
    kept = ingresses.reflected_ingress(home, namespace="demo-rome", home_cluster_id=HOME_ID, classes={"a": "b"})
    assert kept["spec"]["ingressClassName"] == "nginx"  # no entry in the table: the home class as it is
    assert kept["metadata"]["annotations"] == {"team": "web"}
    assert kept["spec"]["rules"] == home["spec"]["rules"]
    mapped = ingresses.reflected_ingress(
        home, namespace="demo-rome", home_cluster_id=HOME_ID, classes={"nginx": "provider-nginx"}
    )
    assert mapped["spec"]["ingressClassName"] == "provider-nginx"
    assert ingresses.ingress_is_current({"metadata": dict(mapped["metadata"]), "spec": mapped["spec"]}, mapped)
    assert not ingresses.ingress_is_current({"metadata": dict(mapped["metadata"]), "spec": {}}, mapped)


def test_an_ingress_naming_no_class_is_not_copied_and_says_why() -> None:
    for spec in ({"rules": [{"host": "a.example.com"}]}, {"ingressClassName": "", "rules": []}):
        refusal = ingresses.refusal({"metadata": {"name": "site", "namespace": "demo"}, "spec": spec})
        assert refusal is not None
        assert "spec.ingressClassName" in refusal
