"""Lease-based leader election with client-go's semantics.

Why client-go's rules exactly: every Kubernetes component elects its leader this way, so ``kubectl get lease``
reads the same for ours, and client-go's safety argument carries over:

- A candidate judges another holder's lease expired by its *own* clock: the lease is valid until its
  ``leaseDurationSeconds`` after the moment this process last *saw the record change* (client-go's
  ``observedTime``). The remote ``renewTime`` is never compared with the local clock, so clock skew between
  nodes cannot produce two leaders.
- Every write is a PUT carrying the resourceVersion just read (or a create when there is no Lease), so of two
  candidates racing for an expired lease exactly one wins; the other gets a ConflictError and tries later.
- A leader that cannot renew within ``renew_deadline`` (shorter than the lease duration) stops leading, and
  so does so before any other candidate may consider the lease expired.

The decisions are pure functions (:func:`can_acquire`, :func:`acquired_lease`, :func:`released_lease`) and the
:class:`LeaderElector` loop only reads, decides and writes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from liqo.kube.errors import ConflictError, KubeError, NotFoundError
from liqo.kube.metrics import CacheGauge
from liqo.kube.resources import LEASES, Resource
from liqo.kube.timefmt import format_micro_time

log = logging.getLogger(__name__)

STANDBY_OBSERVE_PERIOD = 0.5
"""The observe period liqo's components use: a standby takes over about one Lease duration after a leader dies."""
JITTER_FACTOR = 1.2
"""Candidates wait ``retry_period * (1 + random() * JITTER_FACTOR)`` between attempts, as in client-go."""


class LeadershipLost(Exception):
    """The lease could not be renewed within the renew deadline; the leading task has been cancelled.

    Another replica may be leading by now. The safe reaction is the one client-go's users have: exit the
    process and let it restart as a fresh candidate, rather than carry on with state built while leading.
    """


