"""The AuthenticationStatus condition of an outgoing peering: which failed handshakes are waits, which verdicts."""

from __future__ import annotations

import dataclasses

import pytest

from liqo.peering.observations import Observation
from liqo.peering.status import peer_status
from tests.unit.peering.status_support import NOW, peer_state

STATE = peer_state(outgoing="Yes")


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
