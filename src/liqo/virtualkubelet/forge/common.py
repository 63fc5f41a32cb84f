"""What every forge module shares: the envelope of a copy and the marker that makes it ours (pure).

Every copy carries ``names.ORIGIN`` (the cluster it comes from), and nothing unmarked is ever updated or
deleted: a twin may hold objects of the same name made by others.
"""

from __future__ import annotations

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.kube.resources import Resource

DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration", "kubernetes.io/ingress.class"})
"""Annotations never copied: kubectl's own (a copy would be applied back as the original) and the legacy
ingress class (a home class means nothing on the provider)."""


def reflected_by_default(obj: Obj) -> bool:
    """Whether a home object may be copied at all: not opted out, and not itself a copy or a pod token (pure).

    A namespace that is both a twin and offloaded onwards would otherwise bounce copies from cluster to cluster.
    """
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    if (meta.get("annotations") or {}).get(names.SKIP_REFLECTION) == "true":
        return False
    return names.ORIGIN not in labels and names.POD_TOKEN not in labels


def copy_metadata(obj: Obj, *, resource: Resource, namespace: str, home_cluster_id: str) -> Obj:
    """A copy's envelope in twin ``namespace``: same name, labels and annotations, marked as ours (pure)."""
    meta = obj["metadata"]
    labels = dict(meta.get("labels") or {}) | names.peer_labels(home_cluster_id) | {names.ORIGIN: home_cluster_id}
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in DROPPED_ANNOTATIONS}
    copy_meta: Obj = {"name": meta["name"], "namespace": namespace, "labels": labels}
    if kept:
        copy_meta["annotations"] = kept
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": copy_meta}


def is_copy(obj: Obj, *, origin: str) -> bool:
    """Whether ``obj`` is a copy this virtual kubelet keeps of an object of cluster ``origin`` (pure)."""
    return bool((obj["metadata"].get("labels") or {}).get(names.ORIGIN) == origin)


def same_metadata(current: Obj, desired: Obj) -> bool:
    """Whether a copy as read carries the labels and annotations ``desired`` gives it (pure)."""
    meta, wanted = current["metadata"], desired["metadata"]
    return bool(
        (meta.get("labels") or {}) == wanted.get("labels", {})
        and (meta.get("annotations") or {}) == wanted.get("annotations", {})
    )


PROVIDER_REFUSED = "ProviderRefused"
"""The reason said at home when the provider refused what we wrote (its admission, its validation, its verdict)."""
