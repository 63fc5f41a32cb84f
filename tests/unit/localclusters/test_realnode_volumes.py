"""The node-local volumes' decisions: which claim gets a volume where, which is refused and why, which is reclaimed."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import volumes as volume_protocol
from liqo.api.quantity import parse_quantity
from liqo.api.volumes import Refusal
from liqo.localclusters.realnodes import volumes
from liqo.localclusters.realnodes.volumes import Provision

GI = Decimal(2**30)
CLASS = volumes.storage_class()
NODES = {"rome-real-1": 10 * GI, "rome-real-2": 10 * GI}


def claim(
    *, size: str = "1Gi", node: str | None = "rome-real-1", modes: tuple[str, ...] = ("ReadWriteOnce",), **spec: Any
) -> dict[str, Any]:
    annotations = {volume_protocol.SELECTED_NODE: node} if node else {}
    return {
        "metadata": {"name": "data", "namespace": "shop", "uid": "1234", "annotations": annotations},
        "spec": {"storageClassName": volumes.STORAGE_CLASS, "accessModes": list(modes),
                 "resources": {"requests": {"storage": size}}, **spec},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def decide(c: dict[str, Any], *, used: dict[str, Decimal] | None = None, exists: bool = False) -> Any:
    return volumes.decide(c, storage_class=CLASS, capacity=NODES, used=used or {}, exists=exists)


def test_a_claim_gets_a_volume_on_its_selected_node_bound_to_it_alone() -> None:
    decision = decide(claim(size="3Gi"))
    assert isinstance(decision, Provision)
    assert (decision.node, decision.name) == ("rome-real-1", "pvc-1234")
    spec = decision.volume["spec"]
    assert spec["capacity"] == {"storage": "3Gi"}
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "shop",
                                "name": "data", "uid": "1234"}  # fmt: skip
    assert spec["local"] == {"path": "/var/lib/liqo-volumes/pvc-1234"}
    assert volume_protocol.node_of(decision.volume) == "rome-real-1"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert decision.volume["metadata"]["annotations"][volume_protocol.PROVISIONED_BY] == volumes.PROVISIONER


def test_nothing_before_the_scheduler_picks_a_node_nor_twice_nor_for_a_bound_claim() -> None:
    assert decide(claim(node=None)) is None
    assert decide(claim(), exists=True) is None
    assert decide(claim(volumeName="pvc-other")) is None
    bound = claim() | {"status": {"phase": "Bound"}}
    assert decide(bound) is None


def test_an_immediate_class_places_the_claim_on_the_node_with_most_room() -> None:
    immediate = CLASS | {"volumeBindingMode": "Immediate"}
    decision = volumes.decide(
        claim(node=None), storage_class=immediate, capacity=NODES, used={"rome-real-1": GI}, exists=False
    )
    assert isinstance(decision, Provision)
    assert decision.node == "rome-real-2"


def test_a_full_node_or_a_node_that_is_not_real_sends_the_claim_back_to_the_scheduler() -> None:
    full = decide(claim(size="2Gi"), used={"rome-real-1": 9 * GI})
    assert isinstance(full, Refusal)
    assert full.reschedule
    assert full.reason == "NodeStorageFull"
    assert "1Gi of 10Gi left" in full.message
    assert "asks 2Gi" in full.message
    fake = decide(claim(node="rome-node-1"))
    assert isinstance(fake, Refusal)
    assert fake.reschedule
    assert "not a real node" in fake.message


def test_what_a_directory_cannot_be_is_refused_where_it_stays() -> None:
    cases = {
        "AccessModeNotSupported": claim(modes=("ReadWriteMany",)),
        "VolumeModeNotSupported": claim(volumeMode="Block"),
        "DataSourceNotSupported": claim(dataSource={"kind": "PersistentVolumeClaim", "name": "other"}),
        "SelectorNotSupported": claim(selector={"matchLabels": {"a": "b"}}),
    }
    for reason, c in cases.items():
        decision = decide(c)
        assert isinstance(decision, Refusal), reason
        assert (decision.reason, decision.reschedule) == (reason, False)


def test_classes_of_another_provisioner_are_not_ours() -> None:
    other = {"metadata": {"name": "fast"}, "provisioner": "ebs.csi.aws.com"}
    assert volumes.is_ours(claim(), {volumes.STORAGE_CLASS: CLASS})
    assert not volumes.is_ours(claim(storageClassName="fast"), {"fast": other})
    assert not volumes.is_ours(claim(storageClassName="missing"), {volumes.STORAGE_CLASS: CLASS})


@given(sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=12))
def test_volumes_made_one_after_another_never_overfill_a_node(sizes: list[int]) -> None:
    made: list[dict[str, Any]] = []
    for index, size in enumerate(sizes):
        c = claim(size=f"{size}Gi")
        c["metadata"]["uid"] = str(index)
        decision = decide(c, used=volumes.usage(made))
        if isinstance(decision, Provision):
            made.append(decision.volume)
    taken = volumes.usage(made).get("rome-real-1", Decimal(0))
    assert taken <= NODES["rome-real-1"]
    assert taken == sum(parse_quantity(v["spec"]["capacity"]["storage"]) for v in made)


def test_released_volumes_of_ours_with_delete_are_reclaimed_and_no_others() -> None:
    decision = decide(claim())
    assert isinstance(decision, Provision)
    volume = decision.volume | {"status": {"phase": "Released"}}
    assert volumes.reclaimable(volume)
    assert not volumes.reclaimable(decision.volume | {"status": {"phase": "Bound"}})
    retained = volume | {"spec": volume["spec"] | {"persistentVolumeReclaimPolicy": "Retain"}}
    assert not volumes.reclaimable(retained)
    foreign = volume | {"metadata": {"name": "pv-1", "annotations": {volume_protocol.PROVISIONED_BY: "other"}}}
    assert not volumes.reclaimable(foreign)
