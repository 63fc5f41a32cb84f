"""The provider's decisions about twin namespaces (liqo.offloading.provider_namespaces), without a cluster."""

from __future__ import annotations

import ipaddress
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.storage import ClassOffer
from liqo.kube.errors import ApiError, UnreachableError
from liqo.kube.objects import Obj
from liqo.offloading.provider_namespaces import (
    BUILTIN_RESERVED,
    TwinStatus,
    consumer_of_map,
    map_status,
    matches,
    naming_refusal,
    origin_of,
    parse_reserved,
    plan_twins,
    refusal,
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


def given_name(home: str, consumer: str = ROME) -> str:
    """The name this cluster gives the twin of ``home`` (``DefaultName``): ``shop`` → ``shop-rome0000``."""
    return names.twin_namespace(home, home_cluster_id=consumer)


def refused_choice(home: str, twin: str, allowed: str = "none") -> str:
    return (
        f"the twin of {home} is named {given_name(home)} on this cluster; {twin}, a name of the consumer's"
        f" choosing, is not allowed by this cluster's SharingPolicy for it (allowedTwinNames: {allowed})"
    )


def test_a_missing_twin_is_created() -> None:
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop-rome0000"}, namespaces={})
    assert plan.create == {"shop": "shop-rome0000"}
    assert plan.keep == {}
    assert plan.delete == []
    assert plan.status["shop"].phase == "Pending"


def test_an_existing_twin_of_that_home_is_kept_and_ready() -> None:
    shop = given_name("shop")
    plan = plan_twins(consumer_id=ROME, mappings={"shop": shop}, namespaces=by_name(twin(shop, home="shop")))
    assert plan.keep == {"shop": shop}
    assert plan.create == {}
    assert plan.status == {"shop": TwinStatus(shop, "Ready")}


def test_a_name_of_the_consumers_choosing_is_refused_naming_the_one_this_cluster_gives() -> None:
    """EnforceSameName, or a map written by the peer itself: ``com`` would answer ``google.com`` for every pod here."""
    mappings = {"com": "com", "cert-manager": "cert-manager", "shop": "payments", "web": given_name("web")}
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces={})
    assert plan.create == {"web": given_name("web")}
    for home in ("com", "cert-manager", "shop"):
        assert plan.status[home] == TwinStatus(mappings[home], "Conflict", refused_choice(home, mappings[home]))
    assert "com-rome0000" in plan.status["com"].message


def test_a_cut_name_is_the_name_this_cluster_gives_too() -> None:
    home = "a" * 63
    assert len(given_name(home)) == 63
    assert plan_twins(consumer_id=ROME, mappings={home: given_name(home)}, namespaces={}).create == {
        home: given_name(home)
    }


def test_the_policy_lets_a_consumer_choose_names_and_prefixes_it_allows_and_only_those() -> None:
    allowed = ("payments", "team-a-*")
    mappings = {"p": "payments", "q": "payments-2", "t": "team-a-web", "u": "team-b-web", "w": "team-a"}
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces={}, allowed_names=allowed)
    assert plan.create == {"p": "payments", "t": "team-a-web"}
    for home in ("q", "u", "w"):
        assert plan.status[home].message == refused_choice(home, mappings[home], "payments, team-a-*")


def test_reserved_names_are_never_given_whatever_the_policy_allows() -> None:
    patterns = (*BUILTIN_RESERVED, *parse_reserved("cert-manager"))
    mappings = {"a": "cert-manager", "b": "kube-x", "c": "liqo-x"}
    plan = plan_twins(
        consumer_id=ROME, mappings=mappings, namespaces={}, reserved_names=patterns, allowed_names=("c*", "k*", "l*")
    )
    assert plan.create == {}
    for home, name in mappings.items():
        assert plan.status[home] == TwinStatus(name, "Conflict", f"namespace {name} is reserved on this cluster")


def test_a_twin_whose_name_is_no_longer_allowed_is_deleted_and_reported_refused() -> None:
    """The policy tightened, the name was reserved since, or the twin predates these rules: it is not kept."""
    chosen = twin("team-a-web", home="web")
    plan = plan_twins(consumer_id=ROME, mappings={"web": "team-a-web"}, namespaces=by_name(chosen))
    assert (plan.create, plan.keep, plan.delete) == ({}, {}, [chosen])
    assert plan.status["web"] == TwinStatus("team-a-web", "Conflict", refused_choice("web", "team-a-web"))
    still = plan_twins(
        consumer_id=ROME, mappings={"web": "team-a-web"}, namespaces=by_name(chosen), allowed_names=("team-a-*",)
    )
    assert (still.keep, still.delete) == ({"web": "team-a-web"}, [])
    reserved_since = plan_twins(
        consumer_id=ROME,
        mappings={"web": "team-a-web"},
        namespaces=by_name(chosen),
        reserved_names=(*BUILTIN_RESERVED, "team-a-*"),
        allowed_names=("team-a-*",),
    )
    assert reserved_since.delete == [chosen]
    assert reserved_since.status["web"].message == "namespace team-a-web is reserved on this cluster"


