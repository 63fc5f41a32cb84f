"""What the ForeignCluster status tests share: rome's view of its peer milan, as :func:`peer_status` reads it."""

from __future__ import annotations

import datetime
from typing import Any

from liqo.api.networks import ClusterNetwork
from liqo.peering.status import PeerState

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
"""milan's cluster ID."""
ROME = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
"""Our network."""


def peer_state(network: Any = None, *, outgoing: str = "No", status: dict[str, Any] | None = None) -> PeerState:
    """rome's state of milan: ``network`` the one milan declared (none: not yet known), ``outgoing`` its
    ForeignCluster's ``outgoingPeeringEnabled``, ``status`` its status; nothing else known yet."""
    spec: dict[str, Any] = {"clusterID": PEER, "clusterName": "Milan", "outgoingPeeringEnabled": outgoing}
    if network is not None:
        spec["network"] = network
    fc = {"metadata": {"name": "milan"}, "spec": spec, "status": status or {}}
    return PeerState(
        foreign_cluster=fc,
        local_id="rome-id",
        local_name="rome",
        local_network=ROME,
        identity=None,
        our_request=None,
        their_offer=None,
        virtual_nodes=[],
        their_request=None,
        our_offer=None,
        authentication=None,
        api_server=None,
        api_server_url=None,
    )
