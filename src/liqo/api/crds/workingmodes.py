"""The WorkingMode CRD: Autonomous, or Tethered to one peer, and where the switch is (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    CLUSTER_UUID_PATTERN,
    column,
    conditions,
    crd,
    enum,
    integer,
    string,
    struct,
    timestamp,
)
from liqo.api.resources import WORKING_MODES
from liqo.api.workingmodes import MIN_FALLBACK_SECONDS, NAME, Mode, ModePhase


def working_mode_crd() -> dict[str, Any]:
    """WorkingMode (cluster-scoped, named ``cluster``): who schedules this cluster's workloads."""
    spec = struct(
        "The mode asked for.",
        {
            "mode": enum(
                "Autonomous: this cluster schedules; Tethered: the peer does.", tuple(Mode), default="Autonomous"
            ),
            "peer": string("The controlling peer's cluster ID (Tethered only).", pattern=CLUSTER_UUID_PATTERN),
            "fallbackAfterSeconds": integer(
                "End the tether by itself once the peer is unreachable this long (unset: never).",
                minimum=MIN_FALLBACK_SECONDS,
            ),
        },
    )
    status = struct(
        "Where the switch is.",
        {
            "phase": enum("The mode in force, or the switch under way.", tuple(ModePhase)),
            "peer": string("The peer of the tether in force or under way."),
            "observedGeneration": integer("The spec's generation this status is about.", minimum=0),
            "since": timestamp("When the phase began."),
            "offloaded": {
                "type": "array",
                "description": "The namespaces the tether offloaded (undone when it ends).",
                "items": string("A namespace's name."),
                "x-kubernetes-list-type": "set",
            },
            "conditions": conditions("Whether the mode asked for is in force, and why not."),
        },
    )
    definition = crd(
        WORKING_MODES,
        short_name="wm",
        description="Who schedules this cluster's workloads: this cluster (Autonomous) or one peer (Tethered).",
        spec=spec,
        status=status,
        columns=[
            column("Mode", ".spec.mode"),
            column("Peer", ".spec.peer"),
            column("Phase", ".status.phase"),
        ],
    )
    root = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    root["x-kubernetes-validations"] = [
        {
            "rule": f"self.metadata.name == '{NAME}'",
            "message": f"a WorkingMode must be named {NAME!r} (one per cluster)",
        },
        {
            "rule": "self.spec.mode != 'Tethered' || has(self.spec.peer)",
            "message": "a Tethered mode names its peer (spec.peer, the peer's cluster ID)",
        },
    ]
    return definition
