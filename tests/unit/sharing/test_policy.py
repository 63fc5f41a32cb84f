from __future__ import annotations

import dataclasses
import datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.quantity import QuantityError, parse_quantity
from liqo.api.storage import ClassOffer
from liqo.api.workingmodes import ACCEPTS_TETHERING, TETHERED, tethered_to
from liqo.kube.objects import Obj
from liqo.kube.timefmt import parse_time
from liqo.sharing.policy import (
    BUILT_IN_DEFAULT,
    REPUBLISH_SECONDS,
    PodSecurity,
    Policy,
    PolicySelection,
    budgetable_storage,
    compute_offer,
    next_refresh,
    offer_spec,
    select_policy,
    storage_left_out,
    tethered_policy,
)

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=datetime.UTC)
GI = Decimal(2**30)


def sharing_policy(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "sharing.liqo.io/v1alpha1", "kind": "SharingPolicy", "metadata": {"name": name}, "spec": spec}


# -- which policy applies -------------------------------------------------------------------------------------


def test_without_policies_the_built_in_default_shares_half() -> None:
    policy = select_policy([], peer_id="id-rome")
    assert policy == BUILT_IN_DEFAULT
    assert (policy.action, policy.percentage, policy.refresh_threshold_percent, policy.offer_ttl_seconds) == (
        "Share",
        50,
        10,
        300,
    )


def test_a_policy_naming_the_peer_beats_the_default() -> None:
    policies = [
        sharing_policy("a-default", action="Share", percentage=10),
        sharing_policy("z-rome", peers=["id-rome"], action="Share", percentage=80),
    ]
    assert select_policy(policies, peer_id="id-rome").name == "z-rome"
    assert select_policy(policies, peer_id="id-naples").name == "a-default"


def test_a_name_never_matches_so_renaming_dodges_nothing() -> None:
    """A peer chooses its cluster name; only the cluster ID its certificate proves selects a policy."""
    policies = [sharing_policy("default", action="Share"), sharing_policy("deny-rome", peers=["rome"], action="Deny")]
    assert select_policy(policies, peer_id="id-rome").action == "Share"
    assert (
        select_policy([*policies, sharing_policy("deny", peers=["id-rome"], action="Deny")], peer_id="id-rome").action
        == "Deny"
    )


def test_an_unknown_name_matches_no_policy_with_an_empty_peer() -> None:
    policies = [sharing_policy("odd", peers=[""], action="Deny")]
    assert select_policy(policies, peer_id="id-rome") == BUILT_IN_DEFAULT


def test_policies_for_other_peers_do_not_apply() -> None:
    policies = [sharing_policy("naples", peers=["id-naples"], action="Deny")]
    assert select_policy(policies, peer_id="id-rome") == BUILT_IN_DEFAULT


def test_among_equals_the_first_by_name_wins() -> None:
    policies = [
        sharing_policy("b", peers=["id-rome"], action="Share", percentage=20),
        sharing_policy("a", peers=["id-rome", "other"], action="Deny"),
        sharing_policy("0-default", action="Share"),
    ]
    assert select_policy(policies, peer_id="id-rome").name == "a"
    assert select_policy(reversed(policies), peer_id="id-rome").name == "a"


def test_a_policy_is_parsed_with_the_crds_defaults() -> None:
    obj = sharing_policy(
        "gpu",
        peers=["id-rome"],
        action="Share",
        percentage=75,
        limits={"cpu": "4", "memory": 8 * 2**30},
        resources=["cpu", "memory", "nvidia.com/gpu"],
        prices={"cpu": "50m", "nvidia.com/gpu": 2},
        labels={"liqo.io/provider": "milan"},
        allowedTwinNames=["payments", "team-a-*"],
        podSecurity={"allowedLabelKeys": ["example.com/team"], "allowedAnnotationKeys": ["prometheus.io/*"]},
    )
    assert Policy.from_object(obj) == Policy(
        name="gpu",
        action="Share",
        peers=frozenset({"id-rome"}),
        percentage=75,
        limits={"cpu": Decimal(4), "memory": 8 * GI},
        resources=frozenset({"cpu", "memory", "nvidia.com/gpu"}),
        prices={"cpu": "50m", "nvidia.com/gpu": "2"},
        labels={"liqo.io/provider": "milan"},
        refresh_threshold_percent=10,
        offer_ttl_seconds=300,
        allowed_twin_names=("payments", "team-a-*"),
        pod_security=PodSecurity(
            allowed_label_keys=("example.com/team",), allowed_annotation_keys=("prometheus.io/*",)
        ),
    )


