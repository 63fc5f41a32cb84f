"""The virtual class's provisioner in the manager: the I/O around :mod:`liqo.storage.volumes`, which decides.

Two loops. ``virtual-class-claims`` is keyed by the claim: it makes the claim's PV (or its real claim first, on
a local node) and says what it did, or why not, with an Event on the claim. ``virtual-class-volumes`` is keyed
by the PV's name (the claim's uid, which names the real claim too): it deletes a released PV with its real
claim, and a real claim left behind for a claim that is gone. Everything is read from informers, so a restart
converges from what it finds: a PV or real claim is named after the claim's uid, and a create that finds one
there already is an earlier attempt's.

Which nodes are virtual is read from the VirtualNodes (ours), never from a Node's labels.
"""

from __future__ import annotations

import logging
from typing import Any

from liqo.api.resources import VIRTUAL_NODES
from liqo.api.storage import STORAGE_NAMESPACE, VIRTUAL_CLASS, VIRTUAL_PROVISIONER
from liqo.api.volumes import SELECTED_NODE, Refusal, reclaimable, volume_name
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.objects import Obj
from liqo.kube.projection import keep
from liqo.kube.resources import (
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    object_key,
)
from liqo.storage import volumes
from liqo.storage.volumes import MakeBacking, MakeVolume

log = logging.getLogger(__name__)

NAMES_ONLY = keep("metadata.name", "metadata.namespace")


class VirtualClassProvisioner(Component):
    """Provisions the claims of the virtual class ``liqo`` where their first pod runs."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers, events: EventRecorder) -> None:
        self._client = client
        self._events = events
        self.claims = informers.informer(PERSISTENT_VOLUME_CLAIMS)
        self.volumes = informers.informer(PERSISTENT_VOLUMES)
        self.classes = informers.informer(STORAGE_CLASSES)
        self.nodes = informers.informer(NODES, projection=NAMES_ONLY)
        self.virtual_nodes = informers.informer(VIRTUAL_NODES)
        self.claim_loop: Controller[str] = Controller(name="virtual-class-claims", reconcile=self.provision)
        self.claim_loop.watch(self.claims, self._claim_keys)
        self.claim_loop.watch(self.volumes, self._bound_claim)
        self.volume_loop: Controller[str] = Controller(name="virtual-class-volumes", reconcile=self.reclaim)
        self.volume_loop.watch(self.volumes, lambda volume: [volume["metadata"]["name"]])
        self.volume_loop.watch(self.claims, self._volume_keys)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The two loops."""
        return [self.claim_loop, self.volume_loop]

    def _claim_keys(self, claim: Obj) -> list[str]:
        """A claim of the class; or, for a real claim of ours, the claim it backs (its volume may be made now)."""
        meta = claim["metadata"]
        if meta.get("namespace") == STORAGE_NAMESPACE:
            backed = (meta.get("annotations") or {}).get(volumes.BACKS)
            return [backed] if backed else []
        return [object_key(claim)] if volumes.is_virtual(claim) else []

    def _bound_claim(self, volume: Obj) -> list[str]:
        """The real claim a PV is bound to, mapped to the claim it backs (a local volume can be made now)."""
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        if ref.get("namespace") != STORAGE_NAMESPACE:
            return []
        backing = self.claims.store.get(f"{STORAGE_NAMESPACE}/{ref.get('name')}")
        return self._claim_keys(backing) if backing is not None else []

    def _volume_keys(self, claim: Obj) -> list[str]:
        """A claim of the class, or a real claim of ours, is looked at by the name of its PV."""
        meta = claim["metadata"]
        if meta.get("namespace") == STORAGE_NAMESPACE:
            return [meta["name"]]
        return [volume_name(claim)] if volumes.is_virtual(claim) else []

    async def provision(self, key: str) -> None:
        """Make the volume of one claim of the class (or its real claim first), or say why not."""
        claim = self.claims.store.get(key)
        if claim is None or not volumes.is_virtual(claim):
            return
        name = volume_name(claim)
        backing = self.claims.store.get(f"{STORAGE_NAMESPACE}/{name}")
        bound = ((backing or {}).get("spec") or {}).get("volumeName")
        virtual_class = self.classes.store.get(VIRTUAL_CLASS) or {}
        decision = volumes.decide(
            claim,
            providers={vn["metadata"]["name"]: vn["spec"]["clusterID"] for vn in self.virtual_nodes.store.list()},
            local_nodes=frozenset(self.nodes.store.keys()),
            default_class=volumes.local_class(self.classes.store.list()),
            backing=backing,
            backing_volume=self.volumes.store.get(bound) if bound else None,
            exists=self.volumes.store.get(name) is not None,
            reclaim=virtual_class.get("reclaimPolicy") or "Delete",
        )
        if isinstance(decision, MakeVolume):
            if await self._create(PERSISTENT_VOLUMES, decision.volume):
                await self._events.record(
                    claim, type="Normal", reason="ProvisioningSucceeded",
                    message=f"volume {name} made, its data on {decision.where}",
                )  # fmt: skip
        elif isinstance(decision, MakeBacking):
            if await self._create(PERSISTENT_VOLUME_CLAIMS, decision.claim):
                node = decision.claim["metadata"]["annotations"][SELECTED_NODE]
                await self._events.record(
                    claim, type="Normal", reason="Provisioning",
                    message=f"a claim of class {decision.claim['spec']['storageClassName']} holds its data on node"
                    f" {node}: {STORAGE_NAMESPACE}/{name}",
                )  # fmt: skip
        elif isinstance(decision, Refusal):
            await self._refuse(claim, decision)

    async def _create(self, resource: Any, obj: Obj) -> bool:
        """Create ``obj``; False if an earlier attempt made it already (its answer lost, the cache behind)."""
        try:
            await self._client.create(resource, obj)
        except ConflictError:
            return False
        log.info("%s %s made", resource.kind, object_key(obj))
        return True

    async def _refuse(self, claim: Obj, refusal: Refusal) -> None:
        await self._events.record(claim, type="Warning", reason=refusal.reason, message=refusal.message)
        if refusal.reschedule:
            meta = claim["metadata"]
            patch = {"metadata": {"annotations": {SELECTED_NODE: None}}}
            try:
                await self._client.patch(PERSISTENT_VOLUME_CLAIMS, meta["name"], patch, namespace=meta["namespace"])
            except NotFoundError:
                return

    async def reclaim(self, name: str) -> None:
        """Delete a released PV of ours with its real claim, or a real claim nobody's PV stands for."""
        volume = self.volumes.store.get(name)
        backing = self.claims.store.get(f"{STORAGE_NAMESPACE}/{name}")
        if volume is not None and reclaimable(volume, provisioner=VIRTUAL_PROVISIONER):
            if backing is not None:
                await self._delete(PERSISTENT_VOLUME_CLAIMS, backing)
            await self._delete(PERSISTENT_VOLUMES, volume)
            return
        claims = {object_key(claim): claim for claim in self.claims.store.list()}
        if backing is not None and volumes.orphaned(backing, claims=claims, volume_exists=volume is not None):
            await self._delete(PERSISTENT_VOLUME_CLAIMS, backing)

    async def _delete(self, resource: Any, obj: Obj) -> None:
        meta = obj["metadata"]
        await self._client.delete(
            resource, meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid"), missing_ok=True
        )
        log.info("%s %s deleted: its claim of class %s is gone", resource.kind, object_key(obj), VIRTUAL_CLASS)
