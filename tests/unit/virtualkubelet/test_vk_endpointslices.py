"""EndpointSlices for the provider and pod IPs for home: every address translated, or left out with a reason (pure)."""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.networks import ClusterNetwork, Translation, returned_home, translate
from liqo.kube.objects import Obj
from liqo.virtualkubelet.forge import endpointslices, pods

HOME_ID = "rome-id"
ROME = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
MILAN = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.97.0.0/16")
NAPLES = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.98.0.0/16")  # overlaps rome


def to(reader: ClusterNetwork, owner: ClusterNetwork = ROME) -> Any:
    def translated(address: str) -> Translation:
        return translate(address, owner=owner, reader=reader, owner_name="rome", reader_name="the provider")

    return translated


def endpoint(address: str, node: str = "rome-node-1", *, ready: bool = True, hostname: str | None = None) -> Obj:
    found: Obj = {
        "addresses": [address],
        "conditions": {"ready": ready, "serving": ready, "terminating": False},
        "nodeName": node,
        "zone": "rome-a",
        "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "demo", "uid": "u1"},
    }
    if hostname:
        found["hostname"] = hostname
    return found


def home_slice(*endpoints: Obj, address_type: str = "IPv4") -> Obj:
    labels = {
        endpointslices.SERVICE_NAME_LABEL: "web",
        endpointslices.MANAGED_BY_LABEL: "endpointslice-controller.k8s.io",
    }
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web-abcde", "namespace": "demo", "labels": labels},
        "addressType": address_type,
        "endpoints": list(endpoints),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def reflect(slice_: Obj, reader: ClusterNetwork = MILAN) -> endpointslices.ReflectedSlice:
    return endpointslices.reflected_slice(
        slice_,
        namespace="demo-rome",
        home_cluster_id=HOME_ID,
        virtual_node="liqo-milan",
        virtual_nodes={"liqo-milan", "liqo-naples"},
        translate=to(reader),
    )


