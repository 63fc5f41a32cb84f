"""The DiscoverySource CRD: where this cluster hears of others, and what it does with them (pure).

Its spec is the operator's: the source (the LAN, a DNS domain), whether this cluster announces itself there,
how many neighbours it holds, and the policy that turns a neighbour into a peering. Its status is the
listener's, and the listener writes nothing else: what it heard, bounded by the spec's limit, each entry with
when it expires, so that a listener that dies leaves a table the manager can still age. Every field of the
status is a stranger's claim, held to the same patterns as the handshake.
"""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    CLUSTER_UUID_PATTERN,
    DNS_SUBDOMAIN_MAX_LENGTH,
    DNS_SUBDOMAIN_PATTERN,
    KEY_FINGERPRINT_PATTERN,
    MAX_REASON_LENGTH,
    Schema,
    cluster_name,
    column,
    crd,
    enum,
    integer,
    string,
    string_map,
    string_set,
    struct,
    timestamp,
)
from liqo.api.discoverysources import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_LISTED,
    MAX_NAMESERVERS,
    PeeringPolicy,
    SourceType,
)
from liqo.api.labels import MAX_LABELS
from liqo.api.resources import DISCOVERY_SOURCES

NAMESERVER_PATTERN = r"^([0-9]{1,3}\.){3}[0-9]{1,3}(:[0-9]{1,5})?$"


def _clusters(what: str) -> Schema:
    """An allow or deny list: by cluster ID, by name (exact, or a prefix and ``*``), or by announced labels."""
    return struct(
        f"Neighbours {what}, by cluster ID, name or labels (a name or a label is only what the neighbour"
        " announces: a hint).",
        {
            "clusterIDs": string_set(
                "Cluster IDs.", string("A cluster ID.", pattern=CLUSTER_UUID_PATTERN, maxLength=36)
            )
            | {"maxItems": MAX_LISTED},
            "clusterNames": string_set(
                "Cluster names: exact, or a prefix ending in *.",
                string("A cluster name, or a prefix and *.", minLength=1, maxLength=63),
            )
            | {"maxItems": MAX_LISTED},
            "labels": string_map(
                "The clusters announcing every one of these labels (their cluster labels, a claim like a name)."
            )
            | {"maxProperties": MAX_LISTED},
        },
    )


def _neighbour() -> Schema:
    return struct(
        "A cluster as the listener last heard it (its own claim).",
        {
            "clusterID": string("The cluster ID it announced.", pattern=CLUSTER_UUID_PATTERN, maxLength=36),
            "clusterName": cluster_name("The name it announced."),
            "authURL": string("Its authentication endpoint.", pattern="^https://", maxLength=255),
            "keyFingerprint": string(
                "The fingerprint of its cluster key, which the handshake will demand that it prove.",
                pattern=KEY_FINGERPRINT_PATTERN,
            ),
            "labels": string_map("The cluster labels it announced.") | {"maxProperties": MAX_LABELS},
            "address": string("Where it was heard from.", maxLength=255),
            "lastSeen": timestamp("When it was last heard."),
            "expiresAt": timestamp("When it is forgotten unless heard again."),
            "conflict": {
                "type": "boolean",
                "description": "Another neighbour claims the same cluster ID with another key: neither is used.",
            },
        },
        required=("clusterID", "authURL", "keyFingerprint", "expiresAt"),
    )


