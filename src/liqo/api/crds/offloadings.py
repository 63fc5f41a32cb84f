"""The NamespaceOffloading and NamespaceMap CRDs: which namespaces go to which providers, and as what (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api.crds.schema import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    MAX_NAMESPACE_MAPPINGS,
    NAMESPACE_MAPPING_STRATEGIES,
    POD_OFFLOADING_STRATEGIES,
    cluster_id,
    column,
    crd,
    enum,
    string,
    string_map,
    struct,
)
from liqo.api.offloadings import OffloadingPhase, TwinPhase
from liqo.api.resources import (
    NAMESPACE_MAPS,
    NAMESPACE_OFFLOADINGS,
)


def namespace_offloading_crd() -> dict[str, Any]:
    """NamespaceOffloading (namespaced, named ``offloading``): extend a namespace to providers."""
    spec = struct(
        "How the namespace is extended to providers.",
        {
            "podOffloadingStrategy": enum(
                "Where its pods may run: only here, only on providers, or both.",
                POD_OFFLOADING_STRATEGIES,
                default="LocalAndRemote",
            ),
            "namespaceMappingStrategy": enum(
                "The twin namespace's name: <namespace>-<this cluster's ID prefix>, or the same name.",
                NAMESPACE_MAPPING_STRATEGIES,
                default="DefaultName",
            ),
            "clusterSelector": string_map(
                "Labels a provider's virtual node must have to be selected (empty: every provider)."
            ),
        },
    )
    twin = struct(
        "The twin namespace on one provider.",
        {
            "clusterID": cluster_id("The provider's cluster ID."),
            "clusterName": string("The provider's human-readable name."),
            "remoteNamespace": string("The twin namespace's name on the provider."),
            "phase": enum("The twin namespace's state.", tuple(TwinPhase)),
            "message": string("Why, when it is not Ready."),
        },
        required=("clusterID",),
    )
    status = struct(
        "The observed state of the offloading.",
        {
            "remoteNamespaceName": string("The twin namespaces' name on every provider."),
            "offloadingPhase": enum("The state of the offloading as a whole.", tuple(OffloadingPhase)),
            "remoteNamespacesConditions": {
                "type": "array",
                "description": "The twin namespace on each selected provider.",
                "items": twin,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["clusterID"],
            },
        },
    )
    definition = crd(
        NAMESPACE_OFFLOADINGS,
        short_name="nsof",
        description="Extends its namespace to the selected providers, where its pods may then run.",
        spec=spec,
        status=status,
        columns=[
            column("Pod Strategy", ".spec.podOffloadingStrategy"),
            column("Mapping", ".spec.namespaceMappingStrategy"),
            column("Remote Namespace", ".status.remoteNamespaceName"),
            column("Phase", ".status.offloadingPhase"),
        ],
    )
    root = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
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
    return definition


def namespace_map_crd() -> dict[str, Any]:
    """NamespaceMap (namespaced, provider side, named after the consumer's ID): the twins a consumer wants."""
    twin = struct(
        "The twin of one home namespace.",
        {
            "remoteNamespace": string("The twin namespace's name here."),
            "phase": enum("The twin namespace's state.", tuple(TwinPhase)),
            "message": string("Why, when it is not Ready."),
        },
    )
    twin_name = string("The twin namespace's name here.", maxLength=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)
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
    spec = struct(
        "The consumer's offloaded namespaces and the name of their twins here.",
        {"consumerClusterID": cluster_id("The consumer's cluster ID."), "mappings": mappings},
        required=("consumerClusterID",),
    )
    status = struct(
        "The twins this cluster created.",
        {"mappings": {"type": "object", "description": "Home namespace to twin.", "additionalProperties": twin}},
    )
    return crd(
        NAMESPACE_MAPS,
        short_name="nm",
        description="The namespaces a consumer cluster extends here, and their twins.",
        spec=spec,
        status=status,
        columns=[column("Consumer", ".spec.consumerClusterID")],
    )
