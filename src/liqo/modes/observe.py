"""What the switch is decided from, read from the objects (pure); and what its steps write.

Each function turns what the API holds into the plain values of :mod:`liqo.modes.plan`, or a step into the
object it writes, so the controller only reads caches and sends requests.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from liqo.api import names
from liqo.api.foreignclusters import ConditionStatus, ConditionType, Reason, cluster_id
from liqo.api.offloadings import OffloadingPhase
from liqo.api.workingmodes import ACCEPTS_TETHERING, SWITCHED, ModePhase, ModeReason, WorkingModeSpec, made_for_tether
from liqo.kube.timefmt import format_time, parse_time
from liqo.modes.plan import Namespace, Peer, Pod, Status, stays_local

_DONE = frozenset({"Succeeded", "Failed"})


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in ((obj.get("status") or {}).get("conditions") or [])}


def peer_of(foreign_cluster: Mapping[str, Any], *, offer: Mapping[str, Any] | None) -> Peer:
    """The peer a ForeignCluster stands for; ``offer``: the one it made this cluster, if any (pure)."""
    conditions = _conditions(foreign_cluster)
    established = {
        kind for kind, condition in conditions.items() if condition.get("status") == ConditionStatus.ESTABLISHED
    }
    api_server = conditions.get(ConditionType.API_SERVER) or {}
    unreachable_since = None
    if api_server.get("status") == ConditionStatus.ERROR and api_server.get("reason") == Reason.UNREACHABLE:
        since = api_server.get("lastTransitionTime")
        unreachable_since = parse_time(since) if isinstance(since, str) else None
    return Peer(
        cluster_id=cluster_id(foreign_cluster),
        consuming=ConditionType.OUTGOING in established,
        providing=ConditionType.INCOMING in established,
        accepts_tether=bool(((offer or {}).get("spec") or {}).get(ACCEPTS_TETHERING)),
        unreachable_since=unreachable_since,
    )


def namespaces_of(namespaces: Iterable[Mapping[str, Any]], offloadings: Iterable[Mapping[str, Any]]) -> list[Namespace]:
    """This cluster's namespaces as the switch sees them, by name (pure); those being deleted left out."""
    by_namespace = {o["metadata"]["namespace"]: o for o in offloadings if o["metadata"].get("name") == names.OFFLOADING}
    found = []
    for namespace in namespaces:
        meta = namespace["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        offloading = by_namespace.get(meta["name"])
        spec = (offloading or {}).get("spec") or {}
        local = stays_local(meta["name"], meta.get("labels") or {})
        # A twin's tether offloading is the controlling side's (liqo.modes.controlling), never this switch's.
        ours = offloading is not None and made_for_tether(offloading) and not local
        phase = ((offloading or {}).get("status") or {}).get("offloadingPhase")
        found.append(
            Namespace(
                name=meta["name"],
                ready=phase == OffloadingPhase.READY,
                stays_local=local,
                offloading=None if offloading is None else str(spec.get("podOffloadingStrategy") or "LocalAndRemote"),
                ours=ours,
                going=bool(ours and (offloading or {})["metadata"].get("deletionTimestamp")),
                peer=str((spec.get("clusterSelector") or {}).get(names.REMOTE_CLUSTER_ID) or "") if ours else "",
            )
        )
    return sorted(found, key=lambda n: n.name)


def movable(
    pods: Iterable[Mapping[str, Any]], *, peer_node: str | None, virtual_nodes: frozenset[str]
) -> tuple[list[Pod], list[Pod]]:
    """The pods a switch may move: (those on this cluster's own nodes, those on the peer's virtual node) (pure).

    Only pods a controller owns (it makes them again where the placement now says) that are bound, running or
    about to, and not already going; a pod on another provider's virtual node is neither.
    """
    local: list[Pod] = []
    remote: list[Pod] = []
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        owned = any(ref.get("controller") for ref in meta.get("ownerReferences") or [])
        node = spec.get("nodeName")
        if not owned or not node or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in _DONE:
            continue
        ref = Pod(namespace=meta["namespace"], name=meta["name"])
        if node == peer_node:
            remote.append(ref)
        elif node not in virtual_nodes:
            local.append(ref)
    return sorted(local, key=_order), sorted(remote, key=_order)


def _order(pod: Pod) -> tuple[str, str]:
    return pod.namespace, pod.name


def status_of(working_mode: Mapping[str, Any] | None) -> Status:
    """The switch's status as the WorkingMode records it (none: Autonomous, never switched) (pure)."""
    status = (working_mode or {}).get("status") or {}
    switched = _conditions(working_mode or {}).get(SWITCHED) or {}
    return Status(
        phase=ModePhase(status.get("phase") or ModePhase.AUTONOMOUS),
        peer=str(status.get("peer") or ""),
        reason=ModeReason(switched.get("reason") or ModeReason.SWITCHED),
        message=str(switched.get("message") or ""),
        observed_generation=int(status.get("observedGeneration") or 0),
    )


def status_manifest(status: Status, *, offloaded: Iterable[str], now: datetime.datetime) -> dict[str, Any]:
    """The WorkingMode's status for ``status`` (pure): ``Switched`` True once the phase is what was asked."""
    settled = status.reason is ModeReason.SWITCHED and status.phase in (ModePhase.AUTONOMOUS, ModePhase.TETHERED)
    condition = {
        "type": SWITCHED,
        "status": "True" if settled else "False",
        "reason": status.reason.value,
        "message": status.message,
        "lastTransitionTime": format_time(now),
    }
    body: dict[str, Any] = {
        "phase": status.phase.value,
        "observedGeneration": status.observed_generation,
        "since": format_time(now),
        "offloaded": sorted(offloaded),
        "conditions": [condition],
    }
    if status.peer:
        body["peer"] = status.peer
    return body


def mode_sample(working_mode: Mapping[str, Any] | None) -> tuple[tuple[str, str, str], float]:
    """The one sample of ``liqo_working_mode``: (mode asked, phase, peer), 1 (pure)."""
    spec, status = WorkingModeSpec.of(working_mode), status_of(working_mode)
    return (spec.mode.value, status.phase.value, status.peer or spec.peer), 1.0
