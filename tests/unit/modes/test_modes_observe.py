"""What the switch reads from the objects, and what it writes back, read again the same (pure)."""

from __future__ import annotations

import datetime
import uuid

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.workingmodes import ACCEPTS_TETHERING, ModePhase, ModeReason, tether_offloading
from liqo.kube.objects import Obj
from liqo.modes.observe import (
    mode_sample,
    movable,
    namespaces_of,
    peer_of,
    status_manifest,
    status_of,
)
from liqo.modes.plan import Namespace, Peer, Pod, Status

T0 = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
PEER = str(uuid.UUID(int=3))


@given(
    phase=st.sampled_from(ModePhase),
    reason=st.sampled_from(ModeReason),
    message=st.text(max_size=40),
    generation=st.integers(0, 10**6),
    peer=st.sampled_from(["", PEER]),
)
def test_a_status_written_reads_back_the_same_so_a_settled_switch_writes_nothing_more(
    phase: ModePhase, reason: ModeReason, message: str, generation: int, peer: str
) -> None:
    status = Status(phase=phase, peer=peer, reason=reason, message=message, observed_generation=generation)
    written = status_manifest(status, offloaded=["b", "a"], now=T0)
    assert status_of({"status": written}) == status
    assert written["offloaded"] == ["a", "b"]
    settled = written["conditions"][0]["status"] == "True"
    assert settled == (reason is ModeReason.SWITCHED and phase in (ModePhase.AUTONOMOUS, ModePhase.TETHERED))


def test_no_working_mode_is_autonomous_never_switched() -> None:
    assert status_of(None) == Status()


def test_a_peer_is_read_from_its_records_conditions_and_its_offer() -> None:
    conditions = [
        {"type": "OutgoingPeering", "status": "Established"},
        {"type": "IncomingPeering", "status": "Pending"},
        {
            "type": "APIServerStatus",
            "status": "Error",
            "reason": "Unreachable",
            "lastTransitionTime": "2026-11-29T11:59:00Z",
        },
    ]
    record = {"spec": {"clusterID": PEER}, "status": {"conditions": conditions}}
    assert peer_of(record, offer={"spec": {ACCEPTS_TETHERING: True}}) == Peer(
        PEER,
        consuming=True,
        providing=False,
        accepts_tether=True,
        unreachable_since=datetime.datetime(2026, 11, 29, 11, 59, tzinfo=datetime.UTC),
    )
    assert peer_of({"spec": {"clusterID": PEER}}, offer=None) == Peer(PEER)


def test_namespaces_know_their_offloading_and_whether_the_tether_made_it() -> None:
    made = tether_offloading("default", peer=PEER, strategy="Remote")
    back = tether_offloading("shop-1a2b3c4d", peer=PEER, strategy="LocalAndRemote")  # the controlling side's
    admins = {"metadata": {"name": names.OFFLOADING, "namespace": "shop"}, "spec": {"podOffloadingStrategy": "Local"}}
    found = namespaces_of(
        [
            {"metadata": {"name": "shop"}},
            {"metadata": {"name": "default"}},
            {"metadata": {"name": "kube-system"}},
            {"metadata": {"name": "going", "deletionTimestamp": "2026-11-29T12:00:00Z"}},
            {"metadata": {"name": "shop-1a2b3c4d", "labels": {names.ORIGIN_NAMESPACE: "shop"}}},
        ],
        [made, admins, back],
    )
    assert found == [
        Namespace("default", offloading="Remote", ours=True, peer=PEER),  # not Ready: no status yet
        Namespace("kube-system", stays_local=True),
        Namespace("shop", offloading="Local"),
        Namespace("shop-1a2b3c4d", stays_local=True, offloading="LocalAndRemote"),  # not this switch's to undo
    ]


def test_a_tether_offloading_being_deleted_is_known_as_going() -> None:
    going = tether_offloading("default", peer=PEER, strategy="Local")
    going["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    [found] = namespaces_of([{"metadata": {"name": "default"}}], [going])
    assert found == Namespace("default", offloading="Local", ours=True, peer=PEER, going=True)


def test_only_running_pods_a_controller_owns_are_moved_and_their_node_says_where_they_are() -> None:
    def pod(name: str, node: str | None, *, owned: bool = True, phase: str = "Running", going: bool = False) -> Obj:
        meta: Obj = {"name": name, "namespace": "default"}
        if owned:
            meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "r", "controller": True}]
        if going:
            meta["deletionTimestamp"] = "2026-11-29T12:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}

    pods = [
        pod("here", "laptop"),
        pod("there", "liqo-enterprise"),
        pod("bare", "laptop", owned=False),
        pod("unbound", None),
        pod("done", "laptop", phase="Succeeded"),
        pod("leaving", "laptop", going=True),
        pod("elsewhere", "liqo-other-provider"),
    ]
    virtual_nodes = frozenset({"liqo-enterprise", "liqo-other-provider"})
    assert movable(pods, peer_node="liqo-enterprise", virtual_nodes=virtual_nodes) == (
        [Pod("default", "here")],
        [Pod("default", "there")],
    )


def test_the_working_mode_metric_says_what_is_asked_where_the_switch_is_and_the_peer() -> None:
    assert mode_sample(None) == (("Autonomous", "Autonomous", ""), 1.0)
    tethering = {"spec": {"mode": "Tethered", "peer": PEER}, "status": {"phase": "Tethering", "peer": PEER}}
    assert mode_sample(tethering) == (("Tethered", "Tethering", PEER), 1.0)
