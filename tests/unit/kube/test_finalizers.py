from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.finalizers import (
    add_finalizer,
    has_finalizer,
    remove_finalizer,
    with_finalizer,
    without_finalizer,
)
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS, NAMESPACES
from tests.unit.fakeapi import FakeApi

OURS = "liqo.io/cleanup"
finalizer_names = st.sampled_from([OURS, "kubernetes", "foregroundDeletion", "example.com/other"])
lists = st.lists(finalizer_names, max_size=5)


def obj(finalizers: list[str] | None, *, namespace: str | None = "ns") -> Obj:
    meta: Obj = {"name": "x", "resourceVersion": "42"}
    if namespace:
        meta["namespace"] = namespace
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"metadata": meta}


def merged(target: Obj, patch: Obj | None) -> list[str]:
    """The finalizers after a merge patch (which replaces the whole list)."""
    if patch is None:
        return list(target["metadata"].get("finalizers") or [])
    assert patch["metadata"]["resourceVersion"] == target["metadata"]["resourceVersion"]
    return list(patch["metadata"]["finalizers"])


@given(lists, finalizer_names)
def test_adding_appends_once_and_keeps_the_others(finalizers: list[str], finalizer: str) -> None:
    target = obj(finalizers)
    patch = with_finalizer(target, finalizer=finalizer)
    assert (patch is None) == has_finalizer(target, finalizer=finalizer) == (finalizer in finalizers)
    assert merged(target, patch) == (finalizers if finalizer in finalizers else [*finalizers, finalizer])


@given(lists, finalizer_names)
def test_removing_drops_every_copy_and_keeps_the_others_in_order(finalizers: list[str], finalizer: str) -> None:
    target = obj(finalizers)
    patch = without_finalizer(target, finalizer=finalizer)
    assert (patch is None) == (finalizer not in finalizers)
    assert merged(target, patch) == [f for f in finalizers if f != finalizer]


@given(lists.filter(lambda fs: OURS not in fs))
def test_removing_what_was_added_gives_the_list_back(finalizers: list[str]) -> None:
    added = obj(merged(obj(finalizers), with_finalizer(obj(finalizers), finalizer=OURS)))
    assert has_finalizer(added, finalizer=OURS)
    assert merged(added, without_finalizer(added, finalizer=OURS)) == finalizers


def test_no_finalizers_at_all() -> None:
    assert not has_finalizer(obj(None), finalizer=OURS)
    assert without_finalizer(obj(None), finalizer=OURS) is None
    assert with_finalizer(obj(None), finalizer=OURS) == {"metadata": {"finalizers": [OURS], "resourceVersion": "42"}}


def patches(api: FakeApi) -> list[tuple[str, str | None, Any, str | None]]:
    """Every patch sent: (resource, name, body, namespace)."""
    return [(call.plural, call.name, call.body, call.namespace) for call in api.called("patch")]


async def test_add_writes_only_when_missing() -> None:
    api = FakeApi()
    stored = api.put(CONFIGMAPS, obj(["kubernetes"]))
    version = stored["metadata"]["resourceVersion"]
    assert await add_finalizer(api, CONFIGMAPS, stored, finalizer=OURS)
    assert patches(api) == [
        ("configmaps", "x", {"metadata": {"finalizers": ["kubernetes", OURS], "resourceVersion": version}}, "ns")
    ]
    assert not await add_finalizer(api, CONFIGMAPS, obj([OURS]), finalizer=OURS)
    assert len(patches(api)) == 1


async def test_remove_writes_only_when_present() -> None:
    api = FakeApi()
    await remove_finalizer(api, NAMESPACES, obj(["kubernetes"], namespace=None), finalizer=OURS)
    assert patches(api) == []
    stored = api.put(NAMESPACES, obj([OURS, "kubernetes"], namespace=None))
    version = stored["metadata"]["resourceVersion"]
    await remove_finalizer(api, NAMESPACES, stored, finalizer=OURS)
    assert patches(api) == [
        ("namespaces", "x", {"metadata": {"finalizers": ["kubernetes"], "resourceVersion": version}}, None)
    ]


async def test_removing_from_an_object_gone_is_done() -> None:
    await remove_finalizer(FakeApi(), CONFIGMAPS, obj([OURS]), finalizer=OURS)


async def test_adding_to_an_object_gone_is_an_error() -> None:
    with pytest.raises(NotFoundError):
        await add_finalizer(FakeApi(), CONFIGMAPS, obj([]), finalizer=OURS)


async def test_a_stale_object_is_a_conflict_both_ways() -> None:
    api = FakeApi()
    read = api.put(CONFIGMAPS, obj([OURS]))
    stale = {"metadata": dict(read["metadata"])}  # what a cache read, before someone else wrote
    api.put(CONFIGMAPS, read)  # the object has been modified since
    with pytest.raises(ConflictError):
        await add_finalizer(api, CONFIGMAPS, {"metadata": stale["metadata"] | {"finalizers": []}}, finalizer=OURS)
    with pytest.raises(ConflictError):
        await remove_finalizer(api, CONFIGMAPS, stale, finalizer=OURS)
