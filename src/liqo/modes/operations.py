"""What ``liqoctl mode`` does: show the working mode, ask for another, wait until it is in force.

A tether that cannot be made is refused here, before anything is written, with the same checks the manager
makes (:func:`liqo.modes.plan.refusal`): a wrong peer name or a missing half of the peering is the admin's to
fix, and an asked-for mode left pending would only say so later, in a status.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import cluster_id, named
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, WORKING_MODES
from liqo.api.workingmodes import MIN_FALLBACK_SECONDS, NAME, SWITCHED, Mode, ModePhase, ModeReason, WorkingModeSpec
from liqo.kube.client import KubeClient
from liqo.kube.waiting import WaitTimeout, changes_only, poll_until
from liqo.modes.observe import peer_of, status_of
from liqo.modes.plan import Observed, refusal

SWITCH_TIMEOUT = 300.0
"""Seconds ``liqoctl mode`` waits for the switch by default: every pod moved, one eviction at a time."""

Progress = Callable[[str], None]


class ModeError(Exception):
    """A switch refused or failed; the message says why."""


async def current(client: KubeClient) -> dict[str, Any]:
    """The working mode asked for and where the switch is (what ``liqoctl mode`` prints)."""
    working_mode = await client.get_or_none(WORKING_MODES, NAME)
    return shown(working_mode)


def shown(working_mode: dict[str, Any] | None) -> dict[str, Any]:
    """What ``liqoctl mode`` prints of a WorkingMode (none: Autonomous, never switched) (pure)."""
    spec, status = WorkingModeSpec.of(working_mode), status_of(working_mode)
    conditions = ((working_mode or {}).get("status") or {}).get("conditions") or []
    switched: dict[str, Any] = next((c for c in conditions if c.get("type") == SWITCHED), {})
    row: dict[str, Any] = {
        "mode": spec.mode.value,
        "phase": status.phase.value,
        "switched": switched.get("status", "True"),
        "reason": status.reason.value,
        "message": status.message,
    }
    if spec.peer:
        row["peer"] = spec.peer
    if spec.fallback_after is not None:
        row["fallbackAfterSeconds"] = int(spec.fallback_after.total_seconds())
    row["offloaded"] = list(((working_mode or {}).get("status") or {}).get("offloaded") or [])
    return row


async def switch(
    client: KubeClient,
    *,
    mode: Mode,
    to: str | None = None,
    fallback_after: datetime.timedelta | None = None,
) -> int:
    """Ask for ``mode`` (Tethered: to the peer named ``to``); the WorkingMode's generation to wait for.

    Raises:
        ModeError: the peer is unknown, or the tether is refused (nothing is written then).
    """
    peer_id = ""
    if fallback_after is not None and fallback_after.total_seconds() < MIN_FALLBACK_SECONDS:
        raise ModeError(f"--fallback-after must be at least {MIN_FALLBACK_SECONDS}s: a shorter silence is a blip")
    if mode is Mode.TETHERED:
        if not to:
            raise ModeError("a tether names its peer: liqoctl mode tethered --to PEER")
        foreign_clusters, _ = await client.list_all(FOREIGN_CLUSTERS)
        record = named(foreign_clusters, to)
        if record is None:
            known = ", ".join(fc["metadata"]["name"] for fc in foreign_clusters) or "none"
            raise ModeError(f"no peer named {to!r} (known: {known})")
        peer_id = cluster_id(record)
        offers, _ = await client.list_all(RESOURCE_OFFERS)
        by_key = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in offers}
        peers = [
            peer_of(fc, offer=by_key.get((names.tenant_namespace(cluster_id(fc)), cluster_id(fc))))
            for fc in foreign_clusters
        ]
        asked = WorkingModeSpec(mode=mode, peer=peer_id)
        why = refusal(Observed(spec=asked, status=status_of(None), peers=tuple(peers)))
        if why is not None:
            raise ModeError(f"refused ({why[0].value}): {why[1]}")
    spec = WorkingModeSpec(mode=mode, peer=peer_id, fallback_after=fallback_after)
    applied = await client.apply(
        WORKING_MODES, {"apiVersion": WORKING_MODES.api_version, "kind": WORKING_MODES.kind, **spec.manifest()}
    )
    return int(applied["metadata"].get("generation") or 0)


async def wait_switched(
    client: KubeClient, *, generation: int, timeout: float = SWITCH_TIMEOUT, progress: Progress = lambda _: None
) -> dict[str, Any]:
    """Wait until the switch asked for (``generation``) is in force; what ``liqoctl mode`` then prints.

    Raises:
        ModeError: the manager refused it (a peer changed since the check), or it was not done in ``timeout``.
    """
    say, last = changes_only(progress), [""]

    async def done() -> dict[str, Any] | None:
        working_mode = await client.get_or_none(WORKING_MODES, NAME)
        status = status_of(working_mode)
        row = shown(working_mode)
        if status.observed_generation < generation:
            return None
        if row["switched"] == "True":
            return row
        if status.phase is ModePhase.AUTONOMOUS and status.reason not in (ModeReason.SWITCHED, ModeReason.IN_PROGRESS):
            raise ModeError(f"refused ({status.reason.value}): {status.message}")
        last[0] = f"{status.phase.value}: {status.message}"
        say(last[0])
        return None

    try:
        return await poll_until(done, timeout=timeout, interval=0.5, message="the working mode switched")
    except WaitTimeout:
        raise ModeError(f"the switch was not done within {timeout:.0f}s: {last[0]}") from None
