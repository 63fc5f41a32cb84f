"""Finalizers: how a controller holds an object back from deletion until it has cleaned up after it.

A controller that must see a deletion through — even one that was not running when ``kubectl delete`` came —
adds its finalizer before it acts on an object, and removes it once the clean-up is done. Both writes are
merge patches of ``metadata.finalizers`` carrying the ``resourceVersion`` the decision was made on. A merge
patch replaces the whole list, so without that precondition a change of the list meanwhile (another
controller's finalizer added or removed) would be silently undone; with it the write fails with
ConflictError and the reconcile runs again on fresh state.

Removal tolerates NotFound: the object is gone, which is all removal was for. Addition does not: a reconcile
that wanted to hold an object that vanished must run again and see it gone.

The patches are built by pure functions (:func:`with_finalizer`, :func:`without_finalizer`) that answer None
when there is nothing to do, so that reconciling an object already in the right state costs no write.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

from liqo.kube.errors import NotFoundError
from liqo.kube.resources import Resource


class PatchClient(Protocol):
    """The client call finalizers need; :class:`~liqo.kube.client.KubeClient` provides it."""

    async def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None) -> dict[str, Any]:
        """Merge-patch an object."""


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return list((obj.get("metadata") or {}).get("finalizers") or [])


def has_finalizer(obj: Mapping[str, Any], *, finalizer: str) -> bool:
    """Whether ``obj`` holds ``finalizer``."""
    return finalizer in _finalizers(obj)


def with_finalizer(obj: Mapping[str, Any], *, finalizer: str) -> dict[str, Any] | None:
    """The merge patch appending ``finalizer`` to ``obj``'s, on ``obj``'s resourceVersion; None if it holds it."""
    finalizers = _finalizers(obj)
    if finalizer in finalizers:
        return None
    return _patch(obj, [*finalizers, finalizer])


def without_finalizer(obj: Mapping[str, Any], *, finalizer: str) -> dict[str, Any] | None:
    """The merge patch dropping ``finalizer`` from ``obj``'s, on ``obj``'s resourceVersion; None if it has none."""
    finalizers = _finalizers(obj)
    if finalizer not in finalizers:
        return None
    return _patch(obj, [f for f in finalizers if f != finalizer])


def _patch(obj: Mapping[str, Any], finalizers: list[str]) -> dict[str, Any]:
    return {"metadata": {"finalizers": finalizers, "resourceVersion": obj["metadata"]["resourceVersion"]}}


async def add_finalizer(client: PatchClient, resource: Resource, obj: Mapping[str, Any], *, finalizer: str) -> bool:
    """Add ``finalizer`` to ``obj`` (as read from a cache or the API) unless it holds it; whether it wrote.

    Raises:
        ConflictError: ``obj`` changed since it was read.
        NotFoundError: ``obj`` is gone.
    """
    patch = with_finalizer(obj, finalizer=finalizer)
    if patch is None:
        return False
    meta = obj["metadata"]
    await client.patch(resource, meta["name"], patch, namespace=meta.get("namespace"))
    return True


async def remove_finalizer(client: PatchClient, resource: Resource, obj: Mapping[str, Any], *, finalizer: str) -> None:
    """Remove ``finalizer`` from ``obj`` (as read from a cache or the API) if it holds it; done if ``obj`` is gone.

    Raises:
        ConflictError: ``obj`` changed since it was read.
    """
    patch = without_finalizer(obj, finalizer=finalizer)
    if patch is None:
        return
    meta = obj["metadata"]
    with contextlib.suppress(NotFoundError):
        await client.patch(resource, meta["name"], patch, namespace=meta.get("namespace"))
