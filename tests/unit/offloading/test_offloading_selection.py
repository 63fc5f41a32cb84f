"""The consumer's decisions about offloaded namespaces (liqo.offloading.consumer_namespaces), without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.errors import UnreachableError, api_error
from liqo.kube.objects import Obj
from liqo.offloading.consumer_namespaces import (
    RETRY_MAX,
    Provider,
    ProviderView,
    departure_condition,
    desired_mappings,
    map_up_to_date,
    namespace_map_manifest,
    new_conflicts,
    offloading_phase,
    offloading_status,
    provider_error,
    retry_delay,
    selected_providers,
    still_hosted,
    twin_condition,
    twin_name,
)

HOME = "rome0000-1111-2222-3333-444455556666"
MILAN = Provider("milan-id", "milan")
NAPLES = Provider("naples-id", "naples")


def virtual_node(provider: Provider, labels: dict[str, str] | None = None, *, deleting: bool = False) -> Obj:
    meta: Obj = {"name": f"liqo-{provider.cluster_name}", "namespace": names.tenant_namespace(provider.cluster_id)}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    spec_labels = (labels or {}) | {names.REMOTE_CLUSTER_ID: provider.cluster_id}
    return {
        "metadata": meta,
        "spec": {"clusterID": provider.cluster_id, "clusterName": provider.cluster_name, "labels": spec_labels},
    }


def offloading(
    namespace: str,
    *,
    selector: dict[str, str] | None = None,
    strategy: str = "DefaultName",
    deleting: bool = False,
    name: str = names.OFFLOADING,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"namespaceMappingStrategy": strategy, "clusterSelector": selector or {}}}


def view(mappings: dict[str, str] | None = None, status: dict[str, Obj] | None = None, **kwargs: Any) -> ProviderView:
    namespace_map = None
    if mappings is not None or status is not None:
        namespace_map = {
            "metadata": {"name": HOME, "namespace": names.tenant_namespace(HOME)},
            "spec": {"consumerClusterID": HOME, "mappings": mappings or {}},
            "status": {"mappings": status or {}},
        }
    return ProviderView(synced=kwargs.get("synced", True), error=kwargs.get("error", ""), namespace_map=namespace_map)


def test_twin_names_follow_the_mapping_strategy() -> None:
    assert twin_name(offloading("shop"), home_cluster_id=HOME) == "shop-rome0000"
    assert twin_name(offloading("shop", strategy="EnforceSameName"), home_cluster_id=HOME) == "shop"


def test_the_selector_needs_every_pair_and_empty_selects_all() -> None:
    nodes = [virtual_node(MILAN, {"region": "north"}), virtual_node(NAPLES, {"region": "south"})]
    assert selected_providers(nodes, {}) == [MILAN, NAPLES]
    assert selected_providers(nodes, {"region": "north"}) == [MILAN]
    assert selected_providers(nodes, {names.REMOTE_CLUSTER_ID: NAPLES.cluster_id}) == [NAPLES]
    assert selected_providers(nodes, {"region": "north", "gpu": "yes"}) == []


def test_a_deleted_virtual_node_selects_nothing_and_providers_are_unique() -> None:
    assert selected_providers([virtual_node(MILAN, deleting=True)], {}) == []
    assert selected_providers([virtual_node(MILAN), virtual_node(MILAN)], {}) == [MILAN]


def test_the_map_of_a_provider_holds_every_namespace_selecting_it() -> None:
    nodes = [virtual_node(MILAN, {"region": "north"}), virtual_node(NAPLES)]
    offloadings = [
        offloading("shop"),
        offloading("north", selector={"region": "north"}, strategy="EnforceSameName"),
        offloading("gone", deleting=True),
        offloading("odd", name="not-offloading"),
    ]
    assert desired_mappings(offloadings, nodes, provider_id=MILAN.cluster_id, home_cluster_id=HOME) == {
        "north": "north",
        "shop": "shop-rome0000",
    }
    assert desired_mappings(offloadings, nodes, provider_id=NAPLES.cluster_id, home_cluster_id=HOME) == {
        "shop": "shop-rome0000"
    }


def test_the_map_manifest_lives_in_our_tenant_namespace_on_the_provider() -> None:
    manifest = namespace_map_manifest(consumer_id=HOME, mappings={"shop": "shop-rome0000"})
    assert manifest["metadata"]["name"] == HOME
    assert manifest["metadata"]["namespace"] == names.tenant_namespace(HOME)
    assert manifest["spec"] == {"consumerClusterID": HOME, "mappings": {"shop": "shop-rome0000"}}
    assert map_up_to_date(manifest | {"status": {}}, manifest)
    other = namespace_map_manifest(consumer_id=HOME, mappings={})
    assert not map_up_to_date(other, manifest)
    assert not map_up_to_date(None, manifest)


@pytest.mark.parametrize(
    ("the_view", "phase", "words"),
    [
        (None, "Error", "no identity on milan"),
        (view(error="is unreachable: connection refused"), "Error", "milan is unreachable: connection refused"),
        (view(synced=False), "Pending", "connecting to milan"),
        (view(), "Pending", "adding the namespace"),
        (view({"shop": "shop-x"}), "Pending", "waiting for milan to create"),
        (view({"shop": "shop-x"}, {"shop": {"remoteNamespace": "shop", "phase": "Ready"}}), "Pending", "replace"),
        (view({"shop": "shop-x"}, {"shop": {"remoteNamespace": "shop-x", "phase": "Ready"}}), "Ready", ""),
        (
            view({"shop": "shop-x"}, {"shop": {"remoteNamespace": "shop-x", "phase": "Conflict", "message": "taken"}}),
            "Conflict",
            "taken",
        ),
    ],
)
def test_the_twin_condition_follows_what_the_provider_reports(
    the_view: ProviderView | None, phase: str, words: str
) -> None:
    condition = twin_condition(provider=MILAN, home="shop", twin="shop-x", view=the_view)
    assert condition["clusterID"] == MILAN.cluster_id
    assert condition["clusterName"] == "milan"
    assert condition["remoteNamespace"] == "shop-x"
    assert condition["phase"] == phase
    assert words in condition.get("message", "")
    assert words or "message" not in condition


def test_a_twin_is_gone_only_when_the_provider_says_nothing_of_it() -> None:
    assert still_hosted("shop", view({"shop": "shop-x"}))
    assert still_hosted("shop", view({}, {"shop": {"remoteNamespace": "shop-x", "phase": "Pending"}}))
    assert still_hosted("shop", view(synced=False))
    assert still_hosted("shop", view(error="timeout"))
    assert not still_hosted("shop", view())
    assert not still_hosted("shop", view({"other": "other-x"}))
    condition = departure_condition(
        provider=MILAN, home="shop", view=view({}, {"shop": {"remoteNamespace": "shop-x", "phase": "Pending"}})
    )
    assert condition["remoteNamespace"] == "shop-x"
    assert "delete" in condition["message"]


@pytest.mark.parametrize(
    ("phases", "deleting", "expected"),
    [
        ([], False, "NoClusterSelected"),
        (["Ready", "Ready"], False, "Ready"),
        (["Ready", "Pending"], False, "InProgress"),
        (["Ready", "Conflict"], False, "SomeFailed"),
        (["Pending", "Error"], False, "SomeFailed"),
        (["Conflict", "Error"], False, "AllFailed"),
        (["Ready"], True, "Terminating"),
        ([], True, "Terminating"),
    ],
)
def test_offloading_phase(phases: list[str], deleting: bool, expected: str) -> None:
    assert offloading_phase([{"phase": p} for p in phases], deleting=deleting) == expected


@given(st.lists(st.sampled_from(["Pending", "Ready", "Conflict", "Error"]), max_size=6))
def test_phase_properties(phases: list[str]) -> None:
    phase = offloading_phase([{"phase": p} for p in phases], deleting=False)
    assert (phase == "Ready") == (bool(phases) and set(phases) == {"Ready"})
    assert (phase == "AllFailed") == (bool(phases) and set(phases) <= {"Conflict", "Error"})


def test_status_lists_conditions_by_cluster_id() -> None:
    conditions = [
        {"clusterID": "b", "clusterName": "b", "remoteNamespace": "x", "phase": "Ready"},
        {"clusterID": "a", "clusterName": "a", "remoteNamespace": "x", "phase": "Pending"},
    ]
    status = offloading_status(twin="x", conditions=conditions, deleting=False)
    assert status["remoteNamespaceName"] == "x"
    assert status["offloadingPhase"] == "InProgress"
    assert [c["clusterID"] for c in status["remoteNamespacesConditions"]] == ["a", "b"]


def test_a_conflict_is_reported_once() -> None:
    conflict = {"clusterID": "a", "clusterName": "a", "phase": "Conflict", "message": "taken"}
    assert new_conflicts(None, [conflict]) == [conflict]
    assert new_conflicts({"remoteNamespacesConditions": [conflict]}, [conflict]) == []
    changed = conflict | {"message": "taken by someone else"}
    assert new_conflicts({"remoteNamespacesConditions": [conflict]}, [changed]) == [changed]
    assert new_conflicts(None, [conflict | {"phase": "Ready"}]) == []


def test_provider_errors_tell_unreachable_from_refused() -> None:
    assert provider_error(UnreachableError("peer: connection refused")) == "is unreachable: peer: connection refused"
    refused = provider_error(api_error(403, {"reason": "Forbidden", "message": "no"}))
    assert refused == "refused our NamespaceMap: 403 Forbidden: no"


@given(st.integers(min_value=0, max_value=10_000))
def test_retries_back_off_up_to_a_cap(failures: int) -> None:
    delay = retry_delay(failures)
    assert 0 < delay <= RETRY_MAX
    assert retry_delay(failures + 1) >= delay
