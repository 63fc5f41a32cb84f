"""The switch between working modes, one step at a time (pure).

The manager's mode controller looks at the cluster (:class:`Observed`) and takes the one :data:`Step` this
module says, then looks again: every step is idempotent and everything it needs to know is in the API, so a
manager killed between two steps resumes where the cluster is, not where a memory says. The phases, in the
WorkingMode's status::

    Autonomous ──(spec Tethered, checks pass)──▶ Tethering ──(all offloaded, local pods moved)──▶ Tethered
        ▲                                            │                                              │
        └──────── Untethering ◀──(spec changed, or the peer silent longer than fallbackAfter)──────┘
                  (offloadings made Local, the peer's pods of ours evicted, offloadings deleted)

- **Tethering** offloads every namespace of this cluster but the system ones (:func:`stays_local`) to the
  peer, pods there ``Remote`` (the pod placement then puts every new pod on the peer's virtual node), then
  evicts this cluster's pods of those namespaces that a controller re-creates (the Eviction API: their
  PodDisruptionBudgets hold), once each offloading is Ready, so they come back on the peer. A pod no
  controller owns is left where it runs: evicted, it would be lost.
- **Tethered** offloads the namespaces made since, and watches the peer: unreachable longer than
  ``fallbackAfter`` (if set), the tether ends by itself, and is not made again until the spec changes.
- **Untethering** turns the tether's offloadings ``Local`` (new pods run here), evicts the pods of those
  namespaces still on the peer's virtual node (their replacements start here; PodDisruptionBudgets hold),
  then deletes the offloadings.

A namespace someone offloaded before the tether keeps its offloading as it is: the tether neither takes it
over nor deletes it. The offloadings the tether made are known by their annotation
(:data:`~liqo.api.names.MADE_FOR_TETHER`), not by a list a crash could lose.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field

from liqo.api import names
from liqo.api.workingmodes import Mode, ModePhase, ModeReason, WorkingModeSpec


@dataclass(frozen=True)
class Peer:
    """What this cluster knows of one peer, from its ForeignCluster and the offers."""

    cluster_id: str
    consuming: bool = False
    """This cluster consumes from it (outgoing peering established)."""
    providing: bool = False
    """It consumes from this cluster (incoming peering established)."""
    accepts_tether: bool = False
    """Its offer to this cluster says its policy accepts tethered clusters."""
    unreachable_since: datetime.datetime | None = None
    """Since when its API server does not answer (None: it answers, or was never probed)."""


@dataclass(frozen=True)
class Namespace:
    """A namespace of this cluster, as the switch sees it."""

    name: str
    stays_local: bool = False
    """A system namespace (:func:`stays_local`): never offloaded by the tether."""
    offloading: str | None = None
    """Its NamespaceOffloading's pod strategy (None: not offloaded)."""
    ours: bool = False
    """Its NamespaceOffloading was made by the tether."""
    peer: str = ""
    """The peer the tether's offloading sends its pods to (ours only)."""
    ready: bool = False
    """Its offloading is Ready: twins made, the namespace labelled, so new pods get the placement."""
    going: bool = False
    """Its (tether's) offloading is being deleted: the offloading controller ends it once the peer dropped the twin."""


@dataclass(frozen=True)
class Pod:
    """A pod the switch may move: owned by a controller (which makes it again), not terminating."""

    namespace: str
    name: str


@dataclass(frozen=True)
class Status:
    """Where the switch is (the WorkingMode's status)."""

    phase: ModePhase = ModePhase.AUTONOMOUS
    peer: str = ""
    reason: ModeReason = ModeReason.SWITCHED
    message: str = ""
    observed_generation: int = 0


@dataclass(frozen=True)
class Observed:
    """Everything a step is decided from."""

    spec: WorkingModeSpec
    status: Status
    peers: Sequence[Peer]
    namespaces: Sequence[Namespace] = ()
    local_pods: Sequence[Pod] = ()
    """Pods of the tether's namespaces running on this cluster's own nodes."""
    pods_on_peer: Sequence[Pod] = ()
    """Pods of the tether's namespaces bound to the peer's virtual node."""
    now: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))

    def peer(self, cluster_id: str) -> Peer | None:
        """The peer of that cluster ID, if there is one."""
        return next((p for p in self.peers if p.cluster_id == cluster_id), None)


