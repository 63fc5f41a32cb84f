"""Claims of the virtual class copied into twins with the provider's class, and nothing a peer may not say (pure)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.storage import CLASS_ANNOTATION, VIRTUAL_CLASS, ClassOffer, claim_refusals, offered_classes
from liqo.api.volumes import SELECTED_NODE
from liqo.kube.objects import Obj
from liqo.sharing.virtualnodes import virtual_node
from liqo.virtualkubelet.forge import claims


def claim(*, node: str = "liqo-milan", annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {
        "metadata": {
            "name": "data-web-0",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {SELECTED_NODE: node, "pv.kubernetes.io/bind-completed": "yes"} | (annotations or {}),
        },
        "spec": {
            "storageClassName": VIRTUAL_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}},
            "volumeName": "pvc-u-1",
        }
        | spec,
    }


def test_only_claims_of_the_virtual_class_placed_on_this_node_are_copied() -> None:
    assert claims.reflectable(claim(), node_name="liqo-milan")
    assert not claims.reflectable(claim(node="liqo-naples"), node_name="liqo-milan")
    assert not claims.reflectable(claim(storageClassName="local"), node_name="liqo-milan")
    copy_of_a_copy = claim()
    copy_of_a_copy["metadata"]["labels"] = {names.ORIGIN: "naples"}
    assert not claims.reflectable(copy_of_a_copy, node_name="liqo-milan")


def test_the_copy_names_the_providers_class_and_says_nothing_a_peer_may_not() -> None:
    copy = claims.reflected_claim(claim(), namespace="shop-rome", home_cluster_id="rome", storage_class="local")
    assert copy["metadata"] == {
        "name": "data-web-0",
        "namespace": "shop-rome",
        "labels": {"app": "web", **names.peer_labels("rome"), names.ORIGIN: "rome"},
    }
    assert copy["spec"] == {
        "storageClassName": "local",
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    # What the provider's admission checks, its own rules agree with.
    assert claim_refusals(copy["spec"], storage=(ClassOffer(name="local", capacity=Decimal(10**10)),)) == []


def test_the_class_is_the_one_offered_or_the_one_the_claim_names_among_several() -> None:
    assert claims.provider_class(claim(), ["local"]) == "local"
    assert claims.provider_class(claim(), ["fast", "local"]) is None
    assert claims.provider_class(claim(annotations={CLASS_ANNOTATION: "fast"}), ["fast", "local"]) == "fast"
    assert claims.provider_class(claim(annotations={CLASS_ANNOTATION: "gold"}), ["fast", "local"]) is None
    assert claims.provider_class(claim(), []) is None


def test_a_claim_without_a_class_is_not_copied_and_says_why_at_home() -> None:
    assert claims.refusal(claim(), ["local"], provider="milan") is None
    assert claims.refusal(claim(), [], provider="milan") == (
        f"milan offers no storage: its pods cannot have volumes of class {VIRTUAL_CLASS}"
    )
    assert claims.refusal(claim(), ["fast", "local"], provider="milan") == (
        f"milan offers several classes (fast, local): annotate the claim {CLASS_ANNOTATION}: <one of them>"
    )
    named = claim(annotations={CLASS_ANNOTATION: "gold"})
    assert claims.refusal(named, ["fast", "local"], provider="milan") == (
        f"{CLASS_ANNOTATION}: milan does not offer class 'gold' (it offers fast, local)"
    )


def test_a_copy_is_never_updated_nor_replaced_the_providers_binder_writes_on_it() -> None:
    copy = claims.reflected_claim(claim(), namespace="shop-rome", home_cluster_id="rome", storage_class="local")
    bound = copy | {"spec": copy["spec"] | {"volumeName": "pvc-x"}}
    assert claims.claim_is_current(bound, copy)
    assert not claims.never_replaced(bound, copy)


def test_the_virtual_node_says_the_classes_of_the_offers_storage_list_only() -> None:
    offer = {
        "metadata": {"name": "milan-id"},
        "spec": {
            "labels": {"zone": "north", "storage.liqo.io/gold": "true"},  # the provider's say: not a class offered
            "storage": [{"class": "local", "capacity": "10Gi"}],
        },
    }
    vn = virtual_node(offer, provider_id="milan-id", foreign_cluster="milan")
    assert offered_classes(vn["spec"]["labels"]) == ("local",)
    assert vn["spec"]["labels"]["zone"] == "north"
