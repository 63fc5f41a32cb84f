"""The bench-offload harness's pure parts: the Deployment it rolls out, the ratios it reports."""

from __future__ import annotations

from benchmarks.measure import deployment
from benchmarks.offload import provider_cpu_ratio, side_cpu


def test_the_bench_deployment_mounts_a_token_unless_told_not_to() -> None:
    with_token = deployment("bench", namespace="ns", replicas=3)["spec"]["template"]["spec"]
    without = deployment("bench", namespace="ns", replicas=3, token=False)["spec"]["template"]["spec"]
    assert "automountServiceAccountToken" not in with_token
    assert without["automountServiceAccountToken"] is False
    assert without["containers"] == with_token["containers"]


def test_the_provider_cpu_ratio_with_and_without_liqos_processes() -> None:
    offloaded = {
        "milan/kube-apiserver": 20.0,
        "milan/liqo-manager": 4.0,
        "milan/etcd": 4.0,
        "rome/liqo-virtual-kubelet": 6.0,
    }
    direct = {"milan/kube-apiserver": 12.0, "milan/liqo-manager": 1.0, "milan/etcd": 3.0, "rome/kube-apiserver": 1.0}
    assert side_cpu(offloaded, side="milan") == 28.0
    assert side_cpu(offloaded, side="milan", liqo=False) == 24.0
    assert provider_cpu_ratio(offloaded, direct) == {"all": 28.0 / 16.0, "without_liqo": 24.0 / 15.0}
