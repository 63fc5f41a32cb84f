"""What an informer's cache keeps of each object: a declared projection, applied at decode (pure).

Why: a cache holds every object of its scope for the life of the process, and an object as the API server
returns it is mostly fields no controller here reads. A pod carries its ``managedFields`` (one entry per
writer: the ReplicaSet controller, the scheduler, the kubelet), env, volumes, probes, status conditions and
container statuses; a manager that only counts what pods request needs a few hundred bytes of it. Kept
whole, 1 000 pods cost a cache tens of MiB, and every cache of a pod-heavy cluster pays it again.

So every cache drops the server's bookkeeping (:func:`strip_bookkeeping`: ``metadata.managedFields`` and
``kubectl``'s last-applied-configuration annotation, which nothing here reads), and an informer may declare
a :class:`Projection`: the paths its users read, everything else dropped — client-go's ``SetTransform``, but
declared as data, so that two users of one shared informer get the union of their paths and a test can
check that each user answers the same on the projected object as on the whole one.

A projected object is a partial copy. Whatever is read from a cache must therefore never be written back
whole (a PUT of the cached object, or a modified copy of it): the write would drop every field the
projection left out. Writes built from a cached object are patches of the fields they change, with the
cached ``resourceVersion`` as precondition when a concurrent change matters, or go through a fresh GET.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from liqo.kube.objects import Obj

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation ``kubectl apply`` stores the whole applied manifest in."""

ITEMS = "[]"
"""A path segment's suffix (``spec.containers[].resources``) for "every element of this list"."""

_Tree = dict[str, "_Tree | None"]
"""A compiled projection: the keys kept at each level; None keeps the whole value."""


def strip_bookkeeping(obj: Obj) -> Obj:
    """``obj`` without ``metadata.managedFields`` and the last-applied annotation (pure; ``obj`` is not changed).

    Applied to every object every cache keeps, projected or not.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    annotations: dict[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
    applied = LAST_APPLIED in annotations
    if "managedFields" not in meta and not applied:
        return obj
    meta = {key: value for key, value in meta.items() if key != "managedFields"}
    if applied:
        meta["annotations"] = {key: value for key, value in annotations.items() if key != LAST_APPLIED}
    return obj | {"metadata": meta}


@dataclass(frozen=True)
class Projection:
    """The paths of an object a cache keeps, each with everything under it.

    A path is dotted keys (``status.phase``); a segment ending in ``[]`` (``spec.containers[].resources``)
    descends into every element of a list. ``metadata`` should always be kept whole: handlers key objects
    by it, finalizer patches need its ``finalizers`` and ``resourceVersion``, and without
    ``managedFields`` (always dropped) it is small.

    A value whose shape is not the declared one (a list where a mapping was declared, or a scalar) is kept
    whole: a projection only ever drops what it knows to be unread.
    """

    paths: frozenset[str]

    def __or__(self, other: Projection) -> Projection:
        """What either keeps."""
        return Projection(self.paths | other.paths)

    @cached_property
    def _tree(self) -> _Tree:
        return _compile(self.paths)

    def __call__(self, obj: Obj) -> Obj:
        """``obj`` with only the declared paths, the server's bookkeeping dropped (pure; idempotent)."""
        projected: Obj = _project(strip_bookkeeping(obj), self._tree)
        return projected


def keep(*paths: str) -> Projection:
    """A projection keeping ``paths`` (see :class:`Projection` for their form)."""
    return Projection(frozenset(paths))


def widest(a: Projection | None, b: Projection | None) -> Projection | None:
    """What a cache serving users of ``a`` and ``b`` keeps: their union; None (everything) if either is."""
    return None if a is None or b is None else a | b


def project(projection: Projection | None, obj: Obj) -> Obj:
    """``obj`` as a cache with ``projection`` keeps it (None: whole but for the server's bookkeeping)."""
    return strip_bookkeeping(obj) if projection is None else projection(obj)


def _segments(path: str) -> list[str]:
    segments: list[str] = []
    for part in path.split("."):
        name = part.removesuffix(ITEMS)
        if not name:
            raise ValueError(f"projection path {path!r} has an empty segment")
        segments.append(name)
        if part.endswith(ITEMS):
            segments.append(ITEMS)
    return segments


def _compile(paths: Iterable[str]) -> _Tree:
    """The tree of ``paths``; a path that is a prefix of another keeps the whole subtree."""
    tree: _Tree = {}
    for path in sorted(paths, key=lambda p: len(_segments(p))):
        node: _Tree | None = tree
        segments = _segments(path)
        for index, segment in enumerate(segments):
            assert node is not None
            last = index == len(segments) - 1
            if segment in node and node[segment] is None:
                break  # a shorter path keeps all of it already
            if (segment == ITEMS) != (ITEMS in node) and node:
                raise ValueError(f"projection path {path!r} declares both a list and a mapping at one place")
            if last:
                node[segment] = None
            else:
                node = node.setdefault(segment, {})
    return tree


def _project(value: Any, tree: _Tree | None) -> Any:
    if tree is None:
        return value
    if isinstance(value, Mapping) and ITEMS not in tree:
        return {key: _project(value[key], sub) for key, sub in tree.items() if key in value}
    if isinstance(value, list) and ITEMS in tree:
        return [_project(item, tree[ITEMS]) for item in value]
    return value