@dataclass(frozen=True)
class SetStatus:
    """Write the WorkingMode's status."""

    status: Status


@dataclass(frozen=True)
class Offload:
    """Offload ``namespace`` to ``peer``, its pods Remote, marked as the tether's."""

    namespace: str
    peer: str


@dataclass(frozen=True)
class Localise:
    """Turn the tether's offloading of ``namespace`` Local: its new pods run here."""

    namespace: str


@dataclass(frozen=True)
class Unoffload:
    """Delete the tether's offloading of ``namespace``."""

    namespace: str


@dataclass(frozen=True)
class Evict:
    """Evict ``pod`` (the Eviction API: its PodDisruptionBudget may say not now)."""

    pod: Pod


Step = SetStatus | Offload | Localise | Unoffload | Evict


def stays_local(name: str, labels: dict[str, str]) -> bool:
    """Whether a namespace is never offloaded by a tether (pure).

    Kubernetes' own (``kube-*``), liqo's (``liqo``, tenant namespaces), the twins this cluster holds for its
    consumers (the tether's peer among them: its pods run here), and any the admin labelled
    :data:`~liqo.api.names.STAYS_LOCAL` ``=true``.
    """
    return (
        name.startswith("kube-")
        or name == "liqo"
        or name.startswith("liqo-")
        or names.ORIGIN_NAMESPACE in labels
        or labels.get(names.STAYS_LOCAL) == "true"
    )


def refusal(observed: Observed) -> tuple[ModeReason, str] | None:
    """Why the spec's tether cannot be made now; None if it can (pure)."""
    wanted = observed.spec.peer
    peer = observed.peer(wanted)
    if peer is None:
        return ModeReason.NOT_A_PEER, f"no ForeignCluster names cluster {wanted}"
    if not peer.consuming:
        return ModeReason.NOT_CONSUMING, f"this cluster does not consume from {wanted}: peer with it first"
    if not peer.providing:
        return (
            ModeReason.NOT_PROVIDING,
            f"{wanted} does not consume from this cluster: a tether needs a bidirectional peering",
        )
    others = sorted(p.cluster_id for p in observed.peers if p.providing and p.cluster_id != wanted)
    if others:
        return (
            ModeReason.PROVIDES_TO_OTHERS,
            f"this cluster also provides resources to {', '.join(others)}: a tether gives them all to one peer",
        )
    if not peer.accepts_tether:
        return ModeReason.NOT_ACCEPTED, f"the sharing policy of {wanted} does not accept tethered clusters"
    return None


def next_step(observed: Observed) -> Step | None:
    """The one step to take now; None when the switch is where the spec asks (pure)."""
    match observed.status.phase:
        case ModePhase.AUTONOMOUS:
            return _autonomous(observed)
        case ModePhase.TETHERING | ModePhase.TETHERED:
            return _tethered(observed)
        case ModePhase.UNTETHERING:
            return _untethering(observed)


def _autonomous(observed: Observed) -> Step | None:
    spec, status = observed.spec, observed.status
    if spec.mode is Mode.AUTONOMOUS:
        # Offloadings of a tether with no status saying so (the WorkingMode deleted, or its status lost) are
        # undone all the same: the annotations are the truth, the status only a record.
        if (undo := _undo(observed)) is not None:
            return undo
        done = Status(phase=ModePhase.AUTONOMOUS, observed_generation=spec.generation)
        return None if status == done else SetStatus(done)
    if status.reason is ModeReason.FELL_BACK and status.observed_generation == spec.generation:
        return None  # ended by itself: made again only when asked again
    if (why := refusal(observed)) is not None:
        refused = Status(phase=ModePhase.AUTONOMOUS, reason=why[0], message=why[1], observed_generation=spec.generation)
        return None if status == refused else SetStatus(refused)
    return SetStatus(
        Status(
            phase=ModePhase.TETHERING,
            peer=spec.peer,
            reason=ModeReason.IN_PROGRESS,
            message=f"offloading this cluster's namespaces to {spec.peer}",
            observed_generation=spec.generation,
        )
    )


