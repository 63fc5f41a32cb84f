"""Why a pod is not ready, in kubectl's words, escaped and cut whoever wrote the status."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.kube import podstate
from liqo.kube.printable import unprintable


def _pod(*statuses: dict[str, Any], **conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": kind, "status": status, "reason": reason, "message": message}
                for kind, (status, reason, message) in conditions.items()
            ],
            "containerStatuses": list(statuses),
        }
    }


def test_a_ready_pod_has_no_trouble() -> None:
    assert podstate.pod_trouble(_pod(Ready=("True", "", ""))) is None


def test_scheduling_comes_first() -> None:
    pod = _pod(PodScheduled=("False", "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu."))
    assert podstate.pod_trouble(pod) == "not scheduled: Unschedulable (0/1 nodes are available: 1 Insufficient cpu.)"


def test_a_waiting_container_is_named_with_its_reason_and_message() -> None:
    pulling = {"name": "manager", "state": {"waiting": {"reason": "ErrImagePull", "message": 'pull "x": not found'}}}
    pod = _pod(pulling, PodScheduled=("True", "", ""), Ready=("False", "ContainersNotReady", "unready: [manager]"))
    assert podstate.pod_trouble(pod) == 'container "manager" waiting: ErrImagePull (pull "x": not found)'


def test_a_crashing_container_says_how_it_last_ended() -> None:
    crashing = {
        "name": "manager",
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 2}},
    }
    assert podstate.container_trouble(crashing) == (
        'container "manager" waiting: CrashLoopBackOff (back-off 40s), restarted 3 times, last Error, exit code 2'
    )


def test_a_running_container_failing_its_probe_and_a_terminated_one() -> None:
    assert podstate.container_trouble({"name": "a", "state": {"running": {}}}) == 'container "a" running, not ready'
    assert podstate.container_trouble({"name": "a", "ready": True, "state": {"running": {}}}) is None
    ended = {"name": "a", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
    assert podstate.container_trouble(ended) == 'container "a" terminated: OOMKilled, exit code 137'


def test_without_container_statuses_the_conditions_or_the_phase_speak() -> None:
    gated = _pod(Ready=("False", "ReadinessGatesNotReady", "gate x not ready"))
    assert podstate.pod_trouble(gated) == "ReadinessGatesNotReady (gate x not ready)"
    assert podstate.pod_trouble({"status": {}}) == "Pending, not ready"


def test_init_containers_come_first() -> None:
    pod = {
        "status": {
            "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}],
            "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
        }
    }
    assert podstate.pod_trouble(pod) == 'container "init" waiting: PodInitializing'
    assert podstate.container_status(pod, "app") == pod["status"]["containerStatuses"][0]
    assert podstate.container_status(pod, "nope") is None


@given(st.text(max_size=1000), st.text(max_size=1000), st.text(max_size=100))
def test_whatever_the_status_says_comes_back_printable_and_cut(reason: str, message: str, name: str) -> None:
    status = {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}
    said = podstate.pod_trouble({"status": {"containerStatuses": [status]}})
    assert said is not None
    assert unprintable(said) is None
    assert len(said) <= 2 * podstate.MAX_TEXT + len('container "" waiting: ')
