"""The switch between working modes: each rule of liqo.modes.plan, then whole switches played against a model."""

from __future__ import annotations

import dataclasses
import datetime
import uuid

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.workingmodes import Mode, ModePhase, ModeReason, WorkingModeSpec
from liqo.modes.plan import (
    Evict,
    Localise,
    Namespace,
    Observed,
    Offload,
    Peer,
    Pod,
    SetStatus,
    Status,
    Unoffload,
    fallback_in,
    next_step,
    refusal,
    stays_local,
)

T0 = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
ENTERPRISE = str(uuid.UUID(int=1))
OTHER = str(uuid.UUID(int=2))
READY = Peer(ENTERPRISE, consuming=True, providing=True, accepts_tether=True)
TETHER = WorkingModeSpec(mode=Mode.TETHERED, peer=ENTERPRISE, generation=2)


def _observed(**changes: object) -> Observed:
    base = Observed(spec=TETHER, status=Status(), peers=(READY,), now=T0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_system_namespaces_twins_and_those_the_admin_marks_stay_local() -> None:
    assert stays_local("kube-system", {})
    assert stays_local("liqo", {})
    assert stays_local("liqo-tenant-x", {})
    assert stays_local("shop-1a2b3c4d", {names.ORIGIN_NAMESPACE: "shop"})
    assert stays_local("monitoring", {names.STAYS_LOCAL: "true"})
    assert not stays_local("default", {})
    assert not stays_local("liquor", {})


def test_a_tether_is_refused_saying_which_precondition_fails_first() -> None:
    assert refusal(_observed(peers=())) == (ModeReason.NOT_A_PEER, f"no ForeignCluster names cluster {ENTERPRISE}")
    reasons = [
        (dataclasses.replace(READY, consuming=False), ModeReason.NOT_CONSUMING),
        (dataclasses.replace(READY, providing=False), ModeReason.NOT_PROVIDING),
        (dataclasses.replace(READY, accepts_tether=False), ModeReason.NOT_ACCEPTED),
    ]
    for peer, reason in reasons:
        found = refusal(_observed(peers=(peer,)))
        assert found is not None
        assert found[0] is reason
    two = refusal(_observed(peers=(READY, Peer(OTHER, providing=True))))
    assert two is not None
    assert two[0] is ModeReason.PROVIDES_TO_OTHERS
    assert OTHER in two[1]
    assert refusal(_observed(peers=(READY, Peer(OTHER, consuming=True)))) is None  # consuming from others is fine
    assert refusal(_observed()) is None


def test_a_refused_tether_is_said_once_and_tried_again_when_the_peer_changes() -> None:
    refused = _observed(peers=(dataclasses.replace(READY, accepts_tether=False),))
    step = next_step(refused)
    assert isinstance(step, SetStatus)
    assert (step.status.phase, step.status.reason, step.status.observed_generation) == (
        ModePhase.AUTONOMOUS,
        ModeReason.NOT_ACCEPTED,
        2,
    )
    assert next_step(dataclasses.replace(refused, status=step.status)) is None
    accepted = next_step(dataclasses.replace(refused, status=step.status, peers=(READY,)))
    assert isinstance(accepted, SetStatus)
    assert accepted.status.phase is ModePhase.TETHERING


def test_tethering_offloads_each_namespace_but_the_local_ones_then_moves_local_pods_then_is_tethered() -> None:
    tethering = Status(phase=ModePhase.TETHERING, peer=ENTERPRISE, reason=ModeReason.IN_PROGRESS, observed_generation=2)
    namespaces = (
        Namespace("kube-system", stays_local=True),
        Namespace("default"),
        Namespace("shop", offloading="LocalAndRemote"),  # the admin's own: left as it is
    )
    assert next_step(_observed(status=tethering, namespaces=namespaces)) == Offload("default", ENTERPRISE)
    pending = (*namespaces[:1], Namespace("default", offloading="Remote", ours=True), namespaces[2])
    pod = Pod("default", "web-1")
    assert next_step(_observed(status=tethering, namespaces=pending, local_pods=(pod,))) is None  # not Ready yet
    done = (*namespaces[:1], Namespace("default", offloading="Remote", ours=True, ready=True), namespaces[2])
    assert next_step(_observed(status=tethering, namespaces=done, local_pods=(pod,))) == Evict(pod)
    step = next_step(_observed(status=tethering, namespaces=done))
    assert isinstance(step, SetStatus)
    assert step.status.phase is ModePhase.TETHERED
    assert next_step(_observed(status=step.status, namespaces=done)) is None
    later = (*done, Namespace("new"))
    assert next_step(_observed(status=step.status, namespaces=later)) == Offload("new", ENTERPRISE)


def test_the_peer_silent_longer_than_fallback_after_ends_the_tether_until_asked_again() -> None:
    spec = dataclasses.replace(TETHER, fallback_after=datetime.timedelta(seconds=60))
    tethered = Status(
        phase=ModePhase.TETHERED,
        peer=ENTERPRISE,
        message=f"{ENTERPRISE} schedules this cluster's workloads",
        observed_generation=2,
    )
    silent = dataclasses.replace(READY, unreachable_since=T0 - datetime.timedelta(seconds=59))
    assert next_step(_observed(spec=spec, status=tethered, peers=(silent,))) is None
    too_long = dataclasses.replace(READY, unreachable_since=T0 - datetime.timedelta(seconds=61))
    step = next_step(_observed(spec=spec, status=tethered, peers=(too_long,)))
    assert isinstance(step, SetStatus)
    assert (step.status.phase, step.status.reason) == (ModePhase.UNTETHERING, ModeReason.FELL_BACK)
    ended = next_step(_observed(spec=spec, status=step.status, peers=(too_long,)))
    assert isinstance(ended, SetStatus)
    assert ended.status.reason is ModeReason.FELL_BACK
    assert ended.status.phase is ModePhase.AUTONOMOUS
    assert next_step(_observed(spec=spec, status=ended.status, peers=(READY,))) is None  # back, but not asked again
    again = next_step(_observed(spec=dataclasses.replace(spec, generation=3), status=ended.status, peers=(READY,)))
    assert isinstance(again, SetStatus)
    assert again.status.phase is ModePhase.TETHERING
    assert next_step(_observed(status=tethered, peers=(too_long,))) is None  # no fallbackAfter: never by itself


def test_a_silent_peer_is_looked_at_again_when_its_fallback_is_due() -> None:
    """A peer that stays silent changes nothing the controller watches: it must know when to look again."""
    spec = dataclasses.replace(TETHER, fallback_after=datetime.timedelta(seconds=60))
    tethered = Status(phase=ModePhase.TETHERED, peer=ENTERPRISE, observed_generation=2)
    silent = dataclasses.replace(READY, unreachable_since=T0 - datetime.timedelta(seconds=45))
    assert fallback_in(_observed(spec=spec, status=tethered, peers=(silent,))) == datetime.timedelta(seconds=15)
    assert fallback_in(_observed(spec=spec, status=tethered, peers=(READY,))) is None  # answering
    assert fallback_in(_observed(status=tethered, peers=(silent,))) is None  # no fallbackAfter
    assert fallback_in(_observed(spec=spec, status=Status(), peers=(silent,))) is None  # not tethered


def test_untethering_turns_offloadings_local_brings_pods_back_then_deletes_only_its_own() -> None:
    untethering = Status(phase=ModePhase.UNTETHERING, peer=ENTERPRISE, reason=ModeReason.IN_PROGRESS)
    spec = WorkingModeSpec(generation=3)
    namespaces = (Namespace("default", offloading="Remote", ours=True), Namespace("shop", offloading="Remote"))
    assert next_step(_observed(spec=spec, status=untethering, namespaces=namespaces)) == Localise("default")
    local = (Namespace("default", offloading="Local", ours=True), namespaces[1])
    pod = Pod("default", "web-1")
    assert next_step(_observed(spec=spec, status=untethering, namespaces=local, pods_on_peer=(pod,))) == Evict(pod)
    assert next_step(_observed(spec=spec, status=untethering, namespaces=local)) == Unoffload("default")
    going = (dataclasses.replace(local[0], going=True), namespaces[1])
    assert next_step(_observed(spec=spec, status=untethering, namespaces=going)) is None  # until it is gone
    step = next_step(_observed(spec=spec, status=untethering, namespaces=namespaces[1:]))
    assert isinstance(step, SetStatus)
    assert step.status.phase is ModePhase.AUTONOMOUS


def test_a_fallback_ends_without_waiting_for_the_silent_peer_to_drop_the_twins() -> None:
    """The offloadings' deletion waits for the peer; a laptop that fell back works alone meanwhile."""
    fell_back = Status(phase=ModePhase.UNTETHERING, peer=ENTERPRISE, reason=ModeReason.FELL_BACK, message="silent")
    going = (Namespace("default", offloading="Local", ours=True, going=True),)
    step = next_step(_observed(status=fell_back, namespaces=going))
    assert isinstance(step, SetStatus)
    assert (step.status.phase, step.status.reason) == (ModePhase.AUTONOMOUS, ModeReason.FELL_BACK)


# -- whole switches against a model of the cluster -----------------------------------------------------------


@dataclasses.dataclass
class Model:
    """A cluster the steps act on: namespaces, their offloadings, and where each controlled pod runs."""

    namespaces: dict[str, Namespace]
    pods: dict[Pod, str]  # pod → "local" | "peer"
    status: Status = dataclasses.field(default_factory=Status)

    def observed(self, spec: WorkingModeSpec) -> Observed:
        ours = {n.name for n in self.namespaces.values() if n.ours}
        return Observed(
            spec=spec,
            status=self.status,
            peers=(READY,),
            namespaces=tuple(self.namespaces.values()),
            local_pods=tuple(p for p, at in self.pods.items() if at == "local" and p.namespace in ours),
            pods_on_peer=tuple(p for p, at in self.pods.items() if at == "peer" and p.namespace in ours),
            now=T0,
        )

    def take(self, step: object) -> None:
        match step:
            case SetStatus(status):
                self.status = status
            case Offload(namespace, _):  # and its controller makes it Ready
                self.namespaces[namespace] = dataclasses.replace(
                    self.namespaces[namespace], offloading="Remote", ours=True, ready=True
                )
            case Localise(namespace):
                self.namespaces[namespace] = dataclasses.replace(self.namespaces[namespace], offloading="Local")
            case Unoffload(namespace):
                self.namespaces[namespace] = dataclasses.replace(
                    self.namespaces[namespace], offloading=None, ours=False, ready=False
                )
            case Evict(pod):  # its controller makes it again where the offloading's strategy says
                remote = self.namespaces[pod.namespace].offloading == "Remote"
                self.pods[pod] = "peer" if remote else "local"

    def run(self, spec: WorkingModeSpec) -> int:
        for taken in range(500):
            step = next_step(self.observed(spec))
            if step is None:
                return taken
            self.take(step)
        raise AssertionError("the switch never settled")


namespace_names = st.lists(st.sampled_from(["default", "shop", "web", "kube-system", "liqo", "batch"]), unique=True)


@given(names_=namespace_names, admin_offloaded=st.sets(st.sampled_from(["shop", "web"])), pods=st.integers(0, 4))
def test_a_tether_and_its_end_leave_every_namespace_and_pod_where_they_belong(
    names_: list[str], admin_offloaded: set[str], pods: int
) -> None:
    namespaces = {
        n: Namespace(n, stays_local=stays_local(n, {}), offloading="LocalAndRemote" if n in admin_offloaded else None)
        for n in names_
    }
    model = Model(
        namespaces=dict(namespaces),
        pods={Pod(n, f"p{i}"): "local" for n in names_ if not stays_local(n, {}) for i in range(pods)},
    )
    model.run(TETHER)
    assert model.status.phase is ModePhase.TETHERED
    for name, namespace in model.namespaces.items():
        if namespace.stays_local or name in admin_offloaded:
            assert namespace == namespaces[name]  # untouched
        else:
            assert (namespace.offloading, namespace.ours) == ("Remote", True)
    moved = {p for p, at in model.pods.items() if at == "peer"}
    assert moved == {p for p in model.pods if p.namespace not in admin_offloaded}

    model.run(WorkingModeSpec(generation=3))
    ended = model.status
    assert ended.phase is ModePhase.AUTONOMOUS
    assert model.namespaces == namespaces
    assert all(at == "local" for p, at in model.pods.items() if p.namespace not in admin_offloaded)


def test_a_peer_that_stops_accepting_tethered_clusters_ends_the_tether_saying_so() -> None:
    tethered = Status(phase=ModePhase.TETHERED, peer=ENTERPRISE, observed_generation=2)
    step = next_step(_observed(status=tethered, peers=(dataclasses.replace(READY, accepts_tether=False),)))
    assert isinstance(step, SetStatus)
    assert (step.status.phase, step.status.reason) == (ModePhase.UNTETHERING, ModeReason.NOT_ACCEPTED)
