"""Where a claim of the virtual class ``liqo`` gets its volume: decided from what is seen, and the objects made (pure).

The class waits for its first consumer, so the scheduler decides first: it places the claim's first pod and
writes that node on the claim (:data:`~liqo.api.volumes.SELECTED_NODE`). Then:

- **a virtual node**: the volume is on that node's provider. The claim's copy in the twin (the virtual
  kubelet's, :mod:`liqo.virtualkubelet.forge.claims`) is provisioned there by the class the provider offers;
  here the claim is bound to a PV that only stands for it (:func:`virtual_volume`): node affinity to that
  virtual node, a CSI source no kubelet mounts, whose handle names the provider, namespace and claim. The pod
  and any pod that later uses the claim can run on that virtual node only: a claim never moves between
  clusters silently, a pod placed elsewhere waits, and the scheduler says it conflicts with the volume's
  node affinity;
- **a node of this cluster**: a real claim of the cluster's default class, in :data:`STORAGE_NAMESPACE`, with
  the same selected node (:func:`backing_claim`); once its provisioner binds it, the claim of class ``liqo``
  is bound to a PV of the same source and node affinity (:func:`local_volume`). It is a plain local volume,
  and the real claim is what holds it;
- **anything else**: the node is unknown (gone since): the selected node is cleared, with an Event, and the
  scheduler picks again.

Each PV is named after its claim's uid and pre-bound to it, as an external provisioner makes them; a released
one is deleted with its real claim (:func:`reclaimable`, whose provisioner then deletes the data).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.storage import STORAGE_NAMESPACE, VIRTUAL_CLASS, VIRTUAL_PROVISIONER
from liqo.api.volumes import (
    DEFAULT_CLASS,
    SELECTED_NODE,
    Refusal,
    node_affinity,
    pending,
    pre_bound_volume,
    selected_node,
    volume_name,
)
from liqo.kube.objects import Obj

BACKS = "storage.liqo.io/backs"
"""On a real claim in :data:`STORAGE_NAMESPACE`: the ``namespace/name`` of the claim of class ``liqo`` it holds
the data of."""
_NOT_A_SOURCE = frozenset(
    {"capacity", "accessModes", "claimRef", "persistentVolumeReclaimPolicy", "storageClassName", "volumeMode",
     "nodeAffinity", "mountOptions", "volumeAttributesClassName"}
)  # fmt: skip
"""A PV's spec fields that are not its volume source (what a local volume copies from the real PV)."""


@dataclass(frozen=True)
class MakeVolume:
    """Create this PV, pre-bound to the claim."""

    volume: Obj
    where: str
    """Said in the Event: the provider or the node that holds the data."""


@dataclass(frozen=True)
class MakeBacking:
    """Create this real claim in :data:`STORAGE_NAMESPACE`, which a local class's provisioner serves."""

    claim: Obj


Decision = MakeVolume | MakeBacking | Refusal | None


def is_virtual(claim: Mapping[str, Any]) -> bool:
    """Whether a claim is of the virtual class."""
    return bool((claim.get("spec") or {}).get("storageClassName") == VIRTUAL_CLASS)