def test_by_default_a_consumer_chooses_no_twin_name() -> None:
    assert BUILT_IN_DEFAULT.allowed_twin_names == ()
    assert Policy.from_object(sharing_policy("plain", action="Share")).allowed_twin_names == ()


def test_a_malformed_policy_fails_rather_than_being_skipped() -> None:
    policies = [sharing_policy("deny-rome", peers=["id-rome"], action="Deny", limits={"cpu": "lots"})]
    with pytest.raises(QuantityError):
        select_policy(policies, peer_id="id-rome")


# -- what it offers --------------------------------------------------------------------------------------------

FREE = {"cpu": Decimal(10), "memory": 40 * GI, "pods": Decimal(101), "nvidia.com/gpu": Decimal(3)}


def test_the_default_offers_half_of_everything_rounded_down() -> None:
    assert compute_offer(FREE, BUILT_IN_DEFAULT) == {
        "cpu": Decimal(5),
        "memory": 20 * GI,
        "pods": Decimal(50),
        "nvidia.com/gpu": Decimal(1),
    }


def test_deny_offers_nothing() -> None:
    assert compute_offer(FREE, Policy(name="no", action="Deny")) is None


def test_limits_cap_the_offer() -> None:
    policy = Policy(name="p", percentage=100, limits={"cpu": Decimal(1), "memory": GI, "nvidia.com/gpu": Decimal(9)})
    offer = compute_offer(FREE, policy)
    assert offer == {"cpu": Decimal(1), "memory": GI, "pods": Decimal(101), "nvidia.com/gpu": Decimal(3)}


def test_only_the_chosen_resources_are_shared() -> None:
    policy = Policy(name="p", resources=frozenset({"nvidia.com/gpu", "cpu", "fpga"}), percentage=100)
    assert compute_offer(FREE, policy) == {"cpu": Decimal(10), "nvidia.com/gpu": Decimal(3)}


def test_no_capacity_offers_nothing_but_still_offers() -> None:
    assert compute_offer({}, BUILT_IN_DEFAULT) == {}


def test_cpu_is_offered_to_the_millicore() -> None:
    assert compute_offer({"cpu": Decimal("0.0155")}, Policy(name="p", percentage=33)) == {"cpu": Decimal("0.005")}


# -- the ResourceOffer -----------------------------------------------------------------------------------------


def test_offer_spec() -> None:
    policy = Policy(
        name="p",
        prices={"cpu": "50m", "fpga": "10"},
        labels={"liqo.io/provider": "milan"},
        offer_ttl_seconds=600,
    )
    resources = {"cpu": Decimal("2.5"), "memory": 3 * GI, "pods": Decimal(55)}
    slots = [{"cpu": Decimal("1.5"), "memory": 2 * GI}, {"cpu": Decimal(1), "memory": 3 * GI}]
    spec = offer_spec(
        provider_id="id-milan", provider_name="milan", resources=resources, slots=slots, policy=policy, now=NOW
    )
    assert spec == {
        "providerClusterID": "id-milan",
        "providerClusterName": "milan",
        "resources": {"cpu": "2500m", "memory": "3Gi", "pods": "55"},
        "largestSlots": [{"cpu": "1500m", "memory": "2Gi"}, {"cpu": "1", "memory": "3Gi"}],
        "labels": {"liqo.io/provider": "milan"},
        "prices": {"cpu": "50m"},  # fpga is not offered
        "timestamp": "2030-01-02T03:04:05Z",
        "expiry": "2030-01-02T03:14:05Z",
    }


def test_an_offer_without_labels_has_no_labels_field_so_a_tethers_mark_can_be_dropped() -> None:
    """Applied as ``{}`` after the tether's label, server-side apply leaves ``labels: null``, which the schema
    refuses (a run logged it 35 times, the offer stuck saying ``tethered``)."""
    tethered = offer_spec(
        provider_id="id", provider_name="n", resources={}, slots=[], policy=tethered_policy(BUILT_IN_DEFAULT), now=NOW
    )
    assert tethered["labels"] == {names.TETHERED_DEVICE: "true"}
    after = offer_spec(provider_id="id", provider_name="n", resources={}, slots=[], policy=BUILT_IN_DEFAULT, now=NOW)
    assert "labels" not in after
    assert needs_refresh(tethered, {}, BUILT_IN_DEFAULT, new_slots=[], now=NOW)  # the mark goes at once


