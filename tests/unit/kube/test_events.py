from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from liqo.kube.errors import ApiError, UnreachableError, api_error, namespace_terminating
from liqo.kube.events import MAX_MESSAGE_LENGTH, EventRecorder, build_event, event_name
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS
from tests.unit.fakeapi import FakeApi

NOW = datetime(2026, 11, 25, 21, 0, 0, 123456, tzinfo=UTC)

POD: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7", "labels": {"a": "b"}},
    "spec": {},
}
NODE: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "liqo-peer", "uid": "u-2"}}


def test_build_event_about_a_namespaced_object() -> None:
    event = build_event(
        POD,
        type="Warning",
        reason="ReflectionFailed",
        message="boom",
        component="liqo-manager",
        host="manager-0",
        now=NOW,
        name_suffix="18a",
    )
    assert event == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "web.18a", "namespace": "shop"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web",
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "7",
        },
        "type": "Warning",
        "reason": "ReflectionFailed",
        "message": "boom",
        "source": {"component": "liqo-manager", "host": "manager-0"},
        "reportingComponent": "liqo-manager",
        "reportingInstance": "manager-0",
        "firstTimestamp": "2026-11-25T21:00:00Z",
        "lastTimestamp": "2026-11-25T21:00:00Z",
        "count": 1,
    }


def test_build_event_about_a_cluster_scoped_object_goes_to_default() -> None:
    event = build_event(
        NODE, type="Normal", reason="Ready", message="m", component="vk", host="", now=NOW, name_suffix="1"
    )
    assert event["metadata"]["namespace"] == "default"
    assert "namespace" not in event["involvedObject"]
    assert event["source"] == {"component": "vk"}
    assert "reportingInstance" not in event


def test_build_event_truncates_the_message() -> None:
    event = build_event(
        POD, type="Normal", reason="R", message="x" * 5000, component="c", host="", now=NOW, name_suffix="1"
    )
    assert event["message"] == "x" * (MAX_MESSAGE_LENGTH - 1) + "…"


def test_a_message_naming_what_a_peer_named_is_one_printable_line() -> None:
    message = "twin evil\n2026-01-01 INFO forged\x1b[2J refused"
    event = build_event(
        POD, type="Warning", reason="R", message=message, component="c", host="", now=NOW, name_suffix="1"
    )
    assert event["message"] == "twin evil\\n2026-01-01 INFO forged\\x1b[2J refused"


def test_build_event_needs_a_name() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        build_event(
            {"metadata": {}}, type="Normal", reason="R", message="m", component="c", host="", now=NOW, name_suffix="1"
        )


def test_event_name_stays_a_valid_name() -> None:
    assert event_name("web", "18a") == "web.18a"
    long = event_name("a" * 240 + "-" + "b" * 12, "0123456789abcdef")
    assert len(long) <= 253
    assert long == "a" * 236 + ".0123456789abcdef"


# -- the recorder --------------------------------------------------------------------------------------------


def verbs(api: FakeApi) -> list[str]:
    return [call.verb for call in api.calls]


def only_event(api: FakeApi) -> Obj:
    [event] = [obj for (plural, _, _), obj in api.objects.items() if plural == EVENTS.plural]
    return event


def failing(api: FakeApi, error: Exception | None) -> None:
    """Every write of the recorder fails with ``error`` from now on (None: none does)."""
    for verb in ("create", "patch"):
        if error is None:
            api.allow(verb, EVENTS)
        else:
            api.refuse(verb, EVENTS, error)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def client() -> Iterator[FakeApi]:
    api = FakeApi()
    yield api
    for call in api.calls:  # Events only, each created in its own namespace, named there
        assert call.plural == EVENTS.plural, call
        if call.verb == "create":
            assert call.options["namespace"] == call.body["metadata"]["namespace"], call


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder(client: FakeApi, clock: Clock) -> EventRecorder:
    return EventRecorder(client=client, component="liqo-manager", host="manager-0", clock=clock)


async def test_repeats_are_counted_on_the_same_event(client: FakeApi, clock: Clock, recorder: EventRecorder) -> None:
    await recorder.record(POD, type="Warning", reason="Failed", message="boom")
    clock.now += timedelta(minutes=9)
    await recorder.record(POD, type="Warning", reason="Failed", message="boom")
    clock.now += timedelta(minutes=9)  # the window slides with each occurrence
    await recorder.record(POD, type="Warning", reason="Failed", message="boom")

    assert verbs(client) == ["create", "patch", "patch"]
    event = only_event(client)
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2026-11-25T21:00:00Z"
    assert event["lastTimestamp"] == "2026-11-25T21:18:00Z"


