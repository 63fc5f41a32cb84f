from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from liqo.kube.errors import ConflictError, NotFoundError, UnreachableError
from liqo.kube.leaderelection import (
    LeaderElector,
    LeadershipLost,
    acquired_lease,
    can_acquire,
    holder_of,
    lease_duration_seconds,
    released_lease,
)
from liqo.kube.objects import Obj
from liqo.kube.resources import LEASES, Resource
from liqo.kube.timefmt import format_micro_time
from tests.unit.helpers import Signal

NOW = datetime(2026, 11, 25, 21, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=7, microseconds=250)

# Lease 0.5 s (written as 1 s: whole seconds, rounded up), renew deadline 0.3 s, retry every 0.05 s.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 0.5, 0.3, 0.05


# -- pure decisions ------------------------------------------------------------------------------------------


def test_lease_duration_is_rounded_up_to_whole_seconds() -> None:
    assert [lease_duration_seconds(d) for d in (0.2, 1.0, 14.5, 15.0)] == [1, 1, 15, 15]


def test_can_acquire() -> None:
    held = {"holderIdentity": "b", "leaseDurationSeconds": 15}
    assert can_acquire(spec={}, identity="a", observed_at=100, now=100, default_duration=15)
    assert can_acquire(spec={**held, "holderIdentity": ""}, identity="a", observed_at=100, now=100, default_duration=15)
    assert can_acquire(spec=held, identity="b", observed_at=100, now=100, default_duration=15)
    assert not can_acquire(spec=held, identity="a", observed_at=100, now=114.9, default_duration=15)
    assert can_acquire(spec=held, identity="a", observed_at=100, now=115, default_duration=15)
    # Without a declared duration, ours is assumed.
    assert not can_acquire(spec={"holderIdentity": "b"}, identity="a", observed_at=100, now=104, default_duration=5)
    assert can_acquire(spec={"holderIdentity": "b"}, identity="a", observed_at=100, now=105, default_duration=5)


def test_can_acquire_ignores_remote_timestamps() -> None:
    # A renewTime far in the past (the holder's clock is behind ours) does not make the lease look expired.
    spec = {"holderIdentity": "b", "leaseDurationSeconds": 15, "renewTime": "2001-01-01T00:00:00.000000Z"}
    assert not can_acquire(spec=spec, identity="a", observed_at=100, now=101, default_duration=15)


def test_acquired_lease_creates_a_new_lease() -> None:
    lease = acquired_lease(current=None, namespace="liqo", name="mgr", identity="a", lease_duration=15, now=NOW)
    assert lease == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "mgr", "namespace": "liqo"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-25T21:00:00.000000Z",
            "renewTime": "2026-11-25T21:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }


def _lease(**spec: Any) -> Obj:
    meta = {"name": "mgr", "namespace": "liqo", "resourceVersion": "42"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def test_acquired_lease_takes_over_from_another_holder() -> None:
    current = _lease(
        holderIdentity="b",
        leaseDurationSeconds=30,
        acquireTime=format_micro_time(NOW),
        renewTime=format_micro_time(NOW),
        leaseTransitions=3,
        strategy="OldestEmulationVersion",
    )
    lease = acquired_lease(current=current, namespace="x", name="y", identity="a", lease_duration=15, now=LATER)
    assert lease["metadata"] == current["metadata"]  # the resourceVersion makes the PUT conditional
    assert lease["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": format_micro_time(LATER),
        "renewTime": format_micro_time(LATER),
        "leaseTransitions": 4,
        "strategy": "OldestEmulationVersion",
    }
    assert current["spec"]["holderIdentity"] == "b"  # not mutated


def test_acquired_lease_renews_our_own() -> None:
    current = _lease(
        holderIdentity="a", leaseDurationSeconds=15, acquireTime=format_micro_time(NOW), leaseTransitions=3
    )
    spec = acquired_lease(current=current, namespace="x", name="y", identity="a", lease_duration=15, now=LATER)["spec"]
    assert (spec["acquireTime"], spec["renewTime"], spec["leaseTransitions"]) == (
        format_micro_time(NOW),
        format_micro_time(LATER),
        3,
    )


def test_acquiring_a_released_lease_counts_a_transition() -> None:
    current = _lease(holderIdentity="", leaseDurationSeconds=1, leaseTransitions=3)
    spec = acquired_lease(current=current, namespace="x", name="y", identity="a", lease_duration=15, now=LATER)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 4)


