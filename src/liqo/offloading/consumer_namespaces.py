"""The consumer's side of namespace offloading: NamespaceOffloading → NamespaceMaps on the selected providers.

Two controllers share the caches here, because the same facts are needed keyed two ways:

- keyed by **provider** (``namespace-maps-publisher``): the NamespaceMap on a provider lists every home
  namespace offloaded to it. It is one object written with one field manager, so it must be computed from
  all NamespaceOffloadings at once (:func:`desired_mappings`); a per-namespace writer would erase the other
  namespaces' entries with each apply. An empty map is deleted, which is how the last twin goes.
- keyed by **home namespace** (``namespace-offloading``): the finalizer and the ``liqo.io/scheduling-enabled``
  label, and the status, derived (:func:`twin_condition`, :func:`offloading_status`) from what each
  provider reports in its map's status. A deleted NamespaceOffloading is let go only once every provider
  reports its twin gone: until then pods could still be running there.

Only the consumer talks to providers, with the identity each issued (one client per provider, from the
identity registry): an informer per provider watches our map in our tenant namespace there, following the
identities as the replicator's do (:class:`~liqo.kube.following.Following`). An unreachable provider is
reported ``Error`` on every namespace offloaded to it, and retried with a capped exponential backoff for as
long as it is selected; a periodic probe notices a provider going away after everything was ``Ready``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.identity import ClusterIdentity
from liqo.api.offloadings import FAILED, OffloadingPhase, TwinPhase
from liqo.api.peers import PeerClientSource
from liqo.api.resources import NAMESPACE_MAPS, NAMESPACE_OFFLOADINGS, VIRTUAL_NODES
from liqo.kube.cache import InformerGroup, SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import KubeError, NotFoundError, UnreachableError
from liqo.kube.events import EventRecorder
from liqo.kube.finalizers import add_finalizer, has_finalizer, remove_finalizer
from liqo.kube.following import Following
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, terminating

log = logging.getLogger(__name__)


RESYNC = 15.0
"""How often a provider with namespaces offloaded to it is probed (and its map compared) when all is well."""
RETRY_BASE = 0.5
RETRY_MAX = 30.0
"""Retries after failing to reach a provider: doubling from RETRY_BASE, at most RETRY_MAX seconds apart."""


@dataclass(frozen=True)
class Provider:
    """A provider a namespace may be offloaded to (from its VirtualNode)."""

    cluster_id: str
    cluster_name: str


@dataclass(frozen=True)
class ProviderView:
    """What this cluster knows of its NamespaceMap on one provider.

    Attributes:
        synced: the informer on the provider listed at least once.
        error: the last failure talking to the provider, as a phrase following its name (see
            :func:`provider_error`; "" when the last attempt worked).
        namespace_map: our NamespaceMap there, as last seen (None: there is none).
    """

    synced: bool
    error: str
    namespace_map: Obj | None


# -- pure decisions --------------------------------------------------------------------------------------


def twin_name(offloading: Obj, *, home_cluster_id: str) -> str:
    """The name of the twins of ``offloading``'s namespace, per its mapping strategy (pure)."""
    spec = offloading.get("spec") or {}
    return names.twin_namespace(
        offloading["metadata"]["namespace"],
        home_cluster_id=home_cluster_id,
        enforce_same_name=spec.get("namespaceMappingStrategy") == "EnforceSameName",
    )


