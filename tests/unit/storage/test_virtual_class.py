"""Where a claim of the virtual class gets its volume, and what is made for it (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from liqo.api import names
from liqo.api.storage import STORAGE_NAMESPACE, VIRTUAL_CLASS, VIRTUAL_PROVISIONER
from liqo.api.volumes import DEFAULT_CLASS, PROVISIONED_BY, SELECTED_NODE, Refusal, node_of
from liqo.kube.objects import Obj
from liqo.storage import volumes
from liqo.storage.volumes import MakeBacking, MakeVolume

PROVIDERS = {"liqo-milan": "milan-id"}
LOCAL = frozenset({"rome-real-1", "liqo-milan"})


def claim(node: str | None = "liqo-milan", **spec: Any) -> Obj:
    annotations = {SELECTED_NODE: node} if node else {}
    return {
        "metadata": {"name": "data-web-0", "namespace": "shop", "uid": "u-1", "annotations": annotations},
        "spec": {
            "storageClassName": VIRTUAL_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }
        | spec,
        "status": {"phase": "Pending"},
    }


def decide(obj: Obj, **given: Any) -> volumes.Decision:
    seen: dict[str, Any] = {
        "providers": PROVIDERS,
        "local_nodes": LOCAL,
        "default_class": "local",
        "backing": None,
        "backing_volume": None,
        "exists": False,
    }
    return volumes.decide(obj, **(seen | given))


def real_volume() -> Obj:
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["rome-real-1"]}]}]}}  # fmt: skip
    return {
        "metadata": {"name": "pvc-b-1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"namespace": STORAGE_NAMESPACE, "name": "pvc-u-1"},
            "storageClassName": "local",
            "persistentVolumeReclaimPolicy": "Delete",
            "local": {"path": "/var/lib/liqo-volumes/pvc-b-1"},
            "nodeAffinity": affinity,
            "mountOptions": ["noatime"],
        },
    }


def test_a_claim_placed_on_a_virtual_node_gets_a_volume_bound_to_it_that_only_that_node_can_use() -> None:
    decision = decide(claim())
    assert isinstance(decision, MakeVolume)
    volume = decision.volume
    assert volume["metadata"]["name"] == "pvc-u-1"
    assert volume["metadata"]["annotations"] == {PROVISIONED_BY: VIRTUAL_PROVISIONER}
    assert volume["metadata"]["labels"] == {names.REMOTE_CLUSTER_ID: "milan-id"}
    assert volume["spec"]["claimRef"] | {} == {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "shop", "name": "data-web-0", "uid": "u-1"
    }  # fmt: skip
    assert node_of(volume) == "liqo-milan"
    assert volume["spec"]["csi"] == {"driver": VIRTUAL_PROVISIONER, "volumeHandle": "milan-id/shop/data-web-0"}
    assert (volume["spec"]["capacity"], volume["spec"]["storageClassName"]) == ({"storage": "1Gi"}, VIRTUAL_CLASS)
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete"


@pytest.mark.parametrize(
    ("obj", "given"),
    [
        (claim(node=None), {}),  # waiting for its first consumer
        (claim(), {"exists": True}),
        (claim(volumeName="pvc-u-1"), {}),
        (claim() | {"status": {"phase": "Bound"}}, {}),
        ({**claim(), "metadata": claim()["metadata"] | {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, {}),
    ],
)
def test_nothing_is_made_before_a_node_is_chosen_nor_twice(obj: Obj, given: dict[str, Any]) -> None:
    assert decide(obj, **given) is None


def test_a_claim_on_a_local_node_is_held_by_a_real_claim_of_the_default_class_then_bound_to_its_source() -> None:
    local = claim(node="rome-real-1")
    first = decide(local)
    assert isinstance(first, MakeBacking)
    backing = first.claim
    assert (backing["metadata"]["name"], backing["metadata"]["namespace"]) == ("pvc-u-1", STORAGE_NAMESPACE)
    assert backing["metadata"]["annotations"] == {SELECTED_NODE: "rome-real-1", volumes.BACKS: "shop/data-web-0"}
    assert backing["spec"] == {
        "storageClassName": "local",
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    assert decide(local, backing=backing) is None  # until its provisioner binds it
    made = decide(local, backing=backing, backing_volume=real_volume())
    assert isinstance(made, MakeVolume)
    spec = made.volume["spec"]
    assert spec["local"] == {"path": "/var/lib/liqo-volumes/pvc-b-1"}
    assert node_of(made.volume) == "rome-real-1"
    assert spec["mountOptions"] == ["noatime"]
    assert (spec["storageClassName"], spec["claimRef"]["name"], spec["claimRef"]["uid"]) == (
        VIRTUAL_CLASS, "data-web-0", "u-1"
    )  # fmt: skip
    assert "csi" not in spec


def test_a_node_gone_since_is_cleared_for_the_scheduler_and_a_cluster_without_default_class_says_so() -> None:
    gone = decide(claim(node="old-node"))
    assert isinstance(gone, Refusal)
    assert gone.reschedule
    assert gone.reason == "UnknownNode"
    none = decide(claim(node="rome-real-1"), default_class=None)
    assert isinstance(none, Refusal)
    assert not none.reschedule
    assert none.reason == "NoLocalClass"


def test_a_claim_that_asks_for_existing_data_is_refused() -> None:
    refused = decide(claim(dataSource={"kind": "PersistentVolumeClaim", "name": "other"}))
    assert isinstance(refused, Refusal)
    assert refused.reason == "NotSupported"


def test_the_local_class_is_the_default_one_never_the_virtual_class() -> None:
    def cls(name: str, default: bool) -> Obj:
        return {"metadata": {"name": name, "annotations": {DEFAULT_CLASS: "true"} if default else {}}}

    assert volumes.local_class([cls(VIRTUAL_CLASS, True), cls("slow", False), cls("local", True)]) == "local"
    assert volumes.local_class([cls(VIRTUAL_CLASS, True), cls("slow", False)]) is None


def test_a_real_claim_is_orphaned_once_the_claim_it_backs_is_gone_or_another() -> None:
    backing = volumes.backing_claim(claim(), node="rome-real-1", storage_class="local")
    mine = claim()
    other = claim() | {"metadata": claim()["metadata"] | {"uid": "u-2"}}
    assert not volumes.orphaned(backing, claims={"shop/data-web-0": mine}, volume_exists=False)
    assert volumes.orphaned(backing, claims={}, volume_exists=False)
    assert volumes.orphaned(backing, claims={"shop/data-web-0": other}, volume_exists=False)
    assert not volumes.orphaned(backing, claims={}, volume_exists=True)  # the PV's release deletes it
