"""The pod webhook's JSONPatch: the placement each strategy demands, merged with what the pod asks for.

The property test applies the patch (with a small RFC 6902 applier below) and compares, over every node
that can be built from a small label alphabet, where the pod may run before and after: after = before AND
the strategy's placement, exactly. Applying the patch to its own result must add nothing.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.offloading.pod_webhook import (
    STRATEGIES,
    Strategy,
    UnknownStrategy,
    merge_terms,
    pod_patch,
    required_terms,
)
from tests.shared import apply_patch

TYPE = names.VIRTUAL_NODE_TYPE
VIRTUAL = names.VIRTUAL_NODE
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TOLERATION = names.virtual_node_toleration()


def offloading(strategy: str | None = "Remote", selector: Mapping[str, str] | None = None, **meta: Any) -> Obj:
    spec: Obj = {"namespaceMappingStrategy": "DefaultName"}
    if strategy is not None:
        spec["podOffloadingStrategy"] = strategy
    if selector is not None:
        spec["clusterSelector"] = dict(selector)
    return {
        "apiVersion": "offloading.liqo.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "web", **meta},
        "spec": spec,
    }


def pod(**spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "web"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec},
    }


def expression(key: str, operator: str, *values: str) -> Obj:
    return {"key": key, "operator": operator, "values": list(values)}


def required(*terms: list[Obj]) -> Obj:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


# -- a tiny RFC 6902 applier (add and replace: all the webhook emits) -----------------------------------------


# -- node selection semantics, as the scheduler applies them ------------------------------------------------


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
    match operator:
        case "In":
            return key in labels and labels[key] in values
        case "NotIn":
            return key not in labels or labels[key] not in values
        case "Exists":
            return key in labels
        case "DoesNotExist":
            return key not in labels
    raise AssertionError(operator)


def admits(pod_obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the pod's required node affinity lets it onto a node with ``labels`` (ORed terms, ANDed exprs)."""
    terms = (((pod_obj["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(REQUIRED) or {}).get(
        "nodeSelectorTerms"
    )
    if not terms:
        return True
    return any(
        bool(t.get("matchExpressions")) and all(_requirement_matches(r, labels) for r in t["matchExpressions"])
        for t in terms
    )


def strategy_admits(strategy: Strategy, selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    virtual = labels.get(TYPE) == VIRTUAL
    remote = virtual and all(labels.get(k) == v for k, v in selector.items())
    return {"Local": not virtual, "Remote": remote, "LocalAndRemote": (not virtual) or remote}[strategy]


KEYS = (TYPE, "zone", "tier")
VALUES = (VIRTUAL, "x", "y")


def every_node() -> Iterator[dict[str, str]]:
    """Every label set over KEYS x VALUES, each key possibly absent (4^3 nodes)."""
    for choice in itertools.product((None, *VALUES), repeat=len(KEYS)):
        yield {k: v for k, v in zip(KEYS, choice, strict=True) if v is not None}


def count_ours(pod_obj: Mapping[str, Any]) -> int:
    return sum(1 for t in pod_obj["spec"].get("tolerations") or [] if t == TOLERATION)


# -- examples -------------------------------------------------------------------------------------------------


def test_remote_tolerates_and_requires_matching_virtual_nodes() -> None:
    patch = pod_patch(pod=pod(), offloading=offloading("Remote", {"zone": "x", "region": "eu"}))
    assert patch == [
        {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]},
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": required(
                [expression(TYPE, "In", VIRTUAL), expression("region", "In", "eu"), expression("zone", "In", "x")]
            ),
        },
    ]
    assert TOLERATION == {
        "key": "virtual-node.liqo.io/not-allowed",
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
    }


def test_local_and_remote_ors_real_nodes_with_the_remote_term() -> None:
    patch = pod_patch(pod=pod(), offloading=offloading("LocalAndRemote", {"zone": "x"}))
    assert patch[0] == {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]}
    assert patch[1]["value"] == required(
        [expression(TYPE, "NotIn", VIRTUAL)], [expression(TYPE, "In", VIRTUAL), expression("zone", "In", "x")]
    )


