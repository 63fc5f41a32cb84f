"""The provider's Events about the pods we run → Events about the home pods (pure).

One home Event per provider Event, under the same name, so that its count growing updates one home Event
and a re-list writes nothing new.
"""

from __future__ import annotations

from liqo.api import names
from liqo.kube.events import MAX_MESSAGE_LENGTH
from liqo.kube.objects import Obj
from liqo.kube.timefmt import format_time, parse_time

MIRRORED_KINDS = {"Pod": "v1", "Service": "v1", "Ingress": "networking.k8s.io/v1"}
"""What Events are mirrored about (kind → the home object's apiVersion): the pods we run, and the copies of
Services and Ingresses (a load balancer or ingress controller of the provider reports on them)."""


NOT_MIRRORED_REASON = "Scheduled"
"""The provider's scheduler placing the pod on one of its nodes is not mirrored. Home's own ``Scheduled`` Event
already says where the pod went (the virtual node), and the provider's placement stays the provider's, as
its ``PodScheduled`` condition does (:func:`liqo.virtualkubelet.forge.pods.news_for_home`): a second
``Scheduled`` in ``kubectl describe pod`` would name a node home cannot see, for one more write per pod at
home. ``FailedScheduling`` (why the provider cannot place it) is mirrored."""
WATCHED = f"reason!={NOT_MIRRORED_REASON}"
"""The field selector of the twin's Events watch: what is never mirrored is never sent either."""


def mirrorable(event: Obj) -> bool:
    """Whether a provider Event is mirrored at home: about a kind we mirror, not a placement, not a mirror (pure)."""
    involved = event.get("involvedObject") or {}
    labels = event["metadata"].get("labels") or {}
    return bool(
        involved.get("kind") in MIRRORED_KINDS
        and involved.get("name")
        and event.get("reason") != NOT_MIRRORED_REASON
        and names.ORIGIN not in labels
    )


def _whole_seconds(stamp: str | None) -> str | None:
    """A ``Time`` from a ``Time`` or ``MicroTime`` (the events.k8s.io fields), which core Events need."""
    return format_time(parse_time(stamp)) if stamp else None


def mirrored_event(event: Obj, *, home_object: Obj, provider_id: str) -> Obj:
    """The home Event mirroring provider ``event`` onto ``home_object``: same name, reason, message, type, count (pure).

    ``home_object`` is what the provider's object stands for: the home pod, Service or Ingress.

    Same name as the provider's, so that every change of that Event (its count growing) updates one home Event
    and a re-list writes nothing new. Events written through events.k8s.io carry their count and times in
    ``series``/``eventTime`` instead: they are folded into the core fields.
    """
    meta = home_object["metadata"]
    kind = (event.get("involvedObject") or {}).get("kind") or "Pod"
    involved = {
        "apiVersion": MIRRORED_KINDS.get(kind, "v1"),
        "kind": kind,
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
    }
    if (event.get("involvedObject") or {}).get("fieldPath"):
        involved["fieldPath"] = event["involvedObject"]["fieldPath"]
    series = event.get("series") or {}
    first = _whole_seconds(event.get("firstTimestamp") or event.get("eventTime"))
    last = _whole_seconds(event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime"))
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or "provider"
    mirror: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event["metadata"]["name"],
            "namespace": meta["namespace"],
            "labels": names.peer_labels(provider_id) | {names.ORIGIN: provider_id},
        },
        "involvedObject": involved,
        "type": event.get("type") or "Normal",
        "reason": event.get("reason") or "",
        "message": (event.get("message") or "")[:MAX_MESSAGE_LENGTH],
        "count": max(int(event.get("count") or 0), int(series.get("count") or 0), 1),
        "source": {"component": component},
    }
    if first or last:
        mirror["firstTimestamp"] = first or last
        mirror["lastTimestamp"] = last or first
    return mirror