def selects(virtual_node: Obj, selector: Mapping[str, str]) -> bool:
    """Whether ``virtual_node``'s labels carry every pair of ``selector`` (an empty one selects all)."""
    labels = (virtual_node.get("spec") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def selected_providers(virtual_nodes: Iterable[Obj], selector: Mapping[str, str]) -> list[Provider]:
    """The providers whose (live) VirtualNode matches ``selector``, one per cluster ID, by ID (pure)."""
    found: dict[str, Provider] = {}
    for node in virtual_nodes:
        spec = node.get("spec") or {}
        if terminating(node) or not spec.get("clusterID") or not selects(node, selector):
            continue
        found.setdefault(spec["clusterID"], Provider(spec["clusterID"], spec.get("clusterName") or spec["clusterID"]))
    return [found[key] for key in sorted(found)]


def desired_mappings(
    offloadings: Iterable[Obj], virtual_nodes: Iterable[Obj], *, provider_id: str, home_cluster_id: str
) -> dict[str, str]:
    """Home namespace → twin name, for every live NamespaceOffloading selecting ``provider_id`` (pure)."""
    nodes = list(virtual_nodes)
    mappings = {}
    for offloading in offloadings:
        meta = offloading["metadata"]
        if meta["name"] != names.OFFLOADING or terminating(offloading):
            continue
        selector = (offloading.get("spec") or {}).get("clusterSelector") or {}
        if any(p.cluster_id == provider_id for p in selected_providers(nodes, selector)):
            mappings[meta["namespace"]] = twin_name(offloading, home_cluster_id=home_cluster_id)
    return dict(sorted(mappings.items()))


def namespace_map_manifest(*, consumer_id: str, mappings: Mapping[str, str]) -> Obj:
    """Our NamespaceMap on a provider: in our tenant namespace there, named after us (pure)."""
    return {
        "apiVersion": NAMESPACE_MAPS.api_version,
        "kind": NAMESPACE_MAPS.kind,
        "metadata": {
            "name": consumer_id,
            "namespace": names.tenant_namespace(consumer_id),
            "labels": names.peer_labels(consumer_id),
        },
        "spec": {"consumerClusterID": consumer_id, "mappings": dict(mappings)},
    }


def map_up_to_date(current: Obj | None, desired: Obj) -> bool:
    """Whether the provider's copy already says what ``desired`` says (so no write is needed)."""
    if current is None:
        return False
    spec = current.get("spec") or {}
    labels = current["metadata"].get("labels") or {}
    return (
        spec.get("consumerClusterID") == desired["spec"]["consumerClusterID"]
        and (spec.get("mappings") or {}) == desired["spec"]["mappings"]
        and all(labels.get(k) == v for k, v in desired["metadata"]["labels"].items())
    )


def _condition(provider: Provider, twin: str, phase: TwinPhase, message: str) -> dict[str, str]:
    condition = {
        "clusterID": provider.cluster_id,
        "clusterName": provider.cluster_name,
        "remoteNamespace": twin,
        "phase": phase,
    }
    if message:
        condition["message"] = message
    return condition


def twin_condition(*, provider: Provider, home: str, twin: str, view: ProviderView | None) -> dict[str, str]:
    """The status of ``home``'s twin on ``provider``, from what we see of our map there (pure)."""
    name = provider.cluster_name
    if view is None:
        return _condition(provider, twin, TwinPhase.ERROR, f"no identity on {name}: is the peering established?")
    if view.error:
        return _condition(provider, twin, TwinPhase.ERROR, f"{name} {view.error}")
    if not view.synced:
        return _condition(provider, twin, TwinPhase.PENDING, f"connecting to {name}")
    namespace_map = view.namespace_map or {}
    wanted = ((namespace_map.get("spec") or {}).get("mappings") or {}).get(home)
    entry = ((namespace_map.get("status") or {}).get("mappings") or {}).get(home)
    if wanted != twin or terminating(view.namespace_map):
        return _condition(provider, twin, TwinPhase.PENDING, f"adding the namespace to the NamespaceMap on {name}")
    if entry is None:
        return _condition(provider, twin, TwinPhase.PENDING, f"waiting for {name} to create the twin namespace")
    if entry.get("remoteNamespace") != twin:
        message = f"waiting for {name} to replace the twin {entry.get('remoteNamespace')}"
        return _condition(provider, twin, TwinPhase.PENDING, message)
    phase = entry.get("phase")
    reported = TwinPhase(phase) if phase in set(TwinPhase) else TwinPhase.PENDING
    return _condition(provider, twin, reported, str(entry.get("message") or ""))


def still_hosted(home: str, view: ProviderView) -> bool:
    """Whether ``home`` may still have a twin on the provider of ``view`` (unknown counts as yes) (pure)."""
    if view.error or not view.synced:
        return True
    namespace_map = view.namespace_map or {}
    return home in ((namespace_map.get("spec") or {}).get("mappings") or {}) or home in (
        (namespace_map.get("status") or {}).get("mappings") or {}
    )


def departure_condition(*, provider: Provider, home: str, view: ProviderView) -> dict[str, str]:
    """The status of ``home``'s twin on a provider while the offloading is being deleted (pure)."""
    name = provider.cluster_name
    if view.error:
        return _condition(provider, "", TwinPhase.ERROR, f"{name} {view.error}; the twin stays until it answers")
    if not view.synced:
        return _condition(provider, "", TwinPhase.PENDING, f"connecting to {name}")
    entry = (((view.namespace_map or {}).get("status") or {}).get("mappings") or {}).get(home) or {}
    return _condition(
        provider, str(entry.get("remoteNamespace") or ""), TwinPhase.PENDING, f"waiting for {name} to delete the twin"
    )


def offloading_phase(conditions: Iterable[Mapping[str, str]], *, deleting: bool) -> OffloadingPhase:
    """The NamespaceOffloading's ``offloadingPhase`` from its per-provider conditions (pure)."""
    phases = [c["phase"] for c in conditions]
    if deleting:
        return OffloadingPhase.TERMINATING
    if not phases:
        return OffloadingPhase.NO_CLUSTER_SELECTED
    failed = sum(phase in FAILED for phase in phases)
    if failed == len(phases):
        return OffloadingPhase.ALL_FAILED
    if failed:
        return OffloadingPhase.SOME_FAILED
    if all(phase == TwinPhase.READY for phase in phases):
        return OffloadingPhase.READY
    return OffloadingPhase.IN_PROGRESS


def offloading_status(*, twin: str, conditions: list[dict[str, str]], deleting: bool) -> Obj:
    """The NamespaceOffloading ``status`` (pure)."""
    return {
        "remoteNamespaceName": twin,
        "offloadingPhase": offloading_phase(conditions, deleting=deleting),
        "remoteNamespacesConditions": sorted(conditions, key=lambda c: c["clusterID"]),
    }


def new_conflicts(previous: Obj | None, conditions: Iterable[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The conditions in ``Conflict`` that the previous status did not already report (pure)."""
    before = {
        c.get("clusterID"): (c.get("phase"), c.get("message"))
        for c in ((previous or {}).get("remoteNamespacesConditions") or [])
    }
    return [
        c
        for c in conditions
        if c["phase"] == TwinPhase.CONFLICT and before.get(c["clusterID"]) != (TwinPhase.CONFLICT, c.get("message"))
    ]


def provider_error(error: KubeError) -> str:
    """What went wrong with a provider, as a phrase following its name in a condition message (pure)."""
    if isinstance(error, UnreachableError):
        return f"is unreachable: {error}"
    return f"refused our NamespaceMap: {error}"


def retry_delay(failures: int) -> float:
    """Seconds before trying again after ``failures`` transient failures in a row (an unreachable provider) (pure)."""
    return float(min(RETRY_MAX, RETRY_BASE * 2 ** min(failures, 16)))


# -- the controllers -------------------------------------------------------------------------------------


class _Remote(InformerGroup):
    """The informer on our tenant namespace on one provider, for one client (one identity)."""

    def __init__(self, client: KubeClient, *, namespace: str, provider_id: str, on_change: Callable[[], None]) -> None:
        self.client = client
        self.maps = Informer(
            client=client, resource=NAMESPACE_MAPS, namespace=namespace, name=f"namespacemaps@{provider_id[:8]}"
        )
        notify = HandlerFuncs(
            add=lambda _obj: on_change(), update=lambda _old, _new: on_change(), delete=lambda _obj: on_change()
        )
        self.maps.add_handler(notify)
        super().__init__([self.maps], name=f"namespacemaps@{provider_id[:8]}")


class NamespaceOffloadings(Component):
    """Publishes NamespaceMaps to providers and reports, per home namespace, where its twins stand."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        local: ClusterIdentity,
        peers: PeerClientSource,
        events: EventRecorder,
    ) -> None:
        self._client = client
        self._local_id = local.cluster_id
        self._peers = peers
        self._events = events
        self._remotes: Following[str, KubeClient, _Remote] = Following(
            make=lambda provider_id, client: _Remote(
                client,
                namespace=names.tenant_namespace(self._local_id),
                provider_id=provider_id,
                on_change=self._remote_changed(provider_id),
            ),
            # Reconciles that ran before the first list returned early (or reported "connecting"): again.
            on_synced=lambda provider_id, _remote: self._remote_changed(provider_id)(),
        )
        self._errors: dict[str, str] = {}
        self._failures: dict[str, int] = {}
        self.offloadings = informers.informer(NAMESPACE_OFFLOADINGS)
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.namespaces = informers.informer(NAMESPACES)
        self.controller: Controller[str] = Controller(
            name="namespace-offloading", reconcile=self.reconcile_namespace, workers=2
        )
        self.publisher: Controller[str] = Controller(
            name="namespace-maps-publisher", reconcile=self.reconcile_provider, workers=2
        )
        self.controller.watch(self.offloadings, lambda o: [o["metadata"]["namespace"]])
        self.controller.watch(self.virtual_nodes, lambda _vn: self._homes())
        self.controller.watch(self.namespaces, self._home_of_namespace)
        self.publisher.watch(self.offloadings, lambda _o: self._providers())
        self.publisher.watch(self.virtual_nodes, lambda vn: [(vn.get("spec") or {}).get("clusterID") or ""])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """Both control loops (run them together)."""
        return [self.controller, self.publisher]

    def peer_changed(self, provider_id: str) -> None:
        """Hook for PeerClients: an identity appeared, was renewed or went away."""
        self.publisher.queue.add(provider_id)

    def _homes(self) -> list[str]:
        return [o["metadata"]["namespace"] for o in self.offloadings.store.list()]

    def _providers(self) -> list[str]:
        ids = {(vn.get("spec") or {}).get("clusterID") for vn in self.virtual_nodes.store.list()}
        return sorted({i for i in ids if i} | set(self._remotes.members()) | set(self._peers.providers()))

    def _home_of_namespace(self, namespace: Obj) -> list[str]:
        name = namespace["metadata"]["name"]
        labelled = names.SCHEDULING_ENABLED in (namespace["metadata"].get("labels") or {})
        return [name] if labelled or f"{name}/{names.OFFLOADING}" in self.offloadings.store else []

    def _remote_changed(self, provider_id: str) -> Callable[[], None]:
        def changed() -> None:
            self.publisher.queue.add(provider_id)
            for home in self._homes():
                self.controller.queue.add(home)

        return changed

    def view(self, provider_id: str) -> ProviderView | None:
        """What we know of our map on ``provider_id`` (None: we hold no identity there)."""
        remote = self._remotes.get(provider_id)
        if remote is None:
            # An identity whose informer is not started yet (just issued, or just after a restart) knows nothing.
            return ProviderView(synced=False, error="", namespace_map=None) if self._peers.get(provider_id) else None
        theirs = names.tenant_namespace(self._local_id)
        return ProviderView(
            synced=remote.maps.has_synced,
            error=self._errors.get(provider_id, ""),
            namespace_map=remote.maps.store.get(f"{theirs}/{self._local_id}"),
        )

    # -- per provider: the NamespaceMap -----------------------------------------------------------------

    async def reconcile_provider(self, provider_id: str) -> Result | None:
        """Make our NamespaceMap on ``provider_id`` list exactly the namespaces offloaded to it."""
        if not provider_id:
            return None
        await self._follow_identities()
        remote = self._remotes.get(provider_id)
        if remote is None or not remote.maps.has_synced:
            return None  # replayed once an identity exists and the remote cache has synced
        mappings = desired_mappings(
            self.offloadings.store.list(),
            self.virtual_nodes.store.list(),
            provider_id=provider_id,
            home_cluster_id=self._local_id,
        )
        theirs = names.tenant_namespace(self._local_id)
        current = remote.maps.store.get(f"{theirs}/{self._local_id}")
        desired = namespace_map_manifest(consumer_id=self._local_id, mappings=mappings)
        try:
            if terminating(current):
                pass  # the provider is deleting the twins; the map's deletion event brings us back
            elif not mappings:
                if current is not None:
                    log.info("nothing is offloaded to %s any more: deleting our NamespaceMap there", provider_id)
                    await remote.client.delete(NAMESPACE_MAPS, self._local_id, namespace=theirs, missing_ok=True)
            elif not map_up_to_date(current, desired):
                await remote.client.apply(NAMESPACE_MAPS, desired)
            else:
                # All is as it should be in our cache; make sure the provider is still there to say so (a
                # 404 only means our cache is behind: the informer catches up).
                with contextlib.suppress(NotFoundError):
                    await remote.client.get(NAMESPACE_MAPS, self._local_id, namespace=theirs)
        except KubeError as exc:
            failures = self._failures.get(provider_id, 0)
            self._failures[provider_id] = failures + 1
            self._set_error(provider_id, provider_error(exc))
            log.warning("cannot update our NamespaceMap on %s: %s", provider_id, exc)
            return Result(requeue_after=retry_delay(failures))
        self._failures.pop(provider_id, None)
        self._set_error(provider_id, "")
        return Result(requeue_after=RESYNC) if mappings else None

    def _set_error(self, provider_id: str, error: str) -> None:
        if self._errors.get(provider_id, "") == error:
            return
        if error:
            self._errors[provider_id] = error
        else:
            self._errors.pop(provider_id, None)
        for home in self._homes():
            self.controller.queue.add(home)

    async def _follow_identities(self) -> None:
        started, stopped = self._remotes.follow(self._peers.clients())
        if not started | stopped:
            return  # the same identities (or still none)
        for changed in started | stopped:  # a new identity starts with a clean slate
            self._errors.pop(changed, None)
            self._failures.pop(changed, None)
        for home in self._homes():
            self.controller.queue.add(home)

    # -- per home namespace: finalizer, label, status ---------------------------------------------------

    async def reconcile_namespace(self, home: str) -> Result | None:
        """Converge the finalizer, the label and the status of ``home``'s NamespaceOffloading."""
        offloading = self.offloadings.store.get(f"{home}/{names.OFFLOADING}")
        namespace = self.namespaces.store.get(home)
        if offloading is None:
            await self._set_label(namespace, enabled=False)
            return None
        twin = twin_name(offloading, home_cluster_id=self._local_id)
        if terminating(offloading):
            return await self._depart(home, offloading, twin=twin, namespace=namespace)
        await add_finalizer(self._client, NAMESPACE_OFFLOADINGS, offloading, finalizer=names.FINALIZER)
        await self._set_label(namespace, enabled=True)
        selector = (offloading.get("spec") or {}).get("clusterSelector") or {}
        providers = selected_providers(self.virtual_nodes.store.list(), selector)
        conditions = [twin_condition(provider=p, home=home, twin=twin, view=self.view(p.cluster_id)) for p in providers]
        previous = offloading.get("status")
        for conflict in new_conflicts(previous, conditions):
            await self._events.record(
                _typed(offloading),
                type="Warning",
                reason="TwinConflict",
                message=f"{conflict['clusterName']}: {conflict.get('message', '')}",
            )
        await self._write_status(offloading, offloading_status(twin=twin, conditions=conditions, deleting=False))
        return None

    async def _depart(self, home: str, offloading: Obj, *, twin: str, namespace: Obj | None) -> Result | None:
        """A deleted NamespaceOffloading: wait until no provider hosts a twin, then drop label and finalizer."""
        providers = {p.cluster_id: p for p in selected_providers(self.virtual_nodes.store.list(), {})}
        for condition in (offloading.get("status") or {}).get("remoteNamespacesConditions") or []:
            providers.setdefault(condition["clusterID"], Provider(condition["clusterID"], condition["clusterName"]))
        known = set(self._remotes.members()) | set(self._peers.providers())
        views = {pid: view for pid in sorted(known) if (view := self.view(pid)) is not None}
        hosting = [pid for pid, view in views.items() if still_hosted(home, view)]
        conditions = [
            departure_condition(provider=providers.get(pid) or Provider(pid, pid), home=home, view=views[pid])
            for pid in hosting
        ]
        await self._write_status(offloading, offloading_status(twin=twin, conditions=conditions, deleting=True))
        if hosting:
            return None  # each provider's map status change brings us back
        await self._set_label(namespace, enabled=False)
        if has_finalizer(offloading, finalizer=names.FINALIZER):
            log.info("namespace %s is no longer offloaded anywhere: releasing its NamespaceOffloading", home)
            await remove_finalizer(self._client, NAMESPACE_OFFLOADINGS, offloading, finalizer=names.FINALIZER)
        return None

    async def _write_status(self, offloading: Obj, status: Obj) -> None:
        if (offloading.get("status") or {}) == status:
            return
        meta = offloading["metadata"]
        with contextlib.suppress(NotFoundError):  # deleted meanwhile (its finalizer was just released)
            await self._client.apply_status(
                NAMESPACE_OFFLOADINGS, name=meta["name"], namespace=meta["namespace"], status=status
            )

    async def _set_label(self, namespace: Obj | None, *, enabled: bool) -> None:
        """Label the home namespace for the pod webhook while it is offloaded; unlabel it after."""
        if namespace is None:
            return
        labels = namespace["metadata"].get("labels") or {}
        if enabled and labels.get(names.SCHEDULING_ENABLED) == "true":
            return
        if not enabled and names.SCHEDULING_ENABLED not in labels:
            return
        value: str | None = "true" if enabled else None
        with contextlib.suppress(NotFoundError):
            await self._client.patch(
                NAMESPACES, namespace["metadata"]["name"], {"metadata": {"labels": {names.SCHEDULING_ENABLED: value}}}
            )

    async def close(self) -> None:
        """Stop every remote informer."""
        await self._remotes.close()


def _typed(obj: Obj) -> Obj:
    """``obj`` with its apiVersion and kind (an Event's involvedObject needs them; list items may lack them)."""
    return {**obj, "apiVersion": NAMESPACE_OFFLOADINGS.api_version, "kind": NAMESPACE_OFFLOADINGS.kind}
