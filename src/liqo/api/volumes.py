"""Kubernetes' protocol between a claim, its provisioner and its volume, as external provisioners speak it (pure).

Two provisioners of ours speak it: a local cluster's node-disk provisioner
(:mod:`liqo.localclusters.realnodes.volumes`) and the virtual storage class's (:mod:`liqo.storage`). Each
follows the same steps for a class that waits for its first consumer:

1. the scheduler picks a node for the claim's first pod and writes it on the claim (:data:`SELECTED_NODE`),
   kube-controller-manager names the provisioner expected to act (:data:`CLAIM_PROVISIONER`);
2. the provisioner makes a PV pre-bound to the claim (``claimRef`` with the claim's uid: no other claim can
   take it), named after that uid (:func:`volume_name`), annotated with who made it (:data:`PROVISIONED_BY`)
   and with node affinity to where its data is;
3. kube-controller-manager binds the two; once the claim is deleted the PV is ``Released`` and, with
   reclaim policy ``Delete``, left for the provisioner that made it to delete (:func:`reclaimable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from liqo.api.quantity import format_quantity, parse_quantity
from liqo.kube.objects import Obj

SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""Written on a claim by the scheduler: the node of its first pod, where its volume must be reachable."""
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
"""Written on a PV by the provisioner that made it: the one to delete it once released."""
CLAIM_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
"""Set on a claim by kube-controller-manager: which provisioner is to make its volume."""
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
"""A StorageClass annotated ``"true"`` serves the claims that name none."""
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Refusal:
    """A claim that cannot be provisioned as it is, said in a Warning Event.

    ``reschedule`` clears its selected node, for the scheduler to place its pod again.
    """

    reason: str
    message: str
    reschedule: bool = False


def volume_name(claim: Mapping[str, Any]) -> str:
    """The PV of a claim, named after the claim's uid as external-provisioner names them."""
    return f"pvc-{claim['metadata']['uid']}"


def selected_node(claim: Mapping[str, Any]) -> str | None:
    """The node the scheduler chose for the claim's first pod, if it chose one."""
    node = (claim.get("metadata", {}).get("annotations") or {}).get(SELECTED_NODE)
    return str(node) if node else None


def pending(claim: Mapping[str, Any]) -> bool:
    """Whether a claim waits for its volume (phase ``Pending``, which a claim just made has not written yet)."""
    return bool((claim.get("status") or {}).get("phase", "Pending") == "Pending")


def requested(claim: Mapping[str, Any]) -> Decimal:
    """The storage a claim asks for (0 when it names none, which the API refuses anyway)."""
    value = ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    return parse_quantity(value) if value is not None else Decimal(0)


def node_affinity(node: str) -> Obj:
    """A PV's node affinity to one node, by hostname."""
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def node_of(volume: Mapping[str, Any]) -> str | None:
    """The one node a PV's affinity names by hostname, if it names exactly one."""
    required = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == HOSTNAME and len(expression.get("values") or []) == 1:
                return str(expression["values"][0])
    return None


def pre_bound_volume(
    claim: Mapping[str, Any],
    *,
    provisioner: str,
    storage_class: str,
    reclaim: str,
    source: Obj,
    affinity: Obj,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """The PV a provisioner makes for ``claim``: its size and modes, bound to it alone, ``source`` its data."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    metadata: Obj = {"name": volume_name(claim), "annotations": {PROVISIONED_BY: provisioner}}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata,
        "spec": {
            "capacity": {"storage": format_quantity(requested(claim), resource="storage")},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": reclaim,
            "storageClassName": storage_class,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            **source,
            "nodeAffinity": affinity,
        },
    }


def provisioned_by(volume: Mapping[str, Any], provisioner: str) -> bool:
    """Whether ``provisioner`` made this PV."""
    return (volume.get("metadata", {}).get("annotations") or {}).get(PROVISIONED_BY) == provisioner


def reclaimable(volume: Mapping[str, Any], *, provisioner: str) -> bool:
    """Whether a PV ``provisioner`` made is released by its claim, and to be deleted with its data."""
    meta, spec = volume.get("metadata", {}), volume.get("spec") or {}
    return (
        provisioned_by(volume, provisioner)
        and (volume.get("status") or {}).get("phase") in ("Released", "Failed")
        and spec.get("persistentVolumeReclaimPolicy") == "Delete"
        and not meta.get("deletionTimestamp")
    )
