"""A shared informer: one list+watch per resource, a local cache, and handlers that enqueue keys.

Why our own rather than ``kubernetes_asyncio``'s ``Watch``: that one retries a 410 with the same stale
resourceVersion and knows nothing of a cache. Controllers here are level-triggered and read from caches, so
what they need from an informer is (1) a cache that converges on the server's state and (2) a notification
for every key whose state changed, deletions included, whatever happened to the connection meanwhile.
client-go's reflector gets this right, and this module follows it:

- List (paginated) once, then watch from the list's resourceVersion with bookmarks, so that a reconnect
  resumes from a recent resourceVersion instead of paying for a new list.
- A transient failure (server unreachable, 5xx) backs off and resumes the watch from the last seen
  resourceVersion. Only the server's 410 ("that resourceVersion is compacted away") forces a re-list.
- A re-list is diffed against the cache (:func:`diff`, a pure function) into add/update/delete
  notifications. A deletion that happened while we were disconnected thus still reaches the handlers, with
  the last state we knew (client-go's ``DeletedFinalStateUnknown``), and unchanged objects stay silent.

Handlers run synchronously on the informer's task and must only compute keys and enqueue them: any I/O or
slow work there would stall the watch for every other handler.

The cache holds objects as :mod:`liqo.kube.projection` keeps them: never ``managedFields``, and only the
declared paths if the informer has a projection; list pages and watch events alike are projected as they
are decoded, so a list of many objects is never held whole. Hence the rule for every user of a cache: an
object read from it is not written back whole (a PUT of it, or of a modified copy) — that would drop what
the projection left out. Write with a patch of the fields that change (with the cached resourceVersion as
precondition where a concurrent change matters), or read the object from the API first.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from liqo.kube.errors import ApiError, GoneError, UnreachableError
from liqo.kube.objects import Obj
from liqo.kube.projection import Projection, project, widest
from liqo.kube.resources import Resource, object_key

log = logging.getLogger(__name__)


_MIN_WATCH_TIMEOUT = 300
"""Watches last a random 300-600 s, as client-go's, so that many informers do not reconnect in lockstep."""

_SHORT_WATCH = 1.0
"""A watch that ends normally this fast without a single event is treated as a failure (client-go's
"very short watch"), lest a misbehaving proxy turn the re-watch into a busy loop."""


class WatchClient(Protocol):
    """The two client calls an informer makes; :class:`~liqo.kube.client.KubeClient` provides them."""

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        page_size: int,
        transform: Callable[[Obj], Obj],
    ) -> tuple[builtins.list[Obj], str]:
        """Every object of the collection (each through ``transform``, page by page) and its resourceVersion."""

    def watch(
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
        """Watch events from ``resource_version``; ERROR events are raised, 410 as GoneError."""


class EventHandler(Protocol):
    """What an informer notifies.

    Handlers are called synchronously, on the informer's task, after the cache has been updated. They must
    only compute keys and enqueue them (no I/O, no awaiting): a slow handler delays every notification of
    the informer. An exception is logged and does not stop the informer or the other handlers.
    """

    def on_add(self, obj: Obj) -> None:
        """An object appeared (or is in the first list)."""

    def on_update(self, old: Obj, new: Obj) -> None:
        """An object's resourceVersion changed."""

    def on_delete(self, obj: Obj) -> None:
        """An object is gone; ``obj`` is its final state, or the last one seen if the deletion was missed."""


@dataclass(frozen=True, slots=True)
class HandlerFuncs:
    """An :class:`EventHandler` made of optional callables, for handlers that care about some events only."""

    add: Callable[[Obj], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj], None] | None = None

    def on_add(self, obj: Obj) -> None:
        """Call ``add`` if set."""
        if self.add is not None:
            self.add(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        """Call ``update`` if set."""
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: Obj) -> None:
        """Call ``delete`` if set."""
        if self.delete is not None:
            self.delete(obj)


@dataclass(frozen=True, slots=True)
class Added:
    """A notification owed to the handlers: ``obj`` appeared."""

    key: str
    obj: Obj


@dataclass(frozen=True, slots=True)
class Updated:
    """A notification owed to the handlers: ``old`` became ``obj``."""

    key: str
    old: Obj
    obj: Obj


@dataclass(frozen=True, slots=True)
class Deleted:
    """A notification owed to the handlers: ``obj`` (its final or last known state) is gone."""

    key: str
    obj: Obj


Change = Added | Updated | Deleted