def test_times_are_written_in_utc() -> None:
    rome = datetime.timezone(datetime.timedelta(hours=1))
    spec = offer_spec(
        provider_id="id",
        provider_name="n",
        resources={},
        slots=[],
        policy=BUILT_IN_DEFAULT,
        now=datetime.datetime(2030, 1, 2, 4, 4, 5, tzinfo=rome),
    )
    assert spec["timestamp"] == "2030-01-02T03:04:05Z"


def test_a_naive_now_is_refused() -> None:
    # It would be read as this machine's local time: an expiry off by hours.
    with pytest.raises(ValueError, match="time zone"):
        offer_spec(
            provider_id="id",
            provider_name="n",
            resources={},
            slots=[],
            policy=BUILT_IN_DEFAULT,
            now=datetime.datetime(2030, 1, 2),
        )
    with pytest.raises(ValueError, match="time zone"):
        needs_refresh(
            offer_spec(provider_id="id", provider_name="n", resources={}, slots=[], policy=BUILT_IN_DEFAULT, now=NOW),
            {},
            BUILT_IN_DEFAULT,
            new_slots=[],
            now=datetime.datetime(2030, 1, 2),
        )


# -- when to refresh -------------------------------------------------------------------------------------------

POLICY = Policy(name="p", prices={"cpu": "1"}, labels={"zone": "north"})
OFFERED = {"cpu": Decimal(4), "memory": 8 * GI, "pods": Decimal(50)}
SLOTS = [{"cpu": Decimal(2), "memory": 4 * GI}]


def published(resources: dict[str, Decimal] = OFFERED, *, policy: Policy = POLICY) -> Obj:
    return offer_spec(provider_id="id", provider_name="milan", resources=resources, slots=SLOTS, policy=policy, now=NOW)


def needs_refresh(
    spec: Obj | None,
    resources: dict[str, Decimal],
    policy: Policy,
    *,
    new_slots: list[dict[str, Decimal]],
    now: datetime.datetime,
) -> bool:
    """Whether the offer is to be rewritten at ``now``."""
    return next_refresh(spec, resources, policy, new_slots=new_slots, now=now) <= now


def test_an_amount_that_shrank_within_the_threshold_is_republished_at_the_bounded_rate() -> None:
    written = NOW.replace(microsecond=0)
    shrunk = OFFERED | {"cpu": Decimal("3.8")}
    due = next_refresh(published(), shrunk, POLICY, new_slots=SLOTS, now=NOW)
    assert due == written + datetime.timedelta(seconds=REPUBLISH_SECONDS)
    assert needs_refresh(published(), shrunk, POLICY, new_slots=SLOTS, now=due)
    # Grown within the threshold, it waits for the refresh before expiry: the consumer only under-uses it.
    grown = OFFERED | {"cpu": Decimal("4.2")}
    refresh = written + datetime.timedelta(seconds=POLICY.offer_ttl_seconds * 2 / 3)
    assert next_refresh(published(), grown, POLICY, new_slots=SLOTS, now=NOW) == refresh


def test_an_unreadable_timestamp_with_a_shrink_to_publish_means_now() -> None:
    spec = published()
    del spec["timestamp"]
    assert needs_refresh(spec, OFFERED | {"cpu": Decimal("3.8")}, POLICY, new_slots=SLOTS, now=NOW)
    assert not needs_refresh(spec, OFFERED, POLICY, new_slots=SLOTS, now=NOW)


def test_refresh_when_there_is_no_offer() -> None:
    assert needs_refresh(None, OFFERED, POLICY, new_slots=SLOTS, now=NOW)


def test_no_refresh_for_the_same_offer() -> None:
    assert not needs_refresh(published(), OFFERED, POLICY, new_slots=SLOTS, now=NOW + datetime.timedelta(seconds=60))


