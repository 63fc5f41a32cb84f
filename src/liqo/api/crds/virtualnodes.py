"""The VirtualNode CRD: an accepted offer as the consumer's virtual node (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    cluster_id,
    column,
    conditions,
    crd,
    quantity_map,
    slots,
    string,
    string_map,
    struct,
)
from liqo.api.resources import (
    VIRTUAL_NODES,
)


def virtual_node_crd() -> dict[str, Any]:
    """VirtualNode (namespaced): the node a consumer gets for an accepted offer."""
    spec = struct(
        "The node standing for the provider's accepted offer.",
        {
            "clusterID": cluster_id("The provider's cluster ID; never changes.", immutable=True),
            "clusterName": string("The provider's human-readable name."),
            "resources": quantity_map("The node's capacity: the accepted offer."),
            "largestSlots": slots(
                "The accepted offer's largest slots: a pod none of them holds stays Pending here (DoesNotFitRemote)."
            ),
            "labels": string_map("The node's labels."),
            "offer": string("The name of the ResourceOffer this node stands for."),
            "kubeconfigSecretRef": struct(
                "The Secret, in this namespace, holding the identity to reach the provider with.",
                {"name": string("The Secret's name.", minLength=1)},
                required=("name",),
            ),
        },
        required=("clusterID",),
    )
    status = struct(
        "The observed state of the node.",
        {"conditions": conditions("The state of each aspect of the node.")},
    )
    return crd(
        VIRTUAL_NODES,
        short_name="vn",
        description="A virtual node standing for a provider's accepted offer.",
        spec=spec,
        status=status,
        columns=[
            column("Cluster Name", ".spec.clusterName"),
            column("CPU", ".spec.resources.cpu"),
            column("Memory", ".spec.resources.memory"),
        ],
    )
