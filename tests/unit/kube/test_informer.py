from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import NoReturn, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, GoneError, UnreachableError
from liqo.kube.informer import (
    Added,
    Deleted,
    HandlerFuncs,
    Informer,
    Updated,
    apply_changes,
    diff,
    needs_relist,
)
from liqo.kube.objects import Obj
from liqo.kube.projection import keep
from liqo.kube.resources import PODS, Resource, object_key
from tests.unit.helpers import Signal


def pod(name: str, rv: str, *, namespace: str = "ns", uid: str = "") -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": uid or f"uid-{name}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> Obj:
    return event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv}})


# -- the pure re-list diff ----------------------------------------------------------------------------------


def test_diff_reports_adds_updates_and_deletes() -> None:
    cache = {"ns/a": pod("a", "1"), "ns/b": pod("b", "1"), "ns/c": pod("c", "1")}
    fresh = [pod("a", "1"), pod("b", "2"), pod("d", "3")]

    assert diff(cache, fresh) == [
        Deleted("ns/c", cache["ns/c"]),
        Updated("ns/b", cache["ns/b"], fresh[1]),
        Added("ns/d", fresh[2]),
    ]


def test_diff_turns_a_recreated_object_into_delete_and_add() -> None:
    cache = {"ns/a": pod("a", "1", uid="old")}
    fresh = [pod("a", "5", uid="new")]

    assert diff(cache, fresh) == [Deleted("ns/a", cache["ns/a"]), Added("ns/a", fresh[0])]


_keys = st.tuples(st.sampled_from(["", "ns1", "ns2"]), st.sampled_from(["a", "b", "c", "d"]))
_versions = st.tuples(st.sampled_from(["u1", "u2"]), st.integers(min_value=0, max_value=3))
_states = st.dictionaries(_keys, _versions, max_size=8)
State = dict[tuple[str, str], tuple[str, int]]


def _make(key: tuple[str, str], version: tuple[str, int]) -> Obj:
    # The resourceVersion names the uid too, so equal resourceVersions mean equal objects, as on a server.
    (namespace, name), (uid, n) = key, version
    meta: Obj = {"name": name, "uid": uid, "resourceVersion": f"{uid}-{n}"}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "data": {"n": n}}


@given(old=_states, new=_states)
def test_diff_properties(old: State, new: State) -> None:
    cache = {object_key(o): o for o in (_make(k, v) for k, v in old.items())}
    fresh = [_make(k, v) for k, v in new.items()]
    fresh_by_key = {object_key(o): o for o in fresh}

    changes = diff(cache, fresh)

    result = dict(cache)
    apply_changes(result, changes)
    assert result == fresh_by_key
    changed = {c.key for c in changes}
    for key, obj in cache.items():
        if key not in fresh_by_key:
            assert [c for c in changes if c.key == key] == [Deleted(key, obj)]
        elif fresh_by_key[key]["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]:
            assert key not in changed
        else:
            assert key in changed
    for key in fresh_by_key.keys() - cache.keys():
        assert [c for c in changes if c.key == key] == [Added(key, fresh_by_key[key])]
    assert diff(cache, list(cache.values())) == []


def test_needs_relist() -> None:
    assert needs_relist(GoneError(410, "Expired", "too old resource version"))
    assert needs_relist(ApiError(410, "Expired", "too old resource version"))
    too_large = {"details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large"}]}}
    assert needs_relist(ApiError(504, "Timeout", "Too large resource version", too_large))
    assert not needs_relist(ApiError(500, "InternalError", "etcd is sad"))
    assert not needs_relist(ApiError(403, "Forbidden", "no"))


# -- the run loop against a scripted client ------------------------------------------------------------------


class Hang:
    """A watch script step: block (as a quiet but healthy stream does) until cancelled."""


HANG = Hang()
Step = Obj | BaseException | Hang