def discovery_source_crd() -> dict[str, Any]:
    """DiscoverySource (cluster-scoped): a LAN or a DNS domain, this cluster's policy there, what was heard."""
    spec = struct(
        "Where to hear of other clusters, and what to do with them.",
        {
            "type": enum(
                "LAN: multicast DNS on the nodes' network; DNS: the _liqo._tcp records of a domain.",
                tuple(SourceType),
            ),
            "announce": {
                "type": "boolean",
                "description": "LAN: whether this cluster announces itself there (it listens either way).",
                "default": True,
            },
            "domain": string(
                "DNS: the domain whose _liqo._tcp records list clusters.",
                pattern=DNS_SUBDOMAIN_PATTERN,
                maxLength=DNS_SUBDOMAIN_MAX_LENGTH,
            ),
            "nameservers": string_set(
                "DNS: the servers to ask (IPv4[:port]); empty: the system's resolver.",
                string("An IPv4 address, and a port.", pattern=NAMESERVER_PATTERN),
            )
            | {"maxItems": MAX_NAMESERVERS},
            "limit": integer(
                "Neighbours held at most: beyond, new ones are refused and counted.",
                minimum=1,
                maximum=MAX_LIMIT,
                default=DEFAULT_LIMIT,
            ),
            "peering": enum(
                "Manual: a neighbour becomes a ForeignCluster that an operator peers with; Auto: it is also"
                " peered with, using tokenSecret; Never: it is only listed here.",
                tuple(PeeringPolicy),
                default=PeeringPolicy.MANUAL.value,
            ),
            "allow": _clusters("taken from this source (absent: all)"),
            "deny": _clusters("never taken from this source, whatever allow says"),
            "tokenSecret": string(
                "Auto: the Secret in the liqo namespace whose 'token' key is presented to the neighbours' providers.",
                pattern=DNS_SUBDOMAIN_PATTERN,
                maxLength=DNS_SUBDOMAIN_MAX_LENGTH,
            ),
            "admitConsumers": {
                "type": "boolean",
                "description": "Whether the neighbours this source made records of may consume from this cluster"
                " without an enrolment token, their announced key their only proof. Off by default: on, anyone"
                " who can announce on this source (any host on the LAN, whoever writes the zone) is a consumer.",
                "default": False,
            },
        },
        required=("type",),
    )
    spec["x-kubernetes-validations"] = [
        {"rule": "self.type != 'DNS' || has(self.domain)", "message": "a DNS source needs spec.domain"},
        {
            "rule": "self.type == 'DNS' || (!has(self.domain) && !has(self.nameservers))",
            "message": "spec.domain and spec.nameservers are for DNS sources",
        },
        {
            "rule": "!has(self.peering) || self.peering != 'Auto' || has(self.tokenSecret)",
            "message": "peering Auto needs spec.tokenSecret (the providers still demand a token)",
        },
        {"rule": "self.type == oldSelf.type", "message": "spec.type cannot change: make another source"},
    ]
    status = struct(
        "What the listener heard (written by the listener alone).",
        {
            "neighbours": {
                "type": "array",
                "description": "The clusters heard and not expired, at most spec.limit.",
                "items": _neighbour(),
                "maxItems": MAX_LIMIT,
                "x-kubernetes-list-type": "atomic",
            },
            "refused": integer("Announcements refused since the listener started.", minimum=0),
            "lastRefusal": struct(
                "The last announcement refused, and why.",
                {
                    "address": string("Where it came from.", maxLength=255),
                    "reason": string("Why it was refused.", maxLength=MAX_REASON_LENGTH),
                    "at": timestamp("When."),
                },
            ),
            "listener": struct(
                "The listener writing this status.",
                {
                    "address": string("The address it announces and listens on.", maxLength=255),
                    "heartbeat": timestamp("When it last wrote (a stale heartbeat: the listener is gone)."),
                },
            ),
        },
    )
    return crd(
        DISCOVERY_SOURCES,
        short_name="dsrc",
        description="A place where this cluster hears of other liqo clusters (a LAN, a DNS domain).",
        spec=spec,
        status=status,
        columns=[
            column("Type", ".spec.type"),
            column("Peering", ".spec.peering"),
            column("Domain", ".spec.domain"),
            column("Refused", ".status.refused", type_="integer", priority=1),
            column("Heartbeat", ".status.listener.heartbeat", type_="date", priority=1),
        ],
    )
