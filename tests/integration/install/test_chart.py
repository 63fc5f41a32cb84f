"""``helm template charts/liqo`` renders exactly what liqo.install.manifests renders, for any values.

The chart's hand-written templates mirror the Python rendering; this is what keeps them from drifting. Each
case is rendered both ways from one :class:`Values`: Helm from ``Values.to_helm()`` (what ``liqoctl install
--dry-run -o values`` prints), Python by :func:`liqo.install.manifests.chart`. The objects are compared
whole, after parsing, keyed by kind, namespace and name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from liqo.install import manifests
from liqo.install.values import Values
from liqo.peering.authserver import RateLimit
from tests.integration.helpers import helm_binary

CHART = Path(__file__).resolve().parents[3] / "charts" / "liqo"
BASE = Values(api_server_url="https://203.0.113.7:6443", pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/12")
CASES = {
    "defaults": BASE,
    "named, labelled, reserved namespaces, one replica": Values(
        api_server_url="https://api.example.com",
        pod_cidr="10.8.0.0/14",
        service_cidr="10.12.0.0/16",
        cluster_name="rome",
        cluster_labels={"region": "eu-south", "tier": "gold", "a.example.com/b": "c"},
        auth_url="https://auth.example.com:443",
        reserved_namespaces=("cert-manager", "team-*"),
        manager_replicas=1,
        identity_ttl=900,
        auth_rate_limit=RateLimit(burst=5, per_second=0.5),
        image="registry.example.com/liqo:1.2.3",
        image_pull_policy="Always",
    ),
    "node ports, placement and LAN discovery (a local cluster with real nodes)": Values(
        api_server_url="https://172.30.0.1:41000",
        pod_cidr="10.244.0.0/16",
        service_cidr="10.96.0.0/16",
        cluster_name="milan",
        auth_url="https://172.30.1.1:30443",
        auth_service_type="NodePort",
        auth_node_port=30443,
        webhook_url="https://172.30.1.1:30944/",
        webhook_node_port=30944,
        virtual_kubelet_node_port=30250,
        reserved_subnets=("172.30.0.0/16",),
        peer_pools=("10.0.0.0/8", "100.64.0.0/10"),
        node_selector={"liqo.io/local-node": "real"},
        tolerations=({"key": "dedicated", "operator": "Equal", "value": "liqo", "effect": "NoSchedule"},),
        # Helm merges maps with values.yaml's: a case gives every key the defaults have.
        manager_resources={"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        virtual_kubelet_resources={"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "300Mi"}},
        lan_discovery=True,
        discovery_resources={"requests": {"cpu": "5m", "memory": "40Mi"}, "limits": {"memory": "100Mi"}},
    ),
    "a default sharing policy": Values(
        api_server_url="https://api.example.com",
        pod_cidr="10.8.0.0/14",
        service_cidr="10.12.0.0/16",
        default_sharing_policy={"percentage": 30, "refreshThresholdPercent": 5},
    ),
}


def keyed(items: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(i["kind"], i["metadata"].get("namespace", ""), i["metadata"]["name"]): i for i in items}


MUTATING_POLICIES = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def helm_template(values: Values, tmp_path: Path, *, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values.to_helm()))
    argv = [helm_binary(), "template", "liqo", str(CHART), "--namespace", "liqo", "--include-crds", "-f", str(file)]
    argv += [f"--api-versions={v}" for v in api_versions]
    rendered = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


@pytest.mark.parametrize("policy", [True, False], ids=["placement policy served", "pod webhook"])
@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_helm_template_renders_what_liqoctl_applies(values: Values, policy: bool, tmp_path: Path) -> None:
    # Helm's own capabilities (without a cluster) do not list MutatingAdmissionPolicy: say it when it is served.
    rendered = helm_template(values, tmp_path, api_versions=(MUTATING_POLICIES,) if policy else ())
    by_helm, by_python = keyed(rendered), keyed(manifests.chart(values, placement_policy=policy))
    assert sorted(by_helm) == sorted(by_python)
    for key, item in by_python.items():
        assert by_helm[key] == item, key


def test_the_chart_refuses_missing_values_and_another_namespace(tmp_path: Path) -> None:
    base = [helm_binary(), "template", "liqo", str(CHART)]
    missing = subprocess.run([*base, "--namespace", "liqo"], check=False, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0
    assert "apiServer.url is required" in missing.stderr
    (tmp_path / "v.yaml").write_text(yaml.safe_dump(BASE.to_helm()))
    elsewhere = subprocess.run(
        [*base, "--namespace", "kube-system", "-f", str(tmp_path / "v.yaml")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert elsewhere.returncode != 0
    assert "install liqo into the namespace liqo" in elsewhere.stderr


def test_helm_lint_passes() -> None:
    lint = subprocess.run(
        [helm_binary(), "lint", str(CHART), "--namespace", "liqo", "--set", "apiServer.url=https://a",
         "--set", "network.podCIDR=10.0.0.0/16", "--set", "network.serviceCIDR=10.1.0.0/16"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr
