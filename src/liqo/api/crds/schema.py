"""What every CRD of liqo is built from: bounds and patterns, schema fragments, the CRD itself (pure).

One fragment per kind of field (a cluster ID, a CIDR, a quantity, conditions...) so that every kind refuses
a bad value the same way, with the same message.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.networks import MAX_CIDR_LENGTH
from liqo.api.storage import ACCESS_MODES, DEFAULT_ACCESS_MODES, MAX_CLASS_NAME, MAX_CLASSES
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
AMOUNT_PATTERN = QUANTITY_PATTERN.replace(r"^(\+|-)?", r"^\+?", 1)
"""A quantity that cannot be negative: an amount offered."""

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
TETHERING_POLICIES = ("Accept", "Refuse")
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


def string(description: str, **constraints: Any) -> Schema:
    """A string, with optional OpenAPI constraints (``pattern``, ``format``, ``minLength``...)."""
    return {"type": "string", "description": description, **constraints}


def cluster_name(description: str) -> Schema:
    """A cluster's name as a peer claims it: printable text (it is shown in tables and logs), bounded."""
    return string(description, maxLength=names.MAX_CLUSTER_NAME, pattern=printable.PATTERN)


def enum(description: str, values: tuple[str, ...], *, default: str | None = None) -> Schema:
    """A string restricted to ``values``: the API server names the allowed ones when refusing another.

    Plain strings in the schema (an enum member is one, but YAML writers only know ``str`` itself).
    """
    schema = string(description, enum=[str(value) for value in values])
    if default is not None:
        schema["default"] = default
    return schema


def integer(description: str, *, minimum: int, maximum: int | None = None, default: int | None = None) -> Schema:
    """An integer of at least ``minimum`` (at most ``maximum``), with an optional default."""
    schema: Schema = {"type": "integer", "description": description, "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    if default is not None:
        schema["default"] = default
    return schema


def timestamp(description: str) -> Schema:
    """An RFC 3339 time, the format of every timestamp in the Kubernetes API."""
    return string(description, format="date-time")


def cluster_id(description: str, *, immutable: bool = False) -> Schema:
    """A cluster ID; ``immutable`` refuses updates that change it (a peer's identity never changes)."""
    schema = string(description, minLength=1, maxLength=CLUSTER_ID_MAX_LENGTH, pattern=CLUSTER_ID_PATTERN)
    if immutable:
        schema["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": "clusterID is immutable"}]
    return schema


def cidr(description: str) -> Schema:
    """A network in CIDR notation, canonical: no host bits (``10.244.0.0/16``, never ``10.244.1.0/16``)."""
    schema = string(description, format="cidr", pattern=CIDR_PATTERN, minLength=9, maxLength=MAX_CIDR_LENGTH)
    schema["x-kubernetes-validations"] = [
        {
            "rule": "isCIDR(self) && cidr(self) == cidr(self).masked()",
            "message": "must be a network address: no host bits set (10.244.0.0/16, not 10.244.1.0/16)",
        }
    ]
    return schema


def quantity(description: str) -> Schema:
    """A quantity such as ``2``, ``500m`` or ``4Gi``, written either as a number or as a string."""
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def quantity_map(description: str) -> Schema:
    """Resource name (``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``...) to quantity."""
    return {
        "type": "object",
        "description": description,
        "additionalProperties": quantity("A quantity such as 2, 500m or 4Gi."),
    }


def slots(description: str) -> Schema:
    """The largest pods a provider can still place, each as a resource → quantity map, largest first."""
    return {
        "type": "array",
        "description": description,
        "items": quantity_map("The free room of one node, capped by the offer."),
        "maxItems": MAX_SLOTS,
        "x-kubernetes-list-type": "atomic",
    }


def storage_classes(description: str) -> Schema:
    """Storage offered per StorageClass (:mod:`liqo.api.storage`): a list keyed by class."""
    item = struct(
        "One StorageClass offered.",
        {
            "class": string(
                "The provider's StorageClass (at most 63 characters: it names a label of the virtual node).",
                pattern=DNS_SUBDOMAIN_PATTERN,
                maxLength=MAX_CLASS_NAME,
            ),
            "capacity": quantity(
                "What the consumer's claims of this class may request together, in all its namespaces here."
            )
            | {"pattern": AMOUNT_PATTERN},
            "accessModes": string_set("The access modes its claims may ask for.", enum("An access mode.", ACCESS_MODES))
            | {"minItems": 1, "maxItems": len(ACCESS_MODES), "default": list(DEFAULT_ACCESS_MODES)},
        },
        required=("class", "capacity"),
    )
    return {
        "type": "array",
        "description": description,
        "items": item,
        "maxItems": MAX_CLASSES,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["class"],
    }


def string_map(description: str) -> Schema:
    """Any keys to strings (labels, annotations, selectors)."""
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def string_set(description: str, item: Schema) -> Schema:
    """A list of distinct ``item``'s: server-side apply merges it as a set."""
    return {"type": "array", "description": description, "items": item, "x-kubernetes-list-type": "set"}


def struct(description: str, properties: dict[str, Schema], *, required: tuple[str, ...] = ()) -> Schema:
    """An object of ``properties``, the ``required`` ones refused when missing."""
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def conditions(
    description: str, *, types: tuple[str, ...] | None = None, statuses: tuple[str, ...] | None = None
) -> Schema:
    """A list of conditions keyed by ``type`` (server-side apply merges them one by one, as in core kinds)."""
    about, state = "What the condition is about.", "Its state."
    condition = struct(
        "The latest observation of one aspect of the object.",
        {
            "type": enum(about, types) if types else string(about),
            "status": enum(state, statuses) if statuses else string(state),
            "reason": string("A machine-readable, CamelCase reason for the status."),
            "message": string("A human-readable explanation of the status."),
            "lastTransitionTime": timestamp("When the status last changed."),
            "lastProbeTime": timestamp("When it was last checked (a handshake's outcome: when it was tried)."),
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


def column(name: str, json_path: str, *, type_: str = "string", description: str = "", priority: int = 0) -> Schema:
    """A column of ``kubectl get`` (``priority`` above 0: only with ``-o wide``)."""
    column: Schema = {"name": name, "type": type_, "jsonPath": json_path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


def condition_column(name: str, condition_type: str) -> Schema:
    """A column showing the status of the ``condition_type`` condition."""
    return column(
        name,
        f'.status.conditions[?(@.type=="{condition_type}")].status',
        description=f"The status of the {condition_type} condition.",
    )


def crd_name(resource: Resource) -> str:
    """The name of the CRD serving ``resource``: ``<plural>.<group>``."""
    return f"{resource.plural}.{resource.group}"


def crd(
    resource: Resource,
    *,
    short_name: str,
    description: str,
    spec: Schema,
    status: Schema,
    columns: list[Schema],
) -> dict[str, Any]:
    """One CRD serving ``resource`` at its single version, with a status subresource."""
    root = struct(
        description,
        {
            "apiVersion": string("The versioned schema of this representation of the object."),
            "kind": string("The REST resource this object represents."),
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
                    "additionalPrinterColumns": [*columns, column("Age", ".metadata.creationTimestamp", type_="date")],
                }
            ],
        },
    }
