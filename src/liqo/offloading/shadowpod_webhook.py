"""The ShadowPod validating webhook: the provider refuses a peer's pod before it is even stored.

The API server calls it for every ShadowPod created or updated in a twin namespace (the registration's
``namespaceSelector``); the verdict is :func:`liqo.offloading.podsecurity.shadow_pod_verdict`, the same
one the ShadowPod controller checks again before creating a pod. A refusal is ``403`` with every violation
named, which the API server hands back to the consumer's virtual kubelet (it shows it on the home pod).
A label or annotation key off the provider's allowlist is no violation: it is left off the pod the
ShadowPod controller makes (:class:`~liqo.offloading.podsecurity.Dropped`), so a ShadowPod is never refused
for one.

The consumer is the *namespace's* (its ``liqo.io/remote-cluster-id`` label, on a twin this cluster made):
never a label of the ShadowPod, which the consumer writes. Its policy is chosen among the SharingPolicies
by a function the manager passes in (capabilities do not import each other). Every manager replica serves
the webhook, so each runs its own informers of twin namespaces and SharingPolicies, outside leader election.

An UPDATE that leaves the pod and the annotations as they were (but liqo's bookkeeping: the grace period the
consumer's virtual kubelet writes just before it deletes the ShadowPod) is allowed whatever the policy says
now, whatever it does to the labels (the verdict judges no label but its type, which the API server checks):
liqo's own writes (the provider's finalizer, the consumer's grace period before a deletion) must never be
refused because a policy tightened, or a pod whose home pod is gone would keep running here; the pod of such
a ShadowPod was judged when it was made, and is judged again whenever it is made again. The registration's
match condition says the same in CEL (:data:`liqo.install.manifests.SHADOW_POD_JUDGED_CHANGE`), so the API
server does not send those; the check here stays for API servers that send them anyway. Any other UPDATE is
judged whole, as a creation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web

from liqo.api import names
from liqo.api.resources import SHADOW_PODS, SHARING_POLICIES
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES
from liqo.offloading.pod_webhook import LOOKUP_TIMEOUT, PodReview, WebhookClient, review_response, serve_review
from liqo.offloading.podsecurity import BOOKKEEPING_ANNOTATIONS, PolicySelector, Verdict, shadow_pod_verdict
from liqo.offloading.registration import VALIDATE_PATH

log = logging.getLogger(__name__)


NOT_SYNCED = (
    "liqo's ShadowPod webhook has not loaded the twin namespaces and sharing policies yet (the manager is"
    " starting): retry in a few seconds"
)


def unchanged(review: PodReview) -> bool:
    """Whether ``review`` is an UPDATE leaving what the verdict judges as it was (pure).

    That is the pod and the annotations but :data:`~liqo.offloading.podsecurity.BOOKKEEPING_ANNOTATIONS`.
    """
    if review.operation != "UPDATE" or review.obj is None or review.old_obj is None:
        return False

    def judged(obj: Mapping[str, Any]) -> tuple[Any, Any]:
        annotations = _metadata(obj).get("annotations")
        if annotations is None:
            annotations = {}  # absent or empty: the same, as the registration's CEL sees it
        if isinstance(annotations, Mapping):
            annotations = {k: v for k, v in annotations.items() if k not in BOOKKEEPING_ANNOTATIONS}
        return obj.get("spec"), annotations

    return judged(review.obj) == judged(review.old_obj)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def is_shadow_pod_write(review: PodReview) -> bool:
    """Whether ``review`` creates or updates a ShadowPod (the only requests the configuration sends us)."""
    return (
        review.operation in ("CREATE", "UPDATE")
        and review.group == SHADOW_PODS.group
        and review.kind == SHADOW_PODS.kind
        and not review.sub_resource
        and review.obj is not None
    )


class ShadowPodWebhook:
    """``POST`` :data:`VALIDATE_PATH` over caches of the twin namespaces and SharingPolicies."""

    def __init__(self, *, client: WebhookClient, select: PolicySelector) -> None:
        self._client = client
        self._select = select
        self.namespaces = Informer(
            client=client, resource=NAMESPACES, label_selector=names.REMOTE_CLUSTER_ID, name="twins (webhook)"
        )
        self.policies = Informer(client=client, resource=SHARING_POLICIES, name="sharingpolicies (webhook)")

    def attach(self, app: web.Application) -> None:
        """Serve :data:`VALIDATE_PATH` on ``app`` and run the informers while ``app`` runs."""
        app.router.add_post(VALIDATE_PATH, self.handle)
        app.cleanup_ctx.append(self._informing)

    async def _informing(self, _: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(i.run(), name=f"informer {i.name}") for i in (self.namespaces, self.policies)]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one AdmissionReview."""
        return await serve_review(request, self.review)

    async def review(self, review: PodReview) -> Obj:
        """Allowed, or refused (403) with every violation of the ShadowPod named."""
        if not is_shadow_pod_write(review) or unchanged(review):
            return review_response(uid=review.uid)
        if not (self.namespaces.has_synced and self.policies.has_synced):
            log.warning("ShadowPod write in %s refused: the webhook's caches are not synced", review.namespace)
            return review_response(uid=review.uid, denied=(503, NOT_SYNCED))
        try:
            verdict = await self.verdict(review)
        except (KubeError, TimeoutError, ValueError) as exc:
            message = f"liqo's ShadowPod webhook cannot judge pods in namespace {review.namespace}: {exc}"
            log.warning("%s", message)
            return review_response(uid=review.uid, denied=(500, message))
        if not verdict.allowed:
            log.info("ShadowPod in %s refused: %s", review.namespace, verdict.message())
            return review_response(uid=review.uid, denied=(403, verdict.message()))
        return review_response(uid=review.uid)

    async def verdict(self, review: PodReview) -> Verdict:
        """The verdict on the reviewed ShadowPod (a malformed SharingPolicy raises ``ValueError``)."""
        namespace = await self._namespace(review.namespace)
        policies = self.policies.store.list()
        return shadow_pod_verdict(
            review.obj,
            namespace=namespace,
            policy_of=lambda consumer: self._select(policies, consumer),
        )

    async def _namespace(self, name: str) -> Obj | None:
        cached = self.namespaces.store.get(name)
        if cached is not None:
            return cached
        # A twin created an instant ago may not be in the cache yet: ask rather than refuse.
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT):
                return await self._client.get(NAMESPACES, name)
        except NotFoundError:
            return None