@pytest.mark.parametrize(
    ("cpu", "refresh"),
    [("4.4", False), ("3.6", False), ("4.401", True), ("3.599", True), ("0", True)],
)
def test_refresh_when_an_amount_moves_beyond_the_threshold(cpu: str, refresh: bool) -> None:
    assert needs_refresh(published(), OFFERED | {"cpu": Decimal(cpu)}, POLICY, new_slots=SLOTS, now=NOW) is refresh


def test_refresh_when_a_resource_appears_or_disappears() -> None:
    assert needs_refresh(published(), OFFERED | {"nvidia.com/gpu": Decimal(1)}, POLICY, new_slots=SLOTS, now=NOW)
    assert needs_refresh(published(), {"cpu": Decimal(4), "memory": 8 * GI}, POLICY, new_slots=SLOTS, now=NOW)


def test_from_nothing_any_amount_is_a_change() -> None:
    empty = OFFERED | {"pods": Decimal(0)}
    assert not needs_refresh(published(empty), empty, POLICY, new_slots=SLOTS, now=NOW)
    assert needs_refresh(published(empty), OFFERED | {"pods": Decimal(1)}, POLICY, new_slots=SLOTS, now=NOW)


def test_a_zero_threshold_refreshes_on_any_change() -> None:
    strict = Policy(name="p", prices={"cpu": "1"}, labels={"zone": "north"}, refresh_threshold_percent=0)
    assert not needs_refresh(published(policy=strict), OFFERED, strict, new_slots=SLOTS, now=NOW)
    assert needs_refresh(
        published(policy=strict), OFFERED | {"cpu": Decimal("4.001")}, strict, new_slots=SLOTS, now=NOW
    )


def test_refresh_when_labels_or_prices_change() -> None:
    assert needs_refresh(
        published(), OFFERED, Policy(name="p", prices={"cpu": "2"}, labels={"zone": "north"}), new_slots=SLOTS, now=NOW
    )
    assert needs_refresh(
        published(), OFFERED, Policy(name="p", prices={"cpu": "1"}, labels={}), new_slots=SLOTS, now=NOW
    )


@pytest.mark.parametrize(("elapsed", "refresh"), [(0, False), (199, False), (200, True), (299, True), (400, True)])
def test_refresh_when_a_third_of_the_lifetime_or_less_is_left(elapsed: int, refresh: bool) -> None:
    # The offer was made at NOW truncated to the second and lives 300 s.
    later = NOW.replace(microsecond=0) + datetime.timedelta(seconds=elapsed)
    assert needs_refresh(published(), OFFERED, POLICY, new_slots=SLOTS, now=later) is refresh


@pytest.mark.parametrize("expiry", [None, "soon", "2030-01-02T03:04:05"])
def test_an_unreadable_expiry_counts_as_expired(expiry: str | None) -> None:
    spec = published()
    if expiry is None:
        del spec["expiry"]
    else:
        spec["expiry"] = expiry
    assert needs_refresh(spec, OFFERED, POLICY, new_slots=SLOTS, now=NOW)


# -- properties ------------------------------------------------------------------------------------------------

RESOURCES = ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"]
AMOUNT = st.decimals(min_value=0, max_value=10**12, places=3, allow_nan=False, allow_infinity=False)
FREE_CAPACITY = st.dictionaries(st.sampled_from(RESOURCES), AMOUNT)
POLICIES = st.builds(
    Policy,
    name=st.just("p"),
    action=st.sampled_from(["Share", "Deny"]),
    percentage=st.integers(1, 100),
    limits=st.dictionaries(st.sampled_from(RESOURCES), AMOUNT),
    resources=st.frozensets(st.sampled_from([*RESOURCES, "fpga"])),
    prices=st.dictionaries(st.sampled_from(RESOURCES), st.sampled_from(["1", "50m", "2Ki"])),
    labels=st.dictionaries(st.sampled_from(["zone", "tier"]), st.sampled_from(["a", "b"])),
    refresh_threshold_percent=st.integers(0, 100),
    offer_ttl_seconds=st.integers(1, 86_400),
)


