"""Node-local volumes for local clusters with real nodes: the default StorageClass and what its provisioner does (pure).

Why a provisioner of our own rather than rancher's local-path-provisioner: that one runs as a pod and makes
each directory through a helper pod of another image. Here a node's disk is a directory of this machine
(:meth:`~liqo.localclusters.realnodes.nodes.RealNode.inside`), so the provisioner is one more host process of
the local cluster, beside its image registry, that writes the directory itself: no image, no helper pod, no
CSI. The volumes are real all the same: a ``local`` PersistentVolume the real kubelet bind-mounts into the
container, whose data outlives the pod.

The flow is external-provisioner's for ``WaitForFirstConsumer`` (the class's binding mode):

1. the scheduler picks a node for the pod and writes it on the claim (:data:`SELECTED_NODE`);
2. the provisioner makes the claim's directory on that node and a PV with node affinity to it, pre-bound to
   the claim (``claimRef`` with its uid, so no other claim can take it);
3. kube-controller-manager binds the two, the scheduler binds the pod, the kubelet mounts the directory.

A claim the node cannot hold (beyond the node's capacity, or a node that is not real) loses its selected node,
with an Event saying why, and the scheduler picks again: the class's ``allowedTopologies`` already keeps it to
real nodes. A released volume of reclaim policy ``Delete`` loses its directory, then its PV. Each node holds
:data:`VOLUMES_DIR` up to the capacity the cluster was made with (``liqoctl local up --node-storage``): the
sum of its volumes' capacities, as the scheduler cannot count it for a provisioner without CSI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from liqo.api.quantity import format_quantity, parse_quantity
from liqo.api.volumes import (
    DEFAULT_CLASS,
    SELECTED_NODE,
    Refusal,
    node_affinity,
    node_of,
    pending,
    pre_bound_volume,
    provisioned_by,
    requested,
    volume_name,
)
from liqo.api.volumes import reclaimable as api_reclaimable
from liqo.kube.objects import Obj
from liqo.localclusters.realnodes.configs import NODE_LABEL

PROVISIONER = "local.liqo.io/node-disk"
STORAGE_CLASS = "local"
VOLUMES_DIR = "/var/lib/liqo-volumes"
"""Where a node keeps its volumes, seen inside the node (one directory per PV, named as the PV)."""
IDENTITY = "system:liqo-local:volume-provisioner"
"""The provisioner's user name (its client certificate's common name)."""
NODE_LOCAL_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})
"""A directory on one node serves the pods of that node only: these access modes, not the ``Many`` ones."""


def storage_class() -> Obj:
    """The cluster's default StorageClass: node-local, bound where the first pod lands, deleted with its claim."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": False,
        "allowedTopologies": [{"matchLabelExpressions": [{"key": NODE_LABEL, "values": ["real"]}]}],
    }


