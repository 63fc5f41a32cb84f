"""The provider's largest slots: what a single pod can still get on one node, and when they are republished."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.podrequests import covers
from liqo.api.quantity import parse_quantity, round_down
from liqo.kube.objects import Obj
from liqo.kube.timefmt import parse_time
from liqo.sharing import capacity
from liqo.sharing.capacity import MAX_SLOTS, is_placeable
from liqo.sharing.policy import REPUBLISH_SECONDS, Drift, Policy, next_refresh, offer_spec, slot_drift
from tests.unit.sharing.capacity_support import ledger_of

GI = Decimal(2**30)
NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
OFFER = {"cpu": Decimal(100), "memory": 1000 * GI, "pods": Decimal(1000)}


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "16Gi",
    pods: str = "110",
    ready: str = "True",
    unschedulable: bool = False,
    virtual: bool = False,
    taints: list[Obj] | None = None,
    extra: dict[str, str] | None = None,
) -> Obj:
    labels = {names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE} if virtual else {}
    spec: Obj = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods} | (extra or {}),
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(
    node_name: str, *, cpu: str = "0", memory: str = "0", namespace: str = "default", phase: str = "Running"
) -> Obj:
    requests = {"cpu": cpu, "memory": memory}
    return {
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": requests}}]},
        "status": {"phase": phase},
    }


def largest_slots(nodes: list[Obj], pods: list[Obj], *, offer: dict[str, Decimal]) -> list[dict[str, Decimal]]:
    return capacity.largest_slots(ledger_of(nodes, pods).rooms().values(), offer=offer)


def node_free(nodes: list[Obj], pods: list[Obj]) -> dict[str, dict[str, Decimal]]:
    return ledger_of(nodes, pods).rooms()


def slot(cpu: str, memory: str, gpu: str | None = None) -> dict[str, Decimal]:
    gpus = {} if gpu is None else {"nvidia.com/gpu": parse_quantity(gpu)}
    return {"cpu": parse_quantity(cpu), "memory": parse_quantity(memory)} | gpus


# -- what a slot is -------------------------------------------------------------------------------------------


def test_half_filled_nodes_offer_half_a_node_however_large_the_sum() -> None:
    nodes = [node("n1"), node("n2")]
    pods = [pod("n1", cpu="4", memory="8Gi"), pod("n2", cpu="4", memory="8Gi")]
    assert largest_slots(nodes, pods, offer=OFFER) == [slot("4", "8Gi")]  # one shape: the two nodes are alike


@pytest.mark.parametrize(
    "unplaceable",
    [
        node("cordoned", cpu="64", unschedulable=True),
        node("not-ready", cpu="64", ready="False"),
        node("liqo-rome", cpu="64", virtual=True),
        node(
            "control-plane", cpu="64", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
        ),
        node("draining", cpu="64", taints=[{"key": "maintenance", "value": "true", "effect": "NoExecute"}]),
        node("full", cpu="64", pods="0"),
    ],
)
def test_nodes_an_offloaded_pod_cannot_land_on_are_no_slot(unplaceable: Obj) -> None:
    assert largest_slots([node("n1"), unplaceable], [], offer=OFFER) == [slot("8", "16Gi")]


def test_a_preference_is_not_a_refusal() -> None:
    soft = node("soft", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])
    assert is_placeable(soft)
    assert largest_slots([soft], [], offer=OFFER) == [slot("8", "16Gi")]


def test_a_slot_never_promises_more_than_the_offer() -> None:
    offer = {"cpu": Decimal(3), "memory": 32 * GI, "pods": Decimal(10)}
    assert largest_slots([node("n1")], [], offer=offer) == [slot("3", "16Gi")]


def test_slots_speak_of_the_offered_resources_only_and_not_of_pod_counts() -> None:
    gpu = node("gpu", cpu="4", extra={"nvidia.com/gpu": "2", "example.com/fpga": "1"})
    offer = {"cpu": Decimal(64), "memory": 64 * GI, "nvidia.com/gpu": Decimal(4), "pods": Decimal(100)}
    slots = largest_slots([gpu, node("plain")], [], offer=offer)
    # The node without GPUs has none to give; fpga is not offered; pods say nothing about a pod's size.
    assert slots == [slot("8", "16Gi", gpu="0"), slot("4", "16Gi", gpu="2")]


def test_every_pod_takes_room_the_consumers_own_included() -> None:
    pods = [pod("n1", cpu="2", namespace=names.tenant_namespace("rome")), pod("n1", cpu="1")]
    assert largest_slots([node("n1")], pods, offer=OFFER) == [slot("5", "16Gi")]
    # Finished pods hold nothing.
    assert largest_slots([node("n1")], [pod("n1", cpu="8", phase="Succeeded")], offer=OFFER) == [slot("8", "16Gi")]


def test_no_placeable_node_no_slot() -> None:
    assert largest_slots([node("n1", ready="False")], [], offer=OFFER) == []
    assert largest_slots([], [], offer=OFFER) == []


def test_covered_shapes_go_the_largest_by_cpu_and_by_memory_stay() -> None:
    nodes = [
        node("cpu-heavy", cpu="16", memory="8Gi"),
        node("small", cpu="2", memory="4Gi"),  # covered by cpu-heavy: adds nothing
        node("balanced-1", cpu="12", memory="12Gi"),
        node("balanced-2", cpu="10", memory="14Gi"),
        node("balanced-3", cpu="8", memory="15Gi"),
        node("memory-heavy", cpu="1", memory="64Gi"),
    ]
    assert largest_slots(nodes, [], offer=OFFER) == [
        slot("16", "8Gi"),
        slot("12", "12Gi"),
        slot("1", "64Gi"),  # kept although three shapes have more CPU: a 32Gi pod fits only there
    ]


def test_node_free_is_per_node_and_never_negative() -> None:
    free = node_free([node("n1", cpu="2"), node("n2")], [pod("n1", cpu="3"), pod("n2", memory="1Gi")])
    assert free == {
        "n1": {"cpu": Decimal(0), "memory": 16 * GI, "pods": Decimal(109)},
        "n2": {"cpu": Decimal(8), "memory": 15 * GI, "pods": Decimal(109)},
    }


# -- when slots are republished ----------------------------------------------------------------------------------


FOUR = [slot("4", "8Gi")]


@pytest.mark.parametrize(
    ("before", "current", "drift"),
    [
        (FOUR, [slot("4", "8Gi")], Drift.NONE),
        (FOUR, [slot("3999m", "8Gi")], Drift.MINOR),  # shrank within the 10 % threshold: at the bounded rate
        (FOUR, [slot("4", "8Gi") | {"memory": 8 * GI - 1}], Drift.MINOR),
        (FOUR, [slot("3637m", "8Gi")], Drift.MINOR),  # 3.637 * 1.1 still covers 4
        (FOUR, [slot("3636m", "8Gi")], Drift.MAJOR),  # shrank beyond the threshold: at once
        (FOUR, [slot("4400m", "8Gi")], Drift.NONE),  # grew within the threshold
        (FOUR, [slot("4401m", "8Gi")], Drift.MAJOR),  # grew beyond it
        (FOUR, [slot("4", "8Gi"), slot("1", "16Gi")], Drift.MAJOR),  # a new shape
        (FOUR, [slot("4", "8Gi", gpu="1")], Drift.MAJOR),  # a resource appeared
        (FOUR, [], Drift.MAJOR),  # nothing placeable any more
        ([slot("4", "8Gi"), slot("2", "16Gi")], [slot("2", "16Gi"), slot("4", "8Gi")], Drift.NONE),  # reordered
        ([slot("4", "8Gi"), slot("2", "16Gi")], [slot("4", "8Gi")], Drift.MAJOR),  # a shape gone
    ],
)
def test_slots_drift_by_how_far_they_moved_against_the_threshold(
    before: list[dict[str, Decimal]], current: list[dict[str, Decimal]], drift: Drift
) -> None:
    assert slot_drift(before, current, threshold_percent=10) is drift


def test_a_zero_threshold_makes_any_move_major() -> None:
    assert slot_drift([slot("4", "8Gi")], [slot("4001m", "8Gi")], threshold_percent=0) is Drift.MAJOR
    assert slot_drift([slot("4", "8Gi")], [slot("3999m", "8Gi")], threshold_percent=0) is Drift.MAJOR
    assert slot_drift([slot("4", "8Gi")], [slot("4", "8Gi")], threshold_percent=0) is Drift.NONE


def test_nothing_published_and_nothing_placeable_is_no_change() -> None:
    assert slot_drift([], [], threshold_percent=10) is Drift.NONE


POLICY = Policy(name="p")
RESOURCES = {"cpu": Decimal(8), "memory": 16 * GI}


def published(slots: list[dict[str, Decimal]]) -> Obj:
    return offer_spec(provider_id="id", provider_name="milan", resources=RESOURCES, slots=slots, policy=POLICY, now=NOW)


def test_a_slot_that_shrank_is_republished_at_once_beyond_the_threshold_at_the_bounded_rate_within() -> None:
    spec = published([slot("4", "8Gi")])
    refresh = NOW + datetime.timedelta(seconds=POLICY.offer_ttl_seconds * 2 / 3)
    assert next_refresh(spec, RESOURCES, POLICY, new_slots=[slot("4", "8Gi")], now=NOW) == refresh
    assert next_refresh(spec, RESOURCES, POLICY, new_slots=[slot("3", "8Gi")], now=NOW) == NOW
    within = next_refresh(spec, RESOURCES, POLICY, new_slots=[slot("3900m", "8Gi")], now=NOW)
    assert within == NOW + datetime.timedelta(seconds=REPUBLISH_SECONDS)
    # Once that time passed, the same computation says "now".
    later = NOW + datetime.timedelta(seconds=REPUBLISH_SECONDS + 1)
    assert next_refresh(spec, RESOURCES, POLICY, new_slots=[slot("3900m", "8Gi")], now=later) <= later


@pytest.mark.parametrize("slots", [None, "4", [{"cpu": "lots"}]])
def test_an_offer_without_readable_slots_is_rewritten(slots: object) -> None:
    spec = published([slot("4", "8Gi")])
    if slots is None:
        del spec["largestSlots"]  # published before slots existed
    else:
        spec["largestSlots"] = slots
    assert next_refresh(spec, RESOURCES, POLICY, new_slots=[slot("4", "8Gi")], now=NOW) == NOW


# -- properties ------------------------------------------------------------------------------------------------

NODES = st.lists(
    st.builds(
        node,
        st.sampled_from(["n1", "n2", "n3", "n4", "n5"]),
        cpu=st.integers(0, 16_000).map(lambda m: f"{m}m"),
        memory=st.integers(0, 64).map(lambda g: f"{g}Gi"),
        pods=st.integers(0, 3).map(str),
        ready=st.sampled_from(["True", "True", "False"]),
        unschedulable=st.booleans(),
        taints=st.sampled_from(
            [None, [{"key": "k", "effect": "NoSchedule"}], [{"key": "k", "effect": "PreferNoSchedule"}]]
        ),
        extra=st.sampled_from([None, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "4"}]),
    ),
    max_size=5,
    unique_by=lambda n: n["metadata"]["name"],
)
PODS = st.lists(
    st.builds(
        pod,
        st.sampled_from(["n1", "n2", "n3", "n4", "n5", "elsewhere"]),
        cpu=st.integers(0, 8_000).map(lambda m: f"{m}m"),
        memory=st.integers(0, 16).map(lambda g: f"{g}Gi"),
        phase=st.sampled_from(["Running", "Pending", "Succeeded"]),
    ),
    max_size=8,
)
OFFERS = st.fixed_dictionaries(
    {
        "cpu": st.decimals(0, 64, places=3),
        "memory": st.integers(0, 128).map(lambda g: g * GI),
        "pods": st.integers(0, 100).map(Decimal),
    },
    optional={"nvidia.com/gpu": st.integers(0, 8).map(Decimal)},
)


def _key(s: dict[str, Decimal]) -> tuple[Decimal, Decimal]:
    return s["cpu"], s["memory"]


@given(nodes=NODES, pods=PODS, offer=OFFERS)
def test_no_slot_exceeds_a_single_nodes_free_room_nor_the_offer(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal]
) -> None:
    free = node_free(nodes, pods).values()
    for each in largest_slots(nodes, pods, offer=offer):
        assert each.keys() == offer.keys() - {"pods"}
        assert covers(offer, each)
        assert any(covers(room, each) for room in free)


@given(nodes=NODES, pods=PODS, offer=OFFERS)
def test_the_first_slot_is_the_largest_and_slots_are_few_distinct_and_uncovered(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal]
) -> None:
    slots = largest_slots(nodes, pods, offer=offer)
    assert len(slots) <= MAX_SLOTS
    assert all(_key(slots[0]) >= _key(other) for other in slots)
    assert [_key(s) for s in slots] == sorted((_key(s) for s in slots), reverse=True)
    for i, a in enumerate(slots):
        for j, b in enumerate(slots):
            assert i == j or not covers(a, b)


@given(nodes=NODES, pods=PODS, offer=OFFERS)
def test_the_most_cpu_and_the_most_memory_any_pod_can_get_are_both_in_the_slots(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal]
) -> None:
    rooms = [room for room in node_free(nodes, pods).values() if room.get("pods", Decimal(1)) >= 1]
    slots = largest_slots(nodes, pods, offer=offer)
    assert bool(slots) == bool(rooms)
    for resource in ("cpu", "memory"):
        best = max((round_down(min(r[resource], offer[resource]), resource=resource) for r in rooms), default=None)
        assert max((s[resource] for s in slots), default=None) == best


@given(nodes=NODES, pods=PODS, offer=OFFERS, threshold=st.integers(0, 100))
def test_published_slots_read_back_unchanged(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal], threshold: int
) -> None:
    slots = largest_slots(nodes, pods, offer=offer)
    spec = offer_spec(
        provider_id="id", provider_name="n", resources=offer, slots=slots, policy=Policy(name="p"), now=NOW
    )
    read = [{name: parse_quantity(amount) for name, amount in s.items()} for s in spec["largestSlots"]]
    assert read == slots
    assert slot_drift(read, slots, threshold_percent=threshold) is Drift.NONE


@given(nodes=NODES, pods=PODS, offer=OFFERS, extra=PODS)
def test_a_shrinking_slot_never_goes_unnoticed(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal], extra: list[Obj]
) -> None:
    before = largest_slots(nodes, pods, offer=offer)
    after = largest_slots(nodes, [*pods, *extra], offer=offer)
    # A published slot no longer there (pods took its room) is always republished, whatever the threshold.
    if any(not any(covers(now, then) for now in after) for then in before):
        assert slot_drift(before, after, threshold_percent=100) is not Drift.NONE


@given(nodes=NODES, pods=PODS, offer=OFFERS, extra=PODS, threshold=st.integers(0, 100))
def test_a_shrink_is_never_left_unpublished_longer_than_the_bounded_rate(
    nodes: list[Obj], pods: list[Obj], offer: dict[str, Decimal], extra: list[Obj], threshold: int
) -> None:
    policy = Policy(name="p", refresh_threshold_percent=threshold)
    before = largest_slots(nodes, pods, offer=offer)
    spec = offer_spec(provider_id="id", provider_name="n", resources=offer, slots=before, policy=policy, now=NOW)
    after = largest_slots(nodes, [*pods, *extra], offer=offer)
    due = next_refresh(spec, offer, policy, new_slots=after, now=NOW)
    drift = slot_drift(before, after, threshold_percent=threshold)
    if drift is Drift.MAJOR:
        assert due == NOW
    elif drift is Drift.MINOR:
        assert NOW < due <= NOW.replace(microsecond=0) + datetime.timedelta(seconds=REPUBLISH_SECONDS)
    else:
        assert due == parse_time(spec["expiry"]) - datetime.timedelta(seconds=policy.offer_ttl_seconds / 3)