async def test_different_events_are_not_aggregated(client: FakeApi, recorder: EventRecorder) -> None:
    await recorder.record(POD, type="Warning", reason="Failed", message="boom")
    await recorder.record(POD, type="Warning", reason="Failed", message="bang")
    await recorder.record(POD, type="Normal", reason="Failed", message="boom")
    await recorder.record(POD, type="Warning", reason="Other", message="boom")
    await recorder.record(
        {**POD, "metadata": {**POD["metadata"], "uid": "u-9"}}, type="Warning", reason="Failed", message="boom"
    )

    assert verbs(client) == ["create"] * 5


async def test_a_repeat_after_the_window_creates_a_new_event(
    client: FakeApi, clock: Clock, recorder: EventRecorder
) -> None:
    await recorder.record(POD, type="Normal", reason="Synced", message="ok")
    clock.now += timedelta(minutes=10)
    await recorder.record(POD, type="Normal", reason="Synced", message="ok")

    assert verbs(client) == ["create", "create"]


async def test_a_vanished_event_is_created_anew(client: FakeApi, recorder: EventRecorder) -> None:
    await recorder.record(POD, type="Normal", reason="Synced", message="ok")
    for _, namespace, name in list(client.objects):  # the API server's event TTL ran out
        client.remove(EVENTS, name, namespace=namespace)
    await recorder.record(POD, type="Normal", reason="Synced", message="ok")
    await recorder.record(POD, type="Normal", reason="Synced", message="ok")

    assert verbs(client) == ["create", "patch", "create", "patch"]
    assert only_event(client)["count"] == 2


async def test_long_messages_aggregate_on_their_truncation(client: FakeApi, recorder: EventRecorder) -> None:
    await recorder.record(POD, type="Warning", reason="Failed", message="x" * 2000 + "1")
    await recorder.record(POD, type="Warning", reason="Failed", message="x" * 2000 + "2")

    assert verbs(client) == ["create", "patch"]
    assert len(only_event(client)["message"]) == MAX_MESSAGE_LENGTH


async def test_the_cache_is_bounded(client: FakeApi) -> None:
    recorder = EventRecorder(client=client, component="c", cache_size=2)
    for reason in ("A", "B", "C", "A"):
        await recorder.record(POD, type="Normal", reason=reason, message="m")

    assert verbs(client) == ["create"] * 4


async def test_failures_are_logged_and_swallowed(
    client: FakeApi, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    failing(client, UnreachableError("connection refused"))
    with caplog.at_level(logging.WARNING, logger="liqo.kube.events"):
        await recorder.record(POD, type="Warning", reason="Failed", message="boom")
        await recorder.record({"kind": "Pod", "metadata": {}}, type="Warning", reason="Failed", message="boom")

    assert len(caplog.records) == 2
    assert "Failed" in caplog.records[0].getMessage()
    assert "shop/web" in caplog.records[0].getMessage()
    # A failed create leaves nothing to aggregate on: the next occurrence creates again.
    failing(client, None)
    await recorder.record(POD, type="Warning", reason="Failed", message="boom")
    assert client.calls[-1].verb == "create"


TERMINATING: Obj = {
    "kind": "Status",
    "reason": "Forbidden",
    "message": "unable to create new content in namespace shop because it is being terminated",
    "details": {"kind": "events", "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    "code": 403,
}


def test_a_namespace_being_deleted_is_told_from_other_refusals() -> None:
    assert namespace_terminating(api_error(403, TERMINATING))
    assert not namespace_terminating(api_error(403, {**TERMINATING, "details": {"causes": []}}))
    assert not namespace_terminating(api_error(404, TERMINATING))
    assert not namespace_terminating(UnreachableError("connection refused"))


async def test_an_event_in_a_terminating_namespace_is_dropped_without_a_warning(
    client: FakeApi, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    terminating = api_error(403, TERMINATING)
    assert isinstance(terminating, ApiError)
    failing(client, terminating)
    with caplog.at_level(logging.WARNING, logger="liqo.kube.events"):
        await recorder.record(POD, type="Warning", reason="PodRefused", message="namespace shop is terminating")
    assert caplog.records == []


async def test_events_have_unique_names(client: FakeApi, recorder: EventRecorder) -> None:
    for reason in ("A", "B", "C"):
        await recorder.record(POD, type="Normal", reason=reason, message="m")

    names = [str(call.name) for call in client.calls]
    assert len(set(names)) == 3
    assert all(name.startswith("web.") for name in names)
