"""The SharingPolicy CRD: what a provider shares with whom, and on which terms (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    ANNOTATION_KEY_PATTERN,
    CLUSTER_UUID_PATTERN,
    DEFAULT_MAX_GRACE_SECONDS,
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    HOST_PATTERN_PATTERN,
    KEY_OR_PREFIX_PATTERN,
    MAX_ALLOWED_KEYS,
    MAX_ALLOWED_TWIN_NAMES,
    MAX_EXCEPT,
    MAX_INGRESS_ITEMS,
    MAX_POD_NETWORK_PEERS,
    NAME_OR_PREFIX_PATTERN,
    POD_SECURITY_LEVELS,
    SHARING_ACTIONS,
    TAINT_EFFECTS,
    TETHERING_POLICIES,
    TOLERATION_OPERATORS,
    Schema,
    cidr,
    column,
    crd,
    enum,
    integer,
    quantity_map,
    storage_classes,
    string,
    string_map,
    string_set,
    struct,
)
from liqo.api.resources import (
    SHARING_POLICIES,
)


def _pod_security() -> Schema:
    """What a provider lets the peers' pods do (docs/security.md, "ShadowPod admission")."""
    toleration = struct(
        "A toleration the peers' pods may carry (matched exactly).",
        {
            "key": string("The taint key."),
            "operator": enum("Exists or Equal.", TOLERATION_OPERATORS, default="Equal"),
            "value": string("The taint value (Equal)."),
            "effect": enum("The taint effect; empty: every effect.", TAINT_EFFECTS),
        },
    )

    def allowed_keys(what: str) -> Schema:
        return string_set(
            f"{what} keys their pods may carry beyond keys without a prefix and the built-in few (docs/security.md,"
            ' "ShadowPod admission"): exact keys, or a prefix and /* (prometheus.io/*). Other components act on'
            " keys they find on pods (CNI plugins, meshes, the cluster autoscaler): list only keys this cluster's"
            " components treat safely for a peer.",
            string(f"A {what.lower()} key, or a prefix and /*.", pattern=KEY_OR_PREFIX_PATTERN, maxLength=317),
        ) | {"maxItems": MAX_ALLOWED_KEYS}

    return struct(
        "What the peers' pods may do on this cluster.",
        {
            "level": enum(
                "The Pod Security Standards profile their pods must meet.", POD_SECURITY_LEVELS, default="baseline"
            ),
            "tolerations": {
                "type": "array",
                "description": "The only tolerations their pods may carry (default: none).",
                "items": toleration,
                "maxItems": 32,
                "x-kubernetes-list-type": "atomic",
            },
            "maxTerminationGracePeriodSeconds": integer(
                "The longest grace period their pods get (longer ones are cut to it).",
                minimum=0,
                maximum=86400,
                default=DEFAULT_MAX_GRACE_SECONDS,
            ),
            "allowedLabelKeys": allowed_keys("Label"),
            "allowedAnnotationKeys": allowed_keys("Annotation"),
        },
    )


def _ingress() -> Schema:
    """What a provider lets the peers' Ingresses say (docs/security.md, "Ingresses")."""

    def listed(description: str, item: Schema) -> Schema:
        return string_set(description, item) | {"maxItems": MAX_INGRESS_ITEMS}

    return struct(
        "What the peers' Ingresses may say on this cluster. Absent or without classes: no Ingress of theirs is"
        " accepted.",
        {
            "classes": listed(
                "The IngressClasses their Ingresses may name in spec.ingressClassName (the only way: the legacy"
                " annotation is refused).",
                string("An IngressClass name.", pattern=DNS_SUBDOMAIN_PATTERN, maxLength=253),
            ),
            "hosts": listed(
                "The hosts their rules and TLS sections may name: shop.example.com, or *.example.com for any name"
                " under example.com (not example.com itself). A rule without a host is refused.",
                string("A host, or *. and a domain.", pattern=HOST_PATTERN_PATTERN, maxLength=253),
            ),
            "annotations": listed(
                "Annotation keys their Ingresses may carry (exact keys). Ingress controllers act on annotations"
                " (nginx snippets run configuration in the controller): list only keys this cluster's controller"
                " treats safely.",
                string("An annotation key.", pattern=ANNOTATION_KEY_PATTERN, maxLength=317),
            ),
        },
    )


def _block(description: str) -> Schema:
    """A CIDR an admin opens to peers' pods: any size, down to ``::/0`` (a cluster network is at least 9 long)."""
    return cidr(description) | {"minLength": len("::/0")}


