"""The provider's decisions about twin namespaces (liqo.offloading.namespacemaps), without a cluster."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.errors import ApiError, UnreachableError
from liqo.offloading.namespacemaps import (
    BUILTIN_RESERVED,
    TwinStatus,
    consumer_of_map,
    map_status,
    parse_reserved,
    plan_twins,
    refusal,
    reserved,
    transient,
    twins_of,
    valid_name,
)
from liqo.offloading.twins import (
    TWIN_ANNOTATIONS,
    is_twin_of,
    pod_security_labels,
    twin_annotations,
    twin_namespace_manifest,
    twin_patch,
)
from liqo.sharing.policy import IngressOffer

Obj = dict[str, Any]
ROME = "rome0000-1111-2222-3333-444455556666"
NAPLES = "naples00-1111-2222-3333-444455556666"


def namespace(name: str, labels: dict[str, str] | None = None, *, deleting: bool = False, uid: str = "") -> Obj:
    meta: Obj = {"name": name, "labels": labels or {}, "uid": uid or f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def twin(name: str, *, consumer: str = ROME, home: str, deleting: bool = False) -> Obj:
    manifest = twin_namespace_manifest(name=name, consumer_id=consumer, home_namespace=home, level="baseline")
    return namespace(name, manifest["metadata"]["labels"], deleting=deleting)


def by_name(*items: Obj) -> dict[str, Obj]:
    return {ns["metadata"]["name"]: ns for ns in items}


def test_a_missing_twin_is_created() -> None:
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop-rome0000"}, namespaces={})
    assert plan.create == {"shop": "shop-rome0000"}
    assert plan.keep == {}
    assert plan.delete == []
    assert plan.status["shop"].phase == "Pending"


def test_an_existing_twin_of_that_home_is_kept_and_ready() -> None:
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop-x"}, namespaces=by_name(twin("shop-x", home="shop")))
    assert plan.keep == {"shop": "shop-x"}
    assert plan.create == {}
    assert plan.status == {"shop": TwinStatus("shop-x", "Ready")}


def test_an_unrelated_namespace_is_a_conflict_and_never_touched() -> None:
    unrelated = namespace("shop", {"team": "payments"})
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop"}, namespaces=by_name(unrelated))
    assert (plan.create, plan.keep, plan.delete) == ({}, {}, [])
    status = plan.status["shop"]
    assert status.phase == "Conflict"
    assert "already exists" in status.message
    assert "left untouched" in status.message


def test_another_consumers_twin_is_a_conflict_and_never_deleted() -> None:
    theirs = twin("shop", consumer=NAPLES, home="shop")
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop"}, namespaces=by_name(theirs))
    assert plan.status["shop"].phase == "Conflict"
    assert plan.delete == []


def test_reserved_names_are_conflicts_even_when_free() -> None:
    builtin = ("kube-system", "kube-foo", "default", names.LIQO_NAMESPACE, "liqo-foo", "liqorice")
    for name in (*builtin, names.tenant_namespace(NAPLES)):
        assert reserved(name)
        plan = plan_twins(consumer_id=ROME, mappings={"x": name}, namespaces={})
        assert plan.status["x"] == TwinStatus(name, "Conflict", f"namespace {name} is reserved on this cluster")
        assert plan.create == {}
    for name in ("shop", "kube", "defaults", "my-liqo", "cert-manager"):
        assert not reserved(name), name


def test_the_providers_own_reserved_names_and_prefixes_are_conflicts() -> None:
    patterns = (*BUILTIN_RESERVED, *parse_reserved("cert-manager, monitoring,team-*"))
    mappings = {"a": "cert-manager", "b": "monitoring", "c": "team-x", "d": "team", "e": "kube-x", "f": "shop"}
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces={}, reserved_names=patterns)
    assert {home: status.phase for home, status in plan.status.items()} == {
        "a": "Conflict",
        "b": "Conflict",
        "c": "Conflict",
        "d": "Pending",
        "e": "Conflict",
        "f": "Pending",
    }
    assert plan.create == {"d": "team", "f": "shop"}


def test_reserved_names_parse_names_and_prefixes_and_refuse_anything_else() -> None:
    assert parse_reserved("") == ()
    assert parse_reserved(" a , ,b-*,c ") == ("a", "b-*", "c")
    for bad in ("*", "A", "a*b", "-a", "a_b", "a" * 64, "*a"):
        with pytest.raises(ValueError, match="neither a namespace name nor a prefix"):
            parse_reserved(f"ok,{bad}")


def test_an_invalid_name_is_a_conflict() -> None:
    """The schema refuses it; a CRD older than the rule does not, and the plan must not try to create it."""
    for name in ("Shop", "a" * 64, "../etc", ""):
        plan = plan_twins(consumer_id=ROME, mappings={"x": name}, namespaces={})
        assert plan.status["x"].phase == "Conflict"
        assert "is not a valid namespace name" in plan.status["x"].message
        assert plan.create == {}


def test_refusals_are_terminal_and_only_transient_failures_are_errors() -> None:
    for status in (400, 403, 404, 422):
        refused = refusal("t", ApiError(status, "No", "admission webhook said no"), doing="create namespace t")
        assert refused.phase == "Conflict"
        assert refused.message == f"this cluster refused to create namespace t: {status} No: admission webhook said no"
    for error in (ApiError(500, "x", "y"), ApiError(503, "x", "y"), ApiError(429, "x", "y"), UnreachableError("down")):
        assert transient(error)
        assert refusal("t", error, doing="create namespace t").phase == "Error"


@given(st.text(max_size=80))
def test_any_wanted_name_is_either_planned_for_creation_or_refused_with_a_reason(name: str) -> None:
    plan = plan_twins(consumer_id=ROME, mappings={"home": name}, namespaces={})
    if name in plan.create.values():
        assert valid_name(name)
        assert not reserved(name)
    else:
        assert plan.status["home"].phase == "Conflict"
        assert plan.status["home"].message


def test_a_twin_no_mapping_wants_is_deleted_and_reported_pending_until_gone() -> None:
    stale = twin("old-x", home="old")
    plan = plan_twins(consumer_id=ROME, mappings={}, namespaces=by_name(stale))
    assert plan.delete == [stale]
    assert plan.status == {"old": TwinStatus("old-x", "Pending", "twin old-x is being deleted")}
    going = twin("old-x", home="old", deleting=True)
    plan = plan_twins(consumer_id=ROME, mappings={}, namespaces=by_name(going))
    assert plan.delete == []
    assert plan.status["old"].phase == "Pending"
    assert plan_twins(consumer_id=ROME, mappings={}, namespaces={}).status == {}


def test_a_wanted_twin_being_deleted_is_pending() -> None:
    plan = plan_twins(
        consumer_id=ROME, mappings={"shop": "shop-x"}, namespaces=by_name(twin("shop-x", home="shop", deleting=True))
    )
    assert (plan.create, plan.keep, plan.delete) == ({}, {}, [])
    assert plan.status["shop"].phase == "Pending"
    assert "being deleted" in plan.status["shop"].message


def test_two_homes_wanting_one_name_the_existing_twin_wins() -> None:
    # "a" with DefaultName and "a-rome0000" with EnforceSameName both want "a-rome0000".
    mappings = {"a": "a-rome0000", "a-rome0000": "a-rome0000"}
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces=by_name(twin("a-rome0000", home="a-rome0000")))
    assert plan.keep == {"a-rome0000": "a-rome0000"}
    assert plan.status["a"].phase == "Conflict"
    fresh = plan_twins(consumer_id=ROME, mappings=mappings, namespaces={})
    assert fresh.create == {"a": "a-rome0000"}
    assert fresh.status["a-rome0000"].phase == "Conflict"


def test_a_former_twin_of_another_home_is_replaced() -> None:
    former = twin("a-rome0000", home="a")
    plan = plan_twins(consumer_id=ROME, mappings={"a-rome0000": "a-rome0000"}, namespaces=by_name(former))
    assert plan.delete == [former]
    assert plan.status["a-rome0000"].phase == "Pending"
    assert plan.create == {}


def test_map_status_omits_empty_messages_and_an_empty_map() -> None:
    assert map_status({}) == {}
    status = map_status({"b": TwinStatus("b-x", "Ready"), "a": TwinStatus("a", "Conflict", "taken")})
    assert status == {
        "mappings": {
            "a": {"remoteNamespace": "a", "phase": "Conflict", "message": "taken"},
            "b": {"remoteNamespace": "b-x", "phase": "Ready"},
        }
    }


def test_a_map_speaks_only_for_the_consumer_whose_tenant_namespace_holds_it() -> None:
    assert consumer_of_map({"metadata": {"name": ROME, "namespace": names.tenant_namespace(ROME)}}) == [ROME]
    assert consumer_of_map({"metadata": {"name": NAPLES, "namespace": names.tenant_namespace(ROME)}}) == []


def test_twins_of_needs_both_labels() -> None:
    only_peer = namespace("t", names.peer_labels(ROME))  # a tenant namespace, say: not a twin
    assert twins_of([only_peer, twin("s", home="s"), twin("n", consumer=NAPLES, home="n")], consumer_id=ROME) == [
        twin("s", home="s")
    ]


_name = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True)
_existing = st.one_of(
    st.builds(lambda n: namespace(n, {"team": "x"}), _name),
    st.builds(lambda n, h, d: twin(n, home=h, deleting=d), _name, _name, st.booleans()),
    st.builds(lambda n, h: twin(n, consumer=NAPLES, home=h), _name, _name),
    st.builds(lambda n: namespace(n, names.peer_labels(ROME)), _name),
)


@given(mappings=st.dictionaries(_name, _name, max_size=6), existing=st.lists(_existing, max_size=8))
def test_only_this_consumers_twins_are_ever_deleted_and_nothing_existing_is_created(
    mappings: dict[str, str], existing: list[Obj]
) -> None:
    namespaces = by_name(*existing)
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces=namespaces)
    labels = names.REMOTE_CLUSTER_ID, names.ORIGIN_NAMESPACE
    for doomed in plan.delete:
        assert doomed["metadata"]["labels"].get(labels[0]) == ROME
        assert labels[1] in doomed["metadata"]["labels"]
        assert not doomed["metadata"].get("deletionTimestamp")
    assert not set(plan.create.values()) & set(namespaces)
    assert len(set(plan.create.values()) | set(plan.keep.values())) == len(plan.create) + len(plan.keep)
    assert set(mappings) <= set(plan.status)
    for home, kept in plan.keep.items():
        assert namespaces[kept]["metadata"]["labels"][names.ORIGIN_NAMESPACE] == home


def test_twins_carry_the_psa_labels_of_the_level_and_a_change_is_one_patch() -> None:
    baseline = twin("web-rome", home="web")
    labels = baseline["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "baseline"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    assert twin_patch(baseline, level="baseline", annotations={}) is None
    patch = twin_patch(baseline, level="restricted", annotations={})
    assert patch == {"metadata": {"labels": pod_security_labels("restricted")}}
    patched = namespace("web-rome", labels | patch["metadata"]["labels"])
    assert twin_patch(patched, level="restricted", annotations={}) is None
    assert is_twin_of(patched, consumer_id=ROME)  # the twin labels are left alone


OFFER = IngressOffer(classes=("public", "internal"), hosts=("*.rome.example.com",), annotations=("a.io/b",))


def test_a_twin_tells_its_admission_the_block_and_the_ingress_offer_and_nothing_when_there_is_none() -> None:
    block = ipaddress.ip_network("10.244.0.0/16")
    assert twin_annotations(peer_pods=block, ingress=OFFER) == {
        names.PEER_PODS: "10.244.0.0/16",
        names.INGRESS_CLASSES: "public,internal",
        names.INGRESS_HOSTS: "*.rome.example.com",
        names.INGRESS_ANNOTATIONS: "a.io/b",
    }
    # Nothing known, nothing offered: no annotation at all (the policies read an absent one as "none").
    assert twin_annotations(peer_pods=None, ingress=IngressOffer()) == {}
    made = twin_namespace_manifest(
        name="web-rome", consumer_id=ROME, home_namespace="web", level="baseline", annotations={names.PEER_PODS: "x"}
    )
    assert made["metadata"]["annotations"] == {names.PEER_PODS: "x"}


annotation_values = st.dictionaries(st.sampled_from(TWIN_ANNOTATIONS), st.sampled_from(["a", "b,c", "10.0.0.0/8"]))


@given(annotation_values, annotation_values, st.dictionaries(st.sampled_from(["other", "team"]), st.just("v")))
def test_a_twin_patch_brings_our_annotations_to_the_wanted_ones_and_leaves_others_alone(
    current: dict[str, str], wanted: dict[str, str], others: dict[str, str]
) -> None:
    made = twin("web-rome", home="web")
    made["metadata"]["annotations"] = current | others
    patch = twin_patch(made, level="baseline", annotations=wanted)
    if current == wanted:
        assert patch is None
        return
    assert patch is not None
    merged = dict(made["metadata"]["annotations"])
    for key, value in patch["metadata"]["annotations"].items():  # a merge patch: null removes
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    assert merged == wanted | others
    assert "labels" not in patch["metadata"]