def test_local_keeps_pods_off_virtual_nodes_without_a_toleration() -> None:
    patch = pod_patch(pod=pod(), offloading=offloading("Local", {"zone": "x"}))
    assert patch == [{"op": "add", "path": "/spec/affinity", "value": required([expression(TYPE, "NotIn", VIRTUAL)])}]


def test_an_absent_strategy_is_the_crd_default_local_and_remote() -> None:
    patch = pod_patch(pod=pod(), offloading=offloading(None))
    assert len(patch[1]["value"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]) == 2


@pytest.mark.parametrize(
    "offloading_obj",
    [None, offloading("Remote", deletionTimestamp="2030-01-01T00:00:00Z")],
    ids=["no NamespaceOffloading", "NamespaceOffloading being deleted"],
)
def test_without_a_live_namespace_offloading_pods_are_left_alone(offloading_obj: Obj | None) -> None:
    assert pod_patch(pod=pod(), offloading=offloading_obj) == []


def test_a_pod_already_bound_to_a_node_is_left_alone() -> None:
    assert pod_patch(pod=pod(nodeName="node-1"), offloading=offloading("Remote")) == []


def test_an_unknown_strategy_is_an_error_not_a_silent_pass() -> None:
    with pytest.raises(UnknownStrategy, match="Elsewhere"):
        pod_patch(pod=pod(), offloading=offloading("Elsewhere"))


def test_the_toleration_is_appended_once_to_existing_ones() -> None:
    other = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    patch = pod_patch(pod=pod(tolerations=[other]), offloading=offloading("Remote"))
    assert patch[0] == {"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}
    again = pod_patch(pod=pod(tolerations=[other, dict(TOLERATION)]), offloading=offloading("Remote"))
    assert all("tolerations" not in op["path"] for op in again)


def test_a_toleration_with_a_time_limit_is_not_ours() -> None:
    limited = TOLERATION | {"tolerationSeconds": 30}
    patch = pod_patch(pod=pod(tolerations=[limited]), offloading=offloading("Remote"))
    assert patch[0] == {"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}


def test_our_expressions_are_anded_into_each_of_the_pods_terms() -> None:
    spec_affinity = required([expression("disk", "In", "ssd")], [expression("gpu", "Exists")])
    spec_affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 1}]
    patch = pod_patch(pod=pod(affinity=spec_affinity), offloading=offloading("Remote", {"zone": "x"}))
    ours = [expression(TYPE, "In", VIRTUAL), expression("zone", "In", "x")]
    assert patch[1] == {
        "op": "replace",
        "path": f"/spec/affinity/nodeAffinity/{REQUIRED}/nodeSelectorTerms",
        "value": [
            {"matchExpressions": [expression("disk", "In", "ssd"), *ours]},
            {"matchExpressions": [expression("gpu", "Exists"), *ours]},
        ],
    }


def test_local_and_remote_distributes_over_the_pods_terms() -> None:
    existing = [{"matchExpressions": [expression("disk", "In", "ssd")]}]
    merged = merge_terms(existing, required_terms(strategy="LocalAndRemote", cluster_selector={}))
    assert merged == [
        {"matchExpressions": [expression("disk", "In", "ssd"), expression(TYPE, "NotIn", VIRTUAL)]},
        {"matchExpressions": [expression("disk", "In", "ssd"), expression(TYPE, "In", VIRTUAL)]},
    ]


def test_terms_with_match_fields_keep_them() -> None:
    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    merged = merge_terms([fields], required_terms(strategy="Local", cluster_selector={}))
    assert merged == [fields | {"matchExpressions": [expression(TYPE, "NotIn", VIRTUAL)]}]


@pytest.mark.parametrize(
    ("affinity", "path"),
    [
        ({}, "/spec/affinity"),
        ({"podAffinity": {}}, "/spec/affinity/nodeAffinity"),
        (
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            f"/spec/affinity/nodeAffinity/{REQUIRED}",
        ),
    ],
)
def test_the_affinity_is_added_at_the_shallowest_missing_level(affinity: Obj, path: str) -> None:
    patch = pod_patch(pod=pod(affinity=affinity), offloading=offloading("Local"))
    assert [op["path"] for op in patch] == [path]
    patched = apply_patch(pod(affinity=affinity), patch)
    assert {k: v for k, v in patched["spec"]["affinity"].items() if k != "nodeAffinity"} == {
        k: v for k, v in affinity.items() if k != "nodeAffinity"
    }