class LeaseClient(Protocol):
    """The client calls an elector makes; :class:`~liqo.kube.client.KubeClient` provides them."""

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Read one object."""

    async def create(self, resource: Resource, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create an object (ConflictError if it exists)."""

    async def replace(
        self, resource: Resource, obj: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        """Replace an object (ConflictError if its resourceVersion is stale)."""


def lease_duration_seconds(duration: float) -> int:
    """The ``leaseDurationSeconds`` to write for a duration: the field is whole seconds, so round *up*.

    Rounding up keeps the promise safe: other candidates wait at least as long as we said, while we give up
    leading after our (shorter) renew deadline anyway.
    """
    return max(1, math.ceil(duration))


def holder_of(lease: Mapping[str, Any] | None) -> str | None:
    """The lease's ``holderIdentity``, or None when nobody holds it."""
    if lease is None:
        return None
    return str((lease.get("spec") or {}).get("holderIdentity") or "") or None


def can_acquire(
    *, spec: Mapping[str, Any], identity: str, observed_at: float, now: float, default_duration: float
) -> bool:
    """Whether ``identity`` may write itself as the holder of a lease with this spec.

    Args:
        spec: The lease's spec as last read.
        identity: Our identity.
        observed_at: Local monotonic time at which we first saw this spec (it has not changed since).
        now: Local monotonic time now.
        default_duration: The duration to assume if the record states none.

    Returns:
        True if nobody holds the lease, we do, or the holder has not renewed (changed the record) for the
        lease duration it declared, as measured on our clock.
    """
    holder = spec.get("holderIdentity") or ""
    if not holder or holder == identity:
        return True
    duration = float(spec.get("leaseDurationSeconds") or default_duration)
    return now >= observed_at + duration


def acquired_lease(
    *,
    current: Mapping[str, Any] | None,
    namespace: str,
    name: str,
    identity: str,
    lease_duration: float,
    now: datetime,
) -> dict[str, Any]:
    """The Lease to write to take the lock, or to renew it when we hold it already.

    Args:
        current: The Lease as read (its resourceVersion makes the PUT conditional), None if there is none.
        namespace: The Lease's namespace (for a new Lease).
        name: The Lease's name (for a new Lease).
        identity: Our identity.
        lease_duration: How long others must wait for us after our last renewal, in seconds.
        now: The wall-clock time, recorded for humans as ``renewTime`` (and ``acquireTime``).

    Returns:
        The full object. Taking it over from another holder (or from nobody) resets ``acquireTime`` and
        counts one more ``leaseTransitions``; a renewal only moves ``renewTime``. Spec fields we do not manage
        are kept.
    """
    stamp = format_micro_time(now)
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_duration_seconds(lease_duration),
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }
    if current is None:
        return {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    old = dict(current.get("spec") or {})
    transitions = int(old.get("leaseTransitions") or 0)
    if old.get("holderIdentity") == identity:
        spec["acquireTime"] = old.get("acquireTime") or stamp
        spec["leaseTransitions"] = transitions
    else:
        spec["leaseTransitions"] = transitions + 1
    return {**current, "spec": {**old, **spec}}


def released_lease(current: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The Lease to write to give the lock up, as client-go does on release.

    The holder is cleared (so candidates may take it at once) and the duration set to one second for
    readers that only look at times; ``leaseTransitions`` is left for the next holder to count.
    """
    stamp = format_micro_time(now)
    spec = {
        **(current.get("spec") or {}),
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
    }
    return {**current, "spec": spec}


class LeaderElector:
    """Campaign for one Lease and run a coroutine while holding it.

    ``identity`` must be unique per process (for instance the pod name plus a random suffix): a restarted
    process with the same identity would take the lease over at once, as its own.
    """

    def __init__(
        self,
        *,
        client: LeaseClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        observe_period: float | None = None,
        release_on_cancel: bool = True,
    ) -> None:
        """Describe the election; nothing happens before :meth:`run`.

        Args:
            client: The API client (a :class:`~liqo.kube.client.KubeClient`).
            namespace: The Lease's namespace.
            name: The Lease's name.
            identity: This candidate's unique identity, written as ``holderIdentity``.
            lease_duration: How long candidates wait, after the last change they saw, before taking over.
            renew_deadline: How long the leader keeps trying to renew before it gives up leading.
            retry_period: Interval between attempts to acquire or renew.
            observe_period: Interval between a candidate's reads of a lease someone else holds (default: the
                retry period). Shorter means a faster hand-over: a candidate notices the last renewal, and
                then the expiry, this much sooner; it costs one GET per period and never a write (a
                candidate writes only once the lease is free or expired).
            release_on_cancel: Release the lease when :meth:`run` is cancelled while leading, so a successor
                takes over at once instead of after ``lease_duration``.

        Raises:
            ValueError: If the durations cannot be safe (client-go's checks).
        """
        if not identity:
            raise ValueError("identity must not be empty")
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > JITTER_FACTOR * retry_period > 0:
            raise ValueError(f"renew_deadline must be greater than retry_period * {JITTER_FACTOR}, itself positive")
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.observe_period = observe_period or retry_period
        self.release_on_cancel = release_on_cancel
        self._lease: dict[str, Any] | None = None  # last read or written: its resourceVersion guards our writes
        self._observed_spec: Mapping[str, Any] | None = None
        self._observed_at = 0.0
        self._leading = False

    @property
    def is_leader(self) -> bool:
        """Whether we hold the lease (from acquisition until loss or release)."""
        return self._leading

    @property
    def gauge(self) -> CacheGauge:
        """``liqo_leader{lease}``: 1 while this replica leads. Only the leader reports what its caches hold."""
        return CacheGauge(
            "liqo_leader",
            "1 while this replica holds the Lease and runs the control loops, 0 otherwise.",
            ("lease",),
            lambda: [((self.name,), float(self._leading))],
        )

    @property
    def observed_holder(self) -> str | None:
        """The holder in the last lease record seen (None if nobody holds it, or nothing was read yet)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "") or None

    async def run(self, leading: Callable[[], Awaitable[None]]) -> None:
        """Acquire the lease, then run ``leading()`` as a task while renewing it.

        Args:
            leading: What to do while leading; it is cancelled when leadership is lost.

        Raises:
            LeadershipLost: The lease could not be renewed within ``renew_deadline``.
            Exception: Whatever ``leading()`` raised (the lease is released first).
        """
        await self._acquire()
        self._leading = True
        log.info("%s/%s: %s is now the leader", self.namespace, self.name, self.identity)
        task = asyncio.ensure_future(leading())
        try:
            await self._renew_while(task)
        except asyncio.CancelledError:
            await _cancel_and_wait(task)
            if self.release_on_cancel:
                await self._release()
            raise
        except LeadershipLost:
            await _cancel_and_wait(task)
            raise
        await self._release()
        task.result()

    async def _acquire(self) -> None:
        """Try every (jittered) observe period until we hold the lease."""
        while True:
            if await self._try_acquire_or_renew():
                return
            await asyncio.sleep(self.observe_period * (1 + random.random() * JITTER_FACTOR))

    async def _renew_while(self, task: asyncio.Future[None]) -> None:
        """Renew every retry period until ``task`` ends; raise LeadershipLost past the renew deadline."""
        renewed_at = time.monotonic()
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.retry_period)
            if done:
                return
            left = renewed_at + self.renew_deadline - time.monotonic()
            renewed = False
            if left > 0:
                # A request hanging on a dead connection must not keep us leading past the deadline.
                try:
                    async with asyncio.timeout(left):
                        renewed = await self._try_renew_as_written() or await self._try_acquire_or_renew()
                except TimeoutError:
                    log.warning("%s/%s: renewing the lease timed out", self.namespace, self.name)
            if renewed:
                renewed_at = time.monotonic()
            elif time.monotonic() - renewed_at >= self.renew_deadline:
                self._leading = False
                log.error("%s/%s: %s lost the lease", self.namespace, self.name, self.identity)
                raise LeadershipLost(f"{self.identity} could not renew lease {self.namespace}/{self.name}")

    async def _try_renew_as_written(self) -> bool:
        """A renewal over the Lease as we last wrote it, with no read first; False: read it and try again.

        Its resourceVersion makes the write conditional: if anyone wrote the Lease since, the API server
        refuses it (a conflict) and the full attempt reads what they wrote. A leader thus renews with one
        request, not two: on a cluster with a few electors, every two seconds, that is a third of what the
        API server answers when nothing else happens.
        """
        if self._lease is None or holder_of(self._lease) != self.identity:
            return False
        desired = acquired_lease(
            current=self._lease,
            namespace=self.namespace,
            name=self.name,
            identity=self.identity,
            lease_duration=self.lease_duration,
            now=datetime.now(UTC),
        )
        try:
            written = await self._client.replace(LEASES, desired)
        except KubeError:
            return False
        self._observe(written, time.monotonic())
        return True

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt to write ourselves as the holder; API failures are logged and mean False."""
        try:
            try:
                current: dict[str, Any] | None = await self._client.get(LEASES, self.name, namespace=self.namespace)
            except NotFoundError:
                current = None
            if current is not None:
                now = time.monotonic()
                self._observe(current, now)
                spec = current.get("spec") or {}
                if not can_acquire(
                    spec=spec,
                    identity=self.identity,
                    observed_at=self._observed_at,
                    now=now,
                    default_duration=self.lease_duration,
                ):
                    return False
            desired = acquired_lease(
                current=current,
                namespace=self.namespace,
                name=self.name,
                identity=self.identity,
                lease_duration=self.lease_duration,
                now=datetime.now(UTC),
            )
            if current is None:
                written = await self._client.create(LEASES, desired, namespace=self.namespace)
            else:
                written = await self._client.replace(LEASES, desired)
        except ConflictError:
            log.debug("%s/%s: lost a race for the lease", self.namespace, self.name)
            return False
        except KubeError as exc:
            log.warning("%s/%s: cannot acquire or renew the lease: %s", self.namespace, self.name, exc)
            return False
        self._observe(written, time.monotonic())
        return True

    def _observe(self, lease: Mapping[str, Any], now: float) -> None:
        """Remember the lease as last read or written, and when its record last changed (by our clock)."""
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = now
        self._lease = dict(lease)

    async def _release(self) -> None:
        """Give the lease up so a successor need not wait for it to expire (if we still hold it)."""
        self._leading = False
        if self._lease is None or holder_of(self._lease) != self.identity:
            return
        try:
            # Bounded: this runs on the way out (often on shutdown), which must not hang on a dead server.
            async with asyncio.timeout(self.renew_deadline):
                written = await self._client.replace(LEASES, released_lease(self._lease, now=datetime.now(UTC)))
        except ConflictError:
            # Somebody wrote the lease after us: it is not ours to release any more.
            return
        except (KubeError, TimeoutError) as exc:
            log.warning("%s/%s: cannot release the lease: %s", self.namespace, self.name, exc)
            return
        self._observe(written, time.monotonic())
        log.info("%s/%s: %s released the lease", self.namespace, self.name, self.identity)


async def _cancel_and_wait(task: asyncio.Future[None]) -> None:
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        log.error("the leading task failed while being stopped", exc_info=task.exception())