async def _forever() -> NoReturn:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class FakeClient:
    """Plays scripted list results and watch streams; an exhausted script blocks, as an idle server would."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.lists: deque[tuple[list[Obj], str] | BaseException] = deque()
        self.watch_scripts: deque[list[Step]] = deque()
        self.list_calls = 0
        self.watch_rvs: list[str] = []
        self.watch_timeouts: list[int] = []
        self.hanging = 0

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        page_size: int,
        transform: Callable[[Obj], Obj],
    ) -> tuple[list[Obj], str]:
        self.list_calls += 1
        self.signal.fire()
        if not self.lists:
            await _forever()
        result = self.lists.popleft()
        if isinstance(result, BaseException):
            raise result
        items, version = result
        return [transform(item) for item in items], version

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        timeout_seconds: int,
        bookmarks: bool,
    ) -> AsyncIterator[Obj]:
        assert bookmarks
        self.watch_rvs.append(resource_version)
        self.watch_timeouts.append(timeout_seconds)
        script = self.watch_scripts.popleft() if self.watch_scripts else [HANG]
        for step in script:
            self.signal.fire()
            if isinstance(step, Hang):
                self.hanging += 1
                await _forever()
            if isinstance(step, BaseException):
                raise step
            yield step
        self.signal.fire()


class Recorder:
    """A handler that records (op, key, resourceVersion) and wakes the test."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.seen: list[tuple[str, str, str]] = []

    def _record(self, op: str, obj: Obj) -> None:
        self.seen.append((op, object_key(obj), obj["metadata"]["resourceVersion"]))
        self.signal.fire()

    def on_add(self, obj: Obj) -> None:
        self._record("add", obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        assert object_key(old) == object_key(new)
        self._record("update", new)

    def on_delete(self, obj: Obj) -> None:
        self._record("delete", obj)


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def signal() -> Signal:
    return Signal()


@pytest.fixture
def client(signal: Signal) -> FakeClient:
    return FakeClient(signal)


@pytest.fixture
def informer(client: FakeClient) -> Informer:
    return Informer(client=client, resource=PODS, namespace="ns", backoff_base=0.001, backoff_max=0.002)


async def test_list_then_watch_applies_events(signal: Signal, client: FakeClient, informer: Informer) -> None:
    recorder = Recorder(signal)
    informer.add_handler(recorder)
    client.lists.append(([pod("a", "1"), pod("b", "2")], "10"))
    client.watch_scripts.append(
        [
            event("MODIFIED", pod("a", "11")),
            event("ADDED", pod("c", "12")),
            event("MODIFIED", pod("c", "12")),  # same resourceVersion: no update
            event("DELETED", pod("b", "13")),
            event("DELETED", pod("zz", "14")),  # never cached: nothing to announce
            bookmark("15"),
            HANG,
        ]
    )

    async with running(informer):
        assert await informer.wait_synced(timeout=5)
        await signal.until(lambda: client.hanging == 1)

    assert recorder.seen == [
        ("add", "ns/a", "1"),
        ("add", "ns/b", "2"),
        ("update", "ns/a", "11"),
        ("add", "ns/c", "12"),
        ("delete", "ns/b", "13"),
    ]
    assert sorted(informer.store.keys()) == ["ns/a", "ns/c"]
    assert len(informer.store) == 2
    assert "ns/a" in informer.store
    a = informer.store.get("ns/a")
    assert a is not None
    assert a["metadata"]["resourceVersion"] == "11"
    assert informer.store.get("ns/b") is None
    assert informer.resource_version == "15"
    assert (informer.lists, informer.watches, informer.relists_on_gone) == (1, 1, 0)
    assert client.watch_rvs == ["10"]
    assert all(300 <= t < 600 for t in client.watch_timeouts)


async def test_gone_relists_and_synthesises_missed_deletes(
    signal: Signal, client: FakeClient, informer: Informer
) -> None:
    recorder = Recorder(signal)
    informer.add_handler(recorder)
    client.lists.append(([pod("a", "1"), pod("b", "1"), pod("c", "1")], "10"))
    client.watch_scripts.append([event("MODIFIED", pod("a", "11")), GoneError(410, "Expired", "too old")])
    # While we were away: b changed, c was deleted, d appeared; a is as we last saw it.
    client.lists.append(([pod("a", "11"), pod("b", "20"), pod("d", "21")], "30"))

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert recorder.seen[4:] == [("delete", "ns/c", "1"), ("update", "ns/b", "20"), ("add", "ns/d", "21")]
    assert sorted(informer.store.keys()) == ["ns/a", "ns/b", "ns/d"]
    assert (informer.lists, informer.watches, informer.relists_on_gone) == (2, 2, 1)
    assert client.watch_rvs == ["10", "30"]


async def test_unreachable_resumes_the_watch_from_the_last_rv(
    signal: Signal, client: FakeClient, informer: Informer
) -> None:
    recorder = Recorder(signal)
    informer.add_handler(recorder)
    client.lists.append(([pod("a", "1")], "10"))
    client.watch_scripts.append([event("MODIFIED", pod("a", "11")), bookmark("17"), UnreachableError("reset")])
    client.watch_scripts.append([event("MODIFIED", pod("a", "18")), HANG])

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert client.watch_rvs == ["10", "17"]
    assert (informer.lists, informer.watches, informer.relists_on_gone) == (1, 2, 0)
    assert client.list_calls == 1
    assert recorder.seen == [("add", "ns/a", "1"), ("update", "ns/a", "11"), ("update", "ns/a", "18")]


async def test_other_api_errors_back_off_and_resume(signal: Signal, client: FakeClient, informer: Informer) -> None:
    client.lists.append(([], "10"))
    client.watch_scripts.append([ApiError(500, "InternalError", "boom")])

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert client.watch_rvs == ["10", "10"]
    assert informer.lists == 1


async def test_a_stream_ending_normally_is_rewatched_from_the_last_rv(
    signal: Signal, client: FakeClient, informer: Informer
) -> None:
    client.lists.append(([], "10"))
    client.watch_scripts.append([bookmark("12")])  # the server's timeout ends the stream
    client.watch_scripts.append([])  # ends at once without any event: treated as a failure, retried
    client.watch_scripts.append([HANG])

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert client.watch_rvs == ["10", "12", "12"]
    assert (informer.lists, informer.watches) == (1, 3)


async def test_a_failed_list_is_retried_before_syncing(signal: Signal, client: FakeClient, informer: Informer) -> None:
    client.lists.append(UnreachableError("refused"))
    client.lists.append(([pod("a", "1")], "10"))

    assert not informer.has_synced
    async with running(informer):
        assert await informer.wait_synced(timeout=5)
        assert informer.has_synced
        await signal.until(lambda: client.hanging == 1)

    assert client.list_calls == 2
    assert informer.lists == 1


async def test_wait_synced_times_out(client: FakeClient, informer: Informer) -> None:
    async with running(informer):  # the list never answers
        assert not await informer.wait_synced(timeout=0.01)


async def test_a_failing_handler_is_logged_and_others_still_run(
    signal: Signal, client: FakeClient, informer: Informer, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(obj: Obj) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(HandlerFuncs(add=explode))
    recorder = Recorder(signal)
    informer.add_handler(recorder)
    client.lists.append(([pod("a", "1")], "10"))
    client.watch_scripts.append([event("ADDED", pod("b", "11")), HANG])

    with caplog.at_level(logging.ERROR, logger="liqo.kube.informer"):
        async with running(informer):
            await signal.until(lambda: client.hanging == 1)

    assert recorder.seen == [("add", "ns/a", "1"), ("add", "ns/b", "11")]
    assert sum("handler bug" in (r.exc_text or "") for r in caplog.records) == 2


async def test_a_handler_added_after_sync_gets_the_cache_as_adds(
    signal: Signal, client: FakeClient, informer: Informer
) -> None:
    client.lists.append(([pod("a", "1"), pod("b", "2")], "10"))
    deleted: list[str] = []
    updated: list[str] = []

    async with running(informer):
        assert await informer.wait_synced(timeout=5)
        recorder = Recorder(signal)
        informer.add_handler(recorder)
        informer.add_handler(HandlerFuncs(update=lambda old, new: updated.append(object_key(new))))
        informer.add_handler(HandlerFuncs(delete=lambda obj: deleted.append(object_key(obj))))

    assert sorted(recorder.seen) == [("add", "ns/a", "1"), ("add", "ns/b", "2")]
    assert (updated, deleted) == ([], [])


async def test_malformed_events_are_skipped(signal: Signal, client: FakeClient, informer: Informer) -> None:
    recorder = Recorder(signal)
    informer.add_handler(recorder)
    client.lists.append(([], "10"))
    client.watch_scripts.append(
        [
            {"type": "ADDED"},
            event("ADDED", {"metadata": {"resourceVersion": "11"}}),  # no name
            event("SURPRISE", pod("x", "12")),
            event("ADDED", pod("a", "13")),
            HANG,
        ]
    )

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert recorder.seen == [("add", "ns/a", "13")]
    assert informer.resource_version == "13"
    assert client.watch_rvs == ["10"]


async def test_lists_and_events_are_projected_alike(signal: Signal, client: FakeClient) -> None:
    informer = Informer(
        client=client, resource=PODS, namespace="ns", projection=keep("metadata", "status.phase"), backoff_base=0.001
    )
    recorder = Recorder(signal)
    informer.add_handler(recorder)

    def full(name: str, rv: str) -> Obj:
        obj = pod(name, rv)
        obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
        return obj | {"spec": {"containers": [{"env": []}]}, "status": {"phase": "Running", "conditions": []}}

    client.lists.append(([full("a", "1")], "10"))
    client.watch_scripts.append([event("ADDED", full("b", "11")), event("DELETED", full("a", "12")), HANG])

    async with running(informer):
        await signal.until(lambda: client.hanging == 1)

    assert recorder.seen == [("add", "ns/a", "1"), ("add", "ns/b", "11"), ("delete", "ns/a", "12")]
    assert informer.store.list() == [{"metadata": pod("b", "11")["metadata"], "status": {"phase": "Running"}}]


def test_a_projection_widens_before_the_first_list_only(client: FakeClient) -> None:
    informer = Informer(client=client, resource=PODS, projection=keep("metadata"))
    informer.widen(keep("status.phase"))
    assert informer.projection == keep("metadata", "status.phase")
    informer.widen(None)
    assert informer.projection is None
    informer.lists = 1
    informer.widen(keep("spec"))  # already kept: nothing changes, so a user may ask for it at any time
    narrow = Informer(client=client, resource=PODS, projection=keep("metadata"))
    narrow.lists = 1
    narrow.widen(keep("metadata"))
    with pytest.raises(RuntimeError):
        narrow.widen(keep("spec"))


def test_shared_informers_keep_what_every_user_reads(client: FakeClient) -> None:
    informers = SharedInformers(cast(KubeClient, client))
    first = informers.informer(PODS, projection=keep("metadata", "spec.nodeName"))
    second = informers.informer(PODS, projection=keep("metadata", "status.phase"))
    assert first is second
    assert first.projection == keep("metadata", "spec.nodeName", "status.phase")
    assert informers.informer(PODS, label_selector="x", projection=keep("metadata")) is not first
    assert informers.informer(PODS).projection is None  # a user reading everything
