"""The NetworkStatus condition of a ForeignCluster, its Warning Event, and how liqoctl reports it (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from liqo.peering.operations import problems
from liqo.peering.status import PeerState, overlap_first_seen, peer_status
from tests.unit.peering.status_support import NOW, peer_state


def network_condition(peer: PeerState) -> dict[str, str]:
    conditions: list[dict[str, str]] = peer_status(peer, now=NOW)["conditions"]
    [condition] = [c for c in conditions if c["type"] == "NetworkStatus"]
    return condition


def test_disjoint_pod_cidrs_are_direct_routing() -> None:
    condition = network_condition(peer_state({"podCIDR": "10.245.0.0/16", "serviceCIDR": "10.96.0.0/16"}))
    assert (condition["status"], condition["reason"]) == ("Established", "DirectRouting")
    assert condition["message"] == (
        "pod CIDRs do not overlap: addresses pass unchanged (milan: pods 10.245.0.0/16, services 10.96.0.0/16;"
        " ours: pods 10.244.0.0/16, services 10.96.0.0/16)"
    )


def test_the_same_pod_cidr_is_an_overlap_reported_both_ways() -> None:
    condition = network_condition(peer_state({"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.97.0.0/16"}))
    assert (condition["status"], condition["reason"]) == ("Error", "CIDROverlap")
    assert condition["message"] == (
        "pod CIDR 10.244.0.0/16 of milan overlaps ours (10.244.0.0/16): its addresses cannot be reached until the"
        " network fabric remaps them; pod CIDR 10.244.0.0/16 of rome overlaps the pod CIDR of milan"
        " (10.244.0.0/16): milan cannot reach its addresses until the network fabric remaps them"
    )


def test_a_pod_cidr_on_the_other_sides_services_is_an_overlap_one_way() -> None:
    condition = network_condition(peer_state({"podCIDR": "10.245.0.0/16", "serviceCIDR": "10.244.0.0/16"}))
    assert (condition["status"], condition["reason"]) == ("Error", "CIDROverlap")
    assert condition["message"] == (
        "pod CIDR 10.244.0.0/16 of rome overlaps the service CIDR of milan (10.244.0.0/16): milan cannot reach its"
        " addresses until the network fabric remaps them"
    )


def test_an_unknown_network_is_pending_never_guessed() -> None:
    condition = network_condition(peer_state())
    assert (condition["status"], condition["reason"]) == ("Pending", "NetworkUnknown")
    assert condition["message"].startswith("the network of milan is not known yet")


def test_a_network_written_by_hand_into_garbage_is_unknown_with_the_reason() -> None:
    condition = network_condition(peer_state({"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}))
    assert (condition["status"], condition["reason"]) == ("Pending", "NetworkUnknown")
    assert "'spec.network.podCIDR': 127.0.0.0/8 overlaps the special-purpose range" in condition["message"]
    assert condition["message"].endswith("the next handshake records it again")


def overlap_status(message: str = "m") -> dict[str, Any]:
    return {"conditions": [{"type": "NetworkStatus", "status": "Error", "reason": "CIDROverlap", "message": message}]}


@pytest.mark.parametrize(
    ("before", "after", "event"),
    [
        (None, overlap_status(), "m"),
        ({}, overlap_status(), "m"),
        ({"conditions": [{"type": "NetworkStatus", "reason": "NetworkUnknown"}]}, overlap_status(), "m"),
        (overlap_status(), overlap_status(), None),  # the same overlap: one Event, not one per reconcile
        (overlap_status("m"), overlap_status("n"), "n"),  # another overlap (the peer moved): a new Event
        (overlap_status(), {"conditions": [{"type": "NetworkStatus", "reason": "DirectRouting"}]}, None),
    ],
)
def test_a_warning_event_is_due_when_an_overlap_is_first_seen(
    before: dict[str, Any] | None, after: dict[str, Any], event: str | None
) -> None:
    assert overlap_first_seen(before, after) == event


def test_the_condition_keeps_its_transition_time_while_unchanged() -> None:
    network = {"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.97.0.0/16"}
    first = network_condition(peer_state(network))
    earlier = {"conditions": [first | {"lastTransitionTime": "2029-01-01T00:00:00Z"}]}
    assert network_condition(peer_state(network, status=earlier))["lastTransitionTime"] == "2029-01-01T00:00:00Z"


def report(status: str, reason: str) -> dict[str, Any]:
    condition = {"status": status, "reason": reason, "message": "why"}
    return {"peers": [{"name": "milan", "conditions": {"NetworkStatus": condition}}]}


def test_liqoctl_status_lists_an_overlap_and_not_a_network_still_to_learn() -> None:
    assert problems(report("Error", "CIDROverlap")) == ["milan: NetworkStatus is Error (CIDROverlap) why"]
    assert problems(report("Pending", "NetworkUnknown")) == []
    assert problems(report("Established", "DirectRouting")) == []


def with_tunnel(connection: dict[str, Any] | None) -> PeerState:
    config: dict[str, Any] = {"spec": {"remappedPodCIDR": "10.71.0.0/16"}}
    if connection is not None:
        config["status"] = {"connection": connection}
    base = peer_state({"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.97.0.0/16"})
    return dataclasses.replace(base, network_config=config, peer_network_config={"spec": {}})


@pytest.mark.parametrize(
    ("connection", "expected"),
    [
        (None, ("Pending", "GatewayStarting")),
        ({"state": "Connecting", "reason": "WaitingForAnswer", "message": "probing"}, ("Pending", "WaitingForAnswer")),
        ({"state": "Error", "reason": "ProbesLost", "message": "silent"}, ("Error", "ProbesLost")),
        (
            {"state": "Connected", "reason": "ProbesAnswered", "message": "ok", "latency": "0.80ms"},
            ("Established", "ProbesAnswered"),
        ),
    ],
)
def test_with_a_gateway_the_tunnel_decides_even_when_cidrs_overlap(
    connection: dict[str, Any] | None, expected: tuple[str, str]
) -> None:
    condition = network_condition(with_tunnel(connection))
    assert (condition["status"], condition["reason"]) == expected


def test_a_connected_tunnel_says_its_latency_and_where_the_peer_is_seen() -> None:
    connection = {"state": "Connected", "reason": "ProbesAnswered", "message": "milan answers", "latency": "0.80ms"}
    condition = network_condition(with_tunnel(connection))
    assert condition["message"] == "milan answers; round trip 0.80ms; its pods are at 10.71.0.0/16"


def test_without_the_peers_fabric_the_cidrs_decide_as_without_ours() -> None:
    alone = dataclasses.replace(with_tunnel({"state": "Connecting"}), peer_network_config=None)
    condition = network_condition(alone)
    assert (condition["status"], condition["reason"]) == ("Error", "CIDROverlap")
