"""What is offered and accepted between peers, as metric samples read from the offer and VirtualNode caches (pure).

Both directions, from the objects that already say it: as a provider, the ResourceOffers this cluster made
(``liqo_provider_offered_resources``) and those its consumers accepted (``..._accepted_...``); as a
consumer, the offers received (``liqo_consumer_offered_resources``) and the VirtualNodes made of the
accepted ones (``..._accepted_...``). What is used of them is counted where it is known: by the provider's
ShadowPod ledger (:mod:`liqo.offloading.metrics`) and by the consumer's virtual kubelet
(:mod:`liqo.virtualkubelet.metrics`).

Amounts are in base units, as Prometheus has it: CPU in cores, memory in bytes, pods in pods; a resource
whose quantity does not parse is left out rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from liqo.api import names
from liqo.api.offers import OfferPhase
from liqo.api.quantity import QuantityError, parse_quantity
from liqo.kube.metrics import Sample
from liqo.kube.objects import Obj


def resource_samples(peer: str, resources: Mapping[str, Any]) -> Iterator[Sample]:
    """``((peer, resource), amount)`` for every readable quantity of ``resources``."""
    for resource, quantity in resources.items():
        try:
            yield (peer, resource), float(parse_quantity(quantity))
        except QuantityError:
            continue


def _resources(obj: Obj) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("resources") or {}


def offers_made(offers: Iterable[Obj], *, local_id: str, accepted_only: bool = False) -> Iterator[Sample]:
    """Per consumer, what this cluster's offer to it holds (only accepted offers if ``accepted_only``).

    This cluster's offers are the ones named after it in a consumer's tenant namespace; the rest of the
    cache are offers received, replicated from providers.
    """
    for offer in offers:
        consumer = names.tenant_peer_id(offer["metadata"].get("namespace") or "")
        if offer["metadata"]["name"] != local_id or consumer is None:
            continue
        if accepted_only and (offer.get("status") or {}).get("phase") != OfferPhase.ACCEPTED:
            continue
        yield from resource_samples(consumer, _resources(offer))


def offers_received(offers: Iterable[Obj]) -> Iterator[Sample]:
    """Per provider, what its offer to this cluster holds."""
    for offer in offers:
        yield from resource_samples(str(offer["metadata"]["name"]), _resources(offer))


def virtual_node_resources(virtual_nodes: Iterable[Obj]) -> Iterator[Sample]:
    """Per provider, what its VirtualNode (the accepted offer) holds."""
    for node in virtual_nodes:
        yield from resource_samples(str((node.get("spec") or {}).get("clusterID") or ""), _resources(node))
