"""The steps every reflector takes alike: write a copy towards what is desired, delete one, say a refusal.

A reflector (``copies``, ``endpointslices``, ``pods``, ``tokens``, ``events``) decides *what* the provider should
hold; how a copy of ours is created, replaced at the cached resourceVersion or deleted at its uid, and how a
write the provider refused is said at home and retried, is one piece here, so no reflector imports another.
``ReflectionPolicy`` (which kinds go to providers) is here too: the copies and the EndpointSlices both read it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.objects import Obj
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.resources import Resource, terminating
from liqo.virtualkubelet import metrics
from liqo.virtualkubelet.forge.common import PROVIDER_REFUSED

Mode = Literal["All", "None"]
REFUSED_FIRST_SECONDS = 1.0
REFUSED_MAX_SECONDS = 60.0
"""A write the provider refused is made again after 1 s, doubling up to this, never given up on: the provider's
policy may change. Its backoff is cleared once the write goes through."""
REFUSALS = (400, 403, 422)
"""The provider's answers that are a verdict on what we wrote (its admission, its validation), not a failure."""


class Refusals:
    """Why objects were not written to the provider: each said once per change at home, retried with a backoff.

    Keyed like the reflector's queue. A reason is said again only when it changes (not at every look), and
    forgotten once the object is written, or no longer wanted.
    """

    def __init__(self, events: EventRecorder) -> None:
        self._events = events
        self._said: dict[Any, tuple[str, str]] = {}
        self._backoff = ItemExponentialFailureRateLimiter(
            base_delay=REFUSED_FIRST_SECONDS, max_delay=REFUSED_MAX_SECONDS
        )

    async def say(self, key: Any, about: Obj, *, reason: str, message: str) -> None:
        """A Warning Event ``reason`` on home object ``about`` (with its ``apiVersion`` and ``kind``), if news."""
        if self._said.get(key) == (reason, message):
            return
        self._said[key] = (reason, message)
        await self._events.record(about, type="Warning", reason=reason, message=message)

    async def write(
        self,
        key: Any,
        about: Obj,
        write: Awaitable[bool],
        *,
        controller: Controller[Any],
        reflector: str,
        what: str = "",
    ) -> Result | None:
        """Await a copy's ``write``; the provider's verdict on it is said on home object ``about`` and retried.

        A write that went through forgets the last refusal and records its lag (``reflector``'s, measured by
        ``controller``); ``what`` names the copy in the refusal's message when ``about`` is not that object.
        """
        try:
            written = await write
        except ApiError as exc:
            if exc.status not in REFUSALS:
                raise
            await self.say(key, about, reason=PROVIDER_REFUSED, message=f"{what}{exc.message}")
            return self.retry(key)
        self.forget(key)
        if written:
            metrics.written(reflector, controller, key)
        return None

    def retry(self, key: Any) -> Result:
        """When to write a refused object again."""
        return Result(requeue_after=self._backoff.when(key))

    def forget(self, key: Any) -> None:
        """The object was written, or is no longer wanted: a later refusal is news again."""
        self._said.pop(key, None)
        self._backoff.forget(key)

    def forget_where(self, dropped: Callable[[Any], bool]) -> None:
        """Forget every key ``dropped`` says (a namespace no longer offloaded here)."""
        for key in [key for key in self._said if dropped(key)]:
            self.forget(key)


@dataclass(frozen=True, slots=True)
class ReflectionPolicy:
    """Which home objects go to providers, per kind: ``All`` (but the never-reflected) or ``None``.

    ``None`` also deletes the copies made before: the policy is a desired state, not a switch of the loop.
    """

    configmaps: Mode = "All"
    secrets: Mode = "All"
    services: Mode = "All"
    ingresses: Mode = "All"
    ingress_classes: Mapping[str, str] = field(default_factory=dict)
    """Home IngressClass → the provider's, for Ingress copies (unmapped classes are cleared)."""

    def reflects(self, resource: Resource) -> bool:
        """Whether objects of ``resource`` are copied at all."""
        return getattr(self, resource.plural, "All") == "All"


def typed(resource: Resource, obj: Obj) -> Obj:
    """``obj`` as an Event's subject: a cached object carries no ``apiVersion`` and ``kind``."""
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj}


async def converge_copy(
    provider: KubeClient,
    resource: Resource,
    *,
    current: Obj | None,
    desired: Obj,
    is_current: Callable[[Obj, Obj], bool],
    must_replace: Callable[[Obj, Obj], bool],
) -> bool:
    """One step of a copy of ours (``current``, None if absent) towards ``desired``; whether it now is ``desired``.

    Create, then replace at the cached resourceVersion: a create fails on a namesake the cache has not shown
    yet, where an apply would take it over. A conflict either way means the cache is behind, and the event it
    is behind on re-queues the key; a copy that cannot be updated is deleted, its deletion re-queuing it.
    False too when nothing needed writing.
    """
    if current is None:
        with contextlib.suppress(ConflictError):
            await provider.create(resource, desired)
            return True
        return False
    if is_current(current, desired):
        return False
    if must_replace(current, desired):
        await delete_copy(provider, resource, current)
        return False
    desired["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    with contextlib.suppress(ConflictError, NotFoundError):
        await provider.replace(resource, desired)
        return True
    return False


async def delete_copy(provider: KubeClient, resource: Resource, obj: Obj) -> None:
    """Delete a copy (at its uid: never a namesake made since), unless it is already going."""
    if terminating(obj):
        return
    meta = obj["metadata"]
    await provider.delete(resource, meta["name"], namespace=meta["namespace"], uid=meta["uid"], missing_ok=True)
