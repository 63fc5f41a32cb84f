"""Home pods bound to a virtual node → ShadowPods on the provider, and the remote status back home.

One Handle per key, as Liqo's reflection: the key is the home pod's ``namespace/name``, and every event,
at home (the pod) or on the provider (its ShadowPod, its real pod), re-queues that key. ``reconcile``
reads the three caches and does the one next step towards agreement, so a restart (of this process, the
manager, either API server) converges from whatever state it finds, without duplicates:

- home pod alive, no ShadowPod → create the ShadowPod (a refusal by the provider lands on the home pod as
  a Pending reason and an Event, never as a vanished pod, and the write is retried with a capped backoff
  for as long as the pod lives) — unless no slot of the provider holds the pod
  (:mod:`liqo.virtualkubelet.fit`): then it stays Pending with ``DoesNotFitRemote`` and is checked again
  whenever the VirtualNode's slots change (:meth:`PodReflector.slots_changed`);
- remote pod → its phase, conditions, container statuses and IP onto the home pod; no remote pod and a
  ShadowPod the provider holds back (over the consumer's budget, no accepted offer) or refused → Pending
  with the provider's reason;
- home pod deleted → ShadowPod deleted with the home grace period → remote pod gone → home pod finalised;
- ShadowPod deleted on the provider while the home pod lives → home pod deleted (its controller replaces it).

Which twin namespace a home namespace maps to on this provider comes from the NamespaceOffloading's
status; the provider's ShadowPods and pods are watched in each twin (the identity may not list cluster-wide).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from liqo.api import names
from liqo.api.resources import SHADOW_PODS
from liqo.kube.cache import InformerGroup
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.resources import PODS
from liqo.virtualkubelet import fit, forge

log = logging.getLogger(__name__)

Obj = dict[str, Any]
RETRY_REFUSED_SECONDS = 30.0
"""A namespace not yet offloaded here is looked at again this often."""
REFUSED_FIRST_SECONDS = 1.0
REFUSED_MAX_SECONDS = 60.0
"""A ShadowPod the provider refused to take is written again after 1 s, doubling up to this, never given up
on: the provider's policy may change. Its backoff is cleared once the write goes through."""


def twins_on(offloadings: list[Obj], *, provider_id: str) -> dict[str, str]:
    """Home namespace → twin namespace on ``provider_id``, for twins the provider reports Ready (pure)."""
    twins: dict[str, str] = {}
    for offloading in offloadings:
        if offloading["metadata"].get("deletionTimestamp"):
            continue
        for twin in (offloading.get("status") or {}).get("remoteNamespacesConditions") or []:
            if twin.get("clusterID") == provider_id and twin.get("phase") == "Ready" and twin.get("remoteNamespace"):
                twins[offloading["metadata"]["namespace"]] = twin["remoteNamespace"]
    return twins


def _terminating(obj: Obj | None) -> bool:
    return bool(obj and obj["metadata"].get("deletionTimestamp"))


class _Twin(InformerGroup):
    """The provider's ShadowPods and pods of one twin namespace, as seen by our identity."""

    def __init__(self, *, provider: KubeClient, namespace: str, home_cluster_id: str) -> None:
        selector = f"{names.REMOTE_CLUSTER_ID}={home_cluster_id}"
        self.shadows = Informer(client=provider, resource=SHADOW_PODS, namespace=namespace, label_selector=selector)
        self.pods = Informer(client=provider, resource=PODS, namespace=namespace, label_selector=names.SHADOW_POD)
        super().__init__([self.shadows, self.pods], name=f"pods {namespace}")


