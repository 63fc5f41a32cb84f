"""The provider's side of offloaded pods: every ShadowPod gets a real pod, for as long as it exists.

The consumer never creates pods here: it asks with a ShadowPod, and this controller decides. That is what
makes offloaded pods survive the consumer: if the home cluster is unreachable (split brain) nothing
deletes the ShadowPod, so a pod that dies or is deleted by hand is simply created again. A ShadowPod
carries a finalizer so that its deletion is seen even by a restarted controller, and the real pod is then
deleted with the grace period the consumer asked for (the home pod's), before the ShadowPod is let go.
The pod also has the ShadowPod as controlling owner: should the finalizer be removed by hand, the garbage
collector still removes the pod.

The pods of one consumer, in all its twins together, stay within its budget: the offer it accepted
(:mod:`liqo.offloading.budget`). A pod is created only if it fits beside the pods the consumer already
holds; otherwise its ShadowPod waits, saying why in its status (``Waiting``, ``OverBudget`` or
``NoAcceptedOffer``), and is woken when room frees or the budget changes — never dropped. The consumer of
a ShadowPod is the one whose twin holds it (the namespace's label, set by this cluster), never a label on
the ShadowPod, which the consumer writes. Statuses are written when a ShadowPod starts waiting, when the
reason changes, and when it stops: a pod that fits costs no write but its own creation.

Every creation is checked, the first and every later one (the pod deleted by hand or by a drain, or stopped
while the consumer had no budget), and measured from the ShadowPod's spec as it is then: the consumer may
change that spec at any time, and a pod made again without a check would run whatever it says now on the
room its first version was granted. A pod holds its room from the moment it is asked for until it is gone:
terminating, it still runs. The pods cache alone cannot say a pod is gone right after its creation (the
create returns before its event arrives, or fails without saying whether it happened), so until the cache
has shown a pod asked for, its absence there is checked with the API server before its room is let go.

Before making a pod the controller judges the ShadowPod again, with the verdict the validating webhook
gives (:mod:`liqo.offloading.podsecurity`): a ShadowPod stored while the webhook was not registered (before
an upgrade, or with the registration removed), or before the consumer's policy tightened, gets no pod, only
the status ``Refused`` and a Warning Event, and is judged again with the same capped backoff. The pod is
made with the verdict's resets (no ServiceAccount token, the grace period capped) and only the labels and
annotations whose keys the provider copies; the keys left behind are named at each creation, with the
policy fields that would copy them, in a Normal Event ``KeysNotCopied`` on the ShadowPod (where this
controller reports on it) and on the pod (the consumer's virtual kubelet mirrors a pod's Events onto the
home pod, so the consumer's user is told too). Normal, not Warning: the pod runs as the provider's policy
says, nothing failed, and every Helm chart's pod (``helm.sh/chart``) would otherwise raise a warning.

Keyed by ``namespace/name`` (a ShadowPod and its pod share both); the budgets, by consumer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from liqo.api import names
from liqo.api.podrequests import RESOURCE_PATHS
from liqo.api.quantity import QuantityError
from liqo.api.resources import RESOURCE_OFFERS, SHADOW_PODS, SHARING_POLICIES
from liqo.api.shadowpods import ShadowPodPhase, ShadowPodReason
from liqo.api.volumes import SELECTED_NODE
from liqo.kube.cache import Derived, SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, ConflictError, KubeError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.finalizers import add_finalizer, remove_finalizer
from liqo.kube.metrics import CacheGauge
from liqo.kube.objects import Obj
from liqo.kube.projection import keep
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.resources import (
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    object_key,
    split_namespaced_key,
    terminating,
)
from liqo.offloading import metrics
from liqo.offloading.budget import (
    Budget,
    Claim,
    ClaimLedger,
    ClaimsWait,
    Ledger,
    NoBudget,
    UnreadablePod,
    budget_of,
    claim_size,
    pod_claims,
    pod_usage,
)
from liqo.offloading.podsecurity import SecurityPolicy, Verdict, apply_resets, copied_keys, shadow_pod_verdict
from liqo.offloading.twins import is_twin_of

log = logging.getLogger(__name__)


KEYS_NOT_COPIED = "KeysNotCopied"
"""The Normal Event on a ShadowPod whose pod was made without some of its labels or annotations."""
Created = Literal["created", "refused", "unknown"]
"""What came of a pod's creation: ``unknown`` when the API server did not say (a timeout, a 5xx)."""

RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
"""A waiting or refused ShadowPod is looked at again after 1 s, doubling up to this: never given up on."""
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class ConsumerPolicy(Protocol):
    """What this controller needs of the sharing policy applying to a consumer."""

    @property
    def count_limits(self) -> bool:
        """Whether the consumer's pods' limits must add up within its budget too."""
        ...

    @property
    def pod_security(self) -> SecurityPolicy:
        """What the consumer's pods may do here."""
        ...


ConsumerPolicySelector = Callable[[Sequence[Mapping[str, Any]], str], ConsumerPolicy]
"""Which policy applies to a consumer (by cluster ID), given every SharingPolicy (the manager passes
``liqo.sharing``'s: capabilities do not import each other)."""


def pod_from_shadow(shadow: Obj, *, verdict: Verdict) -> Obj:
    """The real pod created for ``shadow``, controlled by it, with the ``verdict``'s resets and drops applied (pure)."""
    meta = shadow["metadata"]
    labels = copied_keys(shadow, field="labels", dropped=verdict.dropped) | {names.SHADOW_POD: meta["name"]}
    annotations = copied_keys(shadow, field="annotations", dropped=verdict.dropped) | {
        names.HOME_POD_UID: shadow["spec"].get("homePodUID", "")
    }
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
        "spec": apply_resets(shadow["spec"]["pod"], verdict.resets),
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


POD_FIELDS = keep("metadata", "status.phase", "spec.terminationGracePeriodSeconds", *RESOURCE_PATHS)
"""All this controller reads of the pods it made: their metadata (:func:`made_for`, :func:`_owner_uid`, the
deletion's UID precondition), phase (:func:`_terminal`), grace period (:func:`grace_period`) and resources
(:func:`~liqo.offloading.budget.pod_usage`). A pod is never written back from the cache, only deleted."""


CLAIM_FIELDS = keep(
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.annotations",
    "spec.storageClassName",
    "spec.resources.requests",
    "status.phase",
    "status.capacity",
)
"""All this controller reads of claims: where they are, their class and size, whether a volume is (being) made."""


def _volume_made(claim: Obj) -> bool:
    """Whether a volume exists, or is being made, for ``claim``: bound, or a node chosen for it (pure)."""
    annotations = claim["metadata"].get("annotations") or {}
    return (claim.get("status") or {}).get("phase") == "Bound" or SELECTED_NODE in annotations


def _key(obj: Obj) -> list[str]:
    return [object_key(obj)]


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES


def _owner_uid(pod: Obj) -> str:
    return next((o.get("uid", "") for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), "")


