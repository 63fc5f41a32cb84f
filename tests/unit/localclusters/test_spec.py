import ipaddress
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.spec import (
    ClusterSpec,
    SpecConflictError,
    SpecError,
    SpecRequest,
    check_cpus,
    format_cpus,
    node_cidr_mask,
    parse_cpus,
    parse_labels,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", Decimal(4)),
        ("500m", Decimal("0.5")),
        ("16Gi", Decimal(16 * 2**30)),
        ("2G", Decimal(2 * 10**9)),
        ("1e3", Decimal(1000)),
        ("1.5Ki", Decimal(1536)),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "4 cores", "-1", "16GB", "1.2.3"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(SpecError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_parse_labels() -> None:
    assert parse_labels("zone=south, liqo.io/provider=naples,empty=") == {
        "zone": "south",
        "liqo.io/provider": "naples",
        "empty": "",
    }


@pytest.mark.parametrize("text", ["novalue", "bad key=x", "k=bad value", "Invalid_Prefix/k=v", "k=" + "x" * 64])
def test_parse_labels_rejects(text: str) -> None:
    with pytest.raises(SpecError):
        parse_labels(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Rome"}, "cluster name"),
        ({"name": "r" * 41}, "cluster name"),
        ({"name": "ok", "nodes": 0}, "--nodes"),
        ({"name": "ok", "node_cpu": "0"}, "--node-cpu"),
        ({"name": "ok", "node_memory": "lots"}, "quantity"),
        ({"name": "ok", "node_storage": "0"}, "--node-storage"),
        ({"name": "ok", "node_storage": "a lot"}, "quantity"),
        ({"name": "ok", "pod_cidr": "10.0.0.0/33"}, "--pod-cidr"),
        ({"name": "ok", "pod_cidr": "10.0.0.1/16"}, "host bits"),
        ({"name": "ok", "pod_cidr": "fd00::/64"}, "only IPv4"),
        ({"name": "ok", "pod_cidr": "10.96.0.0/16"}, "overlap"),
        ({"name": "ok", "pod_cidr": "10.0.0.0/24", "nodes": 4}, "too small"),
    ],
)
def test_spec_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ClusterSpec(**kwargs)  # type: ignore[arg-type]


def test_spec_round_trip_and_differences() -> None:
    spec = ClusterSpec(name="rome", nodes=3, node_labels={"zone": "north"})
    assert ClusterSpec.from_dict(spec.to_dict()) == spec
    other = ClusterSpec(name="rome", nodes=2, node_labels={"zone": "north"})
    assert spec.differences(other) == ["nodes: 3 -> 2"]
    assert spec.api_service_ip == "10.96.0.1"
    # A cluster stored before --node-storage existed resumes with the default.
    stored = {key: value for key, value in spec.to_dict().items() if key != "node_storage"}
    assert ClusterSpec.from_dict(stored) == spec


@given(prefix=st.integers(min_value=8, max_value=24), nodes=st.integers(min_value=1, max_value=1000))
def test_node_mask_fits_every_node(prefix: int, nodes: int) -> None:
    cidr = ipaddress.IPv4Network((0x0A000000, prefix))
    try:
        mask = node_cidr_mask(cidr, nodes=nodes, pods_per_node=1)
    except SpecError:
        assert prefix + max(0, (nodes - 1).bit_length()) > 30
        return
    assert cidr.prefixlen <= mask <= 30
    assert mask - cidr.prefixlen <= 16
    assert 2 ** (mask - cidr.prefixlen) >= nodes


@given(pods=st.integers(min_value=1, max_value=4000), nodes=st.integers(min_value=1, max_value=20))
def test_node_subnets_hold_the_pods_of_a_node(pods: int, nodes: int) -> None:
    mask = node_cidr_mask(ipaddress.IPv4Network("10.0.0.0/8"), nodes=nodes, pods_per_node=pods)
    assert 2 ** (32 - mask) - 2 >= pods
    assert mask <= 24 or pods < 254  # a /24 (the Kubernetes default) unless more pods need more room


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("", set()), ("0", {0}), ("0-1", {0, 1}), ("0,1", {0, 1}), (" 3, 0-1 ", {0, 1, 3}), ("2-2", {2})],
)
def test_cpu_lists_parse_in_taskset_syntax(text: str, cpus: set[int]) -> None:
    assert parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "0;1", ",", "0-1-2"])
