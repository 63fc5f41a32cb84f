"""The provider's Events about the pods we run and the Services and Ingresses we copied, mirrored home.

``kubectl describe pod`` at home must show why a pod does not start on the provider (image pulls, probes,
OOM kills), and ``kubectl describe service`` or ``ingress`` what the provider's controllers say of the copy:
Events there about an object of ours become home Events about the home object it stands for, one per
provider Event (same name), updated in place as its count grows (:mod:`liqo.virtualkubelet.forge.events`).
Ours means: a pod made from our ShadowPod for that very home pod, or a copy carrying our marker, with the
UID the Event names (never a namesake, never an earlier object of that name).

One key per provider Event (``twin/name``). Events may be listed before the object they are about: each
pair keeps an :class:`~liqo.kube.cache.Index` (kind, name) → Event keys on the twin's Events, so an object
showing up finds its Events without a scan of them all (per new pod, a scan would make a rollout quadratic).

A mirror is created (one write), and server-side applied only when it exists already: the provider's Event
changed (its count grew), or a restart finds it made. The provider Event's resourceVersion last mirrored is
kept per key, so the many re-queues of an Event (its pod appearing, the pair listing again) write nothing.
"""

from __future__ import annotations

from liqo.kube.cache import Index
from liqo.kube.controller import Result
from liqo.kube.errors import ConflictError
from liqo.kube.informer import HandlerFuncs, Informer, resource_version_of
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, INGRESSES, SERVICES, Resource, split_namespaced_key
from liqo.virtualkubelet.forge import common
from liqo.virtualkubelet.forge import events as forge
from liqo.virtualkubelet.forge.pods import runs_home_pod
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector, remote_pods

Subject = tuple[str, str]
"""``(kind, name)`` of what an Event is about."""
COPIED = {"Service": SERVICES, "Ingress": INGRESSES}


def _events(pair: NamespacePair) -> Informer:
    """The twin's Events but those never mirrored (:data:`~liqo.virtualkubelet.forge.events.WATCHED`)."""
    return pair.remote(EVENTS, field_selector=forge.WATCHED)


def _subject(event: Obj) -> Subject | None:
    """What an Event is about, as ``(kind, name)`` (pure)."""
    involved = event.get("involvedObject") or {}
    return (involved["kind"], involved["name"]) if involved.get("kind") and involved.get("name") else None


class EventReflector(Reflector[str]):
    """Mirrors the provider's Events about one virtual node's pods and copies onto the home objects."""

    def __init__(
        self,
        *,
        manager: ReflectionManager,
        home_pods: Informer,
    ) -> None:
        """``home_pods`` is the pod reflector's informer (the pods bound to the node)."""
        super().__init__(manager, reflects="events", workers=2)
        self._provider_id = manager.provider_id
        self._home_pods = home_pods
        self._about: dict[str, Index[Subject]] = {}
        """Twin → its Events' keys by (kind, name) of what they are about."""
        self._mirrored: dict[str, str] = {}
        """Provider Event key → its resourceVersion last mirrored home."""

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch the twin's Events (indexed by subject) and our objects there (which re-queue their Events)."""
        events = _events(pair)
        about = self._about[pair.twin] = Index(events, by=_subject)  # before the handler below: it reads it

        def key(event: Obj) -> str:
            return f"{pair.twin}/{event['metadata']['name']}"

        def appeared(kind: str) -> HandlerFuncs:
            def requeue(obj: Obj) -> None:
                for event_key in about.keys((kind, obj["metadata"]["name"])):
                    self.controller.queue.add(event_key)

            return HandlerFuncs(add=requeue)

        def gone(event: Obj) -> None:
            self._mirrored.pop(key(event), None)

        events.add_handler(
            HandlerFuncs(
                add=lambda event: self.controller.queue.add(key(event)),
                update=lambda _old, new: self.controller.queue.add(key(new)),
                delete=gone,
            )
        )
        remote_pods(pair).add_handler(appeared("Pod"))
        for kind, resource in COPIED.items():
            pair.remote(resource).add_handler(appeared(kind))
            pair.home(resource)  # read by reconcile: asked for before the pair starts

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Look at every Event again, with the objects listed too."""
        listed = _events(pair).store.keys()
        for key in listed:
            self.controller.queue.add(key)

    def stop_namespace(self, pair: NamespacePair) -> None:
        """Drop the pair's index and what was mirrored from it."""
        self._about.pop(pair.twin, None)
        prefix = f"{pair.twin}/"
        for key in [k for k in self._mirrored if k.startswith(prefix)]:
            del self._mirrored[key]

    async def reconcile(self, key: str) -> Result | None:
        """Mirror provider Event ``key`` onto the home object it is about, if that object is ours."""
        twin, _ = split_namespaced_key(key)
        pair = self._manager.pair_of_twin(twin)
        if pair is None or not pair.synced:
            return None
        event = _events(pair).store.get(key)
        if event is None or not forge.mirrorable(event):
            return None  # a deleted Event's mirror expires at home on its own, as Events do
        version = resource_version_of(event)
        if self._mirrored.get(key) == version:
            return None
        involved = event["involvedObject"]
        kind, name = involved["kind"], involved["name"]
        home = self._home_object(pair, kind, name, involved.get("uid"))
        if home is None:
            return None
        mirror = forge.mirrored_event(event, home_object=home, provider_id=self._provider_id)
        if key in self._mirrored:
            await self._home.apply(EVENTS, mirror)
        else:
            try:
                await self._home.create(EVENTS, mirror)
            except ConflictError:
                await self._home.apply(EVENTS, mirror)  # made before a restart, or by an earlier version
        self._mirrored[key] = version
        return None

    def _home_object(self, pair: NamespacePair, kind: str, name: str, uid: str | None) -> Obj | None:
        """The home object the provider's ``kind`` ``name`` (of ``uid``) stands for, if it is one of ours."""
        if kind == "Pod":
            remote = remote_pods(pair).store.get(f"{pair.twin}/{name}")
            home = self._home_pods.store.get(f"{pair.home_namespace}/{name}")
            ours = remote is not None and home is not None and runs_home_pod(remote, home)
        else:
            resource: Resource = COPIED[kind]
            remote = pair.remote(resource).store.get(f"{pair.twin}/{name}")
            home = pair.home(resource).store.get(f"{pair.home_namespace}/{name}")
            ours = remote is not None and common.is_copy(remote, origin=self._home_cluster_id)
        if not ours or remote is None or uid not in (None, remote["metadata"]["uid"]):
            return None  # not about an object of ours (or about a previous one of that name)
        return home
