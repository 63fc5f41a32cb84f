"""Which certificate the virtual kubelet serves, and the rights it holds to have one signed."""

from __future__ import annotations

import pytest

from liqo.apps.virtualkubelet import parse_args
from liqo.install.manifests import virtual_kubelet_rules, virtual_kubelet_workload
from tests.shared import SAMPLE_VALUES

CERTIFICATES = "certificates.k8s.io"


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "csr"),
        (["--node-address=fd00::7"], "csr"),
        (["--serving-cert=csr", "--node-address=10.244.1.9"], "csr"),
        (["--serving-cert=self-signed", "--node-address=vk.example"], "self-signed"),
        (["--cert=c.pem", "--key=k.pem", "--node-address=vk.example"], "files"),
    ],
)
def test_the_serving_certificate_is_the_files_given_else_signed_by_the_cluster_unless_asked_otherwise(
    argv: list[str], mode: str
) -> None:
    assert parse_args(argv).serving_cert == mode


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--cert=c.pem"], "--cert and --key go together"),
        (["--key=k.pem"], "--cert and --key go together"),
        (["--cert=c.pem", "--key=k.pem", "--serving-cert=csr"], "--serving-cert chooses"),
        (["--node-address=vk.example"], "must be an IP address"),
        (["--serving-cert=signed"], "invalid choice"),
    ],
)
def test_contradictory_or_unusable_flags_are_refused(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert complaint in capsys.readouterr().err


def test_the_deployment_gets_a_certificate_of_its_pod_ip_from_the_cluster() -> None:
    container = virtual_kubelet_workload(SAMPLE_VALUES)[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--node-address=$(POD_IP)" in container["args"]
    assert not any(arg.startswith(("--cert", "--serving-cert")) for arg in container["args"])


def test_the_virtual_kubelet_may_approve_kubelet_serving_requests_only_and_not_list_anyones() -> None:
    rules = [rule for rule in virtual_kubelet_rules() if rule["apiGroups"] == [CERTIFICATES]]
    assert rules == [
        {
            "apiGroups": [CERTIFICATES],
            "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "watch", "delete"],
        },
        {"apiGroups": [CERTIFICATES], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
        {
            "apiGroups": [CERTIFICATES],
            "resources": ["signers"],
            "resourceNames": ["kubernetes.io/kubelet-serving"],
            "verbs": ["approve"],
        },
    ]
