"""The manager's working-mode controller: look, take the one step :mod:`liqo.modes.plan` says, look again.

One key (there is one WorkingMode); every object the decision reads wakes it. Pods are listed only while a
tether is made, in force or ended, and only in the namespaces it offloaded: an Autonomous cluster, the
common case, keeps no cache of every pod for a switch it is not making.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ForeignClusters, cluster_id
from liqo.api.resources import NAMESPACE_OFFLOADINGS, RESOURCE_OFFERS, WORKING_MODES
from liqo.api.workingmodes import NAME, ModePhase, WorkingModeSpec, made_for_tether, tether_offloading
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.events import EventRecorder
from liqo.kube.metrics import CacheGauge
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, NODES, PODS
from liqo.modes.observe import (
    mode_sample,
    movable,
    namespaces_of,
    peer_of,
    status_manifest,
    status_of,
)
from liqo.modes.plan import (
    Evict,
    Localise,
    Observed,
    Offload,
    Pod,
    SetStatus,
    Step,
    Unoffload,
    fallback_in,
    next_step,
)

log = logging.getLogger(__name__)

EVICTION_REFUSED_RETRY = 5.0
"""Seconds before trying again an eviction a PodDisruptionBudget refused."""
NEXT_STEP = 0.2
"""Seconds before the next look after a step: what a step changes is not always watched (pods are listed)."""


class WorkingModes(Component):
    """Switches this cluster between Autonomous and Tethered as its WorkingMode asks."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        events: EventRecorder,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self.modes = informers.informer(WORKING_MODES)
        self.namespaces = informers.informer(NAMESPACES)
        self.offloadings = informers.informer(NAMESPACE_OFFLOADINGS)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.virtual_nodes = informers.informer(NODES, label_selector=f"{names.VIRTUAL_NODE_TYPE}={names.VIRTUAL_NODE}")
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.controller: Controller[str] = Controller(name="working-mode", reconcile=self.reconcile, workers=1)
        for informer in (
            self.modes,
            self.namespaces,
            self.offloadings,
            self.offers,
            self.virtual_nodes,
            self._by_cluster_id.informer,
        ):
            self.controller.watch(informer, lambda _obj: [NAME])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """The mode asked for, where the switch is, and the peer of the tether (1 for the one combination)."""
        return [
            CacheGauge(
                "liqo_working_mode",
                "This cluster's working mode as asked (mode), where the switch is (phase), and the tether's peer.",
                ("mode", "phase", "peer"),
                lambda: [mode_sample(self.modes.store.get(NAME))],
            )
        ]

    async def reconcile(self, _key: str) -> Result | None:
        """Take the next step of the switch, if any; look again as soon as it is taken."""
        working_mode = self.modes.store.get(NAME)
        observed = await self._observe(working_mode)
        step = next_step(observed)
        if step is None:
            due = fallback_in(observed)
            return None if due is None else Result(requeue_after=due.total_seconds())
        log.info("working mode: %s", step)
        if not await self._take(step, working_mode=working_mode):
            return Result(requeue_after=EVICTION_REFUSED_RETRY)
        return Result(requeue_after=NEXT_STEP)

    async def _observe(self, working_mode: Obj | None) -> Observed:
        status = status_of(working_mode)
        peers = []
        for foreign_cluster in self._by_cluster_id.informer.store.list():
            peer_id = cluster_id(foreign_cluster)
            offer = self.offers.store.get(f"{names.tenant_namespace(peer_id)}/{peer_id}")
            peers.append(peer_of(foreign_cluster, offer=offer))
        namespaces = namespaces_of(self.namespaces.store.list(), self.offloadings.store.list())
        local: list[Pod] = []
        on_peer: list[Pod] = []
        ours = [n for n in namespaces if n.ours]
        if status.phase is not ModePhase.AUTONOMOUS or ours:
            peer_node = self._virtual_node_of(status.peer or next((n.peer for n in ours), ""))
            virtual_nodes = frozenset(n["metadata"]["name"] for n in self.virtual_nodes.store.list())
            for namespace in ours:
                pods, _ = await self._client.list_all(PODS, namespace=namespace.name)
                found = movable(pods, peer_node=peer_node, virtual_nodes=virtual_nodes)
                local += found[0]
                on_peer += found[1]
        return Observed(
            spec=WorkingModeSpec.of(working_mode),
            status=status,
            peers=tuple(peers),
            namespaces=tuple(namespaces),
            local_pods=tuple(local),
            pods_on_peer=tuple(on_peer),
            now=self._clock(),
        )

    def _virtual_node_of(self, peer_id: str) -> str | None:
        for node in self.virtual_nodes.store.list():
            if names.labelled_peer_id(node) == peer_id:
                return str(node["metadata"]["name"])
        return None

    async def _take(self, step: Step, *, working_mode: Obj | None) -> bool:
        """Take ``step``; False when the cluster said not now (an eviction a budget refused)."""
        match step:
            case SetStatus(status):
                if working_mode is None:
                    return True  # nothing to write it on: an Autonomous cluster never asked for anything
                offloaded = [n["metadata"]["namespace"] for n in self.offloadings.store.list() if made_for_tether(n)]
                body = status_manifest(status, offloaded=offloaded, now=self._clock())
                await self._client.apply_status(WORKING_MODES, name=NAME, status=body)
                if status.phase in (ModePhase.TETHERED, ModePhase.AUTONOMOUS) or status.message:
                    reason = status.reason.value
                    about = {"apiVersion": WORKING_MODES.api_version, "kind": WORKING_MODES.kind, **working_mode}
                    await self._events.record(
                        about, type="Normal", reason=reason, message=status.message or status.phase.value
                    )
            case Offload(namespace, peer):
                await self._client.apply(
                    NAMESPACE_OFFLOADINGS, tether_offloading(namespace, peer=peer, strategy="Remote")
                )
            case Localise(namespace):
                patch = {"spec": {"podOffloadingStrategy": "Local"}}
                await self._client.patch(NAMESPACE_OFFLOADINGS, names.OFFLOADING, patch, namespace=namespace)
            case Unoffload(namespace):
                await self._client.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace, missing_ok=True)
            case Evict(pod):
                return await self._client.evict(pod.name, namespace=pod.namespace)
        return True
