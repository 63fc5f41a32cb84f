"""Which way a peering links us to a peer, as every capability must read it alike.

Two facts, each from an object the peer cannot write: we consume from a peer while *our* ForeignCluster for
it (cluster-scoped, ours or the admin's) says ``outgoingPeeringEnabled: Yes``; a consumer of ours takes
from us while *our* ResourceOffer to it (which only we create, named after our cluster ID in its tenant
namespace) is ``Accepted`` — the phase is the consumer's word, but there is nothing to accept unless we
offered. A ResourceRequest is no such fact: a consumer's identity may write one of any name in its tenant
namespace, ours included. Peering, sharing and the network fabric decide from these functions, so that what
keeps a tenant (a budget, a gateway, a place under the caps) is one definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from liqo.api.offers import OfferPhase
from liqo.kube.resources import terminating


def wants_outgoing(foreign_cluster: Mapping[str, Any] | None) -> bool:
    """Whether this ForeignCluster asks us to consume from the peer (pure)."""
    if foreign_cluster is None or terminating(foreign_cluster):
        return False
    return bool((foreign_cluster.get("spec") or {}).get("outgoingPeeringEnabled") == "Yes")


def offer_accepted(offer: Mapping[str, Any] | None) -> bool:
    """Whether this offer of ours stands and its consumer accepted it (pure)."""
    if offer is None or terminating(offer):
        return False
    return bool((offer.get("status") or {}).get("phase") == OfferPhase.ACCEPTED)
