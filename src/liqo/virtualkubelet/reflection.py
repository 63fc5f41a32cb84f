"""What an offloaded pod needs besides itself: its namespace's ConfigMaps and Secrets, its home token, its Events.

A pod that runs on the provider mounts ConfigMaps and Secrets by name from its (twin) namespace, talks to
the home API server with its ServiceAccount's token, and has Events about it written on the provider. So,
per virtual node and next to its :class:`~liqo.virtualkubelet.pods.PodReflector`, with the same identity on
the provider:

- **ConfigMaps and Secrets** of every offloaded home namespace are copied into its twin (same name, content,
  labels and annotations, marked ``names.ORIGIN``), updated when they change and deleted when they go — or
  when they stop qualifying (``liqo.io/skip-reflection``, the policy). Never: ``kube-root-ca.crt`` (the
  provider's pods trust the provider's API) and ServiceAccount token Secrets.
- **Tokens**: for each pod with the home ServiceAccount volume, a TokenRequest at home bound to the pod,
  written with the home CA and namespace into a pod-token Secret in the twin, which the ShadowPod mounts in
  place of the projected volume (``forge.remote_pod_spec``). Renewed at 80% of its lifetime by a delayed
  re-queue, deleted once the home pod is gone (the token itself dies with the pod: it is bound to it).
- **Events** on the provider about the pods we run are mirrored onto the home pods, one home Event per
  provider Event (same name), updated in place as its count grows.

Why one reflector per virtual node, and informers per (home namespace, twin) pair rather than cluster-wide:
the identity may only read inside its twins, and at home only the offloaded namespaces matter (a
cluster-wide Secret informer would hold every Secret of the cluster in memory). The pairs follow the
NamespaceOffloadings exactly as the PodReflector's twins do.

Three controllers, one key per object: ``(plural, home namespace, name)`` for copies, the home pod's key
for tokens, ``twin/name`` of the provider Event for mirrors. Each reconcile reads the caches and does one
step, so a restart converges from whatever it finds; nothing that does not carry our marker (a namesake
made on the provider, a home Event) is ever updated or deleted. Copies are written with create and replace
(not server-side apply, which would take over a namesake the cache has not shown yet); pod tokens and
mirrored Events, whose names nobody else picks, with server-side apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from liqo.api import names
from liqo.kube.cache import InformerGroup
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.resources import CONFIGMAPS, EVENTS, PODS, SECRETS, SERVICE_ACCOUNTS, Resource
from liqo.virtualkubelet import forge
from liqo.virtualkubelet.pods import twins_on

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Mode = Literal["All", "None"]
ObjectKey = tuple[str, str, str]
"""``(plural, home namespace, name)`` of a reflected ConfigMap or Secret."""

KINDS = {CONFIGMAPS.plural: CONFIGMAPS, SECRETS.plural: SECRETS}
NOT_SYNCED_RETRY = 0.5
"""A pair's informers are still listing: look again shortly (their first list enqueues everything anyway)."""
TOKEN_RETRY_SECONDS = 30.0
"""A refused TokenRequest (ServiceAccount missing, RBAC) is tried again this often."""


@dataclass(frozen=True, slots=True)
class ReflectionPolicy:
    """Which home ConfigMaps and Secrets go to providers, per kind: ``All`` (but the never-reflected) or ``None``.

    ``None`` also deletes the copies made before: the policy is a desired state, not a switch of the loop.
    """

    configmaps: Mode = "All"
    secrets: Mode = "All"

    def reflects(self, resource: Resource) -> bool:
        """Whether objects of ``resource`` are copied at all."""
        mode = self.configmaps if resource == CONFIGMAPS else self.secrets
        return mode == "All"