def fallback_in(observed: Observed) -> datetime.timedelta | None:
    """How long until the silent peer's tether falls back by itself, if it is due to (pure).

    Nothing else may happen meanwhile (a peer that stays silent changes nothing the controller watches), so
    the controller looks again then.
    """
    spec, status = observed.spec, observed.status
    if status.phase not in (ModePhase.TETHERING, ModePhase.TETHERED) or spec.fallback_after is None:
        return None
    peer = observed.peer(status.peer)
    if peer is None or peer.unreachable_since is None:
        return None
    return max(peer.unreachable_since + spec.fallback_after - observed.now, datetime.timedelta(0))


def _tethered(observed: Observed) -> Step | None:
    spec, status = observed.spec, observed.status
    peer_id = status.peer
    if spec.mode is not Mode.TETHERED or spec.peer != peer_id:
        return _start_untethering(observed, reason=ModeReason.IN_PROGRESS, message="the spec asks for another mode")
    peer = observed.peer(peer_id)
    if peer is None or not peer.consuming:
        return _start_untethering(observed, reason=ModeReason.NOT_CONSUMING, message=f"no longer peered with {peer_id}")
    if not peer.accepts_tether:
        message = f"the sharing policy of {peer_id} no longer accepts tethered clusters"
        return _start_untethering(observed, reason=ModeReason.NOT_ACCEPTED, message=message)
    if (
        spec.fallback_after is not None
        and peer.unreachable_since is not None
        and observed.now - peer.unreachable_since >= spec.fallback_after
    ):
        silent = int((observed.now - peer.unreachable_since).total_seconds())
        return _start_untethering(
            observed, reason=ModeReason.FELL_BACK, message=f"{peer_id} unreachable for {silent}s: working alone again"
        )
    for namespace in observed.namespaces:
        if not namespace.stays_local and namespace.offloading is None:
            return Offload(namespace=namespace.name, peer=peer_id)
    if observed.local_pods:
        # Only where the offloading is Ready: before, the pod placement may not act yet, and the replacement
        # of an evicted pod would start here again. The offloading's status wakes the controller.
        ready = {n.name for n in observed.namespaces if n.ready}
        movable = [p for p in observed.local_pods if p.namespace in ready]
        return Evict(movable[0]) if movable else None
    tethered = Status(
        phase=ModePhase.TETHERED,
        peer=peer_id,
        message=f"{peer_id} schedules this cluster's workloads",
        observed_generation=spec.generation,
    )
    return None if status == tethered else SetStatus(tethered)


def _start_untethering(observed: Observed, *, reason: ModeReason, message: str) -> SetStatus:
    return SetStatus(
        Status(
            phase=ModePhase.UNTETHERING,
            peer=observed.status.peer,
            reason=reason,
            message=message,
            observed_generation=observed.spec.generation,
        )
    )


def _undo(observed: Observed) -> Step | None:
    """The next step undoing the tether's offloadings; None once every one is asked to go."""
    ours = [n for n in observed.namespaces if n.ours and not n.going]
    for namespace in ours:
        if namespace.offloading != "Local":
            return Localise(namespace.name)
    if observed.pods_on_peer:
        return Evict(observed.pods_on_peer[0])
    if ours:
        return Unoffload(ours[0].name)
    return None


def _untethering(observed: Observed) -> Step | None:
    status = observed.status
    if (undo := _undo(observed)) is not None:
        return undo
    fell_back = status.reason is ModeReason.FELL_BACK
    if not fell_back and any(n.going for n in observed.namespaces):
        # Done once the offloadings are gone (their deletion wakes the controller). Not after a fallback: their
        # deletion waits for a peer that does not answer, and this cluster works alone meanwhile.
        return None
    return SetStatus(
        Status(
            phase=ModePhase.AUTONOMOUS,
            reason=ModeReason.FELL_BACK if fell_back else ModeReason.SWITCHED,
            message=status.message if fell_back else "",
            observed_generation=status.observed_generation,
        )
    )
