"""Observations: a revoked identity wakes the handshake once, not at every probe."""

from __future__ import annotations

from liqo.api.foreignclusters import Reason
from liqo.peering.observations import Observation, Observations


def test_on_forbidden_fires_when_the_provider_starts_refusing_and_only_then() -> None:
    changed: list[str] = []
    forbidden: list[str] = []
    facts = Observations(on_change=changed.append, on_forbidden=forbidden.append)
    facts.report(facts.api_server, "p", Observation(True, "APIServerReady"))
    facts.report(facts.api_server, "p", Observation(False, Reason.FORBIDDEN, "403"))
    facts.report(facts.api_server, "p", Observation(False, Reason.FORBIDDEN, "403 again"))
    facts.report(facts.authentication, "p", Observation(False, Reason.FORBIDDEN, "not an API health fact"))
    assert forbidden == ["p"]
    facts.report(facts.api_server, "p", Observation(True, "APIServerReady"))
    facts.report(facts.api_server, "p", Observation(False, Reason.FORBIDDEN, "revoked again"))
    assert forbidden == ["p", "p"]
    assert len(changed) == 6