def local_class(classes: Iterable[Mapping[str, Any]]) -> str | None:
    """The cluster's default StorageClass, which holds local volumes of the virtual class (never itself)."""
    defaults = sorted(
        cls["metadata"]["name"]
        for cls in classes
        if (cls["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"
        and cls["metadata"]["name"] != VIRTUAL_CLASS
    )
    return defaults[0] if defaults else None


def decide(
    claim: Mapping[str, Any],
    *,
    providers: Mapping[str, str],
    local_nodes: frozenset[str],
    default_class: str | None,
    backing: Mapping[str, Any] | None,
    backing_volume: Mapping[str, Any] | None,
    exists: bool,
    reclaim: str = "Delete",
) -> Decision:
    """What to do for a claim of the virtual class now.

    Args:
        claim: the claim.
        providers: virtual node name → its provider's cluster ID.
        local_nodes: the names of this cluster's own nodes.
        default_class: :func:`local_class`.
        backing: the claim's real claim in :data:`STORAGE_NAMESPACE`, if made.
        backing_volume: the PV bound to ``backing``, once bound.
        exists: whether the claim's PV is already there.
        reclaim: the virtual class's reclaim policy.
    """
    meta, spec = claim.get("metadata", {}), claim.get("spec") or {}
    if exists or meta.get("deletionTimestamp") or spec.get("volumeName"):
        return None
    if not pending(claim):
        return None
    node = selected_node(claim)
    if node is None:
        return None  # until the scheduler places its first pod
    if spec.get("dataSource") or spec.get("dataSourceRef") or spec.get("selector"):
        return Refusal("NotSupported", f"a claim of class {VIRTUAL_CLASS} starts empty and selects no volume")
    provider = providers.get(node)
    if provider is not None:
        return MakeVolume(virtual_volume(claim, node=node, provider_id=provider, reclaim=reclaim), where=node)
    if node not in local_nodes:
        return Refusal("UnknownNode", f"node {node} is neither a node of this cluster nor a virtual node",
                       reschedule=True)  # fmt: skip
    if default_class is None:
        return Refusal(
            "NoLocalClass",
            f"this cluster has no default StorageClass to hold volumes of class {VIRTUAL_CLASS} on its own node {node}",
        )
    if backing is None:
        return MakeBacking(backing_claim(claim, node=node, storage_class=default_class))
    if backing_volume is None:
        return None  # until the local class's provisioner binds the real claim
    return MakeVolume(local_volume(claim, backing_volume, node=node, reclaim=reclaim), where=node)


def virtual_volume(claim: Mapping[str, Any], *, node: str, provider_id: str, reclaim: str) -> Obj:
    """The PV standing here for a volume on ``provider_id``, usable on its virtual node ``node`` only."""
    meta = claim["metadata"]
    return pre_bound_volume(
        claim,
        provisioner=VIRTUAL_PROVISIONER,
        storage_class=VIRTUAL_CLASS,
        reclaim=reclaim,
        source={
            "csi": {
                "driver": VIRTUAL_PROVISIONER,
                "volumeHandle": f"{provider_id}/{meta['namespace']}/{meta['name']}",
            }
        },
        affinity=node_affinity(node),
        labels={names.REMOTE_CLUSTER_ID: provider_id},
    )


def backing_claim(claim: Mapping[str, Any], *, node: str, storage_class: str) -> Obj:
    """The real claim that holds, on this cluster's ``node``, the data of a claim of the virtual class."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    requests = (spec.get("resources") or {}).get("requests") or {}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": volume_name(claim),
            "namespace": STORAGE_NAMESPACE,
            "annotations": {SELECTED_NODE: node, BACKS: f"{meta['namespace']}/{meta['name']}"},
        },
        "spec": {
            "storageClassName": storage_class,
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "resources": {"requests": {"storage": requests.get("storage", "0")}},
        },
    }


def local_volume(claim: Mapping[str, Any], backing_volume: Mapping[str, Any], *, node: str, reclaim: str) -> Obj:
    """The PV of a claim of the virtual class on this cluster's ``node``: the real volume's source and affinity."""
    real = backing_volume.get("spec") or {}
    volume = pre_bound_volume(
        claim,
        provisioner=VIRTUAL_PROVISIONER,
        storage_class=VIRTUAL_CLASS,
        reclaim=reclaim,
        source={key: value for key, value in real.items() if key not in _NOT_A_SOURCE},
        affinity=real.get("nodeAffinity") or node_affinity(node),
    )
    if real.get("mountOptions"):
        volume["spec"]["mountOptions"] = real["mountOptions"]
    return volume


def orphaned(backing: Mapping[str, Any], *, claims: Mapping[str, Mapping[str, Any]], volume_exists: bool) -> bool:
    """Whether a real claim in :data:`STORAGE_NAMESPACE` holds data for nobody.

    So it is when the claim it backs is gone (or is another claim of that name) and no PV of ours stands for it.
    """
    if volume_exists or backing.get("metadata", {}).get("deletionTimestamp"):
        return False
    backed = claims.get((backing["metadata"].get("annotations") or {}).get(BACKS, ""))
    return backed is None or volume_name(backed) != backing["metadata"]["name"]
