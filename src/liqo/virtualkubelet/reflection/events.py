"""The provider's Events about the pods we run, mirrored onto the home pods.

``kubectl describe pod`` at home must show why a pod does not start on the provider (image pulls, probes,
OOM kills): Events there about a pod we run become home Events about its home pod, one per provider Event
(same name), updated in place as its count grows (:mod:`liqo.virtualkubelet.forge.events`).

One key per provider Event (``twin/name``). Events may be listed before the pod they are about: each pair
keeps an index pod name → Event keys, so a pod showing up finds its Events without a scan of all.
"""

from __future__ import annotations

from typing import Any

from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.resources import EVENTS
from liqo.virtualkubelet.forge import events as forge
from liqo.virtualkubelet.forge.pods import runs_home_pod
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector
from liqo.virtualkubelet.reflection.pods import remote_pods

Obj = dict[str, Any]


class EventReflector(Reflector):
    """Mirrors the provider's Events about one virtual node's pods onto the home pods."""

    def __init__(
        self, *, home: KubeClient, manager: ReflectionManager, node_name: str, provider_id: str, home_pods: Informer
    ) -> None:
        """``home_pods`` is the pod reflector's informer (the pods bound to the node)."""
        self._home = home
        self._manager = manager
        self._provider_id = provider_id
        self._home_pods = home_pods
        self._about: dict[str, dict[str, set[str]]] = {}
        """Twin → pod name → keys of the Events about it."""
        self.controller: Controller[str] = Controller(name=f"events {node_name}", reconcile=self.reconcile, workers=2)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The mirror controller."""
        return [self.controller]

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch the twin's Events (indexed by pod) and our pods there (which re-queue their Events)."""
        about = self._about.setdefault(pair.twin, {})

        def key(event: Obj) -> str:
            return f"{pair.twin}/{event['metadata']['name']}"

        def seen(event: Obj) -> None:
            pod = (event.get("involvedObject") or {}).get("name")
            if pod:
                about.setdefault(pod, set()).add(key(event))
            self.controller.queue.add(key(event))

        def gone(event: Obj) -> None:
            pod = (event.get("involvedObject") or {}).get("name")
            keys = about.get(pod or "", set())
            keys.discard(key(event))
            if not keys:
                about.pop(pod or "", None)

        def pod_seen(pod: Obj) -> None:
            for event_key in about.get(pod["metadata"]["name"], ()):
                self.controller.queue.add(event_key)

        pair.remote(EVENTS).add_handler(HandlerFuncs(add=seen, update=lambda _old, new: seen(new), delete=gone))
        remote_pods(pair).add_handler(HandlerFuncs(add=pod_seen))

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Look at every Event again, with the pods listed too."""
        for keys in self._about.get(pair.twin, {}).values():
            for key in keys:
                self.controller.queue.add(key)

        self._about.pop(pair.twin, None)

    async def reconcile(self, key: str) -> Result | None:
        """Mirror provider Event ``key`` onto the home pod it is about, if it is one of ours."""
        twin, _ = key.split("/", 1)
        pair = self._manager.pair_of_twin(twin)
        if pair is None or not pair.synced:
            return None
        event = pair.remote(EVENTS).store.get(key)
        if event is None or not forge.mirrorable(event):
            return None  # a deleted Event's mirror expires at home on its own, as Events do
        involved = event["involvedObject"]
        remote = remote_pods(pair).store.get(f"{twin}/{involved['name']}")
        if remote is None or involved.get("uid", remote["metadata"]["uid"]) != remote["metadata"]["uid"]:
            return None  # not about a pod we run (or about a previous one of that name)
        home = self._home_pods.store.get(f"{pair.home_namespace}/{involved['name']}")
        if home is None or not runs_home_pod(remote, home):
            return None
        await self._home.apply(EVENTS, forge.mirrored_event(event, home_pod=home, provider_id=self._provider_id))
        return None
