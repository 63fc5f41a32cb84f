"""``liqoctl offload``/``unoffload``: input checks, the wait's verdict and refusals, without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from liqo.api import names
from liqo.cli.main import app
from liqo.kube.errors import api_error
from liqo.kube.objects import Obj
from liqo.offloading.operations import (
    OffloadingError,
    check_strategies,
    describe,
    offloading_manifest,
    parse_selector,
    refusal,
    report,
    verdict,
)

HOME = "rome0000-1111-2222-3333-444455556666"


def test_selectors_parse_and_bad_pairs_are_refused() -> None:
    assert parse_selector([]) == {}
    assert parse_selector(["region=north", "gpu=", "a=b=c"]) == {"region": "north", "gpu": "", "a": "b=c"}
    assert parse_selector(["x=1", "x=1"]) == {"x": "1"}
    for bad, words in ((["novalue"], "must be key=value"), (["=v"], "must be key=value"), (["x=1", "x=2"], "twice")):
        with pytest.raises(OffloadingError, match=words):
            parse_selector(bad)


def test_the_manifest_checks_its_strategies() -> None:
    manifest = offloading_manifest(
        namespace="shop",
        pod_offloading_strategy="Remote",
        namespace_mapping_strategy="EnforceSameName",
        cluster_selector={"region": "north"},
    )
    assert manifest["metadata"] == {"name": names.OFFLOADING, "namespace": "shop"}
    assert manifest["spec"] == {
        "podOffloadingStrategy": "Remote",
        "namespaceMappingStrategy": "EnforceSameName",
        "clusterSelector": {"region": "north"},
    }
    every = offloading_manifest(
        namespace="shop", pod_offloading_strategy="Local", namespace_mapping_strategy="DefaultName", cluster_selector={}
    )
    assert "clusterSelector" not in every["spec"]  # absent, never an empty map (SSA would make it null)
    with pytest.raises(OffloadingError, match="--pod-offloading-strategy must be Local, Remote or LocalAndRemote"):
        check_strategies(pod_offloading_strategy="remote", namespace_mapping_strategy=None)
    with pytest.raises(OffloadingError, match="--namespace-mapping-strategy"):
        check_strategies(pod_offloading_strategy=None, namespace_mapping_strategy="Same")
    check_strategies(pod_offloading_strategy=None, namespace_mapping_strategy=None)


def test_a_refusal_keeps_only_the_reason() -> None:
    body = {
        "reason": "Invalid",
        "message": 'NamespaceOffloading.offloading.liqo.io "offloading" is invalid: <nil>: Invalid value: ...',
        "details": {"causes": [{"reason": "FieldValueInvalid", "message": "namespaceMappingStrategy is immutable"}]},
    }
    error = api_error(422, body)
    assert refusal(error) == "namespaceMappingStrategy is immutable"
    assert refusal(api_error(422, {"message": "bad"})) == "bad"


def offloading(status: Obj | None, *, selector: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"name": names.OFFLOADING, "namespace": "shop"},
        "spec": {"namespaceMappingStrategy": "DefaultName", "clusterSelector": selector or {}},
        "status": status or {},
    }


def condition(cluster: str, phase: str, message: str = "") -> Obj:
    found = {"clusterID": cluster, "clusterName": cluster, "remoteNamespace": "shop-rome0000", "phase": phase}
    return found | ({"message": message} if message else {})


def status(phase: str, *conditions: Obj, twin: str = "shop-rome0000") -> Obj:
    return {"remoteNamespaceName": twin, "offloadingPhase": phase, "remoteNamespacesConditions": list(conditions)}


def test_the_wait_ignores_a_status_written_for_another_spec() -> None:
    assert verdict(offloading(None), home_cluster_id=HOME, expected={"milan"}) == "wait"
    stale_set = offloading(status("Ready", condition("naples", "Ready")))
    assert verdict(stale_set, home_cluster_id=HOME, expected={"milan"}) == "wait"
    stale_twin = offloading(status("Ready", condition("milan", "Ready"), twin="shop"))
    assert verdict(stale_twin, home_cluster_id=HOME, expected={"milan"}) == "wait"


def test_the_wait_ends_on_ready_and_fails_clearly() -> None:
    ready = offloading(status("Ready", condition("milan", "Ready")))
    assert verdict(ready, home_cluster_id=HOME, expected={"milan"}) == "ready"
    progressing = offloading(status("InProgress", condition("milan", "Pending", "creating")))
    assert verdict(progressing, home_cluster_id=HOME, expected={"milan"}) == "wait"
    erring = offloading(status("SomeFailed", condition("milan", "Error", "cannot reach"), condition("n", "Ready")))
    assert verdict(erring, home_cluster_id=HOME, expected={"milan", "n"}) == "wait"  # transient: retried
    conflict = offloading(status("SomeFailed", condition("milan", "Conflict", "namespace shop exists")))
    with pytest.raises(OffloadingError, match="milan Conflict \\(namespace shop exists\\)"):
        verdict(conflict, home_cluster_id=HOME, expected={"milan"})
    with pytest.raises(OffloadingError, match="failed"):
        verdict(offloading(status("AllFailed", condition("milan", "Error"))), home_cluster_id=HOME, expected={"milan"})
    nothing = offloading(status("NoClusterSelected"), selector={"region": "mars"})
    with pytest.raises(OffloadingError, match="no provider matches the cluster selector"):
        verdict(nothing, home_cluster_id=HOME, expected=set())


def test_report_and_describe() -> None:
    summary = report(offloading(status("InProgress", condition("milan", "Pending", "creating"))))
    assert summary["phase"] == "InProgress"
    assert summary["remoteNamespace"] == "shop-rome0000"
    assert summary["clusters"] == [
        {
            "clusterID": "milan",
            "clusterName": "milan",
            "remoteNamespace": "shop-rome0000",
            "phase": "Pending",
            "message": "creating",
        }
    ]
    assert describe(offloading(None)) == "no status yet: no provider reported yet"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["offload", "namespace", "shop", "--pod-offloading-strategy", "Everywhere"], "--pod-offloading-strategy"),
        (["offload", "namespace", "shop", "--namespace-mapping-strategy", "x"], "--namespace-mapping-strategy"),
        (["offload", "namespace", "shop", "--selector", "novalue"], "must be key=value"),
    ],
)
def test_bad_input_is_refused_before_connecting(tmp_path: Path, args: list[str], message: str) -> None:
    # The kubeconfig does not exist: a refusal naming the input proves that nothing was attempted.
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
