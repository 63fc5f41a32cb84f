from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.podrequests import pod_requests
from liqo.api.quantity import parse_quantity
from liqo.kube.objects import Obj
from liqo.sharing.capacity import CapacityLedger, is_eligible
from tests.unit.sharing.capacity_support import free_capacity, ledger_of, node_free


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    ready: str = "True",
    unschedulable: bool = False,
    virtual: bool = False,
    extra: dict[str, str] | None = None,
) -> Obj:
    labels = {names.VIRTUAL_NODE_TYPE: "virtual-node"} if virtual else {"kubernetes.io/hostname": name}
    spec: Obj = {"unschedulable": True} if unschedulable else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods} | (extra or {}),
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
        },
    }


def container(name: str = "c", *, restart_policy: str | None = None, **requests: str) -> Obj:
    body: Obj = {"name": name, "image": "x", "resources": {"requests": requests} if requests else {}}
    if restart_policy:
        body["restartPolicy"] = restart_policy
    return body


def pod(
    name: str,
    *,
    node_name: str | None = "n1",
    namespace: str = "default",
    phase: str = "Running",
    containers: list[Obj] | None = None,
    init: list[Obj] | None = None,
    overhead: dict[str, str] | None = None,
    pod_level: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {"containers": containers if containers is not None else [container(cpu="1", memory="1Gi")]}
    if node_name:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    if pod_level:
        spec["resources"] = {"requests": pod_level}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


GI = Decimal(2**30)


def ledger_free(
    nodes: list[Obj], pods: list[Obj], *, exclude_namespaces: frozenset[str] = frozenset()
) -> dict[str, Decimal]:
    """The free capacity a ledger fed these nodes and pods gives."""
    return ledger_of(nodes, pods).free(exclude_namespaces=exclude_namespaces)


# -- which nodes count ----------------------------------------------------------------------------------------


def test_sums_the_allocatable_of_ready_schedulable_real_nodes() -> None:
    nodes = [
        node("n1"),
        node("n2", cpu="4", memory="16Gi"),
        node("cordoned", unschedulable=True),
        node("not-ready", ready="False"),
        node("unknown", ready="Unknown"),
        node("liqo-milan", cpu="100", virtual=True),
    ]
    assert ledger_free(nodes, []) == {"cpu": Decimal(12), "memory": 48 * GI, "pods": Decimal(220)}


def test_a_node_without_a_ready_condition_does_not_count() -> None:
    bare = node("n1")
    bare["status"]["conditions"] = []
    assert not is_eligible(bare)
    assert ledger_free([bare], []) == {}


def test_no_eligible_node_means_no_capacity() -> None:
    assert ledger_free([node("n1", ready="False")], [pod("p")]) == {}


def test_extended_resources_are_capacity_too() -> None:
    nodes = [node("n1", extra={"nvidia.com/gpu": "4"}), node("n2")]
    pods = [pod("train", containers=[container(cpu="1", **{"nvidia.com/gpu": "3"})])]
    free = ledger_free(nodes, pods)
    assert free["nvidia.com/gpu"] == 1
    assert free["cpu"] == 15


# -- which pods count -----------------------------------------------------------------------------------------


def test_subtracts_the_requests_of_running_pods_and_one_pod_each() -> None:
    pods = [pod("a"), pod("b", containers=[container(cpu="250m", memory="512Mi"), container("d", cpu="250m")])]
    assert ledger_free([node("n1")], pods) == {
        "cpu": Decimal("6.5"),
        "memory": Decimal(30 * GI + GI / 2),
        "pods": Decimal(108),
    }


@pytest.mark.parametrize(
    "ignored",
    [
        pod("done", phase="Succeeded"),
        pod("crashed", phase="Failed"),
        pod("pending", node_name=None, phase="Pending"),
        pod("elsewhere", node_name="cordoned"),
        pod("offloaded", node_name="liqo-milan"),
    ],
)
def test_terminal_unbound_and_foreign_pods_do_not_count(ignored: Obj) -> None:
    nodes = [node("n1"), node("cordoned", unschedulable=True), node("liqo-milan", virtual=True)]
    assert ledger_free(nodes, [ignored]) == ledger_free(nodes, [])


def test_pending_but_bound_pods_count() -> None:
    assert ledger_free([node("n1")], [pod("starting", phase="Pending")])["cpu"] == 7


def test_never_negative() -> None:
    greedy = pod("greedy", containers=[container(cpu="20", memory="64Gi")])
    assert ledger_free([node("n1", pods="1")], [greedy, pod("second")]) == {
        "cpu": Decimal(0),
        "memory": Decimal(0),
        "pods": Decimal(0),
    }


def test_the_consumers_own_pods_do_not_reduce_its_capacity() -> None:
    tenant = names.tenant_namespace("rome")
    pods = [pod("local"), pod("offloaded", namespace=tenant), pod("other-consumer", namespace="liqo-tenant-naples")]
    for_rome = ledger_free([node("n1")], pods, exclude_namespaces=frozenset({tenant}))
    assert for_rome == {"cpu": Decimal(6), "memory": 30 * GI, "pods": Decimal(108)}
    assert ledger_free([node("n1")], pods)["cpu"] == 5


# -- a pod's effective requests -------------------------------------------------------------------------------


def test_containers_add_up() -> None:
    requests = pod_requests(pod("p", containers=[container(cpu="1", memory="1Gi"), container("b", cpu="500m")]))
    assert requests == {"cpu": Decimal("1.5"), "memory": GI}


def test_a_pod_without_requests_requests_nothing() -> None:
    assert pod_requests(pod("p", containers=[container()])) == {}


def test_the_largest_init_container_wins_when_larger_than_the_containers() -> None:
    init = [container("migrate", cpu="2", memory="256Mi"), container("warm", cpu="500m", memory="2Gi")]
    requests = pod_requests(pod("p", containers=[container(cpu="1", memory="1Gi")], init=init))
    assert requests == {"cpu": Decimal(2), "memory": 2 * GI}


def test_init_containers_run_one_at_a_time() -> None:
    init = [container("a", cpu="1"), container("b", cpu="1")]
    assert pod_requests(pod("p", containers=[container(cpu="500m")], init=init)) == {"cpu": Decimal(1)}


def test_sidecars_run_alongside_the_containers_and_later_init_containers() -> None:
    init = [
        container("mesh", restart_policy="Always", cpu="500m"),
        container("migrate", cpu="2"),
        container("logs", restart_policy="Always", cpu="250m"),
    ]
    # Containers + both sidecars = 1.75; the init phase peaks at migrate + mesh = 2.5.
    assert pod_requests(pod("p", containers=[container(cpu="1")], init=init)) == {"cpu": Decimal("2.5")}
    # Without the heavy init container, the running phase (containers + sidecars) is the peak.
    assert pod_requests(pod("p", containers=[container(cpu="1")], init=[init[0], init[2]])) == {"cpu": Decimal("1.75")}


def test_overhead_comes_on_top() -> None:
    requests = pod_requests(pod("p", overhead={"cpu": "100m", "memory": "64Mi"}))
    assert requests == {"cpu": Decimal("1.1"), "memory": GI + 64 * 2**20}


def test_pod_level_requests_replace_the_containers_aggregate() -> None:
    requests = pod_requests(pod("p", pod_level={"cpu": "3"}, overhead={"cpu": "100m"}))
    assert requests == {"cpu": Decimal("3.1"), "memory": GI}


# -- properties ------------------------------------------------------------------------------------------------

CPU = st.integers(min_value=0, max_value=16_000).map(lambda m: f"{m}m")
MEMORY = st.integers(min_value=0, max_value=64).map(lambda g: f"{g}Gi")
REQUESTS = st.fixed_dictionaries({}, optional={"cpu": CPU, "memory": MEMORY})
CONTAINERS = st.lists(REQUESTS.map(lambda r: container(**r)), min_size=1, max_size=3)
INIT = st.lists(
    st.tuples(REQUESTS, st.sampled_from([None, "Always"])).map(lambda t: container(restart_policy=t[1], **t[0])),
    max_size=3,
)
NODES = st.lists(
    st.builds(
        node,
        st.sampled_from(["n1", "n2", "n3"]),
        cpu=st.integers(0, 64).map(str),
        memory=MEMORY,
        pods=st.integers(0, 110).map(str),
        ready=st.sampled_from(["True", "False"]),
        unschedulable=st.booleans(),
        virtual=st.booleans(),
    ),
    max_size=3,
    unique_by=lambda n: n["metadata"]["name"],
)
PODS = st.builds(
    pod,
    st.just("p"),
    node_name=st.sampled_from([None, "n1", "n2", "n3"]),
    namespace=st.sampled_from(["default", "liqo-tenant-rome", "liqo-tenant-naples"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    containers=CONTAINERS,
    init=INIT,
)


@given(nodes=NODES, pods=st.lists(PODS, max_size=6), extra=PODS)
def test_adding_a_pod_never_increases_ledger_free(nodes: list[Obj], pods: list[Obj], extra: Obj) -> None:
    before = ledger_free(nodes, pods)
    after = ledger_free(nodes, [*pods, extra])
    assert after.keys() == before.keys()
    assert all(after[r] <= before[r] for r in before)


@given(nodes=NODES, pods=st.lists(PODS, max_size=6))
def test_excluding_a_consumers_namespaces_never_decreases_its_capacity(nodes: list[Obj], pods: list[Obj]) -> None:
    everything = ledger_free(nodes, pods)
    for_rome = ledger_free(nodes, pods, exclude_namespaces=frozenset({"liqo-tenant-rome"}))
    assert all(for_rome[r] >= everything[r] for r in everything)


@given(nodes=NODES, pods=st.lists(PODS, max_size=6))
def test_free_capacity_is_between_zero_and_the_eligible_allocatable(nodes: list[Obj], pods: list[Obj]) -> None:
    allocatable = ledger_free(nodes, [])
    free = ledger_free(nodes, pods)
    assert free.keys() == allocatable.keys()
    assert all(0 <= free[r] <= allocatable[r] for r in free)


@given(containers=CONTAINERS, init=INIT)
def test_a_pod_requests_at_least_what_any_of_its_containers_does(containers: list[Obj], init: list[Obj]) -> None:
    requests = pod_requests(pod("p", containers=containers, init=init))
    for c in [*containers, *init]:
        for resource, amount in c["resources"].get("requests", {}).items():
            assert requests[resource] >= parse_quantity(amount)


# -- the ledger: kept per event, equal to the computation from scratch ---------------------------------------

EVENT_PODS = st.builds(
    pod,
    st.sampled_from(["p1", "p2", "p3"]),
    node_name=st.sampled_from([None, "n1", "n2", "n3"]),
    namespace=st.sampled_from(["default", "liqo-tenant-rome", "liqo-tenant-naples"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    containers=CONTAINERS,
    init=INIT,
)
TAINT_EFFECTS = [None, "NoSchedule", "PreferNoSchedule", "NoExecute"]


def tainted(base: Obj, effect: str | None) -> Obj:
    """``base`` with one taint of ``effect`` (none if None): tainted nodes are eligible but not placeable."""
    return base if effect is None else base | {"spec": base["spec"] | {"taints": [{"key": "k", "effect": effect}]}}


EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("node"),
            st.builds(tainted, NODES.filter(bool).map(lambda nodes: nodes[0]), st.sampled_from(TAINT_EFFECTS)),
        ),
        st.tuples(st.just("node-gone"), st.sampled_from(["n1", "n2", "n3"]).map(node)),
        st.tuples(st.just("pod"), EVENT_PODS),
        st.tuples(st.just("pod-gone"), EVENT_PODS),
    ),
    max_size=30,
)
TERMINAL = ("Succeeded", "Failed")
EXCLUSIONS = [frozenset(), frozenset({"liqo-tenant-rome"}), frozenset({"liqo-tenant-rome", "liqo-tenant-naples"})]


def key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


@settings(max_examples=300)
@given(events=EVENTS)
def test_the_ledger_equals_the_computation_from_scratch_after_any_events(events: list[tuple[str, Obj]]) -> None:
    ledger = CapacityLedger()
    nodes: dict[str, Obj] = {}
    pods: dict[str, Obj] = {}
    for kind, obj in events:
        if kind == "node":
            ledger.set_node(obj)
            nodes[key(obj)] = obj
        elif kind == "node-gone":
            ledger.remove_node(obj)
            nodes.pop(key(obj), None)
        elif kind == "pod":
            ledger.set_pod(obj)
            pods[key(obj)] = obj
        else:
            ledger.remove_pod(obj)
            pods.pop(key(obj), None)
        for excluded in EXCLUSIONS:
            expected = free_capacity(nodes.values(), pods.values(), exclude_namespaces=excluded)
            assert ledger.free(exclude_namespaces=excluded) == expected
        assert ledger.rooms() == node_free(nodes.values(), pods.values())
    counted = [p for p in pods.values() if p["spec"].get("nodeName") and p["status"]["phase"] not in TERMINAL]
    assert len(ledger) == len(counted)


def test_a_pod_takes_back_exactly_what_it_added_when_it_moves_ends_or_goes() -> None:
    ledger = CapacityLedger()
    ledger.set_node(node("n1"))
    ledger.set_node(node("n2"))
    empty = ledger.free()
    ledger.set_pod(pod("p", node_name=None))  # not bound yet: counts nowhere
    assert ledger.free() == empty
    ledger.set_pod(pod("p", containers=[container(cpu="3")]))
    assert ledger.free()["cpu"] == 13
    assert ledger.rooms()["n1"]["cpu"] == 5
    ledger.set_pod(pod("p", containers=[container(cpu="2")]))  # resized in place
    assert ledger.rooms()["n1"]["cpu"] == 6
    ledger.set_pod(pod("p", phase="Succeeded", containers=[container(cpu="2")]))
    assert ledger.free() == empty
    ledger.set_pod(pod("q", node_name="n2"))
    ledger.remove_pod(pod("q", node_name="n2"))
    assert ledger.free() == empty
    assert len(ledger) == 0


def test_pods_bound_to_a_node_not_seen_yet_count_once_it_appears() -> None:
    ledger = CapacityLedger()
    ledger.set_pod(pod("early", node_name="n1"))
    assert ledger.free() == {}
    ledger.set_node(node("n1"))
    assert ledger.free() == {"cpu": Decimal(7), "memory": 31 * GI, "pods": Decimal(109)}
    ledger.set_node(node("n1", ready="False"))
    assert ledger.free() == {}
    assert ledger.rooms() == {}
