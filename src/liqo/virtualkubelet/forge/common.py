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


def not_skipped(obj: Obj) -> bool:
    """Whether the object's owner did not opt it out of reflection (``liqo.io/skip-reflection``) (pure)."""
    return (obj["metadata"].get("annotations") or {}).get(names.SKIP_REFLECTION) != "true"


def reflected_by_default(obj: Obj) -> bool:
    """Whether a home object may be copied at all: not opted out, and not itself a copy or a pod token (pure).

    A namespace that is both a twin and offloaded onwards would otherwise bounce copies from cluster to cluster.
    """
    labels = obj["metadata"].get("labels") or {}
    return not_skipped(obj) and names.ORIGIN not in labels and names.POD_TOKEN not in labels


def goes_back_to(obj: Obj, *, provider_id: str) -> bool:
    """Whether ``obj``, a copy or a pod token, came from ``provider_id`` and may go back there (pure).

    A twin that is offloaded back to the cluster it stands for (the controlling peer of a tether sends the
    tethered cluster's pods back to it: docs/modes.md) holds that cluster's copies and pod tokens, which its
    pods need there too. They return only to the cluster they came from, its own data (a pod token: the one
    it issued), never onward to a third.
    """
    labels = obj["metadata"].get("labels") or {}
    if names.POD_TOKEN in labels:
        return labels.get(names.REMOTE_CLUSTER_ID) == provider_id
    return names.ORIGIN in labels and labels[names.ORIGIN] == provider_id


def copy_metadata(obj: Obj, *, resource: Resource, namespace: str, home_cluster_id: str) -> Obj:
    """A copy's envelope in twin ``namespace``: same name, labels and annotations, marked as ours (pure).

    A pod token going back to its issuer (:func:`goes_back_to`) becomes a plain copy there: the token reflector
    of that hop did not write it.
    """
    meta = obj["metadata"]
    own = {k: v for k, v in (meta.get("labels") or {}).items() if k != names.POD_TOKEN}
    labels = own | names.peer_labels(home_cluster_id) | {names.ORIGIN: home_cluster_id}
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
