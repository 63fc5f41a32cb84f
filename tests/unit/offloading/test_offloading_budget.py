"""One budget per consumer: what a pod takes, what a consumer may hold, and the ledger keeping it (pure)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.objects import Obj
from liqo.offloading.budget import (
    Budget,
    Claim,
    ClaimLedger,
    ClaimsWait,
    Ledger,
    NoBudget,
    UnreadablePod,
    Usage,
    budget_of,
    pod_claims,
    pod_usage,
    shortfall,
)

GI = Decimal(2**30)


def container(name: str = "c", *, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> Obj:
    resources: Obj = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "nginx", "resources": resources}


def spec(*containers: Obj, init: list[Obj] | None = None, **extra: Any) -> Obj:
    body: Obj = {"containers": list(containers) or [container()]}
    if init:
        body["initContainers"] = init
    return body | extra


def offer(phase: str | None = "Accepted", **resources: str) -> Obj:
    body: Obj = {"metadata": {"name": "milan-id", "namespace": "liqo-tenant-rome-id"}, "spec": {"resources": resources}}
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def budget(count_limits: bool = True, **resources: str) -> Budget:
    made = budget_of(offer(**resources), count_limits=count_limits)
    assert isinstance(made, Budget)
    return made


# -- what a pod takes ------------------------------------------------------------------------------------------


def test_a_best_effort_pod_takes_one_pod_and_nothing_else() -> None:
    assert pod_usage(spec(container())) == Usage(requests={"pods": Decimal(1)}, limits={})


def test_requests_add_up_by_the_schedulers_rule_and_limits_are_counted_apart() -> None:
    usage = pod_usage(
        spec(
            container("a", requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "1"}),
            container("b", requests={"cpu": "250m"}),
            init=[container("migrate", requests={"cpu": "2"})],
        )
    )
    assert usage.requests == {"cpu": Decimal(2), "memory": 64 * Decimal(2**20), "pods": Decimal(1)}
    assert usage.limits == {"cpu": Decimal(1)}


def test_a_limit_without_a_request_is_the_request_as_the_api_server_defaults_it() -> None:
    # A ShadowPod's pod has not been through an API server: its pod will carry requests = limits.
    usage = pod_usage(spec(container(limits={"cpu": "2", "memory": "1Gi"})))
    assert usage.requests == {"cpu": Decimal(2), "memory": GI, "pods": Decimal(1)}
    assert usage.limits == {"cpu": Decimal(2), "memory": GI}


def test_overhead_and_extended_resources_count() -> None:
    usage = pod_usage(
        spec(container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}), overhead={"cpu": "100m"})
    )
    assert usage.requests == {"nvidia.com/gpu": Decimal(1), "cpu": Decimal("0.1"), "pods": Decimal(1)}


def test_zero_requests_ask_for_nothing() -> None:
    assert pod_usage(spec(container(requests={"nvidia.com/gpu": "0"}))).requests == {"pods": Decimal(1)}


@pytest.mark.parametrize(
    ("pod_spec", "field"),
    [
        ({"containers": "nginx"}, "spec.pod.containers is not a list"),
        ({"containers": ["nginx"]}, "spec.pod.containers[0] is not an object"),
        ({"containers": [{"name": "a", "resources": ["cpu"]}]}, "spec.pod.containers[0].resources is not an object"),
        (
            {"containers": [container(), {"name": "b", "resources": {"requests": {"cpu": "lots"}}}]},
            "spec.pod.containers[1].resources.requests.cpu",
        ),
        ({"containers": [container(limits={"memory": "-1Gi"})]}, "spec.pod.containers[0].resources.limits.memory"),
        ({"containers": [], "initContainers": [{"resources": {"limits": 3}}]}, "spec.pod.initContainers[0]"),
        ({"containers": [], "overhead": {"cpu": []}}, "spec.pod.overhead.cpu"),
        ({"containers": [], "resources": {"requests": "all"}}, "spec.pod.resources.requests is not an object"),
    ],
)
def test_malformed_resources_are_refused_naming_the_field(pod_spec: Obj, field: str) -> None:
    with pytest.raises(UnreadablePod) as refused:
        pod_usage(pod_spec)
    assert str(refused.value).startswith(field)


QUANTITIES = st.sampled_from(["1", "500m", "1Gi", "0", "-1", "2e3", "lots", ""]) | st.integers(-2, 5)
JSON = st.recursive(
    st.none() | st.booleans() | QUANTITIES | st.floats(allow_nan=False),
    lambda children: (
        st.lists(children, max_size=2) | st.dictionaries(st.sampled_from(["cpu", "x"]), children, max_size=2)
    ),
    max_leaves=6,
)
AMOUNTS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITIES, max_size=2) | JSON
RESOURCES_FIELDS = st.fixed_dictionaries({}, optional={"requests": AMOUNTS, "limits": AMOUNTS})
CONTAINER_JSON = st.fixed_dictionaries({}, optional={"name": JSON, "resources": RESOURCES_FIELDS | JSON}) | JSON
POD_JSON = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(CONTAINER_JSON, max_size=3) | JSON,
        "initContainers": st.lists(CONTAINER_JSON, max_size=2) | JSON,
        "overhead": AMOUNTS,
        "resources": RESOURCES_FIELDS | JSON,
    },
)


@given(pod_spec=POD_JSON)
def test_whatever_a_peer_writes_the_pod_is_measured_or_refused_never_an_error(pod_spec: Obj) -> None:
    refusal = ""
    try:
        usage = pod_usage(pod_spec)
    except UnreadablePod as exc:
        refusal = str(exc)
    if refusal:
        assert refusal.startswith("spec.pod")
    else:
        assert usage.requests["pods"] == 1
        assert all(amount > 0 for amount in [*usage.requests.values(), *usage.limits.values()])


# -- the budget --------------------------------------------------------------------------------------------------


def test_the_budget_is_the_accepted_offer() -> None:
    assert budget_of(offer(cpu="2", memory="4Gi", pods="10"), count_limits=False) == Budget(
        resources={"cpu": Decimal(2), "memory": 4 * GI, "pods": Decimal(10)}, count_limits=False
    )


@pytest.mark.parametrize("phase", [None, "Pending", "Refused", "ManualActionRequired", "Accepted-ish"])
def test_an_offer_not_accepted_is_no_budget(phase: str | None) -> None:
    found = budget_of(offer(phase, cpu="2"), count_limits=True)
    assert isinstance(found, NoBudget)
    assert f"its phase is {phase or 'not set'}" in found.message


def test_no_offer_or_one_being_withdrawn_is_no_budget() -> None:
    assert isinstance(budget_of(None, count_limits=True), NoBudget)
    withdrawn = offer(cpu="2")
    withdrawn["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert isinstance(budget_of(withdrawn, count_limits=True), NoBudget)


def test_an_unreadable_amount_is_no_budget_rather_than_a_guess() -> None:
    found = budget_of(offer(cpu="a lot"), count_limits=True)
    assert isinstance(found, NoBudget)
    assert "spec.resources.cpu" in found.message


def test_a_pod_fits_while_the_sum_stays_within_every_resource() -> None:
    limit = budget(cpu="1", memory="1Gi", pods="3")
    pod = pod_usage(spec(container(requests={"cpu": "400m", "memory": "100Mi"})))
    assert shortfall(limit, Usage(), pod) is None
    assert shortfall(limit, Usage(requests={"cpu": Decimal("0.6"), "pods": Decimal(1)}), pod) is None
    missing = shortfall(limit, Usage(requests={"cpu": Decimal("0.7")}), pod)
    assert missing is not None
    assert (missing.resource, missing.kind, missing.needed, missing.allowed) == (
        "cpu",
        "requests",
        Decimal("0.4"),
        Decimal(1),
    )
    assert missing.message.startswith("cpu requests: the pod requests 400m")
    assert "exceed the 1 its accepted offer allows" in missing.message


def test_pods_are_counted() -> None:
    missing = shortfall(budget(cpu="1", pods="2"), Usage(requests={"pods": Decimal(2)}), pod_usage(spec()))
    assert missing is not None
    assert missing.resource == "pods"
    assert "all 2 pods" in missing.message


def test_a_resource_the_offer_does_not_hold_never_fits() -> None:
    gpu = pod_usage(spec(container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})))
    missing = shortfall(budget(cpu="8", memory="8Gi", pods="10"), Usage(), gpu)
    assert missing is not None
    assert (missing.resource, missing.allowed) == ("nvidia.com/gpu", None)
    assert "holds no nvidia.com/gpu" in missing.message


def test_limits_are_counted_only_when_the_policy_says_so() -> None:
    bursty = pod_usage(spec(container(requests={"cpu": "100m"}, limits={"cpu": "2"})))
    missing = shortfall(budget(count_limits=True, cpu="1", pods="10"), Usage(), bursty)
    assert missing is not None
    assert (missing.kind, missing.resource) == ("limits", "cpu")
    assert missing.message.startswith("cpu limits: the pod declares limits of 2")
    assert shortfall(budget(count_limits=False, cpu="1", pods="10"), Usage(), bursty) is None


def test_a_best_effort_pod_fits_as_long_as_there_is_a_pod_left() -> None:
    best_effort = pod_usage(spec(container()))
    full_cpu = Usage(requests={"cpu": Decimal(1), "pods": Decimal(1)}, limits={"cpu": Decimal(1)})
    assert shortfall(budget(cpu="1", pods="2"), full_cpu, best_effort) is None


# -- the ledger ------------------------------------------------------------------------------------------------

CPU_MILLIS = st.integers(min_value=0, max_value=1500)
POD_USAGES = st.builds(
    lambda cpu, memory, limit, gpu: Usage(
        requests={"pods": Decimal(1)}
        | ({"cpu": Decimal(cpu) / 1000} if cpu else {})
        | ({"memory": Decimal(memory)} if memory else {})
        | ({"nvidia.com/gpu": Decimal(1)} if gpu else {}),
        limits={"cpu": Decimal(cpu + limit) / 1000} if limit else {},
    ),
    CPU_MILLIS,
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=1000),
    st.booleans(),
)
BUDGETS = st.builds(
    lambda cpu, memory, pods, count_limits: Budget(
        resources={"cpu": Decimal(cpu) / 1000, "memory": Decimal(memory), "pods": Decimal(pods)},
        count_limits=count_limits,
    ),
    st.integers(min_value=0, max_value=4000),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=8),
    st.booleans(),
)
EVENTS = st.lists(
    st.tuples(st.sampled_from(["admit", "release"]), st.integers(min_value=0, max_value=9), POD_USAGES),
    max_size=40,
)


def within(total: Usage, limit: Budget) -> bool:
    kinds = [total.requests, *([total.limits] if limit.count_limits else [])]
    return all(
        amount <= limit.resources.get(resource, Decimal(0)) for kind in kinds for resource, amount in kind.items()
    )


def summed(usages: list[Usage]) -> Usage:
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    for usage in usages:
        for total, amounts in ((requests, usage.requests), (limits, usage.limits)):
            for resource, amount in amounts.items():
                total[resource] = total.get(resource, Decimal(0)) + amount
    return Usage(requests=requests, limits=limits)


@given(limit=BUDGETS, events=EVENTS)
def test_the_ledger_never_admits_beyond_the_budget_whatever_the_order_of_events(
    limit: Budget, events: list[tuple[str, int, Usage]]
) -> None:
    ledger = Ledger()
    held: dict[str, Usage] = {}
    for action, index, usage in events:
        key = f"twin-{index % 3}/pod-{index}"
        if action == "release":
            ledger.release(key)
            held.pop(key, None)
            continue
        held.pop(key, None)  # admitted for a pod about to be made: the key's previous pod is gone
        missing = ledger.admit(key, consumer="rome", uid=f"uid-{index}", usage=usage, budget=limit)
        # Checked on its own every time, beside what the other keys hold, whatever the key held before.
        assert (missing is None) == (shortfall(limit, summed(list(held.values())), usage) is None)
        if missing is None:
            held[key] = usage
            assert key not in ledger.waiting("rome")
        else:
            assert key in ledger.waiting("rome")
        assert within(ledger.in_use("rome"), limit)
    expected = summed(list(held.values()))
    in_use = ledger.in_use("rome")
    assert {r: a for r, a in in_use.requests.items() if a} == {r: a for r, a in expected.requests.items() if a}
    assert {r: a for r, a in in_use.limits.items() if a} == {r: a for r, a in expected.limits.items() if a}
    assert sorted(ledger.held_by("rome")) == sorted(held)


@given(limit=BUDGETS, usages=st.lists(POD_USAGES, min_size=1, max_size=8), order=st.randoms())
def test_each_consumer_has_its_own_budget(limit: Budget, usages: list[Usage], order: Any) -> None:
    ledger = Ledger()
    keys = [(consumer, i) for consumer in ("rome", "naples") for i in range(len(usages))]
    order.shuffle(keys)
    for consumer, i in keys:
        ledger.admit(f"{consumer}-twin/p{i}", consumer=consumer, uid=f"{consumer}{i}", usage=usages[i], budget=limit)
    # Both consumers get exactly what a consumer alone would: one's pods never count against the other.
    for consumer in ("rome", "naples"):
        alone = Ledger()
        for c, i in keys:
            if c == consumer:
                alone.admit(f"{c}-twin/p{i}", consumer=c, uid=f"{c}{i}", usage=usages[i], budget=limit)
        assert sorted(ledger.held_by(consumer)) == sorted(alone.held_by(consumer))
        assert within(ledger.in_use(consumer), limit)


def test_a_release_makes_room_for_a_waiting_pod() -> None:
    ledger = Ledger()
    limit = budget(cpu="1", pods="10")
    pod = pod_usage(spec(container(requests={"cpu": "400m"})))
    assert ledger.admit("a/one", consumer="rome", uid="1", usage=pod, budget=limit) is None
    assert ledger.admit("b/two", consumer="rome", uid="2", usage=pod, budget=limit) is None
    assert ledger.admit("c/three", consumer="rome", uid="3", usage=pod, budget=limit) is not None
    assert ledger.waiting("rome") == ["c/three"]
    assert ledger.release("a/one") == "rome"  # whose waiting pods to wake
    assert ledger.admit("c/three", consumer="rome", uid="3", usage=pod, budget=limit) is None
    assert ledger.waiting("rome") == []
    assert sorted(ledger.held_by("rome")) == ["b/two", "c/three"]
    assert ledger.release("a/one") is None  # released once only


def test_a_namesake_is_a_new_pod_with_its_own_admission() -> None:
    ledger = Ledger()
    limit = budget(cpu="1", pods="10")
    small, large = (pod_usage(spec(container(requests={"cpu": cpu}))) for cpu in ("100m", "900m"))
    assert ledger.admit("a/web", consumer="rome", uid="old", usage=small, budget=limit) is None
    assert ledger.admit("a/other", consumer="rome", uid="x", usage=small, budget=limit) is None
    # Same key, new ShadowPod: the old holding goes, the new pod is checked on its own.
    assert ledger.admit("a/web", consumer="rome", uid="new", usage=large, budget=limit) is None
    holding = ledger.holding("a/web")
    assert holding is not None
    assert holding.uid == "new"
    assert ledger.in_use("rome").requests == {"cpu": Decimal(1), "pods": Decimal(2)}


def test_a_pod_made_again_is_checked_again_from_its_spec_as_it_is_now() -> None:
    # The same ShadowPod (same UID), its spec raised from 10m to 7 CPU after admission, its pod gone: the
    # next one is measured as it is now, and does not fit beside the other 7 CPU of an 8-CPU offer.
    ledger = Ledger()
    limit = budget(cpu="8", pods="10")
    small, seven = (pod_usage(spec(container(requests={"cpu": cpu}))) for cpu in ("10m", "7"))
    assert ledger.admit("a/big", consumer="rome", uid="b", usage=seven, budget=limit) is None
    assert ledger.admit("a/small", consumer="rome", uid="s", usage=small, budget=limit) is None
    missing = ledger.admit("a/small", consumer="rome", uid="s", usage=seven, budget=limit)
    assert missing is not None
    assert missing.message.startswith("cpu requests: the pod requests 7,")
    assert ledger.holding("a/small") is None
    assert ledger.waiting("rome") == ["a/small"]
    assert ledger.in_use("rome").requests == {"cpu": Decimal(7), "pods": Decimal(1)}
    # Under a budget that shrank, a pod made again waits like a new one, whatever its first one held.
    assert ledger.admit("a/big", consumer="rome", uid="b", usage=seven, budget=budget(cpu="6", pods="10")) is not None
    assert ledger.in_use("rome") == Usage()


def test_pods_found_running_are_counted_even_beyond_a_smaller_budget() -> None:
    # Rebuilt after a restart, or the offer shrank: what runs stays counted, new pods wait.
    ledger = Ledger()
    pod = pod_usage(spec(container(requests={"cpu": "600m"})))
    ledger.hold("a/one", consumer="rome", uid="1", usage=pod)
    ledger.hold("a/two", consumer="rome", uid="2", usage=pod)
    assert ledger.in_use("rome").requests["cpu"] == Decimal("1.2")
    assert ledger.admit("a/three", consumer="rome", uid="3", usage=pod, budget=budget(cpu="1", pods="9")) is not None
    ledger.release("a/one")
    ledger.release("a/two")
    assert ledger.in_use("rome") == Usage()
    assert ledger.consumers() == {"rome"}  # a/three still waits
    ledger.stop_waiting("a/three")
    assert ledger.consumers() == set()


# -- storage: claims, held from their first pod until deleted ---------------------------------------------


def claim(name: str, size: str, *, storage_class: str = "local", capacity: str | None = None) -> Obj:
    made: Obj = {
        "metadata": {"name": name, "namespace": "web-rome"},
        "spec": {"storageClassName": storage_class, "resources": {"requests": {"storage": size}}},
    }
    if capacity is not None:
        made["status"] = {"phase": "Bound", "capacity": {"storage": capacity}}
    return made


def test_the_offers_storage_is_the_budget_per_class() -> None:
    accepted = offer(cpu="1")
    accepted["spec"]["storage"] = [{"class": "local", "capacity": "10Gi"}]
    found = budget_of(accepted, count_limits=True)
    assert isinstance(found, Budget)
    assert found.storage == {"local": 10 * GI}
    accepted["spec"]["storage"] = [{"class": "local", "capacity": "lots"}]
    assert isinstance(budget_of(accepted, count_limits=True), NoBudget)


def test_a_pods_claims_are_its_claim_volumes_and_its_ephemeral_templates() -> None:
    claims = {"web-rome/data": claim("data", "1Gi", capacity="2Gi")}
    template = {"spec": {"storageClassName": "local", "resources": {"requests": {"storage": "3Gi"}}}}
    pod_spec = spec(
        volumes=[
            {"name": "config", "configMap": {"name": "c"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}},
        ]
    )
    assert pod_claims(pod_spec, namespace="web-rome", pod_name="web-0", claim_of=claims.get) == [
        Claim("web-rome/data", "local", 2 * GI),  # what the volume holds, beyond the request
        Claim("web-rome/web-0-scratch", "local", 3 * GI),
    ]
    missing = pod_claims(
        spec(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "other"}}]),
        namespace="web-rome",
        pod_name="web-0",
        claim_of=claims.get,
    )
    assert isinstance(missing, ClaimsWait)
    assert missing.missing
    assert "other" in missing.message


def test_a_claim_counts_once_whatever_pods_use_it_until_it_is_deleted() -> None:
    ledger = ClaimLedger()
    data = Claim("web-rome/data", "local", 6 * GI)
    storage = {"local": 10 * GI}
    assert ledger.shortfall("rome", [data], storage) is None
    ledger.count("rome", [data])
    assert ledger.shortfall("rome", [data], storage) is None  # a second pod of the same claim takes nothing more
    other = Claim("web-rome/other", "local", 5 * GI)
    refused = ledger.shortfall("rome", [other], storage)
    assert refused is not None
    assert "10Gi" in refused.message
    assert "5Gi" in refused.message
    assert ledger.shortfall("milan", [other], storage) is None  # another consumer, its own budget
    assert ledger.release("web-rome/data") == "rome"
    assert ledger.shortfall("rome", [other], storage) is None
    assert ledger.release("web-rome/data") is None


def test_a_class_the_offer_does_not_hold_never_fits() -> None:
    found = ClaimLedger().shortfall("rome", [Claim("web-rome/x", "fast", GI)], {"local": 10 * GI})
    assert found is not None
    assert "class fast" in found.message


@given(
    sizes=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 4)), max_size=30),
    releases=st.lists(st.integers(0, 9), max_size=10),
)
def test_the_claims_counted_never_exceed_the_budget_whatever_the_order(
    sizes: list[tuple[int, int]], releases: list[int]
) -> None:
    """Admitted only through shortfall-then-count (one synchronous step), the claims of a class stay within it."""
    ledger = ClaimLedger()
    storage = {"local": 8 * GI}
    for index, (name, size) in enumerate(sizes):
        wanted = [Claim(f"ns/c{name}", "local", size * GI)]
        if ledger.shortfall("rome", wanted, storage) is None:
            ledger.count("rome", wanted)
        if index < len(releases):
            ledger.release(f"ns/c{releases[index]}")
        assert ledger.held("rome").get("local", Decimal(0)) <= 8 * GI
