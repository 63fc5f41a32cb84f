"""The CustomResourceDefinitions of liqo, built as plain dicts (pure functions, no I/O).

The schemas are the first line of defence: the API server refuses a wrong enum, an out-of-range
percentage, a malformed quantity or a changed cluster ID with a message naming the field, at
``kubectl apply`` time, instead of a controller failing later in a log nobody reads. Controllers can
then trust the shape of what they read. Group, version, plural and kind come from the descriptors of
:mod:`liqo.api.resources`, so the request paths and the served API cannot drift apart. The field list is
the one of ``docs/peering.md``.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ConditionStatus, ConditionType
from liqo.api.networkconfigs import ConnectionState
from liqo.api.networks import MAX_CIDR_LENGTH, NETWORK, POD_CIDR, SERVICE_CIDR
from liqo.api.offers import OfferPhase, OfferState
from liqo.api.offloadings import OffloadingPhase, TwinPhase
from liqo.api.resources import (
    FOREIGN_CLUSTERS,
    NAMESPACE_MAPS,
    NAMESPACE_OFFLOADINGS,
    NETWORK_CONFIGS,
    RESOURCE_OFFERS,
    RESOURCE_REQUESTS,
    SHADOW_PODS,
    SHARING_POLICIES,
    VIRTUAL_NODES,
)
from liqo.api.shadowpods import WAIT_REASONS, ShadowPodPhase
from liqo.kube import printable
from liqo.kube.resources import CRDS, Resource

Schema = dict[str, Any]

CATEGORY = "liqo"
"""Every liqo kind is in this category: ``kubectl get liqo`` lists them all."""

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""A Kubernetes quantity, as the API server's own ResourceList schema checks it."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX_LENGTH = 63
"""A namespace name: lowercase letters, digits and ``-``, at most 63 characters (RFC 1123 label)."""
NAME_OR_PREFIX_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-z0-9][-a-z0-9]*\*)$"
"""A namespace name, or the start of one followed by ``*`` (``team-*``): how an admin names namespaces, one by one
or by prefix (``--reserved-namespaces``, a SharingPolicy's ``allowedTwinNames``). A bare ``*`` is refused: it would
name every namespace."""
MAX_ALLOWED_TWIN_NAMES = 64
MAX_POD_NETWORK_PEERS = 32
"""How many places a SharingPolicy's ``podNetwork`` may open each way (each goes into every twin's NetworkPolicy)."""
MAX_EXCEPT = 16
CLUSTER_ID_PATTERN = DNS_LABEL_PATTERN
CLUSTER_ID_MAX_LENGTH = 63 - len(names.TENANT_NAMESPACE_PREFIX)
CLUSTER_UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
"""What a cluster ID really is (the UID of kube-system); where a name would be a mistake, only this passes."""
"""A cluster ID names the tenant namespace ``liqo-tenant-<ID>``, so it must keep that a DNS label."""

PEERING_ENABLED = ("Yes", "No", "Auto")
OFFER_POLICY_MODES = ("Auto", "Manual", "PriceLimit")
SHARING_ACTIONS = ("Share", "Deny")
POD_OFFLOADING_STRATEGIES = ("Local", "Remote", "LocalAndRemote")
NAMESPACE_MAPPING_STRATEGIES = ("DefaultName", "EnforceSameName")
POD_SECURITY_LEVELS = ("baseline", "restricted")
"""The Pod Security Standards profiles a provider may enforce on a peer's pods (PSA's own level names)."""
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_MAX_GRACE_SECONDS = 120
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_LENGTH = 253
MAX_REASON_LENGTH = 1024
"""A consumer's reason for its verdict on an offer: a sentence (it is shown by kubectl, and logged)."""
HOST_PATTERN_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ANNOTATION_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""A qualified name, as Kubernetes writes annotation keys: an optional DNS prefix and ``/``, then a name."""
KEY_OR_PREFIX_PATTERN = f"{ANNOTATION_KEY_PATTERN}|{DNS_SUBDOMAIN_PATTERN.removesuffix('$')}/\\*$"
"""A label or annotation key, or a DNS prefix and ``/*`` for every key of that prefix (``prometheus.io/*``). A
bare ``*`` is refused: it would let a peer's pods carry what the provider's other components act on."""
MAX_ALLOWED_KEYS = 64
MAX_INGRESS_ITEMS = 32
"""How many classes, host patterns or annotation keys a policy may offer: each list is written, joined, on
every twin of the consumers it applies to."""
CIDR_PATTERN = r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$|^[0-9a-f:]*:[0-9a-f:.]*/[0-9]{1,3}$"
"""A CIDR as :func:`liqo.api.networks.parse_cidr` writes it: dotted IPv4 or lowercase IPv6, and a prefix length."""
KEY_FINGERPRINT_PATTERN = r"^sha256:[0-9a-f]{64}$"
"""A cluster key's fingerprint: SHA-256 of its public key (SubjectPublicKeyInfo, DER), lowercase hex."""
MAX_CONTAINERS = 64
MAX_NAMESPACE_MAPPINGS = 1000
"""Namespaces one consumer may offload to a provider. Each is a namespace the provider creates, so the bound is
the consumer's reach into the provider's namespace list; and 1000 entries keep the map (spec and the status
the provider writes back, ~0.6 MB with messages and managed fields) well under etcd's 1.5 MiB object limit."""
MAX_SLOTS = 16
GATEWAY_ROLES = ("Server", "Client")
WIREGUARD_KEY_PATTERN = r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$"
"""A WireGuard key: 32 bytes in base64 (44 characters, the last byte's padding bits zero)."""
"""A bound on ``largestSlots`` keeping offers small; providers publish a few (liqo's: 3)."""


