"""How many objects a peer may make in its namespaces (liqo.api.bounds), without a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.bounds import (
    DEFAULT_TENANT_QUOTA,
    DEFAULT_TWIN_QUOTA,
    object_quota,
    parse_quota,
    quota_counted,
    quota_flag,
    quota_matches,
    quota_state,
    recount,
    uncounted,
)

ROME = "rome0000-1111-2222-3333-444455556666"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3),
    max_leaves=8,
)


def test_the_defaults_bound_object_counts_only_and_every_kind_a_peer_writes() -> None:
    for defaults in (DEFAULT_TWIN_QUOTA, DEFAULT_TENANT_QUOTA):
        assert all(key.startswith("count/") and count > 0 for key, count in defaults.items())
    assert set(DEFAULT_TWIN_QUOTA) == {
        "count/shadowpods.virtualkubelet.liqo.io",
        "count/secrets",
        "count/configmaps",
        "count/services",
        "count/endpointslices.discovery.k8s.io",
        "count/ingresses.networking.k8s.io",
        "count/persistentvolumeclaims",
    }
    # A Secret per ShadowPod (its home token), and the namespace's own besides.
    assert DEFAULT_TWIN_QUOTA["count/secrets"] > DEFAULT_TWIN_QUOTA["count/shadowpods.virtualkubelet.liqo.io"]
    # The tenant's request, map and NetworkConfig are one each by name (admission policies); no custom resource
    # is counted there, so a quota made right after the install counts at once.
    assert set(DEFAULT_TENANT_QUOTA) == {"count/leases.coordination.k8s.io"}


def test_a_flag_replaces_the_bounds_it_names_and_keeps_the_others() -> None:
    given_bounds = parse_quota(
        '{"count/secrets": 5000, "count/pods": 10}', flag="--twin-quota", defaults=DEFAULT_TWIN_QUOTA
    )
    assert given_bounds == dict(DEFAULT_TWIN_QUOTA) | {"count/secrets": 5000, "count/pods": 10}
    assert parse_quota("", flag="--twin-quota", defaults=DEFAULT_TWIN_QUOTA) == DEFAULT_TWIN_QUOTA
    # Helm's numbers are floats: a whole one is a count.
    assert parse_quota('{"count/secrets": 1e6}', flag="f", defaults={}) == {"count/secrets": 1000000}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[1]", "expected a JSON object"),
        ("{", "not JSON"),
        ('{"secrets": 1}', "'secrets' is not an object count"),
        ('{"count/": 1}', "'count/' is not an object count"),
        ('{"count/secrets": -1}', "count/secrets: expected a whole number"),
        ('{"count/secrets": 1.5}', "count/secrets: expected a whole number"),
        ('{"count/secrets": "10"}', "count/secrets: expected a whole number"),
        ('{"count/secrets": true}', "count/secrets: expected a whole number"),
    ],
)
def test_a_malformed_flag_is_refused_naming_the_flag_and_the_key(text: str, named: str) -> None:
    with pytest.raises(ValueError, match="--twin-quota") as refused:
        parse_quota(text, flag="--twin-quota", defaults=DEFAULT_TWIN_QUOTA)
    assert named in str(refused.value)


@given(JSON)
def test_whatever_a_flag_holds_is_bounds_or_a_refusal(value: Any) -> None:
    try:
        bounds = parse_quota(json.dumps(value), flag="f", defaults=DEFAULT_TWIN_QUOTA)
    except ValueError as exc:
        refusal = str(exc)
        bounds = {}
    else:
        refusal = ""
    assert not refusal or refusal.startswith("f: ")
    if refusal:
        return
    assert all(key.startswith("count/") and isinstance(count, int) and count >= 0 for key, count in bounds.items())
    assert set(DEFAULT_TWIN_QUOTA) <= set(bounds)


@given(st.dictionaries(st.from_regex(r"count/[a-z]{1,10}(\.[a-z]{1,8}){0,2}", fullmatch=True), st.integers(0, 10**9)))
def test_a_flag_reads_back_what_it_was_given(bounds: dict[str, int]) -> None:
    assert parse_quota(quota_flag(bounds), flag="f", defaults={}) == bounds


def test_a_quota_read_back_in_the_api_servers_spelling_is_the_same_bound() -> None:
    desired = object_quota(namespace="t", peer_id=ROME, hard=DEFAULT_TWIN_QUOTA)
    assert desired["metadata"] == {"name": names.PEER_QUOTA, "namespace": "t", "labels": names.peer_labels(ROME)}
    as_stored = {"spec": {"hard": dict(desired["spec"]["hard"]) | {"count/shadowpods.virtualkubelet.liqo.io": "2k"}}}
    assert quota_matches(as_stored, desired)
    raised = {"spec": {"hard": dict(desired["spec"]["hard"]) | {"count/secrets": "100k"}}}
    assert not quota_matches(raised, desired)
    assert not quota_matches({"spec": {"hard": {"count/secrets": "2500"}}}, desired)
    assert not quota_matches(None, desired)


def test_a_quota_counts_once_the_quota_controller_reported_every_bound() -> None:
    quota = object_quota(namespace="t", peer_id=ROME, hard={"count/secrets": 10, "count/services": 1000})
    assert not quota_counted(quota)
    hard = {"count/secrets": "10", "count/services": "1k"}
    assert quota_counted(quota | {"status": {"hard": hard, "used": {"count/secrets": "0", "count/services": "3"}}})
    assert not quota_counted(quota | {"status": {"hard": hard, "used": {"count/secrets": "0"}}})
    stale = {"count/secrets": "5", "count/services": "1k"}  # the bound moved, not counted anew yet
    assert not quota_counted(quota | {"status": {"hard": stale, "used": {"count/secrets": "0", "count/services": "0"}}})


def test_a_quota_counted_before_its_custom_resources_were_known_is_made_to_count_again() -> None:
    desired = object_quota(namespace="t", peer_id=ROME, hard={"count/secrets": 10, "count/shadowpods.x.io": 20})
    hard = {"count/secrets": "10", "count/shadowpods.x.io": "20"}
    assert uncounted(desired) == []  # not reported yet: the quota controller will
    stuck = desired | {"status": {"hard": hard, "used": {"count/secrets": "1"}}}
    assert uncounted(stuck) == ["count/shadowpods.x.io"]
    assert not quota_counted(stuck)
    changed = recount(desired, keys=uncounted(stuck))
    assert changed["spec"]["hard"] == {"count/secrets": "10"}
    assert changed["metadata"] == desired["metadata"]
    assert desired["spec"]["hard"] == hard  # untouched: applying it again is the second change
    moved = desired | {"status": {"hard": {"count/secrets": "10"}, "used": {"count/secrets": "1"}}}
    assert uncounted(moved) == []  # reported for other bounds: it is counting the new ones
    counted = desired | {"status": {"hard": hard, "used": {"count/secrets": "1", "count/shadowpods.x.io": "0"}}}
    assert uncounted(counted) == []


def test_a_quotas_usage_is_not_what_its_keeper_reads() -> None:
    quota = object_quota(namespace="t", peer_id=ROME, hard={"count/secrets": 10})
    counted = quota | {"status": {"hard": {"count/secrets": "10"}, "used": {"count/secrets": "1"}}}
    more = quota | {"status": {"hard": {"count/secrets": "10"}, "used": {"count/secrets": "7"}}}
    assert quota_state(counted) == quota_state(more)
    assert quota_state(quota) != quota_state(counted)  # it counts now
    raised = object_quota(namespace="t", peer_id=ROME, hard={"count/secrets": 11}) | {"status": more["status"]}
    assert quota_state(raised) != quota_state(more)
