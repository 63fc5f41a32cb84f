"""A cluster's working mode: Autonomous (its own scheduler decides) or Tethered to one peer that decides.

Seed 001, "Working Modes". The mode is one cluster-scoped WorkingMode named ``cluster``: what the admin asks
(``spec``, written by ``liqoctl mode``) and where the switch is (``status``, written by the manager's mode
controller, one step at a time, so a restart in the middle of a switch resumes it). Not the settings
ConfigMap, as the rest of this cluster's configuration: a change there restarts the manager, and a switch
must happen live, its progress recorded in the API.

The words (modes, phases, reasons) are spelt once here for the CRD schema, the controller and liqoctl.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from liqo.api import names
from liqo.api.resources import NAMESPACE_OFFLOADINGS

NAME = "cluster"
"""The one WorkingMode of a cluster."""
MIN_FALLBACK_SECONDS = 30
"""The shortest silence of the controlling peer that may end a tether: below, a blip would."""


class Mode(StrEnum):
    """Who schedules this cluster's workloads."""

    AUTONOMOUS = "Autonomous"
    """This cluster's own scheduler (the default)."""
    TETHERED = "Tethered"
    """One peer's: this cluster's namespaces go there, and that peer places pods on this cluster's nodes."""


class ModePhase(StrEnum):
    """Where the switch between modes is."""

    AUTONOMOUS = "Autonomous"
    TETHERING = "Tethering"
    """Namespaces being offloaded to the peer, local pods moved there."""
    TETHERED = "Tethered"
    UNTETHERING = "Untethering"
    """Pods coming back from the peer, offloadings undone."""


class ModeReason(StrEnum):
    """Why the mode is not (yet) what the spec asks; the reason of the ``Switched`` condition."""

    SWITCHED = "Switched"
    IN_PROGRESS = "InProgress"
    NOT_A_PEER = "NotAPeer"
    """No ForeignCluster names the peer."""
    NOT_CONSUMING = "NotConsumingFromPeer"
    """This cluster does not consume from the peer (no outgoing peering established)."""
    NOT_PROVIDING = "NotProvidingToPeer"
    """The peer does not consume from this cluster (no incoming peering established)."""
    PROVIDES_TO_OTHERS = "ProvidesToOthers"
    """This cluster offers resources to another peer too: a tether takes all of them."""
    NOT_ACCEPTED = "NotAccepted"
    """The peer's policy does not accept tethered clusters."""
    FELL_BACK = "FellBack"
    """The peer was unreachable longer than the spec allows: the tether ended by itself."""


SWITCHED = "Switched"
"""The condition type: True when the phase is what the spec asks."""
ACCEPTS_TETHERING = "acceptsTethering"
"""A ResourceOffer's field: the provider's policy accepts this consumer tethering itself to it."""
TETHERED = "tethered"
"""A ResourceOffer's field: the provider is tethered to this consumer (it schedules the provider's workloads)."""


@dataclass(frozen=True)
class WorkingModeSpec:
    """What the admin asked (a WorkingMode's spec, parsed)."""

    mode: Mode = Mode.AUTONOMOUS
    peer: str = ""
    """The controlling peer's cluster ID (Tethered only)."""
    fallback_after: datetime.timedelta | None = None
    """End the tether by itself after the peer is unreachable this long (None: never)."""
    generation: int = 0

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> WorkingModeSpec:
        """The spec of a WorkingMode object (None: none exists, Autonomous)."""
        if obj is None:
            return cls()
        spec = obj.get("spec") or {}
        fallback = spec.get("fallbackAfterSeconds")
        return cls(
            mode=Mode(spec.get("mode") or Mode.AUTONOMOUS),
            peer=str(spec.get("peer") or ""),
            fallback_after=datetime.timedelta(seconds=int(fallback)) if fallback else None,
            generation=int((obj.get("metadata") or {}).get("generation") or 0),
        )

    def manifest(self) -> dict[str, Any]:
        """The WorkingMode object asking for this (server-side applied by liqoctl)."""
        spec: dict[str, Any] = {"mode": self.mode.value}
        if self.mode is Mode.TETHERED:
            spec["peer"] = self.peer
        if self.fallback_after is not None:
            spec["fallbackAfterSeconds"] = int(self.fallback_after.total_seconds())
        return {"metadata": {"name": NAME}, "spec": spec}


def tethered_to(working_mode: Mapping[str, Any] | None) -> str | None:
    """The peer this cluster is tethered to, or being tethered to or from; None when Autonomous (pure).

    From the status (where the switch is), not the spec (what is asked): a tether asked for but refused
    gives the peer nothing.
    """
    status = (working_mode or {}).get("status") or {}
    if status.get("phase") in (ModePhase.TETHERING, ModePhase.TETHERED, ModePhase.UNTETHERING):
        return str(status.get("peer") or "") or None
    return None


def made_for_tether(offloading: Mapping[str, Any]) -> bool:
    """Whether a NamespaceOffloading was made by a tether, on either side (its annotation) (pure)."""
    return ((offloading.get("metadata") or {}).get("annotations") or {}).get(names.MADE_FOR_TETHER) == "true"


def tether_offloading(namespace: str, *, peer: str, strategy: str) -> dict[str, Any]:
    """The NamespaceOffloading a tether makes of ``namespace``: its pods to ``peer``'s virtual node (pure).

    ``Remote`` on the tethered cluster (every pod goes to the peer), ``LocalAndRemote`` on the peer for the
    tethered cluster's twins (its scheduler may send them back). Marked as the tether's
    (:func:`made_for_tether`): the tether undoes it, and only it.
    """
    return {
        "apiVersion": NAMESPACE_OFFLOADINGS.api_version,
        "kind": NAMESPACE_OFFLOADINGS.kind,
        "metadata": {
            "name": names.OFFLOADING,
            "namespace": namespace,
            "annotations": {names.MADE_FOR_TETHER: "true"},
        },
        "spec": {
            "podOffloadingStrategy": strategy,
            "namespaceMappingStrategy": "DefaultName",
            "clusterSelector": {names.REMOTE_CLUSTER_ID: peer},
        },
    }
