"""The provider's side of offloaded pods: every ShadowPod gets a real pod, for as long as it exists.

The consumer never creates pods here: it asks with a ShadowPod, and this controller decides. That is what
makes offloaded pods survive the consumer: if the home cluster is unreachable (split brain) nothing
deletes the ShadowPod, so a pod that dies or is deleted by hand is simply created again. A ShadowPod
carries a finalizer so that its deletion is seen even by a restarted controller, and the real pod is then
deleted with the grace period the consumer asked for (the home pod's), before the ShadowPod is let go.
The pod also has the ShadowPod as controlling owner: should the finalizer be removed by hand, the garbage
collector still removes the pod.

Before making a pod the controller judges the ShadowPod again, with the verdict the validating webhook
gives (:mod:`liqo.offloading.podsecurity`): a ShadowPod stored while the webhook was not registered (before
an upgrade, or with the registration removed) gets no pod, only the status ``Refused`` and a Warning Event.
The pod is made with the verdict's resets (no ServiceAccount token, the grace period capped).

Keyed by ``namespace/name`` (a ShadowPod and its pod share both).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from liqo.api import names
from liqo.api.resources import SHADOW_PODS, SHARING_POLICIES
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller
from liqo.kube.errors import ApiError, ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.resources import NAMESPACES, PODS
from liqo.offloading.podsecurity import PolicySelector, Reset, Verdict, apply_resets, shadow_pod_verdict

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def pod_from_shadow(shadow: Obj, *, resets: Sequence[Reset]) -> Obj:
    """The real pod created for ``shadow``, controlled by it, with the verdict's ``resets`` applied (pure)."""
    meta = shadow["metadata"]
    labels = dict(meta.get("labels") or {}) | {names.SHADOW_POD: meta["name"]}
    annotations = dict(meta.get("annotations") or {}) | {names.HOME_POD_UID: shadow["spec"].get("homePodUID", "")}
    owner = {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": apply_resets(shadow["spec"]["pod"], resets),
    }


def made_for(pod: Obj, shadow: Obj) -> bool:
    """Whether ``pod`` was made for this very ShadowPod, not for a deleted namesake (pure)."""
    return any(o.get("uid") == shadow["metadata"].get("uid") for o in pod["metadata"].get("ownerReferences") or [])


MAX_GRACE_DIGITS = 18
"""Longer annotations are ignored: ``int()`` refuses strings beyond 4300 digits, and no grace period needs more."""
DEFAULT_GRACE_SECONDS = 30
"""A pod's grace period when its spec has none (the API server's default)."""


def grace_period(shadow: Obj, pod: Obj) -> int | None:
    """The grace period to delete ``pod`` with: the consumer's, never above the pod's own (pure).

    The annotation is the consumer's to write, so anything may be in it; ``str.isdigit`` alone lets ``'²'``
    through to ``int()``, which raises, and a raising reconcile would jam the ShadowPod's deletion behind
    its finalizer (then the twin, then unpeer). Only ASCII digits count; anything else means "the pod's own
    grace period" (None).
    """
    value = (shadow["metadata"].get("annotations") or {}).get(names.GRACE_PERIOD)
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_GRACE_DIGITS
        or not (value.isascii() and value.isdigit())
    ):
        return None
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    ceiling = own if isinstance(own, int) and not isinstance(own, bool) and own >= 0 else DEFAULT_GRACE_SECONDS
    return min(int(value), ceiling)


def _key(obj: Obj) -> list[str]:
    meta = obj["metadata"]
    return [f"{meta['namespace']}/{meta['name']}"]


