from __future__ import annotations

from benchmarks.measure import deployment


def test_the_bench_deployment_mounts_a_token_unless_told_not_to() -> None:
    with_token = deployment("bench", namespace="ns", replicas=3)["spec"]["template"]["spec"]
    without = deployment("bench", namespace="ns", replicas=3, token=False)["spec"]["template"]["spec"]
    assert "automountServiceAccountToken" not in with_token
    assert without["automountServiceAccountToken"] is False
    assert without["containers"] == with_token["containers"]