class _Pair(InformerGroup):
    """One offloaded namespace and its twin, as seen by the informers of both sides.

    At home its ConfigMaps and Secrets; in the twin every ConfigMap and Secret (ours or not: a namesake that is
    not ours must be seen to be left alone), the pods we run and the Events.
    """

    def __init__(self, *, home: KubeClient, provider: KubeClient, home_namespace: str, twin: str) -> None:
        self.home_namespace = home_namespace
        self.twin = twin
        self.home = {r: Informer(client=home, resource=r, namespace=home_namespace) for r in KINDS.values()}
        self.remote = {r: Informer(client=provider, resource=r, namespace=twin) for r in KINDS.values()}
        self.pods = Informer(client=provider, resource=PODS, namespace=twin, label_selector=names.SHADOW_POD)
        self.events = Informer(client=provider, resource=EVENTS, namespace=twin)
        self.events_about: dict[str, set[str]] = {}
        """Pod name → the keys of the Events about it: a pod showing up finds its Events without a scan of all."""
        informers = [*self.home.values(), *self.remote.values(), self.pods, self.events]
        super().__init__(informers, name=f"reflection {twin}")

    def index_event(self, event: Obj, *, deleted: bool = False) -> None:
        """Keep :attr:`events_about` in step with an Event seen (or deleted)."""
        pod = (event.get("involvedObject") or {}).get("name")
        if not pod:
            return
        key = f"{self.twin}/{event['metadata']['name']}"
        if deleted:
            keys = self.events_about.get(pod, set())
            keys.discard(key)
            if not keys:
                self.events_about.pop(pod, None)
        else:
            self.events_about.setdefault(pod, set()).add(key)