class ShadowPods(Component):
    """Creates, re-creates and deletes the pods of every ShadowPod in this cluster, within each consumer's budget."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        events: EventRecorder,
        local_id: str,
        select: ConsumerPolicySelector,
    ) -> None:
        self._client = client
        self._events = events
        self._local_id = local_id
        self._select = select
        self.shadows = informers.informer(SHADOW_PODS, label_selector=names.REMOTE_CLUSTER_ID)
        self.pods = informers.informer(PODS, label_selector=names.SHADOW_POD, projection=POD_FIELDS)
        self.namespaces = informers.informer(NAMESPACES, label_selector=names.REMOTE_CLUSTER_ID)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.policies = informers.informer(SHARING_POLICIES)
        self.claims = informers.informer(PERSISTENT_VOLUME_CLAIMS, projection=CLAIM_FIELDS)
        self.ledger = Ledger()
        self.claim_ledger = ClaimLedger()
        self._rebuilt = False
        self._unseen: set[str] = set()  # keys whose pod was asked for and the cache has not shown yet
        self._retry = ItemExponentialFailureRateLimiter(base_delay=RETRY_FIRST_SECONDS, max_delay=RETRY_MAX_SECONDS)
        self._budgets: dict[str, Budget | NoBudget] = {}  # as last seen by reconcile_budget
        self._computed: Derived[str, Budget | NoBudget] = Derived()
        self.controller: Controller[str] = Controller(name="shadowpods", reconcile=self.reconcile, workers=16)
        self.controller.watch(self.shadows, _key)
        self.controller.watch(self.pods, _key)
        self.budgets: Controller[str] = Controller(name="budgets", reconcile=self.reconcile_budget)
        self.budgets.watch(self.offers, self._consumer_of_offer)
        self.budgets.watch(self.policies, lambda _obj: self._consumers())
        self.claims_controller: Controller[str] = Controller(name="claims", reconcile=self.reconcile_claim)
        self.claims_controller.watch(self.claims, _key)

    # -- budgets --------------------------------------------------------------------------------------------

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The pod controller, the budget controller and the claim controller."""
        return [self.controller, self.budgets, self.claims_controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """What each consumer's pods hold of its budget, and how many wait for room, from the ledger."""
        return [
            CacheGauge(
                "liqo_provider_used_resources",
                "What a consumer's pods here request, in all its twins (cpu in cores, memory in bytes, pods).",
                ("consumer", "resource"),
                lambda: metrics.used_resources(self.ledger),
            ),
            CacheGauge(
                "liqo_provider_waiting_pods",
                "A consumer's ShadowPods waiting for room in its budget, or for an accepted offer.",
                ("consumer",),
                lambda: metrics.waiting_pods(self.ledger),
            ),
        ]

    def _consumer_of_offer(self, offer: Obj) -> list[str]:
        return names.tenant_peer(offer) if offer["metadata"]["name"] == self._local_id else []

    def _consumers(self) -> list[str]:
        """Every consumer with an offer from us or with ShadowPods in the ledger (a policy concerns them all)."""
        with_offers = (c for offer in self.offers.store.list() for c in self._consumer_of_offer(offer))
        return sorted(self.ledger.consumers() | set(with_offers))

    def budget(self, consumer: str) -> Budget | NoBudget:
        """``consumer``'s budget now, from the caches: its accepted offer and its policy's ``countLimits``.

        Asked at every reconcile, so it is worked out again only when the offer or a policy changed (their
        resourceVersions): parsing them each time would multiply the controller's cost per pod event.
        """
        offer = self.offers.store.get(f"{names.tenant_namespace(consumer)}/{self._local_id}")
        policies = self.policies.store.list()
        return self._computed.get(
            consumer,
            [offer, *policies],
            lambda: budget_of(offer, count_limits=self._select(policies, consumer).count_limits),
        )

    async def reconcile_budget(self, consumer: str) -> None:
        """Wake ``consumer``'s waiting ShadowPods if its budget changed; with no budget, its running ones too."""
        budget = self.budget(consumer)
        if self._budgets.get(consumer) == budget:
            return
        self._budgets[consumer] = budget
        keys = self.ledger.waiting(consumer)
        if isinstance(budget, NoBudget):
            keys += self.ledger.held_by(consumer)  # their pods stop
        for key in keys:
            self.controller.queue.add(key)

    def _consumer_of(self, namespace: str) -> str | None:
        """The consumer whose twin ``namespace`` is: the namespace's label, which this cluster set."""
        found = self.namespaces.store.get(namespace)
        if found is None:
            return None
        consumer = names.labelled_peer_id(found) or ""
        return consumer if is_twin_of(found, consumer_id=consumer) else None

    def _rebuild(self) -> None:
        """Count every pod that exists for a ShadowPod (once, before the first decision; caches are synced)."""
        self._rebuilt = True
        for pod in self.pods.store.list():
            meta = pod["metadata"]
            consumer = self._consumer_of(meta["namespace"])
            if consumer is None or _terminal(pod):
                continue
            try:
                usage = pod_usage(pod.get("spec") or {})
            except UnreadablePod:
                continue  # the API server made it: cannot happen, and nothing to count if it does
            self.ledger.hold(object_key(pod), consumer=consumer, uid=_owner_uid(pod), usage=usage)
        for claim in self.claims.store.list():
            consumer = self._consumer_of(claim["metadata"]["namespace"])
            if consumer is not None and _volume_made(claim):
                self._count_existing(consumer, claim)

    def _count_existing(self, consumer: str, claim: Obj) -> None:
        """Count a claim whose volume exists, whatever the budget says: it holds that storage."""
        with contextlib.suppress(QuantityError):
            storage_class = str((claim.get("spec") or {}).get("storageClassName") or "")
            self.claim_ledger.count(consumer, [Claim(object_key(claim), storage_class, claim_size(claim))])

    def _free(self, key: str) -> None:
        """``key`` holds nothing any more: its consumer's waiting ShadowPods may fit now."""
        self._wake(self.ledger.release(key))

    def _wake(self, consumer: str | None) -> None:
        """Look again at ``consumer``'s waiting ShadowPods (room freed, a claim came or went)."""
        if consumer is not None:
            for waiting in self.ledger.waiting(consumer):
                self.controller.queue.add(waiting)

    async def reconcile_claim(self, key: str) -> None:
        """A claim came, changed or went: count it if its volume exists, let it go once deleted; wake its consumer.

        A claim counted stays counted whatever it says later: only its deletion frees its room.
        """
        if not self._rebuilt:
            self._rebuild()
        claim = self.claims.store.get(key)
        if claim is None:
            self._wake(self.claim_ledger.release(key))
            return
        consumer = self._consumer_of(claim["metadata"]["namespace"])
        if consumer is None:
            return
        if _volume_made(claim) and not self.claim_ledger.counted(key):
            self._count_existing(consumer, claim)
        self._wake(consumer)  # a claim a pod waits for may have come

    # -- pods -----------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Converge the pod of ShadowPod ``key``."""
        if not self._rebuilt:
            self._rebuild()
        namespace, name = split_namespaced_key(key)
        shadow = self.shadows.store.get(key)
        pod = await self._pod(key)
        if pod is not None and _terminal(pod):
            self._free(key)  # done: it holds nothing on a node any more
        if shadow is None or terminating(shadow):
            self.ledger.stop_waiting(key)
            self._retry.forget(key)
            if pod is None:
                self._free(key)
            if shadow is None:
                if pod is not None and not terminating(pod):
                    # Its ShadowPod is gone (the garbage collector would get there too, later).
                    await self._client.delete(
                        PODS, name, namespace=namespace, uid=pod["metadata"]["uid"], missing_ok=True
                    )
            else:
                await self._release(shadow, pod)
            return None
        if await add_finalizer(self._client, SHADOW_PODS, shadow, finalizer=names.FINALIZER):
            return None  # the update comes back through the informer
        if pod is not None and not made_for(pod, shadow):
            if not terminating(pod):
                await self._client.delete(PODS, name, namespace=namespace, uid=pod["metadata"]["uid"], missing_ok=True)
            return None
        consumer = self._consumer_of(namespace)
        if consumer is None:  # not a twin: the verdict says so, naming metadata.namespace
            await self._refuse(shadow, reason=ShadowPodReason.POD_REFUSED, message=self._verdict(shadow).message())
            return None
        budget = self.budget(consumer)
        if isinstance(budget, NoBudget):
            return await self._stop(key, shadow, pod, consumer=consumer, message=budget.message)
        if pod is not None:
            holding = self.ledger.holding(key)
            if not _terminal(pod) and (holding is None or holding.uid != shadow["metadata"]["uid"]):
                # Not counted yet (a pod we did not see go, then come back): count what exists.
                self.ledger.hold(key, consumer=consumer, uid=shadow["metadata"]["uid"], usage=pod_usage(pod["spec"]))
            await self._created(shadow)
            return None
        return await self._admit(key, shadow, consumer=consumer, budget=budget)

    async def _admit(self, key: str, shadow: Obj, *, consumer: str, budget: Budget) -> Result | None:
        """Create the pod if the provider allows it and it fits ``consumer``'s budget; otherwise say why.

        Called only once the key's pod is known to be gone (:meth:`_pod`): whatever it held is free, and the
        pod to make is judged and measured afresh from the spec as it is now, whether this ShadowPod had a pod
        before or not.
        """
        self._free(key)
        verdict = self._verdict(shadow)
        if not verdict.allowed:
            await self._refuse(shadow, reason=ShadowPodReason.POD_REFUSED, message=verdict.message())
            return Result(requeue_after=self._retry.when(key))  # a loosened policy lets it through later
        try:
            usage = pod_usage(shadow["spec"]["pod"])
        except UnreadablePod as exc:
            await self._refuse(shadow, reason=ShadowPodReason.UNREADABLE_RESOURCES, message=str(exc))
            return None  # nothing to retry: only a new spec (an update, which re-queues us) can change it
        namespace, name = split_namespaced_key(key)
        claims = pod_claims(shadow["spec"]["pod"], namespace=namespace, pod_name=name, claim_of=self.claims.store.get)
        if not isinstance(claims, ClaimsWait):
            claims = self.claim_ledger.shortfall(consumer, claims, budget.storage) or claims
        if isinstance(claims, ClaimsWait):
            self.ledger.wait(key, consumer=consumer)
            reason = ShadowPodReason.CLAIM_MISSING if claims.missing else ShadowPodReason.OVER_BUDGET
            await self._wait(shadow, reason=reason, message=claims.message)
            return Result(requeue_after=self._retry.when(key))  # claims coming or going wake it sooner
        missing = self.ledger.admit(key, consumer=consumer, uid=shadow["metadata"]["uid"], usage=usage, budget=budget)
        if missing is not None:
            await self._wait(shadow, reason=ShadowPodReason.OVER_BUDGET, message=missing.message)
            return Result(requeue_after=self._retry.when(key))  # room frees and budgets change wake it sooner
        self.claim_ledger.count(consumer, claims)  # with the pod's room: no await between the checks and this
        match await self._create(shadow, verdict=verdict):
            case "refused":
                self._free(key)
                return Result(requeue_after=self._retry.when(key))
            case "unknown":  # its room stays held until the pod is known to be absent
                return Result(requeue_after=self._retry.when(key))
        await self._created(shadow)
        return None

    async def _pod(self, key: str) -> Obj | None:
        """The pod of ``key``: the cache's or, while the cache has not shown a pod asked for, the API server's.

        Without a pod, a ShadowPod's room is let go and its pod made again; a pod created an instant ago that
        the cache does not show yet is not gone, and letting its room go would let another pod take it while
        it runs (and make this one twice, the second time from whatever the spec says by then).
        """
        cached = self.pods.store.get(key)
        if cached is not None or key not in self._unseen:
            self._unseen.discard(key)
            return cached
        namespace, name = split_namespaced_key(key)
        try:
            return await self._client.get(PODS, name, namespace=namespace)
        except NotFoundError:
            self._unseen.discard(key)
            return None

    def _verdict(self, shadow: Obj) -> Verdict:
        """The ShadowPod webhook's verdict, from the caches (a namespace they lack is not a twin)."""
        policies = self.policies.store.list()
        return shadow_pod_verdict(
            shadow,
            namespace=self.namespaces.store.get(shadow["metadata"]["namespace"]),
            policy_of=lambda peer: self._select(policies, peer).pod_security,
        )

    async def _stop(self, key: str, shadow: Obj, pod: Obj | None, *, consumer: str, message: str) -> Result:
        """No budget: the consumer's pod must not run (its ShadowPod stays, waiting for one)."""
        self.ledger.wait(key, consumer=consumer)
        if pod is None:
            self._free(key)
        elif not terminating(pod):
            meta = pod["metadata"]
            await self._client.delete(PODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"], missing_ok=True)
        await self._wait(shadow, reason=ShadowPodReason.NO_ACCEPTED_OFFER, message=message)
        return Result(requeue_after=self._retry.when(key))

    async def _create(self, shadow: Obj, *, verdict: Verdict) -> Created:
        """Create the pod: ``created`` (or it existed), ``refused`` (the ShadowPod says so), or ``unknown``.

        Unless created, the caller retries with the capped backoff: a pod the consumer asked for is never given
        up on while its ShadowPod lives (the controller's own retries would stop after a few failures). From
        the request on, the pod may exist, whatever the answer, but a refusal: the cache must show it, or
        the API server deny it, before its absence counts (:meth:`_pod`).
        """
        meta = shadow["metadata"]
        key = object_key(shadow)
        self._unseen.add(key)
        try:
            made = await self._client.create(PODS, pod_from_shadow(shadow, verdict=verdict))
        except ConflictError:
            return "created"  # created meanwhile (the informer is behind): the pod's event re-queues us
        except ApiError as exc:
            if exc.status in (400, 403, 422):  # refused: admission, validation
                self._unseen.discard(key)
                await self._refuse(shadow, reason=ShadowPodReason.POD_REFUSED, message=exc.message)
                return "refused"
            log.warning("could not create pod %s/%s (retried): %s", meta["namespace"], meta["name"], exc)
            return "unknown"
        except KubeError as exc:
            log.warning("could not create pod %s/%s (retried): %s", meta["namespace"], meta["name"], exc)
            return "unknown"
        log.debug("created pod %s/%s", meta["namespace"], meta["name"])
        if verdict.dropped:
            for about in (shadow, made):
                await self._events.record(
                    about, type="Normal", reason=KEYS_NOT_COPIED, message=verdict.dropped_message()
                )
        return "created"

    async def _created(self, shadow: Obj) -> None:
        """The pod exists: clear a waiting or refused status (none is written on the happy path)."""
        key = object_key(shadow)
        self.ledger.stop_waiting(key)
        self._retry.forget(key)
        if (shadow.get("status") or {}).get("phase") not in (None, ShadowPodPhase.CREATED):
            await self._set_status(shadow, {"phase": ShadowPodPhase.CREATED})

    async def _wait(self, shadow: Obj, *, reason: ShadowPodReason, message: str) -> None:
        await self._report(shadow, {"phase": ShadowPodPhase.WAITING, "reason": reason, "message": message})

    async def _refuse(self, shadow: Obj, *, reason: ShadowPodReason, message: str) -> None:
        await self._report(shadow, {"phase": ShadowPodPhase.REFUSED, "reason": reason, "message": message})

    async def _report(self, shadow: Obj, status: Obj) -> None:
        """Set ``status`` and record it as a Warning Event, unless the ShadowPod says so already."""
        if (shadow.get("status") or {}) == status:
            return
        await self._set_status(shadow, status)
        await self._events.record(shadow, type="Warning", reason=status["reason"], message=status["message"])

    async def _set_status(self, shadow: Obj, status: Obj) -> None:
        if (shadow.get("status") or {}) == status:
            return
        meta = shadow["metadata"]
        with contextlib.suppress(NotFoundError):
            await self._client.apply_status(SHADOW_PODS, name=meta["name"], namespace=meta["namespace"], status=status)

    async def _release(self, shadow: Obj, pod: Obj | None) -> None:
        """Delete the pod with the consumer's grace period, then let the ShadowPod go."""
        meta = shadow["metadata"]
        if pod is not None:
            if not terminating(pod):
                await self._client.delete(
                    PODS,
                    meta["name"],
                    namespace=meta["namespace"],
                    grace_period_seconds=grace_period(shadow, pod),
                    uid=pod["metadata"]["uid"],
                    missing_ok=True,
                )
            return  # the pod's deletion event re-queues us
        await remove_finalizer(self._client, SHADOW_PODS, shadow, finalizer=names.FINALIZER)