# -- the property -----------------------------------------------------------------------------------------------

requirements = st.builds(
    lambda key, op, values: {"key": key, "operator": op, "values": [] if op in ("Exists", "DoesNotExist") else values},
    st.sampled_from(KEYS),
    st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")),
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True),
)
terms = st.lists(
    st.builds(lambda e: {"matchExpressions": e}, st.lists(requirements, min_size=1, max_size=3)), min_size=1, max_size=3
)
other_tolerations: st.SearchStrategy[list[Obj]] = st.lists(
    st.sampled_from(
        [
            {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
            {"key": names.VIRTUAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
            TOLERATION | {"tolerationSeconds": 10},
        ]
    ),
    max_size=2,
)
affinities = st.one_of(
    st.none(),
    st.just({}),
    st.just({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}),
    st.builds(lambda ts: {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": ts}}}, terms),
    st.builds(
        lambda ts: {
            "nodeAffinity": {
                REQUIRED: {"nodeSelectorTerms": ts},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5}],
            }
        },
        terms,
    ),
)


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    spec: Obj = {}
    tolerations: list[Obj] = draw(other_tolerations)
    if draw(st.booleans()):
        tolerations.append(dict(TOLERATION))  # the pod may already carry ours (a copy of a mutated pod)
    empty_list = draw(st.booleans())  # an empty list is not the same document as no list
    if tolerations or empty_list:
        spec["tolerations"] = tolerations
    affinity = draw(affinities)
    if affinity is not None:
        spec["affinity"] = affinity
    return pod(**spec)


selectors = st.dictionaries(st.sampled_from(("zone", "tier")), st.sampled_from(VALUES), max_size=2)


@given(pod_obj=pods(), strategy=st.sampled_from(STRATEGIES), selector=selectors)
def test_the_patched_pod_runs_exactly_where_it_and_the_strategy_both_allow(
    pod_obj: Obj, strategy: Strategy, selector: dict[str, str]
) -> None:
    nsof = offloading(strategy, selector)
    patch = pod_patch(pod=pod_obj, offloading=nsof)
    patched = apply_patch(pod_obj, patch)

    for labels in every_node():
        assert admits(patched, labels) == (admits(pod_obj, labels) and strategy_admits(strategy, selector, labels)), (
            labels
        )
    if strategy == "Local":
        assert patched["spec"].get("tolerations") == pod_obj["spec"].get("tolerations")
    else:
        assert count_ours(patched) == 1
        assert [t for t in patched["spec"]["tolerations"] if t != TOLERATION] == [
            t for t in pod_obj["spec"].get("tolerations") or [] if t != TOLERATION
        ]
    # Only tolerations and the required node affinity change.
    before, after = copy.deepcopy(pod_obj), copy.deepcopy(patched)
    for obj in (before, after):
        obj["spec"].pop("tolerations", None)
        node_affinity = (obj["spec"].get("affinity") or {}).get("nodeAffinity")
        if node_affinity is not None:
            node_affinity.pop(REQUIRED, None)
            if not node_affinity:
                obj["spec"]["affinity"].pop("nodeAffinity")
        if not obj["spec"].get("affinity"):
            obj["spec"].pop("affinity", None)
    assert after == before
    # Idempotent: a second pass (a reinvocation, a pod copied from a mutated one) adds nothing.
    assert pod_patch(pod=patched, offloading=nsof) == []


@given(pod_obj=pods(), strategy=st.sampled_from(STRATEGIES), selector=selectors)
def test_bound_pods_are_never_patched(pod_obj: Obj, strategy: Strategy, selector: dict[str, str]) -> None:
    pod_obj["spec"]["nodeName"] = "node-1"
    assert pod_patch(pod=pod_obj, offloading=offloading(strategy, selector)) == []