def resource_version_of(obj: Mapping[str, Any]) -> str:
    """An object's ``metadata.resourceVersion`` ("" when absent)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def diff(cache: Mapping[str, Obj], fresh: Iterable[Obj]) -> builtins.list[Change]:
    """The changes that turn ``cache`` into the state of a fresh list, in notification order.

    - An object whose resourceVersion is the cached one produces nothing, so a re-list after a reconnect
      does not wake every controller.
    - Every cached key missing from the list is exactly one delete, carrying the last state we knew.
    - An object deleted and re-created under the same name while we were away (its uid changed) is a
      delete of the old one and an add of the new, as a watch would have reported it.

    Deletes come first, so that whatever a deleted object held is released before newcomers claim it.

    Args:
        cache: The informer's cache, by :func:`~liqo.kube.resources.object_key`.
        fresh: Every object of a new list.

    Returns:
        The changes; :func:`apply_changes` applied to ``cache`` yields exactly the fresh state.
    """
    fresh_by_key = {object_key(obj): obj for obj in fresh}
    changes: builtins.list[Change] = [Deleted(key, old) for key, old in cache.items() if key not in fresh_by_key]
    for key, new in fresh_by_key.items():
        old = cache.get(key)
        if old is None:
            changes.append(Added(key, new))
        elif resource_version_of(old) == resource_version_of(new):
            continue
        elif _uid(old) and _uid(new) and _uid(old) != _uid(new):
            changes += [Deleted(key, old), Added(key, new)]
        else:
            changes.append(Updated(key, old, new))
    return changes


def apply_changes(cache: MutableMapping[str, Obj], changes: Iterable[Change]) -> None:
    """Apply changes from :func:`diff` to a cache, in order."""
    for change in changes:
        if isinstance(change, Deleted):
            cache.pop(change.key, None)
        else:
            cache[change.key] = change.obj


def needs_relist(error: ApiError) -> bool:
    """Whether a watch error means the resourceVersion cannot be resumed from, so only a list can recover.

    That is a 410 (compacted, or ``Expired``), or a resourceVersion the server's watch cache has not reached
    (an HA peer lagging behind the server we listed from), which client-go also answers with a re-list.
    """
    if isinstance(error, GoneError) or error.reason in ("Expired", "Gone"):
        return True
    causes = (error.body.get("details") or {}).get("causes") or []
    return any(isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge" for cause in causes)


class Store:
    """A read-only view of an informer's cache, keyed by ``namespace/name`` (``name`` if cluster-scoped).

    Objects are shared with the cache, not copied: never mutate them.
    """

    __slots__ = ("_objects",)

    def __init__(self, objects: Mapping[str, Obj]) -> None:
        self._objects = objects

    def get(self, key: str) -> Obj | None:
        """The cached object with that key, if any."""
        return self._objects.get(key)

    def list(self) -> builtins.list[Obj]:
        """Every cached object."""
        return builtins.list(self._objects.values())

    def keys(self) -> builtins.list[str]:
        """Every cached key."""
        return builtins.list(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects


class _Backoff:
    """Exponential backoff with jitter: ``base`` doubling up to ``maximum``, each delay drawn in its upper half."""

    def __init__(self, *, base: float, maximum: float) -> None:
        self._base = base
        self._maximum = maximum
        self._delay = base

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self._maximum, self._delay * 2)
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._delay = self._base


class Informer:
    """List+watch one resource (optionally one namespace, filtered by selectors) into a cache.

    Start :meth:`run` as a task and cancel it to stop. Read the cache through :attr:`store`; wait for the
    first list with :meth:`wait_synced` before reconciling from it.

    Attributes:
        store: The cache.
        lists: Full lists completed (the first is 1).
        watches: Watch streams opened.
        relists_on_gone: Re-lists forced by the server refusing to resume a watch (410).
    """

    def __init__(
        self,
        *,
        client: WatchClient,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        name: str = "",
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        projection: Projection | None = None,
    ) -> None:
        """Describe what to watch; nothing happens before :meth:`run`.

        Args:
            client: The API client (a :class:`~liqo.kube.client.KubeClient`).
            resource: The resource to list and watch.
            namespace: Only this namespace (all namespaces when None).
            label_selector: Server-side label filter.
            field_selector: Server-side field filter.
            page_size: Objects per list page.
            name: A name for logs (default: the resource's plural and namespace).
            backoff_base: First delay after a failure, in seconds.
            backoff_max: Longest delay after repeated failures, in seconds.
            projection: What the cache keeps of each object (None: all but the server's bookkeeping); see
                the module docstring for what that means for writes.
        """
        self._client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.name = name or (f"{resource.plural}/{namespace}" if namespace else resource.plural)
        self.projection = projection
        self._cache: dict[str, Obj] = {}
        self.store = Store(self._cache)
        self._handlers: builtins.list[EventHandler] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._backoff = _Backoff(base=backoff_base, maximum=backoff_max)
        self.lists = 0
        self.watches = 0
        self.relists_on_gone = 0

    @property
    def has_synced(self) -> bool:
        """Whether the first full list is in the cache."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a list, an event or a bookmark): where a watch resumes."""
        return self._resource_version

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the first full list is in the cache.

        Args:
            timeout: Seconds to wait at most (None: forever).

        Returns:
            Whether the cache is synced (False when the timeout passed first).
        """
        try:
            async with asyncio.timeout(timeout):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    def widen(self, projection: Projection | None) -> None:
        """Keep what ``projection`` keeps too (None: everything), for one more user.

        Raises:
            RuntimeError: The cache was filled already, narrower than the new user needs.
        """
        widened = widest(self.projection, projection)
        if widened == self.projection:
            return
        if self.lists:
            raise RuntimeError(f"{self.name}: projection widened after the first list")
        self.projection = widened

    def _ingest(self, obj: Obj) -> Obj:
        return project(self.projection, obj)

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; if the cache is already synced, it gets an add for every cached object."""
        self._handlers.append(handler)
        if self.has_synced:
            for key, obj in builtins.list(self._cache.items()):
                self._notify_one(handler, Added(key, obj))

    async def run(self) -> None:
        """List, then watch, until cancelled; failures are logged and retried, never raised."""
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                await self._watch()
                continue
            except ApiError as exc:
                if needs_relist(exc):
                    log.info(
                        "%s: cannot resume the watch at %s (%s); re-listing", self.name, self._resource_version, exc
                    )
                    self.relists_on_gone += 1
                    must_list = True
                    continue
                error: Exception = exc
            except UnreachableError as exc:
                error = exc
            except Exception as exc:
                # A bug (or a malformed answer) must not end the informer for good: the cache would silently
                # go stale. Log it loudly and carry on as for a transient failure.
                log.exception("%s: unexpected failure", self.name)
                error = exc
            delay = self._backoff.next()
            doing = "list" if must_list else f"watch from {self._resource_version}"
            log.warning("%s: %s failed, retrying in %.1fs: %s", self.name, doing, delay, error)
            await asyncio.sleep(delay)

    async def _list(self) -> None:
        items, list_rv = await self._client.list_all(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=self.page_size,
            transform=self._ingest,
        )
        self.lists += 1
        changes = diff(self._cache, items)
        apply_changes(self._cache, changes)
        self._resource_version = list_rv
        for change in changes:
            self._notify(change)
        self._synced.set()
        log.debug("%s: listed %d objects at %s, %d changes", self.name, len(items), list_rv, len(changes))

    async def _watch(self) -> None:
        """One watch stream, from the last seen resourceVersion until the server ends it."""
        self.watches += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        received = 0
        stream = self._client.watch(
            self.resource,
            resource_version=self._resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=random.randrange(_MIN_WATCH_TIMEOUT, 2 * _MIN_WATCH_TIMEOUT),
            bookmarks=True,
        )
        try:
            async for event in stream:
                received += 1
                self._backoff.reset()
                self._handle(event)
        finally:
            # Close the stream (and its connection) now, not whenever the generator is collected, if we leave
            # the loop by an exception of ours.
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if not received and loop.time() - started < _SHORT_WATCH:
            raise UnreachableError(f"{self.name}: watch ended at once without events")

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.warning("%s: %s event without an object", self.name, kind)
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._apply_event(kind, self._ingest(obj))
        elif kind != "BOOKMARK":
            log.warning("%s: ignoring a watch event of type %r", self.name, kind)
            return
        rv = resource_version_of(obj)
        if rv:
            self._resource_version = rv

    def _apply_event(self, kind: str, obj: Obj) -> None:
        try:
            key = object_key(obj)
        except ValueError as exc:
            log.warning("%s: skipping a %s event: %s", self.name, kind, exc)
            return
        if kind == "DELETED":
            # Only a cached object is worth a notification: anything else was never announced.
            if self._cache.pop(key, None) is not None:
                self._notify(Deleted(key, obj))
            return
        old = self._cache.get(key)
        self._cache[key] = obj
        if old is None:
            self._notify(Added(key, obj))
        elif resource_version_of(old) != resource_version_of(obj):
            self._notify(Updated(key, old, obj))

    def _notify(self, change: Change) -> None:
        for handler in self._handlers:
            self._notify_one(handler, change)

    def _notify_one(self, handler: EventHandler, change: Change) -> None:
        try:
            match change:
                case Added():
                    handler.on_add(change.obj)
                case Updated():
                    handler.on_update(change.old, change.obj)
                case Deleted():
                    handler.on_delete(change.obj)
        except Exception:
            log.exception("%s: handler %r failed on %s %s", self.name, handler, type(change).__name__, change.key)
