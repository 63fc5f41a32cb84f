"""Home pods bound to a virtual node → ShadowPods on the provider, and the remote status back home.

One Handle per key, as Liqo's reflection: the key is the home pod's ``namespace/name``, and every event,
at home (the pod) or on the provider (its ShadowPod, its real pod), re-queues that key. ``reconcile``
reads the three caches and does the one next step towards agreement, so a restart (of this process, the
manager, either API server) converges from whatever state it finds, without duplicates:

- home pod alive, no ShadowPod → create the ShadowPod (its name is ours alone: a create, and a conflict means
  the cache is behind, whose event re-queues the key; a ShadowPod that no longer asks for the home pod as it
  is now is replaced at the cached resourceVersion; a refusal by the provider lands on the home pod as
  a Pending reason and an Event, never as a vanished pod, and the write is retried with a capped backoff
  for as long as the pod lives) — unless no slot of the provider holds the pod
  (:mod:`liqo.virtualkubelet.fit`): then it stays Pending with ``DoesNotFitRemote`` and is checked again
  whenever the VirtualNode's slots change (:meth:`PodReflector.slots_changed`);
- remote pod starting as it should (Pending, containers being created) → nothing: home's API server already
  shows the pod Pending (:func:`~liqo.virtualkubelet.forge.pods.news_for_home`);
- remote pod running, or in trouble (an image that does not pull, a phase other than Pending) → its phase,
  conditions but ``PodScheduled`` (home's scheduler's), container statuses and IP onto the home pod, in one
  status patch: on the happy path the only write to the home pod, the one that makes it Running and Ready;
- no remote pod and a ShadowPod the provider holds back (over the consumer's budget, no accepted offer) or
  refused → Pending with the provider's reason;
- home pod deleted → ShadowPod deleted, annotated first with the home grace period if it is shorter than the
  pod's own → remote pod gone → home pod finalised. A deletion is never the provider's to judge, its
  preamble may be: a provider refusing the annotation (an older one, judging the pod whole under a policy
  tightened since it was made) gets the ShadowPod deleted all the same, its pod ending with its own grace
  period, and the home pod a Warning Event (``GracePeriodNotPassedOn``) saying so;
- ShadowPod deleted on the provider while the home pod lives → home pod deleted (its controller replaces it);
- provider not answering (the virtual node's probe) → the home pod not Ready (``ProviderUnreachable``),
  everything else as last known, so that its Services' endpoints at home turn not-ready rather than vanish;
  Ready again from the remote pod's status once the provider answers.

Which twin a home namespace maps to, and the informers on the provider's ShadowPods and pods there, come
from the :class:`~liqo.virtualkubelet.reflection.manager.ReflectionManager` (the identity may not list
cluster-wide); the other reflectors read the same remote pod cache.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from liqo.api import names
from liqo.api.networks import Translation
from liqo.api.resources import SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.controller import Result
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.ratelimit import ItemExponentialFailureRateLimiter
from liqo.kube.resources import NAMESPACES, PODS, object_key, split_namespaced_key, terminating
from liqo.virtualkubelet import fit, metrics
from liqo.virtualkubelet.forge import pods as forge
from liqo.virtualkubelet.forge.common import PROVIDER_REFUSED
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector, remote_pods
from liqo.virtualkubelet.reflection.steps import REFUSALS, REFUSED_FIRST_SECONDS, REFUSED_MAX_SECONDS, converge_copy

log = logging.getLogger(__name__)

GRACE_NOT_PASSED_ON = "GracePeriodNotPassedOn"
"""The Warning Event on a deleted home pod whose grace period the provider refused to take (it was deleted anyway)."""
POD_IP_NOT_REACHABLE = "PodIPNotReachable"
"""The Warning Event on a home pod whose provider IP home cannot dial (overlapping pod CIDRs, before the fabric)."""
RETRY_REFUSED_SECONDS = 30.0
"""A namespace not yet offloaded here is looked at again this often."""


def _shadows(pair: NamespacePair, *, home_cluster_id: str) -> Informer:
    return pair.remote(SHADOW_PODS, label_selector=f"{names.REMOTE_CLUSTER_ID}={home_cluster_id}")


class PodReflector(Reflector[str]):
    """Runs the pods bound to one virtual node on its provider."""

    def __init__(
        self,
        *,
        manager: ReflectionManager,
        node_address: str,
        virtual_node: Callable[[], Obj | None],
        provider_ready: Callable[[], bool] = lambda: True,
        workers: int = 32,
    ) -> None:
        super().__init__(manager, reflects="pods", workers=workers)
        self._virtual_node = virtual_node
        self._provider_ready = provider_ready
        self._address = node_address
        self.pods = Informer(client=manager.home, resource=PODS, field_selector=f"spec.nodeName={manager.node_name}")
        self._held: set[str] = set()  # pods held back for want of a slot: what a change of slots re-queues
        self._refusals = ItemExponentialFailureRateLimiter(
            base_delay=REFUSED_FIRST_SECONDS, max_delay=REFUSED_MAX_SECONDS
        )
        self.controller.watch(self.pods, lambda pod: [object_key(pod)])

    @property
    def informers(self) -> list[Informer]:
        """The home pods bound to the node."""
        return [self.pods]

    # -- namespaces (the manager's hooks) -------------------------------------------------------------------

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch the twin's ShadowPods and pods: each re-queues the home pod of its name."""
        home_namespace = pair.home_namespace
        for informer in (_shadows(pair, home_cluster_id=self._home_cluster_id), remote_pods(pair)):
            self.controller.watch(informer, lambda obj: [f"{home_namespace}/{obj['metadata']['name']}"])

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Reconcile the namespace's pods again with both caches listed."""
        self._requeue(pair.home_namespace)

    def namespaces_changed(self) -> None:
        """Pods waiting for a twin may go now (or must stop)."""
        self._requeue(None)

    def network_changed(self) -> None:
        """Every pod IP is translated anew."""
        self._requeue(None)

    def provider_readiness_changed(self) -> None:
        """The provider stopped (or started again) answering: every pod's Ready condition follows."""
        self._requeue(None)

    def _requeue(self, namespace: str | None) -> None:
        for pod in self.pods.store.list():
            if namespace is None or pod["metadata"]["namespace"] == namespace:
                self.controller.queue.add(object_key(pod))

    def slots_changed(self) -> None:
        """The VirtualNode's largest slots changed: pods held back for want of a slot may fit now.

        Only those: slots move with every pod the provider places, and re-queueing every pod of the node
        each time would make a rollout quadratic. A restarted process reconciles every pod anyway.
        """
        for key in list(self._held):
            self.controller.queue.add(key)

    def remote_of(self, namespace: str, name: str) -> tuple[KubeClient, str] | None:
        """The provider's client and the twin namespace where home pod ``namespace/name`` runs."""
        twin = self._manager.twins.get(namespace)
        if twin is None or self.pods.store.get(f"{namespace}/{name}") is None:
            return None
        return self._provider, twin

    # -- reconcile ------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Take pod ``key`` one step closer to agreement between home and provider."""
        namespace, name = split_namespaced_key(key)
        home = self.pods.store.get(key)
        if home is None:
            self._held.discard(key)
            self._refusals.forget(key)
        pair = self._manager.pair(namespace)
        if pair is None:
            return await self._no_twin(home)
        if not pair.synced:
            return None  # namespace_synced re-queues it
        twin_name = pair.twin
        shadow = _shadows(pair, home_cluster_id=self._home_cluster_id).store.get(f"{twin_name}/{name}")
        remote = remote_pods(pair).store.get(f"{twin_name}/{name}")
        if shadow is not None and home is not None and shadow["spec"].get("homePodUID") != home["metadata"]["uid"]:
            await self._delete_shadow(shadow)  # a previous namesake's; the deletion re-queues us
            return None
        if home is None:
            if shadow is not None and not terminating(shadow):
                await self._delete_shadow(shadow)
            return None
        if terminating(home):
            await self._finalise(home, shadow, remote)
            return None
        if terminating(shadow):
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
                written = await converge_copy(
                    self._provider,
                    SHADOW_PODS,
                    current=shadow,
                    desired=desired,
                    is_current=forge.shadow_is_current,
                    must_replace=lambda _current, _desired: False,
                )
            except ApiError as exc:
                if exc.status not in REFUSALS:
                    raise
                await self._refused(home, reason=PROVIDER_REFUSED, message=exc.message)
                return Result(requeue_after=self._refusals.when(key))
            if written:
                metrics.written(PODS.plural, self.controller, key)
            self._refusals.forget(key)
            return None  # its status comes back through the informers (a conflict: the cache was behind)
        if not self._provider_ready():
            message = "the provider does not answer: the pod's state there is unknown"
            await self._set_status(home, forge.unreachable_status(message=message))
        elif remote is not None and forge.runs_home_pod(remote, home):
            if not forge.news_for_home(remote, home):
                return None  # starting as it should: the write that makes it Running comes next
            await self._report(home, remote, twin=twin_name)
        elif (verdict := forge.held_back(shadow)) is not None:
            await self._refused(home, reason=verdict[0], message=verdict[1])
        return None

    async def _report(self, home: Obj, remote: Obj, *, twin: str) -> None:
        """The remote pod's status onto the home pod, its IPs as home dials them (an Event for those it cannot)."""
        status = forge.home_status(remote, node_address=self._address)
        addresses = self._manager.addresses
        translate: Callable[[str], Translation] = addresses.for_home
        if forge.claims_home_pod(status, translate=translate, returned=addresses.returned_home):
            home_ips = await self._sent_back_ips(remote, twin=twin)
            translate = forge.sent_back(translate, returned=addresses.returned_home, home_ips=home_ips)
        status, unreachable = forge.with_home_addresses(status, translate=translate)
        if await self._set_status(home, status) and unreachable:
            message = f"the pod's IP on the provider is not given at home: {unreachable}"
            await self._events.record(home, type="Warning", reason=POD_IP_NOT_REACHABLE, message=message)

    async def _sent_back_ips(self, remote: Obj, *, twin: str) -> frozenset[str]:
        """The IPs of home's pod that runs ``remote`` here: the provider sent it back, to its twin of ``twin`` here.

        Found by what home wrote itself: the provider's twin here of ``twin`` (namespace labels only home's
        manager writes), and in it the pod of the remote pod's name that stands for it (its home-pod UID, which
        home's ShadowPod controller copies). A peer writes its ShadowPods' home-pod UID, but only in its own
        twins: whatever it claims, the pod found is one it runs here.
        """
        selector = f"{names.REMOTE_CLUSTER_ID}={self._manager.provider_id},{names.ORIGIN_NAMESPACE}={twin}"
        twins, _ = await self._home.list_all(NAMESPACES, label_selector=selector)
        for namespace in twins:
            pod = await self._home.get_or_none(
                PODS, remote["metadata"]["name"], namespace=namespace["metadata"]["name"]
            )
            if pod is not None and forge.runs_home_pod(pod, remote):
                return frozenset(forge.pod_ips(pod.get("status") or {}))
        return frozenset()

    async def _no_twin(self, home: Obj | None) -> Result | None:
        if home is None:
            return None
        if terminating(home):
            await self._delete_home(home, grace=0)  # nothing remote to wait for
            return None
        message = f"namespace {home['metadata']['namespace']} is not offloaded to this provider (yet)"
        await self._refused(home, reason="NamespaceNotOffloaded", message=message)
        return Result(requeue_after=RETRY_REFUSED_SECONDS)

    async def _finalise(self, home: Obj, shadow: Obj | None, remote: Obj | None) -> None:
        if shadow is not None:
            if not terminating(shadow):
                await self._pass_grace(home, shadow)
                await self._delete_shadow(shadow)
            return  # the provider deletes the pod, then lets the ShadowPod go: both re-queue us
        if remote is None:
            await self._delete_home(home, grace=0)

    async def _pass_grace(self, home: Obj, shadow: Obj) -> None:
        """Write the home pod's grace period on its ShadowPod, if shorter than the pod's own; a refusal is told.

        The deletion that follows is never judged: refused, the ShadowPod goes all the same (its pod with its
        own grace period), rather than the provider keeping a pod whose home pod is gone.
        """
        grace = forge.shadow_grace(home)
        if grace is None:
            return
        meta = shadow["metadata"]
        annotations = {names.GRACE_PERIOD: str(grace)}
        try:
            await self._provider.patch(
                SHADOW_PODS, meta["name"], {"metadata": {"annotations": annotations}}, namespace=meta["namespace"]
            )
        except NotFoundError:
            return
        except ApiError as exc:
            if exc.status not in REFUSALS:
                raise
            message = (
                f"the provider refused the grace period of {grace}s ({exc.message}): the ShadowPod is deleted"
                " all the same, and the pod there ends with its own grace period"
            )
            await self._events.record(home, type="Warning", reason=GRACE_NOT_PASSED_ON, message=message)

    async def _delete_shadow(self, shadow: Obj) -> None:
        meta = shadow["metadata"]
        await self._provider.delete(
            SHADOW_PODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"], missing_ok=True
        )

    async def _delete_home(self, home: Obj, *, grace: int) -> None:
        meta = home["metadata"]
        await self._home.delete(
            PODS,
            meta["name"],
            namespace=meta["namespace"],
            grace_period_seconds=grace,
            uid=meta["uid"],
            missing_ok=True,
        )

    async def _set_status(self, home: Obj, status: Obj) -> bool:
        """Patch the home pod's status if it lacks something of ``status``; whether it did."""
        if not forge.status_differs(home, status):
            return False
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
        return True

    async def _refused(self, home: Obj, *, reason: str, message: str) -> None:
        status = forge.refused_status(reason=reason, message=message)
        if forge.status_differs(home, status):
            await self._set_status(home, status)
            await self._events.record(home, type="Warning", reason=reason, message=message)