def _pod_network() -> Schema:
    """What a provider opens to its consumers' pods (docs/security.md, "Twins' bounds")."""

    def peers(description: str) -> Schema:
        entry = struct(
            "A block of addresses (with exceptions), or a namespace of this cluster.",
            {
                "cidr": _block(
                    "A block of addresses. This cluster's pod and service CIDRs and the special-purpose ranges"
                    " (link-local, where cloud metadata endpoints answer, loopback...) are always left out of it:"
                    " open this cluster's pods by namespace."
                ),
                "except": string_set("Blocks within cidr left out.", _block("A block within cidr."))
                | {"maxItems": MAX_EXCEPT},
                "namespace": string(
                    "A namespace of this cluster, by name (every pod in it).",
                    maxLength=DNS_LABEL_MAX_LENGTH,
                    pattern=DNS_LABEL_PATTERN,
                ),
            },
        )
        entry["x-kubernetes-validations"] = [
            {"rule": "has(self.cidr) != has(self.namespace)", "message": "give either cidr or namespace"},
            {"rule": "!has(self.except) || has(self.cidr)", "message": "except goes with cidr"},
        ]
        return {
            "type": "array",
            "description": description,
            "items": entry,
            "maxItems": MAX_POD_NETWORK_PEERS,
            "x-kubernetes-list-type": "atomic",
        }

    return struct(
        "Where the peers' pods here may connect, and from where they may be reached, besides what every twin's"
        " NetworkPolicy allows (their own pods in their twins and, with the network fabric, at home; the cluster"
        " DNS; their gateway). Empty: nothing more. Holds only where the cluster's network plugin enforces"
        " NetworkPolicy.",
        {
            "egress": peers("Where they may connect."),
            "ingress": peers("What may connect to them (the namespace of an ingress controller, for their Ingresses)."),
        },
    )


def sharing_policy_crd() -> dict[str, Any]:
    """SharingPolicy (cluster-scoped): what the provider shares, with whom, and at what price."""
    spec = struct(
        "What to share with the peers it names (no peers: every other peer).",
        {
            "peers": string_set(
                "The peers (cluster IDs, as `kubectl get fc` shows them) this policy is for; empty: the default for"
                " every other peer. Names are refused: a peer chooses its name, so a policy could be dodged by"
                " renaming.",
                string(
                    "A peer's cluster ID (a lowercase UUID).",
                    pattern=CLUSTER_UUID_PATTERN,
                ),
            ),
            "action": enum("Share resources with the peers, or deny them peering.", SHARING_ACTIONS),
            "percentage": integer("The share of the free capacity to offer, in percent.", minimum=1, maximum=100),
            "limits": quantity_map("Absolute caps on the offer, per resource."),
            "resources": string_set(
                "Which resources to share; empty: all of the nodes' allocatable.",
                string("A resource name such as cpu or nvidia.com/gpu.", minLength=1),
            ),
            "prices": quantity_map("The price per resource unit-hour."),
            "labels": string_map("Labels for the consumers' virtual nodes."),
            "refreshThresholdPercent": integer(
                "Refresh the offer when the free capacity moves by more than this percentage.",
                minimum=0,
                maximum=100,
                default=10,
            ),
            "offerTTLSeconds": integer("How long an offer is valid unless refreshed.", minimum=1, default=300),
            "storage": storage_classes(
                "The StorageClasses these peers' claims may name, each with what their claims of it may request"
                " together, in all their namespaces here. Empty: no storage, and their pods may use neither"
                " PersistentVolumeClaims nor generic ephemeral volumes."
            ),
            "podSecurity": _pod_security(),
            "allowedTwinNames": {
                **string_set(
                    "The twin namespace names these peers may choose themselves (their namespaceMappingStrategy"
                    " EnforceSameName): names, or prefixes ending in '*' (team-a-*). Default: none, and every twin"
                    " is named <namespace>-<first 8 characters of the peer's cluster ID>. Reserved names and"
                    " existing namespaces are never given.",
                    string(
                        "A namespace name, or the start of one followed by '*'.",
                        maxLength=DNS_LABEL_MAX_LENGTH,
                        pattern=NAME_OR_PREFIX_PATTERN,
                    ),
                ),
                "maxItems": MAX_ALLOWED_TWIN_NAMES,
            },
            "podNetwork": _pod_network(),
            "ingress": _ingress(),
            "tethering": enum(
                "Whether these peers may tether themselves to this cluster (liqoctl mode tethered): this"
                " cluster's scheduler then places all their workloads, and may use all their resources.",
                TETHERING_POLICIES,
                default="Refuse",
            ),
            "countLimits": {
                "type": "boolean",
                "description": "Whether the declared limits of the peers' pods must also add up within the accepted"
                " offer (their requests always must).",
                "default": True,
            },
        },
        required=("action",),
    )
    return crd(
        SHARING_POLICIES,
        short_name="sp",
        description="What this cluster shares with its consumers, as a provider.",
        spec=spec,
        status=struct("Reserved: a policy is only read, nothing reports on it yet.", {}),
        columns=[
            column("Action", ".spec.action"),
            column("Percentage", ".spec.percentage", type_="integer"),
            column("Peers", ".spec.peers"),
        ],
    )
