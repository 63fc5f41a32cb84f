"""The CustomResourceDefinitions of liqo, built as plain dicts (pure functions, no I/O).

The schemas are the first line of defence: the API server refuses a wrong enum, an out-of-range
percentage, a malformed quantity or a changed cluster ID with a message naming the field, at
``kubectl apply`` time, instead of a controller failing later in a log nobody reads. Controllers can
then trust the shape of what they read. Group, version, plural and kind come from the descriptors of
:mod:`liqo.api.resources`, so the request paths and the served API cannot drift apart. The field list is
the one of ``docs/peering.md``.

One module per kind; what they are built from is :mod:`liqo.api.crds.schema`.
"""

from __future__ import annotations

from typing import Any

from liqo.api.crds.discoverysources import discovery_source_crd
from liqo.api.crds.foreignclusters import foreign_cluster_crd
from liqo.api.crds.networkconfigs import network_config_crd
from liqo.api.crds.offers import resource_offer_crd, resource_request_crd
from liqo.api.crds.offloadings import namespace_map_crd, namespace_offloading_crd
from liqo.api.crds.shadowpods import shadow_pod_crd
from liqo.api.crds.sharingpolicies import sharing_policy_crd
from liqo.api.crds.virtualnodes import virtual_node_crd
from liqo.api.crds.workingmodes import working_mode_crd


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
        discovery_source_crd(),
        working_mode_crd(),
    ]