@given(free=FREE_CAPACITY, policy=POLICIES)
def test_an_offer_never_exceeds_free_capacity_limits_or_percentage(free: dict[str, Decimal], policy: Policy) -> None:
    offer = compute_offer(free, policy)
    if policy.action == "Deny":
        assert offer is None
        return
    assert offer is not None
    assert offer.keys() == (policy.resources or free.keys()) & free.keys()
    for resource, amount in offer.items():
        assert 0 <= amount <= free[resource] * policy.percentage / 100
        assert amount <= policy.limits.get(resource, amount)


@given(free=FREE_CAPACITY, policy=POLICIES)
def test_the_published_offer_says_exactly_what_was_computed(free: dict[str, Decimal], policy: Policy) -> None:
    offer = compute_offer(free, policy)
    if offer is None:
        return
    spec = offer_spec(provider_id="id", provider_name="n", resources=offer, slots=[], policy=policy, now=NOW)
    assert {name: parse_quantity(text) for name, text in spec["resources"].items()} == offer


@given(free=FREE_CAPACITY, policy=POLICIES, elapsed=st.floats(0, 1))
def test_an_identical_recomputation_well_before_expiry_is_not_rewritten(
    free: dict[str, Decimal], policy: Policy, elapsed: float
) -> None:
    offer = compute_offer(free, policy)
    if offer is None:
        return
    spec = offer_spec(provider_id="id", provider_name="n", resources=offer, slots=[], policy=policy, now=NOW)
    # Anywhere in the first half of the offer's life (counted from its truncated timestamp).
    later = parse_time(spec["timestamp"]) + datetime.timedelta(seconds=elapsed * policy.offer_ttl_seconds / 2)
    assert not needs_refresh(spec, offer, policy, new_slots=[], now=later)


@given(free=FREE_CAPACITY, policy=POLICIES)
def test_an_offer_past_two_thirds_of_its_life_is_always_refreshed(free: dict[str, Decimal], policy: Policy) -> None:
    offer = compute_offer(free, policy)
    if offer is None:
        return
    spec = offer_spec(provider_id="id", provider_name="n", resources=offer, slots=[], policy=policy, now=NOW)
    later = parse_time(spec["expiry"]) - datetime.timedelta(seconds=policy.offer_ttl_seconds / 3)
    assert needs_refresh(spec, offer, policy, new_slots=[], now=later)


def versioned(policy: Obj, version: str) -> Obj:
    return policy | {"metadata": policy["metadata"] | {"resourceVersion": version}}


def test_a_remembered_selection_is_select_policys_and_follows_changes() -> None:
    selection = PolicySelection()
    share = versioned(sharing_policy("rome", peers=["id-rome"], action="Share", percentage=20), "1")
    default = versioned(sharing_policy("default", action="Share"), "1")
    assert selection([share, default], "id-rome") == select_policy([share, default], peer_id="id-rome")
    assert selection([share, default], "id-naples").name == "default"
    denied = versioned(sharing_policy("rome", peers=["id-rome"], action="Deny"), "2")
    assert selection([denied, default], "id-rome").action == "Deny"
    assert selection([default], "id-rome").name == "default"


# -- tethering ------------------------------------------------------------------------------------------------


def test_a_policy_accepting_tethered_peers_says_so_in_its_offers() -> None:
    accepting = Policy.from_object(sharing_policy("p", action="Share", tethering="Accept"))
    assert accepting.accepts_tethering
    assert not Policy.from_object(sharing_policy("p", action="Share")).accepts_tethering
    spec = offer_spec(provider_id="id", provider_name="n", resources={}, slots=[], policy=accepting, now=NOW)
    assert spec[ACCEPTS_TETHERING] is True
    assert TETHERED not in spec


def test_tethered_a_cluster_offers_its_controlling_peer_everything_free_and_marks_its_virtual_node() -> None:
    denying = Policy(
        name="p", percentage=10, limits={"cpu": Decimal(1)}, resources=frozenset({"cpu"}), labels={"a": "b"}
    )
    free = {"cpu": Decimal(4), "memory": 8 * GI}
    tethered = tethered_policy(denying)
    assert compute_offer(free, tethered) == free
    assert tethered.labels == {"a": "b", names.TETHERED_DEVICE: "true"}
    assert tethered.pod_security == denying.pod_security  # what the peer's pods may do stays the policy's
    spec = offer_spec(provider_id="id", provider_name="n", resources=free, slots=[], policy=tethered, now=NOW)
    assert spec[TETHERED] is True
    # The offer is replaced at once when the tether begins, and when it ends, whatever else changed.
    autonomous = offer_spec(provider_id="id", provider_name="n", resources=free, slots=[], policy=denying, now=NOW)
    assert needs_refresh(autonomous, free, tethered, new_slots=[], now=NOW)
    assert needs_refresh(spec, free, dataclasses.replace(tethered, tethered=False), new_slots=[], now=NOW)
    assert not needs_refresh(spec, free, tethered, new_slots=[], now=NOW)