def test_an_unrelated_namespace_is_a_conflict_and_never_touched() -> None:
    unrelated = namespace("shop", {"team": "payments"})
    plan = plan_twins(
        consumer_id=ROME, mappings={"shop": "shop"}, namespaces=by_name(unrelated), allowed_names=["shop"]
    )
    assert (plan.create, plan.keep, plan.delete) == ({}, {}, [])
    status = plan.status["shop"]
    assert status.phase == "Conflict"
    assert "already exists" in status.message
    assert "left untouched" in status.message


def test_a_name_of_the_consumers_choosing_says_nothing_of_whether_it_exists_here() -> None:
    """Refused before it is looked up: a peer cannot probe the provider's namespace names through the map."""
    there = plan_twins(consumer_id=ROME, mappings={"shop": "payments"}, namespaces=by_name(namespace("payments")))
    absent = plan_twins(consumer_id=ROME, mappings={"shop": "payments"}, namespaces={})
    assert (
        there.status
        == absent.status
        == {"shop": TwinStatus("payments", "Conflict", refused_choice("shop", "payments"))}
    )


def test_another_consumers_twin_is_a_conflict_and_never_deleted() -> None:
    theirs = twin("shop", consumer=NAPLES, home="shop")
    plan = plan_twins(consumer_id=ROME, mappings={"shop": "shop"}, namespaces=by_name(theirs), allowed_names=["shop"])
    assert plan.status["shop"].phase == "Conflict"
    assert "already exists" in plan.status["shop"].message
    assert plan.delete == []


def test_reserved_names_are_conflicts_even_when_free() -> None:
    builtin = ("kube-system", "kube-foo", "default", names.LIQO_NAMESPACE, "liqo-foo", "liqorice")
    for name in (*builtin, names.tenant_namespace(NAPLES)):
        assert matches(name, BUILTIN_RESERVED)
        plan = plan_twins(consumer_id=ROME, mappings={"x": name}, namespaces={})
        assert plan.status["x"] == TwinStatus(name, "Conflict", f"namespace {name} is reserved on this cluster")
        assert plan.create == {}
    for name in ("shop", "kube", "defaults", "my-liqo", "cert-manager"):
        assert not matches(name, BUILTIN_RESERVED), name


def test_the_providers_own_reserved_names_and_prefixes_are_conflicts() -> None:
    patterns = (*BUILTIN_RESERVED, *parse_reserved("cert-manager, monitoring,team-*"))
    mappings = {"a": "cert-manager", "b": "monitoring", "c": "team-x", "d": "team", "e": "kube-x", "f": "shop"}
    # Every name allowed by the policy (the attack is a name of the consumer's choosing): reserved ones still refused.
    allowed = ("cert-manager", "monitoring", "team*", "kube-x", "shop")
    plan = plan_twins(
        consumer_id=ROME, mappings=mappings, namespaces={}, reserved_names=patterns, allowed_names=allowed
    )
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


@given(st.text(max_size=80), st.lists(st.text(max_size=8), max_size=3))
def test_any_wanted_name_is_either_planned_for_creation_or_refused_with_a_reason(name: str, allowed: list[str]) -> None:
    plan = plan_twins(consumer_id=ROME, mappings={"home": name}, namespaces={}, allowed_names=allowed)
    if name in plan.create.values():
        assert valid_name(name)
        assert not matches(name, BUILTIN_RESERVED)
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
    shop = given_name("shop")
    plan = plan_twins(
        consumer_id=ROME, mappings={"shop": shop}, namespaces=by_name(twin(shop, home="shop", deleting=True))
    )
    assert (plan.create, plan.keep, plan.delete) == ({}, {}, [])
    assert plan.status["shop"].phase == "Pending"
    assert "being deleted" in plan.status["shop"].message


def test_two_homes_wanting_one_name_the_existing_twin_wins() -> None:
    # "a" with DefaultName and "a-rome0000" with EnforceSameName both want "a-rome0000".
    mappings = {"a": "a-rome0000", "a-rome0000": "a-rome0000"}
    existing = by_name(twin("a-rome0000", home="a-rome0000"))
    allowed = ["a-rome0000"]
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces=existing, allowed_names=allowed)
    assert plan.keep == {"a-rome0000": "a-rome0000"}
    assert plan.status["a"].phase == "Conflict"
    fresh = plan_twins(consumer_id=ROME, mappings=mappings, namespaces={}, allowed_names=allowed)
    assert fresh.create == {"a": "a-rome0000"}
    assert fresh.status["a-rome0000"].phase == "Conflict"