class Reflection:
    """Keeps the ConfigMaps, Secrets, pod tokens and pod Events of one virtual node's pods in step."""

    def __init__(
        self,
        *,
        home: KubeClient,
        provider: KubeClient,
        node_name: str,
        provider_id: str,
        home_cluster_id: str,
        offloadings: Informer,
        home_pods: Informer,
        events: EventRecorder,
        policy: ReflectionPolicy,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        """Wire the controllers; ``home_pods`` is the PodReflector's informer (the pods bound to the node)."""
        self._home = home
        self._provider = provider
        self._provider_id = provider_id
        self._home_cluster_id = home_cluster_id
        self._offloadings = offloadings
        self._home_pods = home_pods
        self._events = events
        self._policy = policy
        self._clock = clock
        self.twins: dict[str, str] = {}
        self._pairs: dict[str, _Pair] = {}
        self.objects: Controller[ObjectKey] = Controller(
            name=f"reflection {node_name}", reconcile=self.reconcile_object, workers=3
        )
        self.tokens: Controller[str] = Controller(name=f"tokens {node_name}", reconcile=self.reconcile_token, workers=2)
        self.mirrors: Controller[str] = Controller(
            name=f"events {node_name}", reconcile=self.reconcile_event, workers=2
        )
        self.tokens.watch(home_pods, lambda pod: [_key(pod)])

    async def run(self) -> None:
        """Follow the twins and reconcile until cancelled (the PodReflector runs the home pod informer)."""
        try:
            async with asyncio.TaskGroup() as group:
                await self._home_pods.wait_synced()
                self.twins_changed()
                for controller in (self.objects, self.tokens, self.mirrors):
                    group.create_task(controller.run())
        finally:
            for pair in self._pairs.values():
                await pair.stop()

    # -- pairs ----------------------------------------------------------------------------------------------

    def twins_changed(self) -> None:
        """The NamespaceOffloadings changed: follow the twins on this provider (call on every change)."""
        wanted = twins_on(self._offloadings.store.list(), provider_id=self._provider_id)
        if wanted == self.twins:
            return
        self.twins = wanted
        for twin in set(self._pairs) - set(wanted.values()):
            asyncio.get_running_loop().create_task(self._pairs.pop(twin).stop())
        for home_namespace, twin in wanted.items():
            if twin not in self._pairs:
                pair = _Pair(home=self._home, provider=self._provider, home_namespace=home_namespace, twin=twin)
                self._watch(pair)
                self._pairs[twin] = pair
                pair.start()
        for pod in self._home_pods.store.list():  # pods waiting for a twin may get their token now
            self.tokens.queue.add(_key(pod))

    def _watch(self, pair: _Pair) -> None:
        home_namespace = pair.home_namespace

        def on_home(resource: Resource) -> Callable[[Obj], None]:
            def enqueue(obj: Obj) -> None:
                self.objects.queue.add((resource.plural, home_namespace, obj["metadata"]["name"]))
                if resource == CONFIGMAPS and obj["metadata"]["name"] == forge.ROOT_CA_CONFIGMAP:
                    for pod in self._home_pods.store.list():  # the CA in every pod-token Secret follows it
                        if pod["metadata"]["namespace"] == home_namespace:
                            self.tokens.queue.add(_key(pod))

            return enqueue

        def on_remote(resource: Resource) -> Callable[[Obj], None]:
            def enqueue(obj: Obj) -> None:
                meta = obj["metadata"]
                if forge.is_pod_token(obj, home_cluster_id=self._home_cluster_id):
                    pod = (meta.get("annotations") or {}).get(names.HOME_POD)
                    if pod:
                        self.tokens.queue.add(f"{home_namespace}/{pod}")
                    return
                self.objects.queue.add((resource.plural, home_namespace, meta["name"]))

            return enqueue

        def on_event(event: Obj) -> None:
            pair.index_event(event)
            self.mirrors.queue.add(f"{pair.twin}/{event['metadata']['name']}")

        def on_pod(pod: Obj) -> None:
            # Events can be listed before the pod they are about: they are looked at again once it is known.
            for key in pair.events_about.get(pod["metadata"]["name"], ()):
                self.mirrors.queue.add(key)

        for resource, informer in pair.home.items():
            informer.add_handler(_on_any(on_home(resource)))
        for resource, informer in pair.remote.items():
            informer.add_handler(_on_any(on_remote(resource)))
        pair.events.add_handler(
            HandlerFuncs(
                add=on_event,
                update=lambda _old, new: on_event(new),
                delete=lambda event: pair.index_event(event, deleted=True),
            )
        )
        pair.pods.add_handler(HandlerFuncs(add=on_pod))

    def _pair_of(self, home_namespace: str) -> _Pair | None:
        twin = self.twins.get(home_namespace)
        return self._pairs.get(twin) if twin else None

    # -- ConfigMaps and Secrets -----------------------------------------------------------------------------

    async def reconcile_object(self, key: ObjectKey) -> Result | None:
        """Bring the copy of one home ConfigMap or Secret in line with it (or delete it)."""
        plural, namespace, name = key
        resource = KINDS[plural]
        pair = self._pair_of(namespace)
        if pair is None:
            return None  # not (or no longer) offloaded here: the provider deletes the twin, copies and all
        if not pair.synced:
            return Result(requeue_after=NOT_SYNCED_RETRY)
        home = pair.home[resource].store.get(f"{namespace}/{name}")
        current = pair.remote[resource].store.get(f"{pair.twin}/{name}")
        wanted = home is not None and self._policy.reflects(resource) and forge.reflectable(home, resource=resource)
        if current is not None and not forge.is_copy(current, origin=self._home_cluster_id):
            if wanted and home is not None:
                message = f"the twin {pair.twin} on the provider has a {resource.kind} {name} liqo did not make"
                await self._events.record(
                    {"apiVersion": "v1", "kind": resource.kind, **home},
                    type="Warning",
                    reason="ReflectionConflict",
                    message=message,
                )
            return None  # never ours to change
        if not wanted or home is None:
            if current is not None:
                await self._delete_remote(resource, current)
            return None
        desired = forge.reflected_copy(
            home, resource=resource, namespace=pair.twin, home_cluster_id=self._home_cluster_id
        )
        # Create, then replace at the cached resourceVersion, rather than server-side apply: a create fails on
        # a namesake made in the twin that the cache has not shown yet, where an apply would take it over. A
        # conflict either way means the cache is behind, and the event it is behind on re-queues us.
        if current is None:
            with contextlib.suppress(ConflictError):
                await self._provider.create(resource, desired)
            return None
        if forge.copy_is_current(current, desired):
            return None
        if forge.must_replace(current, desired):
            await self._delete_remote(resource, current)  # its deletion re-queues us, and the copy is made anew
            return None
        desired["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        with contextlib.suppress(ConflictError, NotFoundError):
            await self._provider.replace(resource, desired)
        return None

    async def _delete_remote(self, resource: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        with contextlib.suppress(NotFoundError):
            await self._provider.delete(resource, meta["name"], namespace=meta["namespace"], uid=meta["uid"])

    # -- ServiceAccount tokens ------------------------------------------------------------------------------

    async def reconcile_token(self, key: str) -> Result | None:
        """Keep the pod-token Secret of home pod ``key`` holding a live home token (or delete it)."""
        namespace, name = key.split("/", 1)
        pair = self._pair_of(namespace)
        if pair is None:
            return None
        if not pair.synced:
            return Result(requeue_after=NOT_SYNCED_RETRY)
        home = self._home_pods.store.get(key)
        secret_name = forge.token_secret_name(name)
        current = pair.remote[SECRETS].store.get(f"{pair.twin}/{secret_name}")
        if current is not None and not forge.is_pod_token(current, home_cluster_id=self._home_cluster_id):
            log.warning("%s/%s on the provider is not a pod-token Secret of ours: left alone", pair.twin, secret_name)
            return None
        volume = forge.token_volume(home["spec"]) if home is not None else None
        if home is None or volume is None:
            if current is not None:
                await self._delete_remote(SECRETS, current)
            return None
        root_ca = pair.home[CONFIGMAPS].store.get(f"{namespace}/{forge.ROOT_CA_CONFIGMAP}")
        ca = ((root_ca or {}).get("data") or {}).get("ca.crt")
        if ca is None:
            return None  # published by the controller manager shortly; its arrival re-queues the namespace's pods
        now = self._clock()
        renew_at = forge.token_renew_at(current, home, ca=ca) if current is not None else None
        if renew_at is not None and renew_at > now:
            return Result(requeue_after=(renew_at - now).total_seconds())
        try:
            answer = await self._home.request(
                "POST",
                SERVICE_ACCOUNTS.path(namespace=namespace, name=forge.service_account_of(home), subresource="token"),
                body=forge.token_request(home, seconds=forge.token_seconds(volume)),
            )
        except ApiError as exc:
            # The ServiceAccount is missing or we may not ask: say so on the pod and try again later. (A 404 may
            # also mean the pod went meanwhile; then its deletion re-queues us and the retry finds nothing to do.)
            if exc.status not in (400, 403, 404, 422):
                raise
            await self._events.record(
                {"apiVersion": "v1", "kind": "Pod", **home},
                type="Warning",
                reason="TokenRequestFailed",
                message=exc.message,
            )
            return Result(requeue_after=TOKEN_RETRY_SECONDS)
        renew_at = forge.renewal_time(issued=now, expires=forge.parse_time(answer["status"]["expirationTimestamp"]))
        secret = forge.token_secret(
            home,
            namespace=pair.twin,
            home_cluster_id=self._home_cluster_id,
            token=answer["status"]["token"],
            ca=ca,
            renew_at=renew_at,
        )
        await self._provider.apply(SECRETS, secret)
        return Result(requeue_after=max((renew_at - now).total_seconds(), 1.0))

    # -- Events ---------------------------------------------------------------------------------------------

    async def reconcile_event(self, key: str) -> Result | None:
        """Mirror provider Event ``key`` onto the home pod it is about, if it is one of ours."""
        twin, _ = key.split("/", 1)
        pair = self._pairs.get(twin)
        if pair is None:
            return None
        if not pair.synced:
            return Result(requeue_after=NOT_SYNCED_RETRY)
        event = pair.events.store.get(key)
        if event is None or not forge.mirrorable(event):
            return None  # a deleted Event's mirror expires at home on its own, as Events do
        involved = event["involvedObject"]
        remote = pair.pods.store.get(f"{twin}/{involved['name']}")
        if remote is None or involved.get("uid", remote["metadata"]["uid"]) != remote["metadata"]["uid"]:
            return None  # not about a pod we run (or about a previous one of that name)
        home = self._home_pods.store.get(f"{pair.home_namespace}/{involved['name']}")
        if home is None or not forge.runs_home_pod(remote, home):
            return None
        await self._home.apply(EVENTS, forge.mirrored_event(event, home_pod=home, provider_id=self._provider_id))
        return None


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _on_any(enqueue: Callable[[Obj], None]) -> HandlerFuncs:
    return HandlerFuncs(add=enqueue, update=lambda _old, new: enqueue(new), delete=enqueue)