def test_home_endpoints_go_to_the_provider_as_they_are_when_the_networks_are_apart() -> None:
    made = reflect(home_slice(endpoint("10.244.1.5", hostname="web-0"), endpoint("10.244.1.6", ready=False)))
    assert made.refused == []
    assert made.slice is not None
    assert made.slice["metadata"]["namespace"] == "demo-rome"
    assert made.slice["metadata"]["name"] == "web-abcde"
    labels = made.slice["metadata"]["labels"]
    assert labels[endpointslices.SERVICE_NAME_LABEL] == "web"
    assert labels[endpointslices.MANAGED_BY_LABEL] == endpointslices.MANAGED_BY  # not the provider's controller's
    assert labels[names.ORIGIN] == HOME_ID
    assert made.slice["endpoints"] == [
        {
            "addresses": ["10.244.1.5"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "hostname": "web-0",
        },
        {"addresses": ["10.244.1.6"], "conditions": {"ready": False, "serving": False, "terminating": False}},
    ]
    assert made.slice["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_the_providers_own_pods_are_left_to_it_and_third_clusters_are_refused() -> None:
    made = reflect(
        home_slice(
            endpoint("10.244.1.5"),
            endpoint("10.245.3.3", node="liqo-milan"),  # milan lists its own pod itself
            endpoint("10.246.0.9", node="liqo-naples"),  # naples' pod: a third cluster
        )
    )
    assert made.slice is not None
    assert [e["addresses"] for e in made.slice["endpoints"]] == [["10.244.1.5"]]
    assert len(made.refused) == 1
    assert "liqo-naples" in made.refused[0]


def test_overlapping_pod_cidrs_leave_every_endpoint_out_with_the_reason() -> None:
    made = reflect(home_slice(endpoint("10.244.1.5")), reader=NAPLES)
    assert made.slice is None
    [reason] = made.refused
    assert "overlaps" in reason
    assert "10.244.0.0/16" in reason


def test_only_ip_slices_are_reflected() -> None:
    made = reflect(home_slice(endpoint("web.example.com"), address_type="FQDN"))
    assert made.slice is None
    assert "FQDN" in made.refused[0]


octets = st.integers(0, 255)
home_ips = st.builds(lambda a, b: f"10.244.{a}.{b}", octets, octets)
foreign_ips = st.builds(lambda a, b: f"192.0.{a}.{b}", octets, octets)


@given(st.lists(st.tuples(st.one_of(home_ips, foreign_ips), st.sampled_from(["rome-node-1", "liqo-milan"]))))
def test_no_address_outside_the_home_pod_cidr_ever_reaches_the_provider(found: list[tuple[str, str]]) -> None:
    made = reflect(home_slice(*(endpoint(address, node) for address, node in found)))
    written = [a for e in (made.slice or {}).get("endpoints", []) for a in e["addresses"]]
    assert all(ipaddress.ip_address(a) in ROME.pod_cidr for a in written)
    expected = [a for a, node in found if node != "liqo-milan" and ipaddress.ip_address(a) in ROME.pod_cidr]
    assert written == expected
    assert len(made.refused) == sum(
        1 for a, node in found if node != "liqo-milan" and ipaddress.ip_address(a) not in ROME.pod_cidr
    )


def test_a_slice_is_current_until_an_endpoint_changes() -> None:
    made = reflect(home_slice(endpoint("10.244.1.5")))
    assert made.slice is not None
    read = dict(made.slice) | {"metadata": dict(made.slice["metadata"]) | {"uid": "s1", "resourceVersion": "4"}}
    assert endpointslices.slice_is_current(read, made.slice)
    moved = reflect(home_slice(endpoint("10.244.1.5", ready=False)))
    assert moved.slice is not None
    assert not endpointslices.slice_is_current(read, moved.slice)
    assert not endpointslices.must_replace(read, moved.slice)


# -- pod IPs at home ---------------------------------------------------------------------------------------------


def test_the_home_pod_gets_the_providers_ip_when_home_can_dial_it() -> None:
    status = {"phase": "Running", "podIP": "10.245.0.7", "podIPs": [{"ip": "10.245.0.7"}]}
    translated, reason = pods.with_home_addresses(status, translate=to(ROME, owner=MILAN))
    assert reason is None
    assert translated["podIP"] == "10.245.0.7"
    assert translated["podIPs"] == [{"ip": "10.245.0.7"}]


def test_an_ip_home_cannot_dial_is_left_out_never_copied() -> None:
    status = {"phase": "Running", "podIP": "10.244.0.7", "podIPs": [{"ip": "10.244.0.7"}]}
    translated, reason = pods.with_home_addresses(status, translate=to(ROME, owner=NAPLES))
    assert reason is not None
    assert "overlaps" in reason
    assert translated["podIP"] is None
    assert translated["podIPs"] is None
    assert pods.status_patch(translated)["status"]["podIPs"] is None  # deleted by the strategic merge
    assert translated["phase"] == "Running"


def test_a_pod_without_an_ip_yet_is_left_as_it_is() -> None:
    status = {"phase": "Pending"}
    assert pods.with_home_addresses(status, translate=to(ROME, owner=MILAN)) == (status, None)


def returned_to_rome(provider: ClusterNetwork, *, seen_at: Any = None) -> Any:
    """Which of rome's own pods ``provider`` means by an address (it sees rome's pods at ``seen_at``)."""
    return functools.partial(returned_home, home=ROME, provider=provider, provider_sees_home=seen_at)


def _sent_back_case(home_ips: frozenset[str]) -> tuple[Obj, str | None]:
    """Rome's pod runs on milan, which sent it back to rome's own node: milan sees rome's pods at 10.71/16."""
    seen_at = ipaddress.ip_network("10.71.0.0/16")
    translate = to(ROME, owner=NAPLES)  # milan's pod CIDR is rome's: 10.71.0.7 is outside it

    returned = returned_to_rome(NAPLES, seen_at=seen_at)

    status = {"phase": "Running", "podIP": "10.71.0.7", "podIPs": [{"ip": "10.71.0.7"}]}
    assert pods.claims_home_pod(status, translate=translate, returned=returned)
    return pods.with_home_addresses(status, translate=pods.sent_back(translate, returned=returned, home_ips=home_ips))


def test_a_pod_sent_back_to_home_gets_its_address_at_home() -> None:
    translated, reason = _sent_back_case(frozenset({"10.244.0.7"}))
    assert reason is None
    assert translated["podIP"] == "10.244.0.7"
    assert translated["podIPs"] == [{"ip": "10.244.0.7"}]


def test_an_address_naming_another_pod_of_homes_is_refused() -> None:
    translated, reason = _sent_back_case(frozenset({"10.244.0.8"}))
    assert reason is not None
    assert "10.244.0.7" in reason
    assert translated["podIP"] is None


def test_an_overlapping_address_keeps_its_reason_and_asks_home_nothing() -> None:
    """Rome and naples share a pod CIDR, no fabric: naples' pod address is naples' own, no claim on rome's."""
    status = {"phase": "Running", "podIP": "10.244.0.7"}
    translate = to(ROME, owner=NAPLES)

    returned = returned_to_rome(NAPLES)

    assert not pods.claims_home_pod(status, translate=translate, returned=returned)
    _, reason = pods.with_home_addresses(status, translate=translate)
    assert reason is not None
    assert "overlaps" in reason


def test_a_providers_own_address_is_no_claim_on_homes_pods() -> None:
    status = {"phase": "Running", "podIP": "10.245.0.7"}
    translate = to(ROME, owner=MILAN)

    returned = returned_to_rome(MILAN)

    assert not pods.claims_home_pod(status, translate=translate, returned=returned)
    translated, _ = pods.with_home_addresses(
        status, translate=pods.sent_back(translate, returned=returned, home_ips=frozenset())
    )
    assert translated["podIP"] == "10.245.0.7"


def test_the_providers_slices_of_a_service_copy_are_never_taken_for_ours() -> None:
    made = reflect(home_slice(endpoint("10.244.1.5")))
    assert made.slice is not None
    assert endpointslices.is_reflected(made.slice, origin=HOME_ID)
    # The provider's controller copies the Service copy's labels (our marker among them) onto its own slices.
    theirs = {
        "metadata": {
            "name": "web-xyz12",
            "labels": {
                names.ORIGIN: HOME_ID,
                endpointslices.SERVICE_NAME_LABEL: "web",
                endpointslices.MANAGED_BY_LABEL: "endpointslice-controller.k8s.io",
            },
        }
    }
    assert not endpointslices.is_reflected(theirs, origin=HOME_ID)
