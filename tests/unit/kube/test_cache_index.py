"""liqo.kube.cache.Index: an informer's objects by a value, kept by its events, without scans."""

from __future__ import annotations

import asyncio

from liqo.kube.cache import Changes, Index
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi


def event(name: str, about: str | None) -> Obj:
    involved = {"kind": "Pod", "name": about} if about else {}
    return {"metadata": {"name": name, "namespace": "t"}, "involvedObject": involved}


def _about(obj: Obj) -> str | None:
    name = obj["involvedObject"].get("name")
    return str(name) if name else None


async def test_an_index_follows_adds_updates_and_deletes() -> None:
    api = FakeApi((EVENTS, event("a", "web-1")), (EVENTS, event("b", "web-1")), (EVENTS, event("c", None)))
    informer = Informer(client=api, resource=EVENTS, namespace="t")
    index = Index(informer, by=_about)
    seen: list[list[str]] = []
    # A handler registered after the index reads it current.
    informer.add_handler(HandlerFuncs(add=lambda obj: seen.append(index.keys("web-1"))))
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_synced(5)
        assert sorted(index.keys("web-1")) == ["t/a", "t/b"]
        assert index.keys("web-2") == []
        assert seen[0] == ["t/a"]  # at a's add, the index already holds it (and not yet b)

        api.put(EVENTS, event("b", "web-2"))  # MODIFIED
        api.remove(EVENTS, "a", namespace="t")
        api.put(EVENTS, event("d", "web-2"))

        async def moved() -> bool:
            return index.keys("web-1") == [] and sorted(index.keys("web-2")) == ["t/b", "t/d"]

        await eventually(moved, timeout=5, message="the index follows the events")
        assert index._keys.keys() == {"web-2"}  # an emptied value is dropped, not kept as an empty set
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_index_made_on_a_synced_informer_holds_its_objects() -> None:
    api = FakeApi((EVENTS, event("a", "web-1")))
    informer = Informer(client=api, resource=EVENTS, namespace="t")
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_synced(5)
        assert Index(informer, by=_about).keys("web-1") == ["t/a"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_changes_wake_a_waiter_once_its_condition_holds_and_a_bound_ends_the_wait() -> None:
    """Read-your-writes: a caller that wrote waits for its cache to show the write, event by event, no polling."""
    api = FakeApi((EVENTS, event("a", "web-1")))
    informer = Informer(client=api, resource=EVENTS, namespace="t")
    changes = Changes(informer)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_synced(5)
        assert await changes.until(lambda: "t/a" in informer.store, timeout=0)  # holds already: no wait at all
        waiting = asyncio.create_task(changes.until(lambda: "t/c" in informer.store, timeout=5))
        api.put(EVENTS, event("b", "web-1"))  # not yet
        api.put(EVENTS, event("c", "web-1"))
        assert await waiting
        assert not await changes.until(lambda: "t/never" in informer.store, timeout=0.05)
        # A waiter that gave up takes no one's wake-up with it.
        late = asyncio.create_task(changes.until(lambda: "t/d" in informer.store, timeout=5))
        api.put(EVENTS, event("d", "web-1"))
        assert await late
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