def test_a_former_twin_of_another_home_is_replaced() -> None:
    former = twin("a-rome0000", home="a")
    plan = plan_twins(
        consumer_id=ROME,
        mappings={"a-rome0000": "a-rome0000"},
        namespaces=by_name(former),
        allowed_names=["a-rome0000"],
    )
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


_pattern = st.one_of(_name, st.builds("{}*".format, st.from_regex(r"[a-z][a-z0-9-]{0,3}", fullmatch=True)))


@given(
    mappings=st.dictionaries(_name, _name, max_size=6),
    existing=st.lists(_existing, max_size=8),
    allowed=st.lists(_pattern, max_size=3),
)
def test_only_this_consumers_twins_are_ever_deleted_and_nothing_existing_is_created(
    mappings: dict[str, str], existing: list[Obj], allowed: list[str]
) -> None:
    namespaces = by_name(*existing)
    plan = plan_twins(consumer_id=ROME, mappings=mappings, namespaces=namespaces, allowed_names=allowed)
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


_HOMES = ("com", "cert-manager", "shop", "team-a-web", "web")
_CHOSEN = st.sampled_from(("com", "cert-manager", "payments", "team-a-web", "team-b", "shop", "web"))


@st.composite
def _maps_and_namespaces(draw: st.DrawFn) -> tuple[dict[str, str], list[Obj]]:
    """A map from a few homes to this cluster's name or one of the consumer's choosing, and namespaces in the way."""
    homes = draw(st.lists(st.sampled_from(_HOMES), unique=True, max_size=len(_HOMES)))
    mappings = {home: draw(st.one_of(st.just(given_name(home)), _CHOSEN)) for home in homes}
    wanted = sorted({*mappings.values(), *(given_name(home) for home in _HOMES)})
    existing = draw(
        st.lists(
            st.one_of(
                st.builds(lambda n, h, d: twin(n, home=h, deleting=d), st.sampled_from(wanted), _CHOSEN, st.booleans()),
                st.builds(lambda n: namespace(n, {"team": "x"}), st.sampled_from(wanted)),
            ),
            max_size=6,
        )
    )
    return mappings, existing


@given(
    case=_maps_and_namespaces(), allowed=st.lists(st.sampled_from(("payments", "team-a-*", "shop", "c*")), max_size=2)
)
def test_a_twin_name_neither_given_by_this_cluster_nor_allowed_is_never_created_nor_kept(
    case: tuple[dict[str, str], list[Obj]], allowed: list[str]
) -> None:
    mappings, existing = case
    namespaces = by_name(*existing)
    reserved_names = (*BUILTIN_RESERVED, "cert-manager")
    plan = plan_twins(
        consumer_id=ROME, mappings=mappings, namespaces=namespaces, reserved_names=reserved_names, allowed_names=allowed
    )
    for home, name in (plan.create | plan.keep).items():
        assert name == given_name(home) or matches(name, allowed)
        assert not matches(name, reserved_names)
    deleted = {ns["metadata"]["name"] for ns in plan.delete}
    for home, name in mappings.items():
        why = naming_refusal(
            consumer_id=ROME, home=home, twin=name, reserved_names=reserved_names, allowed_names=allowed
        )
        if (name != given_name(home) and not matches(name, allowed)) or matches(name, reserved_names):
            assert why
            assert plan.status[home] == TwinStatus(name, "Conflict", why)
            ours = namespaces.get(name)
            if ours is not None and is_twin_of(ours, consumer_id=ROME) and origin_of(ours) == home:
                assert name in deleted or ours["metadata"].get("deletionTimestamp")
        else:
            assert not why


OFFER = IngressOffer(classes=("public", "internal"), hosts=("*.rome.example.com",), annotations=("a.io/b",))


def test_a_twin_tells_its_admission_the_block_and_the_ingress_offer_and_nothing_when_there_is_none() -> None:
    block = ipaddress.ip_network("10.244.0.0/16")
    storage = (
        ClassOffer(name="local", capacity=Decimal(10 * 2**30)),
        ClassOffer(name="shared", capacity=Decimal(2**40), access_modes=("ReadWriteMany", "ReadOnlyMany")),
    )
    assert twin_annotations(peer_pods=block, ingress=OFFER, storage=storage) == {
        names.PEER_PODS: "10.244.0.0/16",
        names.INGRESS_CLASSES: "public,internal",
        names.INGRESS_HOSTS: "*.rome.example.com",
        names.INGRESS_ANNOTATIONS: "a.io/b",
        names.STORAGE_CLASSES: "local:ReadWriteOnce:10Gi,shared:ReadWriteMany|ReadOnlyMany:1Ti",
    }
    # Nothing known, nothing offered: no annotation at all (the policies read an absent one as "none").
    assert twin_annotations(peer_pods=None, ingress=IngressOffer(), storage=()) == {}
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
