"""Storage a provider offers a consumer: per StorageClass, how much and with which access modes (pure).

Spelt once for every place that says it: the SharingPolicy (what the provider's admin offers), the
ResourceOffer (what the consumer is offered, and once accepted its storage budget), the virtual node's labels
(where the consumer's scheduler and users see it) and the provider's admission of the consumer's claims.

A class is named as the provider calls it. A consumer's claim in its twin names that class, and no alias
stands between the two to be kept in step or to be confused with a class of the same name the provider
does not offer; a provider that would rather not show a class's name makes a StorageClass for its peers.
Names are at most 63 characters: each becomes the name part of a label key (``storage.liqo.io/<class>``).

What a peer's claim may say (:data:`CLAIM_RULES`) is here too: the same rules judge a claim written by the
peer and the claim template of a pod it sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from liqo.api.names import LIQO_NAMESPACE
from liqo.api.quantity import QuantityError, format_quantity, parse_quantity

ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
"""Every access mode a claim may ask for (a PersistentVolumeClaim's ``spec.accessModes``)."""
DEFAULT_ACCESS_MODES = ("ReadWriteOnce",)
"""What an offered class allows unless the policy says otherwise: one node at a time, as most classes do."""
MAX_CLASS_NAME = 63
"""The longest class name that can be offered: the name part of a label key."""
MAX_CLASSES = 16
"""The most classes one policy offers (the schema's bound)."""
LABEL_PREFIX = "storage.liqo.io/"
"""A virtual node carries ``storage.liqo.io/<class>: "true"`` for each class its provider offers."""
VIRTUAL_CLASS = "liqo"
"""The consumer's StorageClass whose claims are provisioned where their first pod lands: on a provider, by the
class it offers; on a local node, by the cluster's default class."""
VIRTUAL_PROVISIONER = "virtual.storage.liqo.io"
"""The provisioner the virtual class names (the consumer's manager), and the CSI driver its PVs on providers name."""
CLASS_ANNOTATION = "storage.liqo.io/class"
"""On a claim of the virtual class: the provider's class to use when a provider offers more than one."""
STORAGE_NAMESPACE = LIQO_NAMESPACE
"""Where the consumer's manager keeps the real claims behind virtual-class claims on local nodes: liqo's own
namespace, which no peer and no user of the cluster writes in."""


@dataclass(frozen=True)
class ClassOffer:
    """One StorageClass offered: what the consumer's claims of it may hold together, and how they may mount."""

    name: str
    """The provider's StorageClass."""
    capacity: Decimal
    """What all the consumer's claims of this class, in all its twins, may request together (bytes)."""
    access_modes: tuple[str, ...] = DEFAULT_ACCESS_MODES
    """The access modes its claims may ask for."""


def class_offers(items: Iterable[Mapping[str, Any]] | None) -> tuple[ClassOffer, ...]:
    """The classes a ``storage`` list offers (a SharingPolicy's or a ResourceOffer's), in name order (pure).

    Raises:
        QuantityError: A capacity is not a quantity (the schemas refuse it; an offer read from a peer may say
            anything, and a budget must never be read from a field half understood).
        ValueError: An item without a class name, or an access mode that is none.
    """
    offers = []
    for item in items or ():
        name = item.get("class")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a storage item names no class: {dict(item)!r}")
        modes = tuple(item.get("accessModes") or DEFAULT_ACCESS_MODES)
        unknown = [mode for mode in modes if mode not in ACCESS_MODES]
        if unknown:
            raise ValueError(f"storage class {name}: unknown access modes {', '.join(map(str, unknown))}")
        capacity = item.get("capacity")
        if not isinstance(capacity, str | int) or isinstance(capacity, bool):
            raise QuantityError(f"storage class {name}: capacity {capacity!r} is not a quantity")
        offers.append(ClassOffer(name=name, capacity=parse_quantity(capacity), access_modes=modes))
    return tuple(sorted(offers, key=lambda offer: offer.name))


def storage_items(offers: Sequence[ClassOffer]) -> list[dict[str, Any]]:
    """``offers`` as the ``storage`` list of a ResourceOffer: what :func:`class_offers` reads back (pure)."""
    return [
        {
            "class": offer.name,
            "capacity": format_quantity(offer.capacity, resource="storage"),
            "accessModes": list(offer.access_modes),
        }
        for offer in offers
    ]


def storage_labels(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    """The virtual node's labels for an offer's ``storage`` list: one per class named there (pure).

    Unreadable items still name their class: a label says the provider offers it, the budget comes from the
    offer itself, and the provider judges every claim.
    """
    return {
        f"{LABEL_PREFIX}{item['class']}": "true"
        for item in items or ()
        if isinstance(item, Mapping) and isinstance(item.get("class"), str) and 0 < len(item["class"]) <= MAX_CLASS_NAME
    }


def offered_classes(labels: Mapping[str, str] | None) -> tuple[str, ...]:
    """The provider's classes a virtual node's labels say are offered (:func:`storage_labels`), sorted (pure)."""
    return tuple(
        sorted(key.removeprefix(LABEL_PREFIX) for key, value in (labels or {}).items()
               if key.startswith(LABEL_PREFIX) and value == "true")
    )  # fmt: skip


CLAIM_RULES = {
    "annotations": "a peer's claim carries no annotation: this cluster's provisioners and binder act on them"
    " (volume.kubernetes.io/selected-node has a volume made at once, on the node it names)",
    "storageClassName": "name one of the StorageClasses this provider offers you",
    "accessModes": "ask only for the access modes this provider offers for the class",
    "volumeName": "a peer's claim never binds a volume of this cluster by name",
    "selector": "a peer's claim never selects volumes of this cluster by label",
    "dataSource": "a peer's claim is never filled from this cluster's claims, snapshots or populators",
    "dataSourceRef": "a peer's claim is never filled from this cluster's claims, snapshots or populators",
    "volumeAttributesClassName": "volume attribute classes are not offered to peers",
}
"""What a peer's claim may not say, by field. :func:`claim_refusals` judges a ShadowPod's generic ephemeral volume
template with them (kube-controller-manager makes that claim with its own identity); a claim the peer writes in
its twin is judged by the API server's admission policy (``liqo.install.peerwrites.CLAIM_VALIDATIONS``)."""


def claim_refusals(spec: Mapping[str, Any], *, storage: Sequence[ClassOffer]) -> list[tuple[str, str]]:
    """What a peer's claim ``spec`` says that it may not, as (field, rule) pairs in field order (pure).

    The class must be named (the cluster's default class is not offered by being the default) and offered; the
    access modes must be among the class's; nothing may point at volumes, claims or classes of this cluster.
    How much the claim asks for is the budget's (:mod:`liqo.offloading.budget`), across all the peer's claims.
    """
    offered = {offer.name: offer for offer in storage}
    refusals = []
    name = spec.get("storageClassName")
    offer = offered.get(name) if isinstance(name, str) else None
    if offer is None:
        classes = ", ".join(offered) or "none"
        refusals.append(("storageClassName", f"{CLAIM_RULES['storageClassName']} ({classes}), got {name!r}"))
    modes = spec.get("accessModes")
    if offer is not None and (
        not isinstance(modes, list) or not modes or any(mode not in offer.access_modes for mode in modes)
    ):
        allowed = ", ".join(offer.access_modes)
        refusals.append(("accessModes", f"{CLAIM_RULES['accessModes']} ({allowed}), got {modes!r}"))
    for field in ("volumeName", "selector", "dataSource", "dataSourceRef", "volumeAttributesClassName"):
        if spec.get(field) not in (None, "", {}):
            refusals.append((field, CLAIM_RULES[field]))
    return refusals