def test_only_a_tether_in_force_or_under_way_names_the_peer_offered_everything() -> None:
    def mode(phase: str) -> Obj:
        return {"spec": {"mode": "Tethered", "peer": "id-e"}, "status": {"phase": phase, "peer": "id-e"}}

    assert [tethered_to(mode(p)) for p in ("Autonomous", "Tethering", "Tethered", "Untethering")] == [
        None,
        "id-e",
        "id-e",
        "id-e",
    ]
    assert tethered_to(None) is None
    assert tethered_to({"spec": {"mode": "Tethered", "peer": "id-e"}}) is None  # asked, not (yet) made


# -- storage ------------------------------------------------------------------------------------------------

LOCAL = ClassOffer(name="local", capacity=10 * GI)


def test_a_policys_storage_is_what_its_pods_may_claim_and_its_offer_says() -> None:
    policy = Policy.from_object(sharing_policy("p", action="Share", storage=[{"class": "local", "capacity": "10Gi"}]))
    assert policy.pod_security.storage == (LOCAL,)
    spec = offer_spec(provider_id="id", provider_name="milan", resources={}, slots=[], policy=policy, now=NOW)
    assert spec["storage"] == [{"class": "local", "capacity": "10Gi", "accessModes": ["ReadWriteOnce"]}]
    # No storage, no field (as for labels: applied empty after ours, server-side apply would leave a null).
    assert "storage" not in offer_spec(
        provider_id="id", provider_name="milan", resources={}, slots=[], policy=Policy(name="p"), now=NOW
    )


def test_refresh_when_the_storage_offered_changes() -> None:
    storing = Policy(name="p", pod_security=PodSecurity(storage=(LOCAL,)))
    current = offer_spec(provider_id="id", provider_name="m", resources=OFFERED, slots=SLOTS, policy=storing, now=NOW)
    assert not needs_refresh(current, OFFERED, storing, new_slots=SLOTS, now=NOW)
    assert needs_refresh(current, OFFERED, Policy(name="p"), new_slots=SLOTS, now=NOW)
    grown = Policy(name="p", pod_security=PodSecurity(storage=(ClassOffer(name="local", capacity=20 * GI),)))
    assert needs_refresh(current, OFFERED, grown, new_slots=SLOTS, now=NOW)


@pytest.mark.parametrize(
    ("classes", "kept"),
    [
        ({"local": {"volumeBindingMode": "WaitForFirstConsumer"}}, (LOCAL,)),
        ({"local": {"volumeBindingMode": "Immediate"}}, ()),
        ({"local": {}}, ()),  # Immediate is the API server's default
        ({}, ()),  # no such class
    ],
)
def test_only_classes_waiting_for_a_first_consumer_are_offered(
    classes: dict[str, Obj], kept: tuple[ClassOffer]
) -> None:
    policy = Policy(name="p", pod_security=PodSecurity(storage=(LOCAL,)))
    assert budgetable_storage(policy, classes).pod_security.storage == kept


def test_a_class_left_out_says_why() -> None:
    policy = Policy(
        name="p",
        pod_security=PodSecurity(
            storage=(
                LOCAL,
                ClassOffer(name="fast", capacity=GI),
                ClassOffer(name="gone", capacity=GI),
                ClassOffer(name="liqo", capacity=GI),
            )
        ),
    )
    wffc = {"volumeBindingMode": "WaitForFirstConsumer"}
    classes: dict[str, Obj] = {"local": wffc, "fast": {}, "liqo": wffc}
    why = storage_left_out(policy, classes)
    assert set(why) == {"fast", "gone", "liqo"}
    assert "volumeBindingMode is Immediate" in why["fast"]
    assert why["gone"] == "no such StorageClass here"
    assert why["liqo"] == "the virtual class holds no volume of this cluster's, only its providers'"