def test_released_lease() -> None:
    current = _lease(
        holderIdentity="a", leaseDurationSeconds=15, acquireTime=format_micro_time(NOW), leaseTransitions=3
    )
    lease = released_lease(current, now=LATER)
    assert lease["metadata"] == current["metadata"]
    assert lease["spec"] == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": format_micro_time(LATER),
        "renewTime": format_micro_time(LATER),
        "leaseTransitions": 3,
    }
    assert holder_of(lease) is None
    assert holder_of(current) == "a"
    assert holder_of(None) is None


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        (10, 10, 2, "lease_duration"),
        (15, 2, 2, "renew_deadline"),
        (15, 10, 0, "renew_deadline"),
    ],
)
def test_unsafe_durations_are_refused(lease: float, renew: float, retry: float, message: str) -> None:
    client = LeaseServer(Signal()).client()
    with pytest.raises(ValueError, match=message):
        LeaderElector(
            client=client,
            namespace="liqo",
            name="mgr",
            identity="a",
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(client=client, namespace="liqo", name="mgr", identity="")


# -- the loop, against an in-memory Lease store -------------------------------------------------------------


class LeaseServer:
    """Leases in memory with an API server's rules: resourceVersions, create conflicts, stale-PUT conflicts."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.objects: dict[str, Obj] = {}
        self.revision = 0
        self.writes: list[tuple[float, str]] = []  # (monotonic time, holder written)

    def client(self) -> FakeLeaseClient:
        return FakeLeaseClient(self)

    def lease(self) -> Obj:
        return self.objects["liqo/mgr"]

    def store(self, obj: Obj) -> Obj:
        self.revision += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.revision)
        self.objects[f"{stored['metadata']['namespace']}/{stored['metadata']['name']}"] = stored
        self.writes.append((time.monotonic(), stored["spec"].get("holderIdentity") or ""))
        return copy.deepcopy(stored)


class FakeLeaseClient:
    """One process's view of the server; ``down`` makes every call fail as if the network were cut."""

    def __init__(self, server: LeaseServer) -> None:
        self.server = server
        self.down = False
        self.conflicts = 0  # the next N replaces lose a race
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        self.server.signal.fire()
        if self.down:
            raise UnreachableError("connection refused")

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        assert resource == LEASES
        self._call()
        obj = self.server.objects.get(f"{namespace}/{name}")
        if obj is None:
            raise NotFoundError(404, "NotFound", f"leases {name!r} not found")
        return copy.deepcopy(obj)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        self._call()
        assert "resourceVersion" not in obj["metadata"]
        if f"{namespace}/{obj['metadata']['name']}" in self.server.objects:
            raise ConflictError(409, "AlreadyExists", "already exists")
        return self.server.store(obj)

    async def replace(self, resource: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        self._call()
        meta = obj["metadata"]
        current = self.server.objects.get(f"{meta['namespace']}/{meta['name']}")
        if current is None:
            raise NotFoundError(404, "NotFound", "gone")
        if self.conflicts or meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            self.conflicts = max(0, self.conflicts - 1)
            raise ConflictError(409, "Conflict", "the object has been modified")
        return self.server.store(obj)


class Work:
    """A ``leading()`` coroutine: notes when it started and stopped, runs until cancelled (or told to end)."""

    def __init__(self, signal: Signal, *, finish: BaseException | bool = False) -> None:
        self.signal = signal
        self.finish = finish
        self.started: float | None = None
        self.stopped: float | None = None

    async def __call__(self) -> None:
        self.started = time.monotonic()
        self.signal.fire()
        try:
            if isinstance(self.finish, BaseException):
                raise self.finish
            if not self.finish:
                await asyncio.Event().wait()
        finally:
            self.stopped = time.monotonic()
            self.signal.fire()


@contextlib.asynccontextmanager
async def campaigning(elector: LeaderElector, work: Work) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run(work))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await task


def elector(client: FakeLeaseClient, identity: str, *, release_on_cancel: bool = True) -> LeaderElector:
    return LeaderElector(
        client=client,
        namespace="liqo",
        name="mgr",
        identity=identity,
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        release_on_cancel=release_on_cancel,
    )


@pytest.fixture
def signal() -> Signal:
    return Signal()


@pytest.fixture
def server(signal: Signal) -> LeaseServer:
    return LeaseServer(signal)


async def test_one_of_two_leads_and_a_release_hands_over_at_once(signal: Signal, server: LeaseServer) -> None:
    a, b = elector(server.client(), "a"), elector(server.client(), "b")
    work = {"a": Work(signal), "b": Work(signal)}
    async with campaigning(a, work["a"]) as task_a, campaigning(b, work["b"]) as task_b:
        await signal.until(lambda: a.is_leader or b.is_leader)
        leader, follower = (a, b) if a.is_leader else (b, a)
        tasks = {"a": task_a, "b": task_b}
        # Several renewals later, still exactly one leader, and the follower knows who it is.
        writes = len(server.writes)
        await signal.until(lambda: len(server.writes) >= writes + 4 and follower.observed_holder == leader.identity)
        assert leader.is_leader
        assert not follower.is_leader
        assert work[follower.identity].started is None
        assert work[leader.identity].started is not None
        assert holder_of(server.lease()) == leader.identity

        cancelled_at = time.monotonic()
        tasks[leader.identity].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[leader.identity]
        assert not leader.is_leader
        assert work[leader.identity].stopped is not None
        await signal.until(lambda: follower.is_leader)
        # The release, not the expiry, let the follower in: the leader cleared the holder, the follower wrote next.
        # (Not a wall-clock bound: beside a loaded suite that measures the neighbours.)
        assert [holder for at, holder in server.writes if at >= cancelled_at][:2] == ["", follower.identity]
        await signal.until(lambda: work[follower.identity].started is not None)

        holders = [holder for _, holder in server.writes]
        released = holders.index("")
        assert set(holders[:released]) == {leader.identity}
        assert set(holders[released + 1 :]) == {follower.identity}
        assert server.lease()["spec"]["leaseTransitions"] == 1


async def test_a_leader_that_cannot_renew_steps_down_before_the_other_takes_over(
    signal: Signal, server: LeaseServer
) -> None:
    client_a = server.client()
    a, b = elector(client_a, "a"), elector(server.client(), "b")
    work_a, work_b = Work(signal), Work(signal)
    async with campaigning(a, work_a) as task_a:
        await signal.until(lambda: a.is_leader and work_a.started is not None)
        async with campaigning(b, work_b):
            await signal.until(lambda: b.observed_holder == "a")
            client_a.down = True
            cut_at = time.monotonic()

            with pytest.raises(LeadershipLost):
                async with asyncio.timeout(5):
                    await task_a
            assert not a.is_leader
            assert work_a.stopped is not None
            assert work_a.stopped - cut_at < RENEW_DEADLINE + 0.2

            await signal.until(lambda: b.is_leader and work_b.started is not None)

    last_a_write = max(t for t, holder in server.writes if holder == "a")
    b_acquired = min(t for t, holder in server.writes if holder == "b")
    # b waited the full duration declared in the record (1 s) after the last renewal it could have seen...
    assert b_acquired - last_a_write >= 1.0
    # ...and a had stopped its work before b took over: never two leaders.
    assert work_a.stopped < b_acquired
    assert server.lease()["spec"]["leaseTransitions"] == 1


async def test_leading_returning_releases_the_lease(signal: Signal, server: LeaseServer) -> None:
    a = elector(server.client(), "a")
    work = Work(signal, finish=True)
    async with asyncio.timeout(5):
        await a.run(work)
    assert work.started is not None
    assert not a.is_leader
    assert holder_of(server.lease()) is None
    assert server.lease()["spec"]["leaseDurationSeconds"] == 1


async def test_leading_raising_propagates_after_release(signal: Signal, server: LeaseServer) -> None:
    a = elector(server.client(), "a")
    with pytest.raises(RuntimeError, match="reconciler bug"):
        async with asyncio.timeout(5):
            await a.run(Work(signal, finish=RuntimeError("reconciler bug")))
    assert holder_of(server.lease()) is None


async def test_without_release_on_cancel_the_lease_is_kept(signal: Signal, server: LeaseServer) -> None:
    a = elector(server.client(), "a", release_on_cancel=False)
    work = Work(signal)
    async with campaigning(a, work):
        await signal.until(lambda: work.started is not None)
    assert work.stopped is not None
    assert holder_of(server.lease()) == "a"


async def test_a_lost_race_is_retried(signal: Signal, server: LeaseServer) -> None:
    server.store(_lease(holderIdentity="", leaseDurationSeconds=1, leaseTransitions=2))
    client = server.client()
    client.conflicts = 2
    a = elector(client, "a")
    work = Work(signal)
    async with campaigning(a, work):
        await signal.until(lambda: work.started is not None)
        assert client.conflicts == 0
        assert server.lease()["spec"]["leaseTransitions"] == 3


async def test_a_leader_renews_with_one_write_and_reads_only_after_someone_else_wrote(
    signal: Signal, server: LeaseServer
) -> None:
    client = server.client()
    a = elector(client, "a")
    work = Work(signal)
    async with campaigning(a, work):
        await signal.until(lambda: work.started is not None)
        calls, writes = client.calls, len(server.writes)
        await signal.until(lambda: len(server.writes) >= writes + 3)
        assert client.calls - calls == len(server.writes) - writes  # renewals: a write each, no read
        # Someone else's write (an admin's edit): the next renewal conflicts, reads, and renews over it.
        server.store(server.lease())
        writes = len(server.writes)
        await signal.until(lambda: len(server.writes) >= writes + 2)
        assert a.is_leader
        assert holder_of(server.lease()) == "a"