class PodReflector:
    """Runs the pods bound to one virtual node on its provider."""

    def __init__(
        self,
        *,
        home: KubeClient,
        provider: KubeClient,
        node_name: str,
        provider_id: str,
        home_cluster_id: str,
        node_address: str,
        offloadings: Informer,
        events: EventRecorder,
        virtual_node: Callable[[], Obj | None],
        workers: int = 32,
    ) -> None:
        self._home = home
        self._virtual_node = virtual_node
        self._provider = provider
        self._provider_id = provider_id
        self._home_cluster_id = home_cluster_id
        self._address = node_address
        self._events = events
        self._offloadings = offloadings
        self.pods = Informer(client=home, resource=PODS, field_selector=f"spec.nodeName={node_name}")
        self.twins: dict[str, str] = {}
        self._held: set[str] = set()  # pods held back for want of a slot: what a change of slots re-queues
        self._refusals = ItemExponentialFailureRateLimiter(
            base_delay=REFUSED_FIRST_SECONDS, max_delay=REFUSED_MAX_SECONDS
        )
        self._remote: dict[str, _Twin] = {}
        self.controller: Controller[str] = Controller(
            name=f"pods {node_name}", reconcile=self.reconcile, workers=workers
        )
        self.controller.watch(self.pods, lambda pod: [_key(pod)])

    async def run(self) -> None:
        """Watch, reconcile, and follow the twins until cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.pods.run())
                await self.pods.wait_synced()
                self.twins_changed()
                group.create_task(self.controller.run())
        finally:
            for twin in self._remote.values():
                await twin.stop()

    # -- twins ----------------------------------------------------------------------------------------------

    def twins_changed(self) -> None:
        """The NamespaceOffloadings changed: follow the twins on this provider (call on every change)."""
        wanted = twins_on(self._offloadings.store.list(), provider_id=self._provider_id)
        if wanted == self.twins:
            return
        self.twins = wanted
        for namespace in set(self._remote) - set(wanted.values()):
            twin = self._remote.pop(namespace)
            asyncio.get_running_loop().create_task(twin.stop())
        homes = {twin: home for home, twin in wanted.items()}
        for namespace in set(wanted.values()) - set(self._remote):
            twin = _Twin(provider=self._provider, namespace=namespace, home_cluster_id=self._home_cluster_id)
            home = homes[namespace]

            for informer in (twin.shadows, twin.pods):
                informer.add_handler(self._remote_handler(home))
            self._remote[namespace] = twin
            twin.start()
        for pod in self.pods.store.list():  # pods waiting for a twin may go now (or must stop)
            self.controller.queue.add(_key(pod))

    def slots_changed(self) -> None:
        """The VirtualNode's largest slots changed: pods held back for want of a slot may fit now.

        Only those: slots move with every pod the provider places, and re-queueing every pod of the node
        each time would make a rollout quadratic. A restarted process reconciles every pod anyway.
        """
        for key in list(self._held):
            self.controller.queue.add(key)

    def remote_of(self, namespace: str, name: str) -> tuple[KubeClient, str] | None:
        """The provider's client and the twin namespace where home pod ``namespace/name`` runs."""
        twin = self.twins.get(namespace)
        if twin is None or self.pods.store.get(f"{namespace}/{name}") is None:
            return None
        return self._provider, twin

    def _remote_handler(self, home_namespace: str) -> HandlerFuncs:
        def enqueue(obj: Obj) -> None:
            self.controller.queue.add(f"{home_namespace}/{obj['metadata']['name']}")

        return HandlerFuncs(add=enqueue, update=lambda _old, new: enqueue(new), delete=enqueue)

    # -- reconcile ------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Take pod ``key`` one step closer to agreement between home and provider."""
        namespace, name = key.split("/", 1)
        home = self.pods.store.get(key)
        if home is None:
            self._held.discard(key)
            self._refusals.forget(key)
        twin_name = self.twins.get(namespace)
        if twin_name is None:
            return await self._no_twin(home)
        twin = self._remote[twin_name]
        if not twin.synced:
            return Result(requeue_after=0.5)
        shadow = twin.shadows.store.get(f"{twin_name}/{name}")
        remote = twin.pods.store.get(f"{twin_name}/{name}")
        if shadow is not None and home is not None and shadow["spec"].get("homePodUID") != home["metadata"]["uid"]:
            await self._delete_shadow(shadow, grace=None)  # a previous namesake's; the deletion re-queues us
            return None
        if home is None:
            if shadow is not None and not _terminating(shadow):
                await self._delete_shadow(shadow, grace=None)
            return None
        if _terminating(home):
            await self._finalise(home, shadow, remote)
            return None
        if _terminating(shadow):
            # The provider (or its admin) let the pod go: the home controller must make a new one.
            await self._delete_home(home, grace=0)
            return None
        slots = fit.slots_of(self._virtual_node())
        if shadow is None and slots is not None and not fit.fits(home, slots):
            # Sent, it would wait on the provider for a node that never comes. Only a pod not sent yet is
            # held back: one already running stays, whatever the slots say now.
            self._held.add(key)
            await self._refused(home, reason=fit.DOES_NOT_FIT, message=fit.misfit_message(home, slots))
            return None  # checked again when the slots change (slots_changed)
        self._held.discard(key)
        desired = forge.shadow_pod(home, namespace=twin_name, home_cluster_id=self._home_cluster_id)
        if shadow is None or not forge.shadow_is_current(shadow, desired):
            try:
                await self._provider.apply(SHADOW_PODS, desired)
            except ApiError as exc:
                if exc.status not in (400, 403, 422):
                    raise
                await self._refused(home, reason=forge.PROVIDER_REFUSED, message=exc.message)
                return Result(requeue_after=self._refusals.when(key))
            self._refusals.forget(key)
            return None  # its status comes back through the informers
        if remote is not None and forge.runs_home_pod(remote, home):
            await self._set_status(home, forge.home_status(remote, node_address=self._address))
        elif (verdict := forge.held_back(shadow)) is not None:
            await self._refused(home, reason=verdict[0], message=verdict[1])
        return None

    async def _no_twin(self, home: Obj | None) -> Result | None:
        if home is None:
            return None
        if _terminating(home):
            await self._delete_home(home, grace=0)  # nothing remote to wait for
            return None
        message = f"namespace {home['metadata']['namespace']} is not offloaded to this provider (yet)"
        await self._refused(home, reason="NamespaceNotOffloaded", message=message)
        return Result(requeue_after=RETRY_REFUSED_SECONDS)

    async def _finalise(self, home: Obj, shadow: Obj | None, remote: Obj | None) -> None:
        if shadow is not None:
            if not _terminating(shadow):
                grace = home["metadata"].get("deletionGracePeriodSeconds")
                await self._delete_shadow(shadow, grace=grace)
            return  # the provider deletes the pod, then lets the ShadowPod go: both re-queue us
        if remote is None:
            await self._delete_home(home, grace=0)

    async def _delete_shadow(self, shadow: Obj, *, grace: int | None) -> None:
        meta = shadow["metadata"]
        with contextlib.suppress(NotFoundError):
            if grace is not None:
                annotations = {names.GRACE_PERIOD: str(grace)}
                await self._provider.patch(
                    SHADOW_PODS, meta["name"], {"metadata": {"annotations": annotations}}, namespace=meta["namespace"]
                )
            await self._provider.delete(SHADOW_PODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"])

    async def _delete_home(self, home: Obj, *, grace: int) -> None:
        meta = home["metadata"]
        with contextlib.suppress(NotFoundError):
            await self._home.delete(
                PODS, meta["name"], namespace=meta["namespace"], grace_period_seconds=grace, uid=meta["uid"]
            )

    async def _set_status(self, home: Obj, status: Obj) -> None:
        if forge.status_differs(home, status):
            meta = home["metadata"]
            with contextlib.suppress(NotFoundError):
                await self._home.patch(
                    PODS,
                    meta["name"],
                    forge.status_patch(status),
                    namespace=meta["namespace"],
                    subresource="status",
                    patch_type="strategic",
                )

    async def _refused(self, home: Obj, *, reason: str, message: str) -> None:
        status = forge.refused_status(reason=reason, message=message)
        if forge.status_differs(home, status):
            await self._set_status(home, status)
            await self._events.record(home, type="Warning", reason=reason, message=message)


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
