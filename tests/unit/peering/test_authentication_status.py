"""The AuthenticationStatus condition of an outgoing peering: which failed handshakes are waits, which verdicts."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from liqo.api.networks import ClusterNetwork
from liqo.peering.observations import Observation
from liqo.peering.status import PeerState, peer_status

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
STATE = PeerState(
    foreign_cluster={
        "metadata": {"name": "milan"},
        "spec": {"clusterID": PEER, "clusterName": "Milan", "outgoingPeeringEnabled": "Yes"},
    },
    local_id="rome-id",
    local_name="rome",
    local_network=ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16"),
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


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("MissingCredentials", "Pending"),
        ("ProviderBusy", "Pending"),  # 429/503: `liqoctl peer` keeps waiting, nothing to act on
        ("Refused", "Denied"),
        ("ProviderNotAuthenticated", "Error"),
        ("HandshakeFailed", "Error"),
    ],
)
def test_a_busy_provider_is_a_wait_and_a_refusal_a_verdict(reason: str, status: str) -> None:
    seen = Observation(False, reason, "why", at=NOW)
    conditions = peer_status(dataclasses.replace(STATE, authentication=seen), now=NOW)["conditions"]
    [condition] = [c for c in conditions if c["type"] == "AuthenticationStatus"]
    assert (condition["status"], condition["reason"], condition["message"]) == (status, reason, "why")
