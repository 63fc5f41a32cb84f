"""What controllers learned about peers that no object records: the last handshake error, API health.

The ForeignCluster status controller is the only writer of ``status``; the controllers that act (the
handshake, the health probe) report here instead, and the status controller turns it into conditions.
It is process memory on purpose: after a restart both facts are re-learned within one reconcile.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field

from liqo.api.foreignclusters import Reason


@dataclass(frozen=True)
class Observation:
    """One fact: ``ok`` or not, and why; ``at``, when it was learned, for facts that must be known fresh."""

    ok: bool
    reason: str
    message: str = ""
    at: datetime.datetime | None = None


"""The reason of an API health fact when the provider refuses our identity (401/403): revoked, or its rights gone."""


@dataclass
class Observations:
    """Facts per peer cluster ID, and hooks that fire when they change.

    ``on_change(peer_id)`` fires when any fact changes; ``on_forbidden(peer_id)`` when the provider starts
    refusing our identity, so that a handshake learns why without waiting for the identity's renewal.
    """

    on_change: Callable[[str], None] = lambda _: None
    on_forbidden: Callable[[str], None] = lambda _: None
    authentication: dict[str, Observation] = field(default_factory=dict)
    api_server: dict[str, Observation] = field(default_factory=dict)

    def report(self, facts: dict[str, Observation], peer_id: str, observation: Observation | None) -> None:
        """Record (or with None, forget) a fact about ``peer_id`` in ``facts``."""
        previous = facts.get(peer_id)
        if observation is None:
            facts.pop(peer_id, None)
        else:
            facts[peer_id] = observation
        if previous != observation:
            self.on_change(peer_id)
        forbidden = observation is not None and observation.reason == Reason.FORBIDDEN
        if facts is self.api_server and forbidden and (previous is None or previous.reason != Reason.FORBIDDEN):
            self.on_forbidden(peer_id)
