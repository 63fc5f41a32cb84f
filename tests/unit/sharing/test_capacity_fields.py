"""The capacity cache's projections keep every field the capacity rules read: same answers either way."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from liqo.api.podrequests import pod_limits, pod_requests
from liqo.kube.objects import Obj
from liqo.kube.projection import strip_bookkeeping
from liqo.sharing.capacity import NODE_FIELDS, POD_FIELDS, is_placeable, largest_slots
from tests.shared import api_pods
from tests.unit.sharing.capacity_support import ledger_of
from tests.unit.sharing.test_capacity import node


@st.composite
def api_nodes(draw: st.DrawFn) -> Obj:
    """A node as the API returns it: with images, addresses and the like, which no rule reads."""
    name = draw(st.sampled_from(["n1", "n2", "n3"]))
    found = node(name, ready=draw(st.sampled_from(["True", "False"])), unschedulable=draw(st.booleans()))
    found["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    if draw(st.booleans()):
        found["spec"]["taints"] = [{"key": "k", "effect": draw(st.sampled_from(["NoSchedule", "PreferNoSchedule"]))}]
    found["status"] |= {"images": [{"names": ["nginx"], "sizeBytes": 1}], "addresses": [{"type": "InternalIP"}]}
    return found


OFFER = {"cpu": Decimal(4), "memory": Decimal(2**33)}


@given(pods=st.lists(api_pods(nodes=("n1", "n2", "n3")), max_size=6), nodes=st.lists(api_nodes(), max_size=3))
def test_capacity_answers_the_same_on_projected_pods_and_nodes(pods: list[Obj], nodes: list[Obj]) -> None:
    small_pods, small_nodes = [POD_FIELDS(p) for p in pods], [NODE_FIELDS(n) for n in nodes]
    assert [POD_FIELDS(p) for p in small_pods] == small_pods  # a cached object is a fixed point
    for pod, small in zip(pods, small_pods, strict=True):
        assert pod_requests(small) == pod_requests(pod)
        assert pod_limits(small) == pod_limits(pod)
        assert small["metadata"] == strip_bookkeeping(pod)["metadata"]
    assert [is_placeable(n) for n in small_nodes] == [is_placeable(n) for n in nodes]
    excluded = {"liqo-tenant-x"}
    projected, kept = ledger_of(small_nodes, small_pods), ledger_of(nodes, pods)
    assert projected.free(exclude_namespaces=excluded) == kept.free(exclude_namespaces=excluded)
    assert projected.rooms() == kept.rooms()
    assert largest_slots(projected.rooms().values(), offer=OFFER) == largest_slots(kept.rooms().values(), offer=OFFER)


@given(pod=api_pods())
def test_the_pod_projection_drops_what_capacity_never_reads(pod: Obj) -> None:
    small = POD_FIELDS(pod)
    assert set(small["status"]) == {"phase"}
    assert "managedFields" not in small["metadata"]
    assert not {"volumes", "tolerations"} & set(small["spec"])
    assert all(set(c) <= {"resources"} for c in small["spec"]["containers"])