def test_bad_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(SpecError, match="--cpus"):
        parse_cpus(text)


@given(cpus=st.frozensets(st.integers(min_value=0, max_value=64)))
def test_cpu_lists_round_trip_through_their_canonical_form(cpus: frozenset[int]) -> None:
    assert parse_cpus(format_cpus(cpus)) == cpus


def test_cpus_are_stored_canonically_and_checked_against_what_is_available() -> None:
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert ClusterSpec(name="rome", cpus="1,0") == ClusterSpec(name="rome", cpus="0-1")
    assert ClusterSpec(name="rome", cpus="1,0").cpu_set == {0, 1}
    check_cpus(frozenset({1}), available={0, 1})
    with pytest.raises(SpecError, match=r"CPU\(s\) 2-3 not available here \(this process may run on 0-1\)"):
        check_cpus(frozenset({1, 2, 3}), available={0, 1})


def test_up_without_flags_resumes_a_cluster_as_it_was_made() -> None:
    stored = ClusterSpec(name="rome", nodes=0, real_nodes=1, cpus="0")
    assert SpecRequest("rome").settle(stored) == stored
    assert SpecRequest("rome", {"real_nodes": 1}).settle(stored) == stored
    assert SpecRequest("rome", {"cpus": "0-0"}).settle(stored) == stored  # the same CPUs spelled otherwise


def test_a_new_cluster_takes_the_given_flags_and_the_defaults_for_the_rest() -> None:
    assert SpecRequest("rome").settle(None) == ClusterSpec(name="rome")
    assert SpecRequest("rome", {"nodes": 0, "real_nodes": 1}).settle(None) == ClusterSpec(
        name="rome", nodes=0, real_nodes=1
    )


def test_a_given_flag_that_differs_from_the_stored_one_is_refused_with_the_differences() -> None:
    stored = ClusterSpec(name="rome", nodes=0, real_nodes=1)
    with pytest.raises(SpecConflictError) as refused:
        SpecRequest("rome", {"nodes": 1, "real_nodes": 0}).settle(stored)
    assert "cluster 'rome' exists with other settings (nodes: 0 -> 1; real_nodes: 1 -> 0)" in str(refused.value)
    assert "liqoctl local down rome --purge" in str(refused.value)


def test_an_invalid_flag_is_named_before_any_comparison() -> None:
    stored = ClusterSpec(name="rome")
    with pytest.raises(SpecError, match="--pod-cidr") as refused:
        SpecRequest("rome", {"pod_cidr": "10.0.0.0/33"}).settle(stored)
    assert not isinstance(refused.value, SpecConflictError)
    with pytest.raises(SpecError, match="cluster name"):
        SpecRequest("Rome")


@given(
    nodes=st.integers(1, 50),
    node_pods=st.integers(1, 200),
    cpus=st.sets(st.integers(0, 7), max_size=4),
    flags=st.sets(st.sampled_from(["nodes", "node_pods", "cpus", "node_cpu", "pod_cidr"])),
)
def test_any_subset_of_the_stored_flags_resumes_the_stored_spec(
    nodes: int, node_pods: int, cpus: set[int], flags: set[str]
) -> None:
    stored = ClusterSpec(name="rome", nodes=nodes, node_pods=node_pods, cpus=format_cpus(cpus))
    given_flags = {flag: value for flag, value in stored.to_dict().items() if flag in flags}
    assert SpecRequest("rome", given_flags).settle(stored) == stored
    assert SpecRequest.exactly(stored).settle(stored) == stored