class ShadowPods:
    """Creates, re-creates and deletes the pods of every ShadowPod in this cluster."""

    def __init__(
        self, *, client: KubeClient, informers: SharedInformers, events: EventRecorder, select: PolicySelector
    ) -> None:
        self._client = client
        self._events = events
        self._select = select
        self.shadows = informers.informer(SHADOW_PODS, label_selector=names.REMOTE_CLUSTER_ID)
        self.pods = informers.informer(PODS, label_selector=names.SHADOW_POD)
        self.namespaces = informers.informer(NAMESPACES)
        self.policies = informers.informer(SHARING_POLICIES)
        self.controller: Controller[str] = Controller(name="shadowpods", reconcile=self.reconcile, workers=16)
        self.controller.watch(self.shadows, _key)
        self.controller.watch(self.pods, _key)

    async def reconcile(self, key: str) -> None:
        """Converge the pod of ShadowPod ``key``."""
        namespace, name = key.split("/", 1)
        shadow = self.shadows.store.get(key)
        pod = self.pods.store.get(key)
        if shadow is None:
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                # Its ShadowPod is gone (the garbage collector would get there too, later).
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(PODS, name, namespace=namespace, uid=pod["metadata"]["uid"])
            return
        if shadow["metadata"].get("deletionTimestamp"):
            await self._release(shadow, pod)
            return
        if names.FINALIZER not in (shadow["metadata"].get("finalizers") or []):
            finalizers = [*(shadow["metadata"].get("finalizers") or []), names.FINALIZER]
            await self._client.patch(
                SHADOW_PODS,
                name,
                {"metadata": {"finalizers": finalizers, "resourceVersion": shadow["metadata"]["resourceVersion"]}},
                namespace=namespace,
            )
            return  # the update comes back through the informer
        if pod is not None and not made_for(pod, shadow):
            if not pod["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(PODS, name, namespace=namespace, uid=pod["metadata"]["uid"])
            return
        if pod is None:
            await self._create(shadow)

    async def verdict(self, shadow: Obj) -> Verdict:
        """The webhook's verdict on ``shadow``, from the caches (a namespace they miss is asked for)."""
        name = shadow["metadata"]["namespace"]
        namespace = self.namespaces.store.get(name)
        if namespace is None:
            with contextlib.suppress(NotFoundError):
                namespace = await self._client.get(NAMESPACES, name)
        policies = self.policies.store.list()
        return shadow_pod_verdict(
            shadow, namespace=namespace, policy_of=lambda consumer: self._select(policies, consumer)
        )

    async def _create(self, shadow: Obj) -> None:
        meta = shadow["metadata"]
        verdict = await self.verdict(shadow)
        if not verdict.allowed:
            refused = {"phase": "Refused", "message": verdict.message()}
            if (shadow.get("status") or {}) != refused:  # once, not at every re-queue
                await self._set_status(shadow, refused)
                await self._events.record(shadow, type="Warning", reason="PodRefused", message=verdict.message())
            return
        try:
            await self._client.create(PODS, pod_from_shadow(shadow, resets=verdict.resets))
        except ConflictError:
            return  # created meanwhile (the informer is behind): the pod's event re-queues us
        except ApiError as exc:
            if exc.status in (400, 403, 422):  # refused: quota, admission, validation
                await self._set_status(shadow, {"phase": "Refused", "message": exc.message})
                await self._events.record(shadow, type="Warning", reason="PodRefused", message=exc.message)
            raise
        if (shadow.get("status") or {}).get("phase") == "Refused":  # no write per pod on the happy path
            await self._set_status(shadow, {"phase": "Created", "message": ""})
        log.debug("created pod %s/%s", meta["namespace"], meta["name"])

    async def _set_status(self, shadow: Obj, status: Obj) -> None:
        meta = shadow["metadata"]
        body = {
            "apiVersion": SHADOW_PODS.api_version,
            "kind": SHADOW_PODS.kind,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        }
        with contextlib.suppress(NotFoundError):
            await self._client.apply(SHADOW_PODS, body, subresource="status")

    async def _release(self, shadow: Obj, pod: Obj | None) -> None:
        """Delete the pod with the consumer's grace period, then let the ShadowPod go."""
        meta = shadow["metadata"]
        if pod is not None:
            if not pod["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(
                        PODS,
                        meta["name"],
                        namespace=meta["namespace"],
                        grace_period_seconds=grace_period(shadow, pod),
                        uid=pod["metadata"]["uid"],
                    )
            return  # the pod's deletion event re-queues us
        finalizers = [f for f in meta.get("finalizers") or [] if f != names.FINALIZER]
        if finalizers != (meta.get("finalizers") or []):
            with contextlib.suppress(NotFoundError):
                await self._client.patch(
                    SHADOW_PODS,
                    meta["name"],
                    {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
                    namespace=meta["namespace"],
                )