# -- schema fragments ------------------------------------------------------------------------------------


def _string(description: str, **constraints: Any) -> Schema:
    """A string, with optional OpenAPI constraints (``pattern``, ``format``, ``minLength``...)."""
    return {"type": "string", "description": description, **constraints}


def _name(description: str) -> Schema:
    """A cluster's name as a peer claims it: printable text (it is shown in tables and logs), bounded."""
    return _string(description, maxLength=names.MAX_CLUSTER_NAME, pattern=printable.PATTERN)


def _enum(description: str, values: tuple[str, ...], *, default: str | None = None) -> Schema:
    """A string restricted to ``values``: the API server names the allowed ones when refusing another.

    Plain strings in the schema (an enum member is one, but YAML writers only know ``str`` itself).
    """
    schema = _string(description, enum=[str(value) for value in values])
    if default is not None:
        schema["default"] = default
    return schema


def _integer(description: str, *, minimum: int, maximum: int | None = None, default: int | None = None) -> Schema:
    schema: Schema = {"type": "integer", "description": description, "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    if default is not None:
        schema["default"] = default
    return schema


def _timestamp(description: str) -> Schema:
    """An RFC 3339 time, the format of every timestamp in the Kubernetes API."""
    return _string(description, format="date-time")


def _cluster_id(description: str, *, immutable: bool = False) -> Schema:
    """A cluster ID; ``immutable`` refuses updates that change it (a peer's identity never changes)."""
    schema = _string(description, minLength=1, maxLength=CLUSTER_ID_MAX_LENGTH, pattern=CLUSTER_ID_PATTERN)
    if immutable:
        schema["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": "clusterID is immutable"}]
    return schema


def _cidr(description: str) -> Schema:
    """A network in CIDR notation, canonical: no host bits (``10.244.0.0/16``, never ``10.244.1.0/16``)."""
    schema = _string(description, format="cidr", pattern=CIDR_PATTERN, minLength=9, maxLength=MAX_CIDR_LENGTH)
    schema["x-kubernetes-validations"] = [
        {
            "rule": "isCIDR(self) && cidr(self) == cidr(self).masked()",
            "message": "must be a network address: no host bits set (10.244.0.0/16, not 10.244.1.0/16)",
        }
    ]
    return schema


def _quantity(description: str) -> Schema:
    """A quantity such as ``2``, ``500m`` or ``4Gi``, written either as a number or as a string."""
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _quantity_map(description: str) -> Schema:
    """Resource name (``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``...) to quantity."""
    return {
        "type": "object",
        "description": description,
        "additionalProperties": _quantity("A quantity such as 2, 500m or 4Gi."),
    }


def _slots(description: str) -> Schema:
    """The largest pods a provider can still place, each as a resource → quantity map, largest first."""
    return {
        "type": "array",
        "description": description,
        "items": _quantity_map("The free room of one node, capped by the offer."),
        "maxItems": MAX_SLOTS,
        "x-kubernetes-list-type": "atomic",
    }


def _string_map(description: str) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def _string_set(description: str, item: Schema) -> Schema:
    return {"type": "array", "description": description, "items": item, "x-kubernetes-list-type": "set"}


