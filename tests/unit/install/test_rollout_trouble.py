"""When an install's Deployment rolled out, and what the install says while it has not."""

from __future__ import annotations

from typing import Any

from liqo.install.installer import rolled_out, rollout_trouble


def _deployment(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "m"}}},
        "status": {"observedGeneration": 1} | status,
    }


def _pod(name: str, reason: str) -> dict[str, Any]:
    waiting = {"name": "manager", "state": {"waiting": {"reason": reason}}}
    return {"metadata": {"name": name}, "status": {"containerStatuses": [waiting]}}


def test_rolled_out_means_every_replica_updated_and_available_and_no_old_one_left() -> None:
    assert rolled_out(_deployment(replicas=2, updatedReplicas=2, availableReplicas=2))
    assert not rolled_out(_deployment(replicas=3, updatedReplicas=2, availableReplicas=3))  # an old pod is left
    assert not rolled_out(_deployment(replicas=2, updatedReplicas=1, availableReplicas=2))  # old ones serve
    assert not rolled_out(_deployment(replicas=2, updatedReplicas=2, availableReplicas=1))
    assert not rolled_out(_deployment(2, replicas=2, updatedReplicas=2, availableReplicas=2))  # not observed
    assert not rolled_out({"metadata": {"generation": 1}, "spec": {"replicas": 2}})


def test_each_unready_pod_is_named_with_its_first_cause() -> None:
    said = rollout_trouble(_deployment(), [_pod("m-1", "ErrImagePull"), _pod("m-2", "ContainerCreating")])
    assert said == (
        'pod m-1: container "manager" waiting: ErrImagePull; pod m-2: container "manager" waiting: ContainerCreating'
    )
    ready = {"metadata": {"name": "m-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert rollout_trouble(_deployment(), [ready, _pod("m-1", "ErrImagePull")]).startswith("pod m-1:")


def test_many_pods_are_cut_to_three() -> None:
    said = rollout_trouble(_deployment(), [_pod(f"m-{i}", "ContainerCreating") for i in range(5)])
    assert said.count("pod m-") == 3
    assert said.endswith("; 2 more")


def test_pods_refused_at_creation_are_told_from_the_deployment() -> None:
    refused = {"type": "ReplicaFailure", "status": "True", "message": 'pods "m-1" is forbidden: exceeded quota'}
    assert rollout_trouble(_deployment(conditions=[refused]), []) == (
        'none of its 2 pods created yet: pods "m-1" is forbidden: exceeded quota'
    )
    assert rollout_trouble(_deployment(), []) == "none of its 2 pods created yet"


def test_ready_pods_still_rolling_and_an_unobserved_version_are_told_as_counts() -> None:
    ready = {"metadata": {"name": "m-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    counts = _deployment(replicas=3, updatedReplicas=2, availableReplicas=3)
    assert rollout_trouble(counts, [ready]) == "2 of 2 pods updated, 3 available, 3 in all"
    assert rollout_trouble(_deployment(2), [ready]) == "the Deployment controller has not seen this version yet"
