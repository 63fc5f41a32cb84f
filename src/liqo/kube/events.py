"""Kubernetes Events about our objects, aggregated as client-go's recorder does.

Why a recorder rather than a bare ``client.create``: a reconcile that fails the same way on every retry would
write one Event per attempt and flood etcd and ``kubectl describe``. Like client-go's ``EventCorrelator``, a
repeat of the same event (same object, type, reason and message) within ten minutes bumps ``count`` and
``lastTimestamp`` of the Event already written instead.

An Event is a courtesy to humans, never part of a reconcile's outcome: every failure here is logged and
swallowed. The Event body is built by a pure function (:func:`build_event`) so its shape is testable alone.
Its message often names what a peer named, and ``kubectl describe`` prints it to a terminal: it goes through
:func:`~liqo.kube.printable.printable` like every log line (docs/security.md, "Logs").
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from liqo.kube.errors import NotFoundError, namespace_terminating
from liqo.kube.printable import printable
from liqo.kube.resources import EVENTS, Resource
from liqo.kube.timefmt import format_time

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_LENGTH = 1024
"""Longer messages are truncated (client-go's limit; the API rejects huge ones)."""

AGGREGATION_WINDOW = timedelta(minutes=10)
"""A repeat within this time of the previous occurrence updates the existing Event."""

_MAX_NAME_LENGTH = 253

_Key = tuple[str, str, str, str, str, str, str]


class EventClient(Protocol):
    """The client calls a recorder makes; :class:`~liqo.kube.client.KubeClient` provides them."""

    async def create(self, resource: Resource, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create an object."""

    async def patch(self, resource: Resource, name: str, patch: Any, *, namespace: str | None = None) -> dict[str, Any]:
        """Merge-patch an object."""


def event_name(object_name: str, suffix: str) -> str:
    """``<object name>.<suffix>``, shortening the object name so the result is a valid name (253 chars)."""
    room = _MAX_NAME_LENGTH - len(suffix) - 1
    # A cut name may end in "-" or ".", which may not precede the "." separator in a DNS subdomain.
    return f"{object_name[:room].rstrip('-.')}.{suffix}"


def involved_object(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ``involvedObject`` reference of an object (its set fields among the ones an ObjectReference has)."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise ValueError("object has no metadata.name")
    fields = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {field: str(value) for field, value in fields.items() if value}


def build_event(
    obj: Mapping[str, Any],
    *,
    type: EventType,
    reason: str,
    message: str,
    component: str,
    host: str,
    now: datetime,
    name_suffix: str,
) -> dict[str, Any]:
    """The core/v1 Event reporting ``reason``/``message`` about ``obj``, first seen ``now``.

    Args:
        obj: The object the event is about (needs ``metadata.name``).
        type: ``Normal`` or ``Warning``.
        reason: A short UpperCamelCase cause, e.g. ``PeeringEstablished``.
        message: A human-readable description (escaped, and cut to :data:`MAX_MESSAGE_LENGTH`).
        component: The reporting component, e.g. ``liqo-manager``.
        host: The reporting instance (host or pod name); may be empty.
        now: The time of the occurrence.
        name_suffix: Makes the Event's name unique, e.g. the time in hex nanoseconds as client-go does.

    Returns:
        The Event, in the object's namespace, or ``default`` for a cluster-scoped object.

    Raises:
        ValueError: If ``obj`` has no name.
    """
    involved = involved_object(obj)
    stamp = format_time(now)
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(involved["name"], name_suffix),
            "namespace": involved.get("namespace") or "default",
        },
        "involvedObject": involved,
        "type": type,
        "reason": reason,
        "message": printable(message, limit=MAX_MESSAGE_LENGTH),
        "source": {"component": component, **({"host": host} if host else {})},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    if host:
        event["reportingInstance"] = host
    return event


@dataclass(slots=True)
class _Written:
    """An Event we wrote, and how often and when last its occurrence was seen."""

    name: str
    namespace: str
    count: int
    last_seen: datetime


class EventRecorder:
    """Record Events about objects, counting repeats on the Event already written."""

    def __init__(
        self,
        *,
        client: EventClient,
        component: str,
        host: str = "",
        cache_size: int = 4096,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Set up a recorder; it writes nothing before :meth:`record`.

        Args:
            client: The API client (a :class:`~liqo.kube.client.KubeClient`) of the objects' cluster.
            component: The reporting component, e.g. ``liqo-manager``.
            host: The reporting instance (host or pod name).
            cache_size: How many distinct recent events are remembered for aggregation (least recent dropped).
            clock: The current time (for tests).
        """
        self._client = client
        self.component = component
        self.host = host
        self._cache_size = cache_size
        self._clock = clock
        self._written: OrderedDict[_Key, _Written] = OrderedDict()

    async def record(self, obj: Mapping[str, Any], *, type: EventType, reason: str, message: str) -> None:
        """Record an event about ``obj``; never raises (failures are logged).

        Args:
            obj: The object the event is about.
            type: ``Normal`` or ``Warning``.
            reason: A short UpperCamelCase cause.
            message: A human-readable description (escaped, and cut to :data:`MAX_MESSAGE_LENGTH`).
        """
        try:
            await self._record(obj, type=type, reason=reason, message=printable(message, limit=MAX_MESSAGE_LENGTH))
        except Exception as exc:
            meta = obj.get("metadata") or {}
            where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
            if namespace_terminating(exc):  # the object goes with its namespace: nobody would read the Event
                log.debug(
                    "no %s event %s about %s %s: its namespace is terminating", type, reason, obj.get("kind"), where
                )
                return
            log.warning("cannot record %s event %s about %s %s", type, reason, obj.get("kind"), where, exc_info=True)

    async def _record(self, obj: Mapping[str, Any], *, type: EventType, reason: str, message: str) -> None:
        now = self._clock()
        involved = involved_object(obj)
        key: _Key = (
            involved.get("namespace", ""),
            involved.get("kind", ""),
            involved["name"],
            involved.get("uid", ""),
            type,
            reason,
            message,
        )
        written = self._written.get(key)
        if written is not None and now - written.last_seen < AGGREGATION_WINDOW:
            written.count += 1
            written.last_seen = now
            self._written.move_to_end(key)
            patch = {"count": written.count, "lastTimestamp": format_time(now)}
            try:
                await self._client.patch(EVENTS, written.name, patch, namespace=written.namespace)
                return
            except NotFoundError:
                # Expired (events live an hour by default) or deleted: start a new one.
                del self._written[key]
        event = build_event(
            obj,
            type=type,
            reason=reason,
            message=message,
            component=self.component,
            host=self.host,
            now=now,
            name_suffix=f"{time.time_ns():x}",
        )
        namespace = event["metadata"]["namespace"]
        created = await self._client.create(EVENTS, event, namespace=namespace)
        name = str((created.get("metadata") or {}).get("name") or event["metadata"]["name"])
        self._written[key] = _Written(name=name, namespace=namespace, count=1, last_seen=now)
        self._written.move_to_end(key)
        while len(self._written) > self._cache_size:
            self._written.popitem(last=False)
