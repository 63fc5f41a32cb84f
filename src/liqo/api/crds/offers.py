"""The ResourceRequest and ResourceOffer CRDs: a consumer's request, a provider's offer (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    DNS_SUBDOMAIN_MAX_LENGTH,
    DNS_SUBDOMAIN_PATTERN,
    MAX_REASON_LENGTH,
    cluster_id,
    cluster_name,
    column,
    crd,
    enum,
    quantity_map,
    slots,
    storage_classes,
    string,
    string_map,
    struct,
    timestamp,
)
from liqo.api.offers import OfferPhase, OfferState
from liqo.api.resources import (
    RESOURCE_OFFERS,
    RESOURCE_REQUESTS,
)
from liqo.api.workingmodes import ACCEPTS_TETHERING, TETHERED
from liqo.kube import printable


def resource_request_crd() -> dict[str, Any]:
    """ResourceRequest (namespaced, named after the consumer's ID): a consumer asking a provider for resources."""
    spec = struct(
        "The consumer asking for an offer.",
        {
            "consumerClusterID": cluster_id("The consumer's cluster ID."),
            "consumerClusterName": cluster_name("The consumer's human-readable name."),
            "withdrawalTimestamp": timestamp("Set when the consumer wants out of the peering."),
        },
        required=("consumerClusterID",),
    )
    status = struct(
        "The provider's answer.",
        {
            "offerState": enum("Whether the provider made an offer.", tuple(OfferState)),
            "message": string("Why, when the provider denied the request."),
        },
    )
    return crd(
        RESOURCE_REQUESTS,
        short_name="rr",
        description="A consumer cluster asking a provider for resources.",
        spec=spec,
        status=status,
        columns=[
            column("Consumer", ".spec.consumerClusterName"),
            column("Offer", ".status.offerState"),
            column("Withdrawn", ".spec.withdrawalTimestamp", priority=1),
        ],
    )


def resource_offer_crd() -> dict[str, Any]:
    """ResourceOffer (namespaced, named after the provider's ID): what a provider offers to one consumer."""
    spec = struct(
        "What the provider offers.",
        {
            "providerClusterID": cluster_id("The provider's cluster ID."),
            "providerClusterName": cluster_name("The provider's human-readable name."),
            "resources": quantity_map("The resources offered: cpu, memory, pods, extended resources..."),
            "largestSlots": slots(
                "The largest pods the provider can still place on one of its nodes, largest CPU first: a pod"
                " no slot holds is refused by the consumer's virtual kubelet instead of sent to no node."
            ),
            "storage": storage_classes(
                "The storage offered, per StorageClass of the provider: once the offer is accepted, what the"
                " consumer's claims there may request together."
            ),
            "labels": string_map("Labels for the virtual node standing for this offer."),
            ACCEPTS_TETHERING: {
                "type": "boolean",
                "description": "The provider's policy accepts this consumer tethering itself to the provider.",
            },
            TETHERED: {
                "type": "boolean",
                "description": "The provider is tethered to this consumer: the consumer schedules its workloads.",
            },
            "prices": quantity_map("The price per resource unit-hour."),
            "timestamp": timestamp("When the offer was made."),
            "expiry": timestamp("When the offer lapses unless refreshed."),
        },
        required=("providerClusterID", "resources"),
    )
    status = struct(
        "The consumer's decision.",
        {
            "phase": enum("The consumer's verdict on the offer.", tuple(OfferPhase)),
            "reason": string("Why the offer is in this phase.", maxLength=MAX_REASON_LENGTH, pattern=printable.PATTERN),
            "virtualNode": string(
                "The VirtualNode standing for the accepted offer.",
                maxLength=DNS_SUBDOMAIN_MAX_LENGTH,
                pattern=DNS_SUBDOMAIN_PATTERN,
            ),
        },
    )
    return crd(
        RESOURCE_OFFERS,
        short_name="ro",
        description="The resources a provider cluster offers to one consumer.",
        spec=spec,
        status=status,
        columns=[
            column("Provider", ".spec.providerClusterName"),
            column("Phase", ".status.phase"),
            column("CPU", ".spec.resources.cpu"),
            column("Memory", ".spec.resources.memory"),
            column("Pods", ".spec.resources.pods"),
            # A string, not a date: kubectl renders future dates as "<invalid>".
            column("Expiry", ".spec.expiry"),
        ],
    )