def rbac() -> list[Obj]:
    """What the provisioner may do: make and delete PVs, read claims and move their selected node, tell why."""
    rbac_group = "rbac.authorization.k8s.io"
    name = "liqo-local:volume-provisioner"
    role = {
        "apiVersion": f"{rbac_group}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["persistentvolumes"],
             "verbs": ["get", "list", "watch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": f"{rbac_group}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": rbac_group, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": rbac_group, "kind": "User", "name": IDENTITY}],
    }
    return [role, binding]


@dataclass(frozen=True)
class Provision:
    """Make the directory ``name`` on ``node``, then the PV ``volume``."""

    node: str
    name: str
    volume: Obj


def is_ours(obj: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether a claim or a PV is of a class this provisioner serves (any class naming :data:`PROVISIONER`)."""
    cls = classes.get(str((obj.get("spec") or {}).get("storageClassName") or ""))
    return cls is not None and cls.get("provisioner") == PROVISIONER


def usage(volumes: Iterable[Mapping[str, Any]]) -> dict[str, Decimal]:
    """Per node, the capacity of the volumes this provisioner made there (released ones too: their data stays)."""
    used: dict[str, Decimal] = {}
    for volume in volumes:
        node = node_of(volume)
        if node is not None and _provisioned_here(volume):
            capacity = parse_quantity(volume["spec"].get("capacity", {}).get("storage", "0"))
            used[node] = used.get(node, Decimal(0)) + capacity
    return used


def decide(
    claim: Mapping[str, Any],
    *,
    storage_class: Mapping[str, Any],
    capacity: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    exists: bool,
) -> Provision | Refusal | None:
    """What to do for a claim of our class: nothing yet, a volume to make, or why not.

    Args:
        claim: a claim of our class.
        storage_class: its class.
        capacity: the real nodes this provisioner serves and what each can hold.
        used: per node, what its volumes already take (:func:`usage`).
        exists: whether the claim's PV (:func:`volume_name`) is already there.
    """
    meta, spec = claim.get("metadata", {}), claim.get("spec") or {}
    if exists or meta.get("deletionTimestamp") or spec.get("volumeName"):
        return None
    if not pending(claim):
        return None
    node = (meta.get("annotations") or {}).get(SELECTED_NODE)
    if node is None:
        if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
            return None  # until a pod using it is scheduled
        node = least_used(capacity, used)
        if node is None:
            return Refusal("NoRealNode", "this cluster has no real node to hold volumes")
    if refusal := _unsupported(spec):
        return refusal
    if node not in capacity:
        return Refusal("NotARealNode", f"node {node} is not a real node of this cluster: it holds no volumes",
                       reschedule=True)  # fmt: skip
    wanted = requested(claim)
    free = capacity[node] - used.get(node, Decimal(0))
    if wanted > free:
        return Refusal(
            "NodeStorageFull",
            f"node {node} has {_bytes(free)} of {_bytes(capacity[node])} left for volumes; this claim asks "
            f"{_bytes(wanted)}",
            reschedule=True,
        )
    name = volume_name(claim)
    return Provision(node=node, name=name, volume=_volume(claim, name=name, node=node, storage_class=storage_class))


def least_used(capacity: Mapping[str, Decimal], used: Mapping[str, Decimal]) -> str | None:
    """The real node with the most room left (by name when equal): where an ``Immediate`` claim goes."""
    if not capacity:
        return None
    return min(sorted(capacity), key=lambda node: used.get(node, Decimal(0)) - capacity[node])


def _unsupported(spec: Mapping[str, Any]) -> Refusal | None:
    modes = set(spec.get("accessModes") or [])
    if not modes <= NODE_LOCAL_MODES:
        shared = ", ".join(sorted(modes - NODE_LOCAL_MODES))
        return Refusal("AccessModeNotSupported", f"a node-local volume serves one node: {shared} is not possible")
    if spec.get("volumeMode", "Filesystem") != "Filesystem":
        return Refusal("VolumeModeNotSupported", "only Filesystem volumes: a node's directory is no block device")
    if spec.get("dataSource") or spec.get("dataSourceRef"):
        return Refusal("DataSourceNotSupported", "volumes start empty: this class neither clones nor restores")
    if spec.get("selector"):
        return Refusal("SelectorNotSupported", "a provisioned volume cannot match a selector")
    return None


def _volume(claim: Mapping[str, Any], *, name: str, node: str, storage_class: Mapping[str, Any]) -> Obj:
    return pre_bound_volume(
        claim,
        provisioner=PROVISIONER,
        storage_class=storage_class["metadata"]["name"],
        reclaim=storage_class.get("reclaimPolicy") or "Delete",
        source={"local": {"path": f"{VOLUMES_DIR}/{name}"}},
        affinity=node_affinity(node),
    )


def reclaimable(volume: Mapping[str, Any]) -> bool:
    """Whether a PV is ours, released by its claim, and to be deleted with its data."""
    return api_reclaimable(volume, provisioner=PROVISIONER)


def _provisioned_here(volume: Mapping[str, Any]) -> bool:
    return provisioned_by(volume, PROVISIONER)


def _bytes(value: Decimal) -> str:
    return format_quantity(value, resource="storage")
