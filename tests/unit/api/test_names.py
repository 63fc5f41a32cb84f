"""Names chosen from what a peer says about itself: always valid, never another peer's."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.names import foreign_cluster_names, virtual_node_name

PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


@pytest.mark.parametrize(
    ("cluster_name", "expected"),
    [
        ("milan", ["milan", "milan-5a3c1b2e", PEER]),
        ("Milan", ["milan", "milan-5a3c1b2e", PEER]),
        ("Rome.Europe", ["rome-europe", "rome-europe-5a3c1b2e", PEER]),
        ("  not a name! ", ["not-a-name", "not-a-name-5a3c1b2e", PEER]),
        ("Milán", ["mil-n", "mil-n-5a3c1b2e", PEER]),
        ("東京", [PEER]),
        ("", [PEER]),
        ("x" * 300, ["x" * 48, f"{'x' * 48}-5a3c1b2e", PEER]),
        (PEER, [PEER, f"{PEER}-5a3c1b2e"]),
    ],
)
def test_foreign_clusters_are_named_after_the_cluster_then_its_id(cluster_name: str, expected: list[str]) -> None:
    assert foreign_cluster_names(cluster_id=PEER, cluster_name=cluster_name) == expected


@given(st.text(max_size=300))
def test_every_candidate_name_is_valid_and_its_node_name_needs_no_cut(cluster_name: str) -> None:
    candidates = foreign_cluster_names(cluster_id=PEER, cluster_name=cluster_name)
    assert candidates[-1] == PEER  # the ID, always available as the last resort
    for name in candidates:
        assert DNS_SUBDOMAIN.fullmatch(name)
        assert virtual_node_name(name) == f"liqo-{name}"


def test_virtual_node_names_follow_the_foreign_cluster() -> None:
    assert virtual_node_name("milan") == "liqo-milan"
    assert virtual_node_name("milan-5a3c1b2e") == "liqo-milan-5a3c1b2e"
    long = "a" * 58  # liqo- + 58 = 63: cut, so that no uncut name is 63 long
    assert len(virtual_node_name("a" * 57)) == 62
    assert virtual_node_name(long) != f"liqo-{long}"
    assert len(virtual_node_name(long)) == 63


@given(
    st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,3}\Z"),
    st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,3}\Z"),
)
def test_node_names_are_valid_hostname_labels_and_distinct_for_distinct_foreign_clusters(a: str, b: str) -> None:
    for name in (a, b):
        node = virtual_node_name(name)
        assert len(node) <= 63
        assert DNS_SUBDOMAIN.fullmatch(node)
        assert LABEL_VALUE.fullmatch(node)
    if a != b:
        assert virtual_node_name(a) != virtual_node_name(b)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"metadata": {"labels": {names.REMOTE_CLUSTER_ID: "rome-id"}}}, "rome-id"),
        ({"metadata": {"labels": {names.REMOTE_CLUSTER_ID: ""}}}, None),
        ({"metadata": {"labels": {"other": "rome-id"}}}, None),
        ({"metadata": {"labels": None}}, None),
        ({"metadata": {}}, None),
        ({}, None),
    ],
)
def test_the_peer_a_label_names_is_read_one_way(obj: dict[str, object], expected: str | None) -> None:
    assert names.labelled_peer_id(obj) == expected
    assert names.labelled_peer(obj) == ([expected] if expected else [])
