"""The ForeignCluster CRD: a peer as this cluster knows it (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    DNS_SUBDOMAIN_MAX_LENGTH,
    KEY_FINGERPRINT_PATTERN,
    OFFER_POLICY_MODES,
    PEERING_ENABLED,
    cidr,
    cluster_id,
    cluster_name,
    column,
    condition_column,
    conditions,
    crd,
    enum,
    quantity_map,
    string,
    struct,
    timestamp,
)
from liqo.api.discoverysources import MAX_HEARD_BY
from liqo.api.foreignclusters import ConditionStatus, ConditionType
from liqo.api.networks import NETWORK, POD_CIDR, SERVICE_CIDR
from liqo.api.resources import (
    FOREIGN_CLUSTERS,
)


def foreign_cluster_crd() -> dict[str, Any]:
    """ForeignCluster (cluster-scoped): a peer, what we want from the peering, and how it is going."""
    offer_policy = struct(
        "How this cluster, as a consumer, decides on the peer's offers.",
        {
            "mode": enum(
                "Auto accepts every offer, Manual waits for an operator, PriceLimit accepts offers within maxPrices.",
                OFFER_POLICY_MODES,
                default="Auto",
            ),
            "maxPrices": quantity_map("PriceLimit mode: the highest acceptable price per resource unit-hour."),
        },
    )
    offer_policy["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.mode) || self.mode != 'PriceLimit' || has(self.maxPrices)",
            "message": "offerPolicy.maxPrices is required in PriceLimit mode",
        }
    ]
    spec = struct(
        "The peer and the peering wanted with it.",
        {
            "clusterID": cluster_id(
                "The peer's cluster ID (its liqo-cluster-identity); never changes.", immutable=True
            ),
            "clusterName": cluster_name("The peer's human-readable name."),
            "authURL": string("The peer's authentication endpoint.", pattern="^https://"),
            "outgoingPeeringEnabled": enum(
                "Whether this cluster consumes the peer's resources.", PEERING_ENABLED, default="Auto"
            ),
            "incomingPeeringEnabled": enum(
                "Whether this cluster provides resources to the peer.", PEERING_ENABLED, default="Auto"
            ),
            "offerPolicy": offer_policy,
            "keyFingerprint": string(
                "The fingerprint of the peer's cluster key (sha256:<hex>). A consumer sets it from the provider's"
                " identity and refuses any other provider; a provider pins it at the consumer's first"
                " authentication and refuses any other key claiming this cluster ID. Clear it to re-pin.",
                pattern=KEY_FINGERPRINT_PATTERN,
            ),
            NETWORK: struct(
                "The peer's network, as it told it at its latest authentication (the manager writes it at every"
                " handshake): what its pods' and Services' addresses are. Untrusted: checked before it is written.",
                {
                    POD_CIDR: cidr("The peer's pod CIDR."),
                    SERVICE_CIDR: cidr("The peer's service CIDR."),
                },
                required=(POD_CIDR, SERVICE_CIDR),
            ),
        },
        required=("clusterID",),
    )
    status = struct(
        "The observed state of the peering, written by the manager.",
        {
            "tenantNamespace": struct(
                "The namespaces holding everything about this peering.",
                {
                    "local": string("The tenant namespace on this cluster."),
                    "remote": string("The tenant namespace on the peer."),
                },
            ),
            "apiServerURL": string("The peer's API server, as its identity reaches it."),
            "identity": struct(
                "The identity the peer issued to this cluster.",
                {"expiresAt": timestamp("When its certificate expires.")},
            ),
            "discovery": {
                "type": "array",
                "description": "The DiscoverySources hearing the peer now (not expired), by name, at most"
                f" {MAX_HEARD_BY}; empty when none does.",
                "items": struct(
                    "A source hearing the peer.",
                    {
                        "source": string("The DiscoverySource.", maxLength=DNS_SUBDOMAIN_MAX_LENGTH),
                        "type": string("The source's type: LAN or DNS.", maxLength=16),
                        "address": string("Where the source hears it (the listener's word).", maxLength=255),
                        "lastSeen": timestamp("When the source last heard it, to the minute."),
                    },
                    required=("source",),
                ),
                "maxItems": MAX_HEARD_BY,
                "x-kubernetes-list-type": "atomic",
            },
            "tethered": {
                "type": "boolean",
                "description": "The peer is tethered to this cluster (its offer says so): this cluster schedules"
                " its workloads (docs/modes.md).",
            },
            "conditions": conditions(
                "The state of each aspect of the peering.",
                types=tuple(ConditionType),
                statuses=tuple(ConditionStatus),
            ),
        },
    )
    return crd(
        FOREIGN_CLUSTERS,
        short_name="fc",
        description="A peer cluster, the peering wanted with it, and how it is going.",
        spec=spec,
        status=status,
        columns=[
            column("Cluster Name", ".spec.clusterName"),
            column("Cluster ID", ".spec.clusterID"),
            condition_column("Outgoing", "OutgoingPeering"),
            condition_column("Incoming", "IncomingPeering"),
            condition_column("Authentication", "AuthenticationStatus"),
            column(
                "Network",
                '.status.conditions[?(@.type=="NetworkStatus")].reason',
                description="How addresses pass between the peer and this cluster: DirectRouting, CIDROverlap...",
                priority=1,
            ),
            column(
                "Tethered",
                ".status.tethered",
                type_="boolean",
                description="The peer is tethered to this cluster: this cluster schedules its workloads.",
                priority=1,
            ),
            column(
                "Discovered",
                ".status.discovery[0].source",
                description="The first DiscoverySource (by name) hearing the cluster now (status.discovery: all).",
                priority=1,
            ),
        ],
    )
