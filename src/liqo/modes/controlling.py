"""The controlling peer's side of a tether: its scheduler may send a tethered cluster's pods back to it.

A tethered cluster L offloads its namespaces here, so their pods arrive as ShadowPods in L's twins and run
as pods here. For this cluster's scheduler to place one of them on L's own node — through the virtual node
for L — the twin must itself be offloaded to L: then the pod placement gives its pods the virtual node's
toleration and a choice between this cluster's nodes and L's (``LocalAndRemote``, selecting L only).

So, for every consumer whose offer says it is tethered here (``tethered``) while this cluster's own offer to
it accepts tethering (``acceptsTethering``: this cluster's SharingPolicy), each of its twins gets that
NamespaceOffloading, marked :data:`~liqo.api.names.MADE_FOR_TETHER`; when the tether ends, the ones marked so
are deleted (by then L has taken its pods home and deleted its offloadings, and with them these twins).
Twins of other consumers, and offloadings someone else made, are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.resources import NAMESPACE_OFFLOADINGS, RESOURCE_OFFERS
from liqo.api.workingmodes import ACCEPTS_TETHERING, TETHERED, made_for_tether, tether_offloading
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller
from liqo.kube.resources import NAMESPACES, terminating

KEY = "tethered-here"
BACK = "LocalAndRemote"
"""The twins' pods may run here or on the tethered cluster: this cluster's scheduler decides."""


@dataclass(frozen=True)
class Changes:
    """What to write so that exactly the twins of tethered consumers are offloaded back to them."""

    offload: tuple[tuple[str, str], ...] = ()
    """(twin namespace, its consumer) to offload back."""
    unoffload: tuple[str, ...] = ()
    """Twin namespaces whose tether offloading goes."""


def tethered_here(offers: Iterable[Mapping[str, Any]], *, local_id: str) -> frozenset[str]:
    """The consumers tethered to this cluster with its consent (pure).

    Both offers of a peering sit in its tenant namespace: the consumer's (named after it, replicated here,
    saying ``tethered``) and this cluster's own (named after this cluster, saying ``acceptsTethering``).
    """
    said: dict[str, set[str]] = {}
    for offer in offers:
        meta = offer["metadata"]
        peer = names.tenant_peer_id(meta.get("namespace") or "")
        spec = offer.get("spec") or {}
        if peer is None or terminating(offer):
            continue
        if meta["name"] == peer and spec.get(TETHERED) is True:
            said.setdefault(peer, set()).add(TETHERED)
        elif meta["name"] == local_id and spec.get(ACCEPTS_TETHERING) is True:
            said.setdefault(peer, set()).add(ACCEPTS_TETHERING)
    return frozenset(peer for peer, flags in said.items() if flags == {TETHERED, ACCEPTS_TETHERING})


def changes(
    tethered: frozenset[str], *, namespaces: Iterable[Mapping[str, Any]], offloadings: Iterable[Mapping[str, Any]]
) -> Changes:
    """The offloadings to make and delete (pure)."""
    existing = {o["metadata"]["namespace"]: o for o in offloadings if o["metadata"].get("name") == names.OFFLOADING}
    offload: list[tuple[str, str]] = []
    unoffload: list[str] = []
    for namespace in namespaces:
        meta = namespace["metadata"]
        labels = meta.get("labels") or {}
        consumer = names.labelled_peer_id(namespace)
        if consumer is None or names.ORIGIN_NAMESPACE not in labels:
            continue  # not a twin: this cluster's own namespaces (its own tether's among them) are not ours here
        current = existing.get(meta["name"])
        ours = current is not None and made_for_tether(current)
        wanted = consumer in tethered and not terminating(namespace)
        desired = tether_offloading(meta["name"], peer=consumer, strategy=BACK)["spec"]
        if wanted and (current is None or (ours and (current.get("spec") or {}) != desired)):
            offload.append((meta["name"], consumer))
        elif ours and not wanted and current is not None and not terminating(current):
            unoffload.append(meta["name"])
    return Changes(offload=tuple(sorted(offload)), unoffload=tuple(sorted(unoffload)))


class TetheredHere(Component):
    """Offloads the twins of the consumers tethered here back to them, and stops when the tether ends."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers, local_id: str) -> None:
        self._client = client
        self._local_id = local_id
        self.offers = informers.informer(RESOURCE_OFFERS)
        self.namespaces = informers.informer(NAMESPACES)
        self.offloadings = informers.informer(NAMESPACE_OFFLOADINGS)
        self.controller: Controller[str] = Controller(name="tethered-here", reconcile=self.reconcile, workers=1)
        for informer in (self.offers, self.namespaces, self.offloadings):
            self.controller.watch(informer, lambda _obj: [KEY])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    async def reconcile(self, _key: str) -> None:
        """Make and delete the back offloadings the tethers in force need."""
        tethered = tethered_here(self.offers.store.list(), local_id=self._local_id)
        todo = changes(tethered, namespaces=self.namespaces.store.list(), offloadings=self.offloadings.store.list())
        for twin, consumer in todo.offload:
            await self._client.apply(NAMESPACE_OFFLOADINGS, tether_offloading(twin, peer=consumer, strategy=BACK))
        for twin in todo.unoffload:
            await self._client.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=twin, missing_ok=True)
