"""``python -m liqo.localclusters.realnodes.provisioner``: the volume provisioner of a local cluster's real nodes.

The I/O around :mod:`liqo.localclusters.realnodes.volumes`, which decides: three informers (storage classes,
claims, volumes), one loop for claims and one for released volumes. Both loops run one item at a time: a
node's room is counted from the volumes made so far, and two claims decided at once could both take the last
of it. A PV just created is counted before the informer shows it (:attr:`Provisioner.made`).

A directory is made before its PV and removed before the PV is deleted: a crash between the two leaves an
empty directory at worst, which the next attempt reuses (it is named after the claim's uid), never a PV
whose path is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

from liqo.api import volumes as volume_protocol
from liqo.api.quantity import parse_quantity
from liqo.api.volumes import Refusal
from liqo.kube import kubeconfig
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES, object_key
from liqo.localclusters.realnodes import volumes
from liqo.localclusters.realnodes.volumes import Provision

log = logging.getLogger("liqo.localclusters.provisioner")


class Provisioner:
    """Makes the volumes of claims of our classes on real nodes, and deletes the released ones."""

    def __init__(self, *, client: KubeClient, nodes: Mapping[str, Path], capacity: Decimal) -> None:
        """``nodes``: each real node's volumes directory as this machine sees it; ``capacity``: what each holds."""
        self._client = client
        self._nodes = dict(nodes)
        self._capacity = dict.fromkeys(nodes, capacity)
        self._events = EventRecorder(client=client, component=volumes.PROVISIONER)
        self.classes = Informer(client=client, resource=STORAGE_CLASSES)
        self.claims = Informer(client=client, resource=PERSISTENT_VOLUME_CLAIMS)
        self.volumes = Informer(client=client, resource=PERSISTENT_VOLUMES)
        self.made: dict[str, Obj] = {}
        """Volumes created that the informer may not show yet."""
        self.claim_loop: Controller[str] = Controller(name="volume-provisioner", reconcile=self.provision, workers=1)
        self.claim_loop.watch(self.claims, lambda claim: [object_key(claim)])
        # A volume gone or released frees room: the claims waiting on a node may fit now.
        self.claim_loop.watch(self.volumes, lambda _volume: self.claims.store.keys())
        self.claim_loop.watch(self.classes, lambda _class: self.claims.store.keys())
        self.volume_loop: Controller[str] = Controller(name="volume-reclaimer", reconcile=self.reclaim, workers=1)
        self.volume_loop.watch(self.volumes, lambda volume: [object_key(volume)])

    @property
    def informers(self) -> list[Informer]:
        """What :meth:`run` lists and watches."""
        return [self.classes, self.claims, self.volumes]

    async def run(self) -> None:
        """List, watch and reconcile until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
            for informer in self.informers:
                await informer.wait_synced()
            group.create_task(self.claim_loop.run())
            group.create_task(self.volume_loop.run())

    def _classes(self) -> dict[str, Obj]:
        return {cls["metadata"]["name"]: cls for cls in self.classes.store.list()}

    async def provision(self, key: str) -> None:
        """Make the volume of one claim, or say on the claim why not."""
        claim = self.claims.store.get(key)
        classes = self._classes()
        if claim is None or not volumes.is_ours(claim, classes):
            return
        listed = {volume["metadata"]["name"]: volume for volume in self.volumes.store.list()}
        self.made = {name: volume for name, volume in self.made.items() if name not in listed}
        decision = volumes.decide(
            claim,
            storage_class=classes[claim["spec"]["storageClassName"]],
            capacity=self._capacity,
            used=volumes.usage([*listed.values(), *self.made.values()]),
            exists=volume_protocol.volume_name(claim) in listed or volume_protocol.volume_name(claim) in self.made,
        )
        if isinstance(decision, Provision):
            await self._make(claim, decision)
        elif isinstance(decision, Refusal):
            await self._refuse(claim, decision)

    async def _make(self, claim: Obj, decision: Provision) -> None:
        directory = self._nodes[decision.node] / decision.name
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)  # the pod's user is whoever its image says: every one of them may write
        try:
            created = await self._client.create(PERSISTENT_VOLUMES, decision.volume)
        except ConflictError:
            return  # made by an earlier attempt whose answer was lost: the informer will show it
        self.made[decision.name] = created
        log.info("volume %s for claim %s on node %s", decision.name, object_key(claim), decision.node)
        await self._events.record(
            claim, type="Normal", reason="ProvisioningSucceeded",
            message=f"volume {decision.name} made on node {decision.node}",
        )  # fmt: skip

    async def _refuse(self, claim: Obj, refusal: Refusal) -> None:
        log.info("claim %s: %s", object_key(claim), refusal.message)
        await self._events.record(claim, type="Warning", reason=refusal.reason, message=refusal.message)
        if refusal.reschedule:
            meta = claim["metadata"]
            patch = {"metadata": {"annotations": {volume_protocol.SELECTED_NODE: None}}}
            try:
                await self._client.patch(PERSISTENT_VOLUME_CLAIMS, meta["name"], patch, namespace=meta["namespace"])
            except NotFoundError:
                return

    async def reclaim(self, key: str) -> None:
        """Delete a released volume of ours: its directory, then its PV."""
        volume = self.volumes.store.get(key)
        if volume is None or not volumes.reclaimable(volume):
            return
        name = volume["metadata"]["name"]
        node = volume_protocol.node_of(volume)
        if node in self._nodes:
            shutil.rmtree(self._nodes[node] / name, ignore_errors=True)
        await self._client.delete(PERSISTENT_VOLUMES, name, uid=volume["metadata"]["uid"], missing_ok=True)
        log.info("volume %s deleted with its data (node %s)", name, node)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The provisioner's flags."""
    parser = argparse.ArgumentParser(prog="python -m liqo.localclusters.realnodes.provisioner")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", default=[], metavar="NAME=DIR",
                        help="a real node and its volumes directory on this machine (repeat for each)")  # fmt: skip
    parser.add_argument("--capacity", required=True, help="what each node holds for volumes (a quantity: 20Gi)")
    args = parser.parse_args(argv)
    try:
        args.nodes = {name: Path(directory) for name, _, directory in (item.partition("=") for item in args.node)}
        args.capacity = parse_quantity(args.capacity)
    except ValueError as exc:
        parser.error(str(exc))
    return args


async def run(args: argparse.Namespace) -> None:
    """Provision until killed (the supervisor's SIGTERM: nothing is held that a restart would not find)."""
    async with KubeClient(access=kubeconfig.load_file(args.kubeconfig), name="local") as client:
        await Provisioner(client=client, nodes=args.nodes, capacity=args.capacity).run()


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    asyncio.run(run(parse_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