def _object(description: str, properties: dict[str, Schema], *, required: tuple[str, ...] = ()) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _conditions(
    description: str, *, types: tuple[str, ...] | None = None, statuses: tuple[str, ...] | None = None
) -> Schema:
    """A list of conditions keyed by ``type`` (server-side apply merges them one by one, as in core kinds)."""
    about, state = "What the condition is about.", "Its state."
    condition = _object(
        "The latest observation of one aspect of the object.",
        {
            "type": _enum(about, types) if types else _string(about),
            "status": _enum(state, statuses) if statuses else _string(state),
            "reason": _string("A machine-readable, CamelCase reason for the status."),
            "message": _string("A human-readable explanation of the status."),
            "lastTransitionTime": _timestamp("When the status last changed."),
            "lastProbeTime": _timestamp("When it was last checked (a handshake's outcome: when it was tried)."),
        },
        required=("type", "status"),
    )
    return {
        "type": "array",
        "description": description,
        "items": condition,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }


def _column(name: str, json_path: str, *, type_: str = "string", description: str = "", priority: int = 0) -> Schema:
    column: Schema = {"name": name, "type": type_, "jsonPath": json_path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


def _condition_column(name: str, condition_type: str) -> Schema:
    return _column(
        name,
        f'.status.conditions[?(@.type=="{condition_type}")].status',
        description=f"The status of the {condition_type} condition.",
    )


def crd_name(resource: Resource) -> str:
    """The name of the CRD serving ``resource``: ``<plural>.<group>``."""
    return f"{resource.plural}.{resource.group}"


def _crd(
    resource: Resource,
    *,
    short_name: str,
    description: str,
    spec: Schema,
    status: Schema,
    columns: list[Schema],
) -> dict[str, Any]:
    """One CRD serving ``resource`` at its single version, with a status subresource."""
    root = _object(
        description,
        {
            "apiVersion": _string("The versioned schema of this representation of the object."),
            "kind": _string("The REST resource this object represents."),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        required=("spec",),
    )
    return {
        "apiVersion": CRDS.api_version,
        "kind": CRDS.kind,
        "metadata": {"name": crd_name(resource), "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}},
        "spec": {
            "group": resource.group,
            "names": {
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "shortNames": [short_name],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "versions": [
                {
                    "name": resource.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    # Declaring any column drops the default Age column: every kind declares it again.
                    "additionalPrinterColumns": [*columns, _column("Age", ".metadata.creationTimestamp", type_="date")],
                }
            ],
        },
    }


# -- the kinds -------------------------------------------------------------------------------------------


def foreign_cluster_crd() -> dict[str, Any]:
    """ForeignCluster (cluster-scoped): a peer, what we want from the peering, and how it is going."""
    offer_policy = _object(
        "How this cluster, as a consumer, decides on the peer's offers.",
        {
            "mode": _enum(
                "Auto accepts every offer, Manual waits for an operator, PriceLimit accepts offers within maxPrices.",
                OFFER_POLICY_MODES,
                default="Auto",
            ),
            "maxPrices": _quantity_map("PriceLimit mode: the highest acceptable price per resource unit-hour."),
        },
    )
    offer_policy["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.mode) || self.mode != 'PriceLimit' || has(self.maxPrices)",
            "message": "offerPolicy.maxPrices is required in PriceLimit mode",
        }
    ]
    spec = _object(
        "The peer and the peering wanted with it.",
        {
            "clusterID": _cluster_id(
                "The peer's cluster ID (its liqo-cluster-identity); never changes.", immutable=True
            ),
            "clusterName": _name("The peer's human-readable name."),
            "authURL": _string("The peer's authentication endpoint.", pattern="^https://"),
            "outgoingPeeringEnabled": _enum(
                "Whether this cluster consumes the peer's resources.", PEERING_ENABLED, default="Auto"
            ),
            "incomingPeeringEnabled": _enum(
                "Whether this cluster provides resources to the peer.", PEERING_ENABLED, default="Auto"
            ),
            "offerPolicy": offer_policy,
            "keyFingerprint": _string(
                "The fingerprint of the peer's cluster key (sha256:<hex>). A consumer sets it from the provider's"
                " identity and refuses any other provider; a provider pins it at the consumer's first"
                " authentication and refuses any other key claiming this cluster ID. Clear it to re-pin.",
                pattern=KEY_FINGERPRINT_PATTERN,
            ),
            NETWORK: _object(
                "The peer's network, as it told it at its latest authentication (the manager writes it at every"
                " handshake): what its pods' and Services' addresses are. Untrusted: checked before it is written.",
                {
                    POD_CIDR: _cidr("The peer's pod CIDR."),
                    SERVICE_CIDR: _cidr("The peer's service CIDR."),
                },
                required=(POD_CIDR, SERVICE_CIDR),
            ),
        },
        required=("clusterID",),
    )
    status = _object(
        "The observed state of the peering, written by the manager.",
        {
            "tenantNamespace": _object(
                "The namespaces holding everything about this peering.",
                {
                    "local": _string("The tenant namespace on this cluster."),
                    "remote": _string("The tenant namespace on the peer."),
                },
            ),
            "apiServerURL": _string("The peer's API server, as its identity reaches it."),
            "identity": _object(
                "The identity the peer issued to this cluster.",
                {"expiresAt": _timestamp("When its certificate expires.")},
            ),
            "conditions": _conditions(
                "The state of each aspect of the peering.",
                types=tuple(ConditionType),
                statuses=tuple(ConditionStatus),
            ),
        },
    )
    return _crd(
        FOREIGN_CLUSTERS,
        short_name="fc",
        description="A peer cluster, the peering wanted with it, and how it is going.",
        spec=spec,
        status=status,
        columns=[
            _column("Cluster Name", ".spec.clusterName"),
            _column("Cluster ID", ".spec.clusterID"),
            _condition_column("Outgoing", "OutgoingPeering"),
            _condition_column("Incoming", "IncomingPeering"),
            _condition_column("Authentication", "AuthenticationStatus"),
            _column(
                "Network",
                '.status.conditions[?(@.type=="NetworkStatus")].reason',
                description="How addresses pass between the peer and this cluster: DirectRouting, CIDROverlap...",
                priority=1,
            ),
        ],
    )


def resource_request_crd() -> dict[str, Any]:
    """ResourceRequest (namespaced, named after the consumer's ID): a consumer asking a provider for resources."""
    spec = _object(
        "The consumer asking for an offer.",
        {
            "consumerClusterID": _cluster_id("The consumer's cluster ID."),
            "consumerClusterName": _name("The consumer's human-readable name."),
            "withdrawalTimestamp": _timestamp("Set when the consumer wants out of the peering."),
        },
        required=("consumerClusterID",),
    )
    status = _object(
        "The provider's answer.",
        {
            "offerState": _enum("Whether the provider made an offer.", tuple(OfferState)),
            "message": _string("Why, when the provider denied the request."),
        },
    )
    return _crd(
        RESOURCE_REQUESTS,
        short_name="rr",
        description="A consumer cluster asking a provider for resources.",
        spec=spec,
        status=status,
        columns=[
            _column("Consumer", ".spec.consumerClusterName"),
            _column("Offer", ".status.offerState"),
            _column("Withdrawn", ".spec.withdrawalTimestamp", priority=1),
        ],
    )


def resource_offer_crd() -> dict[str, Any]:
    """ResourceOffer (namespaced, named after the provider's ID): what a provider offers to one consumer."""
    spec = _object(
        "What the provider offers.",
        {
            "providerClusterID": _cluster_id("The provider's cluster ID."),
            "providerClusterName": _name("The provider's human-readable name."),
            "resources": _quantity_map("The resources offered: cpu, memory, pods, extended resources..."),
            "largestSlots": _slots(
                "The largest pods the provider can still place on one of its nodes, largest CPU first: a pod"
                " no slot holds is refused by the consumer's virtual kubelet instead of sent to no node."
            ),
            "labels": _string_map("Labels for the virtual node standing for this offer."),
            "prices": _quantity_map("The price per resource unit-hour."),
            "timestamp": _timestamp("When the offer was made."),
            "expiry": _timestamp("When the offer lapses unless refreshed."),
        },
        required=("providerClusterID", "resources"),
    )
    status = _object(
        "The consumer's decision.",
        {
            "phase": _enum("The consumer's verdict on the offer.", tuple(OfferPhase)),
            "reason": _string(
                "Why the offer is in this phase.", maxLength=MAX_REASON_LENGTH, pattern=printable.PATTERN
            ),
            "virtualNode": _string(
                "The VirtualNode standing for the accepted offer.",
                maxLength=DNS_SUBDOMAIN_MAX_LENGTH,
                pattern=DNS_SUBDOMAIN_PATTERN,
            ),
        },
    )
    return _crd(
        RESOURCE_OFFERS,
        short_name="ro",
        description="The resources a provider cluster offers to one consumer.",
        spec=spec,
        status=status,
        columns=[
            _column("Provider", ".spec.providerClusterName"),
            _column("Phase", ".status.phase"),
            _column("CPU", ".spec.resources.cpu"),
            _column("Memory", ".spec.resources.memory"),
            _column("Pods", ".spec.resources.pods"),
            # A string, not a date: kubectl renders future dates as "<invalid>".
            _column("Expiry", ".spec.expiry"),
        ],
    )


def _pod_security() -> Schema:
    """What a provider lets the peers' pods do (docs/security.md, "ShadowPod admission")."""
    toleration = _object(
        "A toleration the peers' pods may carry (matched exactly).",
        {
            "key": _string("The taint key."),
            "operator": _enum("Exists or Equal.", TOLERATION_OPERATORS, default="Equal"),
            "value": _string("The taint value (Equal)."),
            "effect": _enum("The taint effect; empty: every effect.", TAINT_EFFECTS),
        },
    )

    def allowed_keys(what: str) -> Schema:
        return _string_set(
            f"{what} keys their pods may carry beyond keys without a prefix and the built-in few (docs/security.md,"
            ' "ShadowPod admission"): exact keys, or a prefix and /* (prometheus.io/*). Other components act on'
            " keys they find on pods (CNI plugins, meshes, the cluster autoscaler): list only keys this cluster's"
            " components treat safely for a peer.",
            _string(f"A {what.lower()} key, or a prefix and /*.", pattern=KEY_OR_PREFIX_PATTERN, maxLength=317),
        ) | {"maxItems": MAX_ALLOWED_KEYS}

    return _object(
        "What the peers' pods may do on this cluster.",
        {
            "level": _enum(
                "The Pod Security Standards profile their pods must meet.", POD_SECURITY_LEVELS, default="baseline"
            ),
            "tolerations": {
                "type": "array",
                "description": "The only tolerations their pods may carry (default: none).",
                "items": toleration,
                "maxItems": 32,
                "x-kubernetes-list-type": "atomic",
            },
            "shareStorage": {
                "type": "boolean",
                "description": "Whether their pods may use PersistentVolumeClaims and generic ephemeral volumes.",
                "default": False,
            },
            "maxTerminationGracePeriodSeconds": _integer(
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
        return _string_set(description, item) | {"maxItems": MAX_INGRESS_ITEMS}

    return _object(
        "What the peers' Ingresses may say on this cluster. Absent or without classes: no Ingress of theirs is"
        " accepted.",
        {
            "classes": listed(
                "The IngressClasses their Ingresses may name in spec.ingressClassName (the only way: the legacy"
                " annotation is refused).",
                _string("An IngressClass name.", pattern=DNS_SUBDOMAIN_PATTERN, maxLength=253),
            ),
            "hosts": listed(
                "The hosts their rules and TLS sections may name: shop.example.com, or *.example.com for any name"
                " under example.com (not example.com itself). A rule without a host is refused.",
                _string("A host, or *. and a domain.", pattern=HOST_PATTERN_PATTERN, maxLength=253),
            ),
            "annotations": listed(
                "Annotation keys their Ingresses may carry (exact keys). Ingress controllers act on annotations"
                " (nginx snippets run configuration in the controller): list only keys this cluster's controller"
                " treats safely.",
                _string("An annotation key.", pattern=ANNOTATION_KEY_PATTERN, maxLength=317),
            ),
        },
    )


def _block(description: str) -> Schema:
    """A CIDR an admin opens to peers' pods: any size, down to ``::/0`` (a cluster network is at least 9 long)."""
    return _cidr(description) | {"minLength": len("::/0")}


def _pod_network() -> Schema:
    """What a provider opens to its consumers' pods (docs/security.md, "Twins' bounds")."""

    def peers(description: str) -> Schema:
        entry = _object(
            "A block of addresses (with exceptions), or a namespace of this cluster.",
            {
                "cidr": _block(
                    "A block of addresses. This cluster's pod and service CIDRs and the special-purpose ranges"
                    " (link-local, where cloud metadata endpoints answer, loopback...) are always left out of it:"
                    " open this cluster's pods by namespace."
                ),
                "except": _string_set("Blocks within cidr left out.", _block("A block within cidr."))
                | {"maxItems": MAX_EXCEPT},
                "namespace": _string(
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

    return _object(
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
    spec = _object(
        "What to share with the peers it names (no peers: every other peer).",
        {
            "peers": _string_set(
                "The peers (cluster IDs, as `kubectl get fc` shows them) this policy is for; empty: the default for"
                " every other peer. Names are refused: a peer chooses its name, so a policy could be dodged by"
                " renaming.",
                _string(
                    "A peer's cluster ID (a lowercase UUID).",
                    pattern=CLUSTER_UUID_PATTERN,
                ),
            ),
            "action": _enum("Share resources with the peers, or deny them peering.", SHARING_ACTIONS),
            "percentage": _integer("The share of the free capacity to offer, in percent.", minimum=1, maximum=100),
            "limits": _quantity_map("Absolute caps on the offer, per resource."),
            "resources": _string_set(
                "Which resources to share; empty: all of the nodes' allocatable.",
                _string("A resource name such as cpu or nvidia.com/gpu.", minLength=1),
            ),
            "prices": _quantity_map("The price per resource unit-hour."),
            "labels": _string_map("Labels for the consumers' virtual nodes."),
            "refreshThresholdPercent": _integer(
                "Refresh the offer when the free capacity moves by more than this percentage.",
                minimum=0,
                maximum=100,
                default=10,
            ),
            "offerTTLSeconds": _integer("How long an offer is valid unless refreshed.", minimum=1, default=300),
            "podSecurity": _pod_security(),
            "allowedTwinNames": {
                **_string_set(
                    "The twin namespace names these peers may choose themselves (their namespaceMappingStrategy"
                    " EnforceSameName): names, or prefixes ending in '*' (team-a-*). Default: none, and every twin"
                    " is named <namespace>-<first 8 characters of the peer's cluster ID>. Reserved names and"
                    " existing namespaces are never given.",
                    _string(
                        "A namespace name, or the start of one followed by '*'.",
                        maxLength=DNS_LABEL_MAX_LENGTH,
                        pattern=NAME_OR_PREFIX_PATTERN,
                    ),
                ),
                "maxItems": MAX_ALLOWED_TWIN_NAMES,
            },
            "podNetwork": _pod_network(),
            "ingress": _ingress(),
            "countLimits": {
                "type": "boolean",
                "description": "Whether the declared limits of the peers' pods must also add up within the accepted"
                " offer (their requests always must).",
                "default": True,
            },
        },
        required=("action",),
    )
    return _crd(
        SHARING_POLICIES,
        short_name="sp",
        description="What this cluster shares with its consumers, as a provider.",
        spec=spec,
        status=_object("Reserved: a policy is only read, nothing reports on it yet.", {}),
        columns=[
            _column("Action", ".spec.action"),
            _column("Percentage", ".spec.percentage", type_="integer"),
            _column("Peers", ".spec.peers"),
        ],
    )


def virtual_node_crd() -> dict[str, Any]:
    """VirtualNode (namespaced): the node a consumer gets for an accepted offer."""
    spec = _object(
        "The node standing for the provider's accepted offer.",
        {
            "clusterID": _cluster_id("The provider's cluster ID; never changes.", immutable=True),
            "clusterName": _string("The provider's human-readable name."),
            "resources": _quantity_map("The node's capacity: the accepted offer."),
            "largestSlots": _slots(
                "The accepted offer's largest slots: a pod none of them holds stays Pending here (DoesNotFitRemote)."
            ),
            "labels": _string_map("The node's labels."),
            "offer": _string("The name of the ResourceOffer this node stands for."),
            "kubeconfigSecretRef": _object(
                "The Secret, in this namespace, holding the identity to reach the provider with.",
                {"name": _string("The Secret's name.", minLength=1)},
                required=("name",),
            ),
        },
        required=("clusterID",),
    )
    status = _object(
        "The observed state of the node.",
        {"conditions": _conditions("The state of each aspect of the node.")},
    )
    return _crd(
        VIRTUAL_NODES,
        short_name="vn",
        description="A virtual node standing for a provider's accepted offer.",
        spec=spec,
        status=status,
        columns=[
            _column("Cluster Name", ".spec.clusterName"),
            _column("CPU", ".spec.resources.cpu"),
            _column("Memory", ".spec.resources.memory"),
        ],
    )


def _preserved(description: str, properties: dict[str, Schema] | None = None) -> Schema:
    """An object kept whole (a pod spec), with ``properties`` typed so that validation rules can read them."""
    schema: Schema = {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema["properties"] = properties
    return schema


def _containers(description: str) -> Schema:
    security = _preserved(
        "The container's security context.",
        {"privileged": {"type": "boolean", "description": "Whether the container runs privileged."}},
    )
    container = _preserved("A container, as in a Pod.", {"securityContext": security})
    return {"type": "array", "description": description, "items": container, "maxItems": MAX_CONTAINERS}


_UNPRIVILEGED = (
    "!has({0}) || {0}.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
    " || !c.securityContext.privileged)"
)


def shadow_pod_crd() -> dict[str, Any]:
    """ShadowPod (namespaced, provider side): a consumer's pod that this cluster runs for it.

    The refusals of host-level access live in the schema: the provider's own API server rejects such a
    ShadowPod with the message below, before anything runs, and the consumer shows it on the home pod.
    """
    pod = _preserved(
        "The pod to run: its spec, without the scheduling fields of the consumer's cluster.",
        {
            "hostNetwork": {"type": "boolean", "description": "Refused: the pod would share the node's network."},
            "hostPID": {"type": "boolean", "description": "Refused: the pod would see the node's processes."},
            "hostIPC": {"type": "boolean", "description": "Refused: the pod would share the node's IPC."},
            "containers": _containers("The pod's containers."),
            "initContainers": _containers("The pod's init containers."),
        },
    )
    pod["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.hostNetwork) || !self.hostNetwork",
            "message": "hostNetwork pods are refused by this provider: they would share its node's network",
        },
        {
            "rule": "!has(self.hostPID) || !self.hostPID",
            "message": "hostPID pods are refused by this provider: they would see its node's processes",
        },
        {
            "rule": "!has(self.hostIPC) || !self.hostIPC",
            "message": "hostIPC pods are refused by this provider: they would share its node's IPC",
        },
        {
            "rule": _UNPRIVILEGED.format("self.containers") + " && " + _UNPRIVILEGED.format("self.initContainers"),
            "message": "privileged containers are refused by this provider",
        },
    ]
    spec = _object(
        "The pod a consumer asks this cluster to run.",
        {
            "pod": pod,
            "homePodUID": _string("The UID of the pod in the consumer's cluster this one stands for."),
        },
        required=("pod",),
    )
    status = _object(
        "What the provider did with it.",
        {
            "phase": _enum(
                "Whether the provider created the pod, refused it, or holds it back until it may run.",
                tuple(ShadowPodPhase),
            ),
            "reason": _string(f"Why it waits ({', '.join(WAIT_REASONS)}) or was refused, in one word."),
            "message": _string("Why, when refused or waiting: the resource, and the pod's and the budget's figures."),
        },
    )
    return _crd(
        SHADOW_PODS,
        short_name="shp",
        description="A pod a consumer cluster asks this cluster to run; re-created while it exists.",
        spec=spec,
        status=status,
        columns=[
            _column("Phase", ".status.phase"),
            _column("Reason", ".status.reason"),
            _column("Home Pod", ".spec.homePodUID", priority=1),
        ],
    )


def namespace_offloading_crd() -> dict[str, Any]:
    """NamespaceOffloading (namespaced, named ``offloading``): extend a namespace to providers."""
    spec = _object(
        "How the namespace is extended to providers.",
        {
            "podOffloadingStrategy": _enum(
                "Where its pods may run: only here, only on providers, or both.",
                POD_OFFLOADING_STRATEGIES,
                default="LocalAndRemote",
            ),
            "namespaceMappingStrategy": _enum(
                "The twin namespace's name: <namespace>-<this cluster's ID prefix>, or the same name.",
                NAMESPACE_MAPPING_STRATEGIES,
                default="DefaultName",
            ),
            "clusterSelector": _string_map(
                "Labels a provider's virtual node must have to be selected (empty: every provider)."
            ),
        },
    )
    twin = _object(
        "The twin namespace on one provider.",
        {
            "clusterID": _cluster_id("The provider's cluster ID."),
            "clusterName": _string("The provider's human-readable name."),
            "remoteNamespace": _string("The twin namespace's name on the provider."),
            "phase": _enum("The twin namespace's state.", tuple(TwinPhase)),
            "message": _string("Why, when it is not Ready."),
        },
        required=("clusterID",),
    )
    status = _object(
        "The observed state of the offloading.",
        {
            "remoteNamespaceName": _string("The twin namespaces' name on every provider."),
            "offloadingPhase": _enum("The state of the offloading as a whole.", tuple(OffloadingPhase)),
            "remoteNamespacesConditions": {
                "type": "array",
                "description": "The twin namespace on each selected provider.",
                "items": twin,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["clusterID"],
            },
        },
    )
    crd = _crd(
        NAMESPACE_OFFLOADINGS,
        short_name="nsof",
        description="Extends its namespace to the selected providers, where its pods may then run.",
        spec=spec,
        status=status,
        columns=[
            _column("Pod Strategy", ".spec.podOffloadingStrategy"),
            _column("Mapping", ".spec.namespaceMappingStrategy"),
            _column("Remote Namespace", ".status.remoteNamespaceName"),
            _column("Phase", ".status.offloadingPhase"),
        ],
    )
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    root["x-kubernetes-validations"] = [
        {
            "rule": f"self.metadata.name == '{names.OFFLOADING}'",
            "message": f"a NamespaceOffloading must be named {names.OFFLOADING!r} (one per namespace)",
        },
        {
            "rule": "!has(oldSelf.spec) || self.spec.namespaceMappingStrategy == oldSelf.spec.namespaceMappingStrategy",
            "message": "namespaceMappingStrategy is immutable: unoffload and offload again to change it",
        },
    ]
    return crd


def namespace_map_crd() -> dict[str, Any]:
    """NamespaceMap (namespaced, provider side, named after the consumer's ID): the twins a consumer wants."""
    twin = _object(
        "The twin of one home namespace.",
        {
            "remoteNamespace": _string("The twin namespace's name here."),
            "phase": _enum("The twin namespace's state.", tuple(TwinPhase)),
            "message": _string("Why, when it is not Ready."),
        },
    )
    twin_name = _string("The twin namespace's name here.", maxLength=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)
    mappings = {
        "type": "object",
        "description": f"Home namespace to twin namespace name (at most {MAX_NAMESPACE_MAPPINGS}).",
        "maxProperties": MAX_NAMESPACE_MAPPINGS,
        "additionalProperties": twin_name,
        # OpenAPI constrains values, not keys: CEL checks the home namespaces.
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(home, size(home) <= {DNS_LABEL_MAX_LENGTH} && home.matches('{DNS_LABEL_PATTERN}'))",
                "message": "every home namespace (key) must be a namespace name: lowercase letters, digits and"
                f" '-', at most {DNS_LABEL_MAX_LENGTH} characters",
            }
        ],
    }
    spec = _object(
        "The consumer's offloaded namespaces and the name of their twins here.",
        {"consumerClusterID": _cluster_id("The consumer's cluster ID."), "mappings": mappings},
        required=("consumerClusterID",),
    )
    status = _object(
        "The twins this cluster created.",
        {"mappings": {"type": "object", "description": "Home namespace to twin.", "additionalProperties": twin}},
    )
    return _crd(
        NAMESPACE_MAPS,
        short_name="nm",
        description="The namespaces a consumer cluster extends here, and their twins.",
        spec=spec,
        status=status,
        columns=[_column("Consumer", ".spec.consumerClusterID")],
    )


def network_config_crd() -> dict[str, Any]:
    """NetworkConfig (namespaced in the other cluster's tenant namespace, named after its author's ID).

    One cluster's word to one peer about the network between them: the author's pod CIDR, how the author
    names the peer's pods, and its gateway's public key (and, serving, its endpoint). Each side writes its
    own and reads the other's (:mod:`liqo.network.configs`); the status is the author's gateway's own view
    of the tunnel and never leaves the author's cluster.
    """
    spec = _object(
        "The author's side of the network between it and the other cluster.",
        {
            "clusterID": _cluster_id("The author's cluster ID.", immutable=True),
            POD_CIDR: _cidr("The author's pod CIDR."),
            "remappedPodCIDR": _cidr(
                "Where the author sees the other cluster's pods: their pod CIDR itself when it is free for the"
                " author, else a free block of the same size."
            ),
            "gateway": _object(
                "The author's gateway for this peer.",
                {
                    "role": _enum("Server: it listens; Client: it dials the other side's server.", GATEWAY_ROLES),
                    "publicKey": _string("Its WireGuard public key (base64).", pattern=WIREGUARD_KEY_PATTERN),
                    "endpoint": _object(
                        "Where a server is reached from the other cluster, once its pod runs.",
                        {
                            "address": _string("An IP address.", minLength=2, maxLength=45),
                            "port": _integer("A UDP port.", minimum=1, maximum=65535),
                        },
                        required=("address", "port"),
                    ),
                },
                required=("role",),
            ),
        },
        required=("clusterID", POD_CIDR, "remappedPodCIDR"),
    )
    status = _object(
        "The author's gateway's view of the tunnel (in the author's cluster only).",
        {
            "connection": _object(
                "The connection check: probes through the tunnel to the other gateway.",
                {
                    "state": _enum("Whether probes are answered.", tuple(ConnectionState)),
                    "latency": _string("The round trip of the latest answered probe (e.g. 0.8ms)."),
                    "reason": _string("A machine-readable, CamelCase reason for the state."),
                    "message": _string("A human-readable explanation of the state."),
                    "lastTransitionTime": _timestamp("When the state last changed."),
                    "lastHandshakeTime": _timestamp("The latest WireGuard handshake with the other gateway."),
                },
            ),
        },
    )
    return _crd(
        NETWORK_CONFIGS,
        short_name="netcfg",
        description="One cluster's side of the network fabric between it and a peer.",
        spec=spec,
        status=status,
        columns=[
            _column("Cluster", ".spec.clusterID"),
            _column("Pods", ".spec.podCIDR"),
            _column("Peer pods at", ".spec.remappedPodCIDR"),
            _column("Role", ".spec.gateway.role"),
            _column("Connection", ".status.connection.state"),
            _column("Latency", ".status.connection.latency"),
        ],
    )


def all_crds() -> list[dict[str, Any]]:
    """Every CRD of liqo, in the order of :data:`liqo.api.resources.ALL`."""
    return [
        foreign_cluster_crd(),
        resource_request_crd(),
        resource_offer_crd(),
        sharing_policy_crd(),
        virtual_node_crd(),
        shadow_pod_crd(),
        namespace_offloading_crd(),
        namespace_map_crd(),
        network_config_crd(),
    ]
