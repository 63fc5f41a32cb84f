"""The provider's side of a partition: the endpoints a consumer reflected turn not-ready when it goes silent.

A consumer's virtual kubelet lists, in EndpointSlices of its twins, the endpoints of its Services that run
at home, so that pods here reach them (:mod:`liqo.virtualkubelet.reflection.endpointslices`). Only it can
keep them true, and only while it reaches us: it renews the Lease ``liqo-consumer-heartbeat`` in its tenant
namespace every 10 s. When nothing renewed it for its duration (40 s), those slices describe a world we no
longer see, so this controller sets their endpoints not-ready (``ready`` and ``serving`` false) — never
deletes them: Services here keep them and take them back the moment the virtual kubelet, answering again,
rewrites them from home.

Silence is judged by when *we* saw the Lease change (its resourceVersion), on our monotonic clock, never by
the ``renewTime`` the consumer writes: its clock is not ours, and a consumer's word is untrusted. A
restarted manager sees every Lease anew, so it waits a whole duration before judging. The consumer of a
slice is the one whose twin holds it (the namespace's labels, written by this cluster), never a label on the
slice, which the consumer writes.

Keyed by consumer cluster ID.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from liqo.api import names
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.informer import HandlerFuncs
from liqo.kube.objects import Obj
from liqo.kube.resources import ENDPOINT_SLICES, LEASES, NAMESPACES

log = logging.getLogger(__name__)


SILENCE_SECONDS = 40.0
"""How long a heartbeat may go unrenewed before the consumer's endpoints are taken as unknown (a node's
Lease duration: the same judgement Kubernetes makes of a silent kubelet)."""


# -- pure decisions --------------------------------------------------------------------------------------


def consumer_of_twin(namespace: Obj | None) -> str | None:
    """The consumer a twin namespace was made for, from the labels this cluster wrote (pure)."""
    if namespace is None or names.ORIGIN_NAMESPACE not in ((namespace.get("metadata") or {}).get("labels") or {}):
        return None
    return names.labelled_peer_id(namespace)


def not_ready(endpoint_slice: Obj) -> Obj | None:
    """The patch setting every endpoint of ``endpoint_slice`` not-ready; None when none is ready (pure).

    ``terminating`` and the addresses stay: only what the silent consumer can no longer vouch for goes.
    """
    endpoints = endpoint_slice.get("endpoints") or []
    if not any(
        (e.get("conditions") or {}).get("ready") or (e.get("conditions") or {}).get("serving") for e in endpoints
    ):
        return None
    darkened = [
        endpoint | {"conditions": (endpoint.get("conditions") or {}) | {"ready": False, "serving": False}}
        for endpoint in endpoints
    ]
    meta = endpoint_slice["metadata"]
    return {"metadata": {"resourceVersion": meta["resourceVersion"]}, "endpoints": darkened}


def silent_for(last_change: float | None, *, now: float) -> float:
    """Seconds since the heartbeat was last seen changing (0 when never seen: nothing to judge yet) (pure)."""
    return 0.0 if last_change is None else max(0.0, now - last_change)


# -- the controller --------------------------------------------------------------------------------------


class Heartbeats(Component):
    """Turns the endpoints of silent consumers not-ready."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        clock: Callable[[], float] = time.monotonic,
        silence: float = SILENCE_SECONDS,
    ) -> None:
        self._client = client
        self._clock = clock
        self._silence = silence
        self._seen: dict[str, tuple[str, float]] = {}
        """Consumer → (its heartbeat's resourceVersion, when we saw it change)."""
        # Only heartbeats: a cluster-wide Lease cache would hold (and hear of) every node's.
        self.leases = informers.informer(LEASES, field_selector=f"metadata.name={names.CONSUMER_HEARTBEAT}")
        self.slices = informers.informer(
            ENDPOINT_SLICES, label_selector=f"{names.SLICE_MANAGED_BY}={names.REFLECTION_MANAGER}"
        )
        self.namespaces = informers.informer(NAMESPACES)
        self.controller: Controller[str] = Controller(name="heartbeats", reconcile=self.reconcile, workers=2)
        self.leases.add_handler(HandlerFuncs(add=self._beat, update=lambda _old, new: self._beat(new)))
        self.controller.watch(self.slices, self._consumer_of_slice)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def _beat(self, lease: Obj) -> None:
        meta = lease["metadata"]
        consumer = names.tenant_peer_id(meta.get("namespace") or "")
        if consumer is None or meta["name"] != names.CONSUMER_HEARTBEAT:
            return
        version = meta.get("resourceVersion", "")
        if self._seen.get(consumer, ("", 0.0))[0] != version:
            self._seen[consumer] = (version, self._clock())
        self.controller.queue.add(consumer)

    def _consumer_of_slice(self, endpoint_slice: Obj) -> list[str]:
        consumer = consumer_of_twin(self.namespaces.store.get(endpoint_slice["metadata"].get("namespace") or ""))
        return [consumer] if consumer else []

    async def reconcile(self, consumer: str) -> Result | None:
        """Darken the consumer's reflected endpoints if its heartbeat went silent; else look again when it could."""
        seen = self._seen.get(consumer)
        if seen is None:
            return None  # no heartbeat (yet): nothing to judge it by
        quiet = silent_for(seen[1], now=self._clock())
        if quiet < self._silence:
            return Result(requeue_after=self._silence - quiet)
        for endpoint_slice in self.slices.store.list():
            meta = endpoint_slice["metadata"]
            if self._consumer_of_slice(endpoint_slice) != [consumer]:
                continue
            patch = not_ready(endpoint_slice)
            if patch is None:
                continue
            log.info(
                "consumer %s silent for %.0fs: endpoints of %s/%s not ready",
                consumer,
                quiet,
                meta["namespace"],
                meta["name"],
            )
            with contextlib.suppress(ConflictError, NotFoundError):  # changed meanwhile: its event re-queues us
                await self._client.patch(ENDPOINT_SLICES, meta["name"], patch, namespace=meta["namespace"])
        return None
