"""The network ``liqoctl install`` records: a local cluster's own, else the flags, else the previous one."""

from __future__ import annotations

import ipaddress

import pytest

from liqo.api.clusterkey import ClusterKey
from liqo.api.identity import ClusterIdentity
from liqo.api.networks import ClusterNetwork, InvalidNetwork
from liqo.install.installer import InstallError, resolve_network
from liqo.peering.bootstrap import InvalidSettings, identity_configmap, identity_from_settings
from tests.unit.helpers import install_manifests

LOCAL = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
PREVIOUS = ClusterNetwork.parse(pod_cidr="10.8.0.0/14", service_cidr="10.12.0.0/16")
PODS = ipaddress.ip_network("172.16.0.0/16")
SERVICES = ipaddress.ip_network("172.17.0.0/16")


def test_a_local_cluster_records_its_own_network_and_refuses_a_contradicting_flag() -> None:
    assert resolve_network(pod_cidr=None, service_cidr=None, local=LOCAL, previous=PREVIOUS) == LOCAL
    assert resolve_network(pod_cidr=LOCAL.pod_cidr, service_cidr=None, local=LOCAL, previous=None) == LOCAL
    with pytest.raises(InstallError, match=r"--pod-cidr 172\.16\.0\.0/16 is not this local cluster's"):
        resolve_network(pod_cidr=PODS, service_cidr=None, local=LOCAL, previous=None)


def test_elsewhere_the_flags_win_over_what_was_recorded_and_a_reinstall_keeps_it() -> None:
    flags = resolve_network(pod_cidr=PODS, service_cidr=SERVICES, local=None, previous=PREVIOUS)
    assert flags == ClusterNetwork(pod_cidr=PODS, service_cidr=SERVICES)
    assert resolve_network(pod_cidr=None, service_cidr=None, local=None, previous=PREVIOUS) == PREVIOUS
    one = resolve_network(pod_cidr=PODS, service_cidr=None, local=None, previous=PREVIOUS)
    assert one == ClusterNetwork(pod_cidr=PODS, service_cidr=PREVIOUS.service_cidr)


@pytest.mark.parametrize(
    ("pods", "services", "complaint"),
    [
        (None, None, "--pod-cidr and --service-cidr are required: this cluster's network is not recorded yet"),
        (PODS, None, "--service-cidr is required"),
        (None, SERVICES, "--pod-cidr is required"),
    ],
)
def test_a_first_install_elsewhere_needs_both_flags(
    pods: ipaddress.IPv4Network | None, services: ipaddress.IPv4Network | None, complaint: str
) -> None:
    with pytest.raises(InstallError) as refused:
        resolve_network(pod_cidr=pods, service_cidr=services, local=None, previous=None)
    assert complaint in str(refused.value)
    assert "does not guess" in str(refused.value)


def test_flags_that_make_no_network_are_refused_with_both_values() -> None:
    with pytest.raises(InstallError, match=r"--pod-cidr 10\.0\.0\.0/8, --service-cidr 10\.96\.0\.0/16\): .* overlap"):
        resolve_network(
            pod_cidr=ipaddress.ip_network("10.0.0.0/8"), service_cidr=LOCAL.service_cidr, local=None, previous=None
        )


def test_the_identity_the_manager_makes_records_the_network_and_reads_it_back() -> None:
    [settings] = [
        m
        for m in install_manifests(pod_cidr="10.8.0.0/14", service_cidr="10.12.0.0/16")
        if m["metadata"]["name"] == "liqo-settings"
    ]
    identity = identity_from_settings(settings["data"], cluster_id="id", key=ClusterKey.generate())
    configmap = identity_configmap(identity)
    assert (configmap["data"]["podCIDR"], configmap["data"]["serviceCIDR"]) == ("10.8.0.0/14", "10.12.0.0/16")
    assert ClusterIdentity.from_configmap(configmap) == identity
    assert identity.network == PREVIOUS


def test_an_identity_without_a_network_is_one_installed_before_it_was_recorded() -> None:
    [settings] = [m for m in install_manifests() if m["metadata"]["name"] == "liqo-settings"]
    configmap = identity_configmap(identity_from_settings(settings["data"], cluster_id="id", key=ClusterKey.generate()))
    for key in ("podCIDR", "serviceCIDR"):
        del configmap["data"][key]
    assert ClusterIdentity.from_configmap(configmap).network is None
    configmap["data"] |= {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}
    with pytest.raises(InvalidNetwork, match=r"'ConfigMap liqo-cluster-identity\.podCIDR': 127\.0\.0\.0/8 overlaps"):
        ClusterIdentity.from_configmap(configmap)


def test_settings_no_identity_can_be_made_of_are_refused_naming_the_key() -> None:
    key = ClusterKey.generate()
    good = {"apiServerURL": "https://a:6443", "podCIDR": "10.8.0.0/14", "serviceCIDR": "10.12.0.0/16"}
    identity = identity_from_settings(good, cluster_id="0123456789", key=key)
    assert (identity.cluster_name, identity.auth_url) == ("cluster-01234567", "https://liqo-auth.liqo.svc")
    assert identity.key_fingerprint == key.fingerprint
    for broken, complaint in (
        ({"apiServerURL": ""}, "apiServerURL must be set"),
        ({"podCIDR": "", "serviceCIDR": ""}, "podCIDR, serviceCIDR must be set"),
        ({"clusterLabels": "[1]"}, "clusterLabels must be a JSON object of strings"),
        ({"clusterLabels": '{"a": 1}'}, "clusterLabels must be a JSON object of strings"),
        ({"podCIDR": "127.0.0.0/8"}, "overlaps"),
    ):
        with pytest.raises(InvalidSettings, match="ConfigMap liqo/liqo-settings: .*" + complaint):
            identity_from_settings(good | broken, cluster_id="id", key=key)
