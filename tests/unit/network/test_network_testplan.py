"""liqoctl test network's plan, verdicts and diagnoses (pure)."""

from __future__ import annotations

import ipaddress

import pytest

from liqo.api.networks import ClusterNetwork
from liqo.network import testplan
from liqo.network.testplan import Endpoint, Probe, Remote

HOME = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
LOCAL = [Endpoint(cluster="here", pod=f"local-{i}", node=f"n{i}", address=f"10.244.{i}.5") for i in (1, 2)]
REMOTE = Remote(
    endpoint=Endpoint(cluster="rome", pod="remote-rome", node="liqo-rome", address="10.71.0.9"),
    provider="rome",
    locals_seen={"local-1": "10.72.1.5", "local-2": "10.72.2.5"},
)


def probe(protocol: str = "tcp", *, outbound: bool = True) -> Probe:
    [found] = [
        p for p in testplan.plan(local=LOCAL[:1], remote=[REMOTE]) if p.protocol == protocol and p.outbound == outbound
    ]
    return found


def test_every_local_pod_probes_every_remote_one_and_back_over_every_protocol() -> None:
    planned = testplan.plan(local=LOCAL, remote=[REMOTE])
    assert len(planned) == 2 * 2 * len(testplan.PROTOCOLS)
    out = probe("tcp")
    assert (out.target.address, out.expected_source, out.port) == ("10.71.0.9", "10.72.1.5", testplan.TCP_PORT)
    back = probe("udp", outbound=False)
    assert (back.source.pod, back.target.address, back.expected_source) == ("remote-rome", "10.72.1.5", "10.71.0.9")


def test_the_address_the_provider_dials_for_a_home_pod() -> None:
    theirs = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.97.0.0/16")
    remap = ipaddress.ip_network("10.72.0.0/16")
    seen = testplan.seen_by_provider(
        "10.244.3.4", home=HOME, provider=theirs, provider_name="rome", provider_sees_home=remap
    )
    assert seen == "10.72.3.4"
    # Overlapping CIDRs and no fabric: there is no address to give.
    assert (
        testplan.seen_by_provider(
            "10.244.3.4", home=HOME, provider=theirs, provider_name="rome", provider_sees_home=None
        )
        is None
    )


@pytest.mark.parametrize(
    ("protocol", "code", "stdout", "ok", "detail"),
    [
        ("tcp", 0, "10.72.1.5\n", True, "the server saw the caller at 10.72.1.5"),
        ("tcp", 0, "10.244.1.1\n", False, "answered, but the server saw the caller at 10.244.1.1, not 10.72.1.5"),
        ("udp", 1, "", False, "no answer on UDP port 7002"),
        ("icmp", 1, "", False, "no reply to ping"),
    ],
)
def test_verdicts(protocol: str, code: int, stdout: str, ok: bool, detail: str) -> None:
    assert testplan.judge(probe(protocol), exit_code=code, stdout=stdout, stderr="") == (ok, detail)


def test_a_ping_reports_its_replies_and_round_trips() -> None:
    stdout = (
        "3 packets transmitted, 2 received, 33% packet loss, time 402ms\n"
        "rtt min/avg/max/mdev = 0.497/1.041/1.835/0.494 ms\n"
    )
    assert testplan.judge(probe("icmp"), exit_code=0, stdout=stdout, stderr="") == (
        True,
        "2/3 replies, round trip min/avg/max 0.497/1.041/1.835 ms",
    )


def test_the_hop_is_named_gateway_then_tunnel_then_nat_then_route() -> None:
    p = probe("tcp")
    connected = {"state": "Connected"}
    assert testplan.diagnose(p, "x", tunnel=connected, gateway_running=False).startswith("gateway:")
    down = {"state": "Error", "message": "silent for 9 s"}
    assert testplan.diagnose(p, "x", tunnel=down, gateway_running=True) == "tunnel to rome: Error (silent for 9 s)"
    assert testplan.diagnose(p, "answered, but ...", tunnel=connected, gateway_running=True).startswith("nat:")
    route = testplan.diagnose(p, "no answer", tunnel=connected, gateway_running=True)
    assert route.startswith("route:")
    assert "node n1" in route


def test_why_a_probe_pod_does_not_run() -> None:
    assert testplan.why_not_running(None) == "not created"
    pulling = {"name": "probe", "state": {"waiting": {"reason": "ErrImagePull", "message": "no"}}}
    assert testplan.why_not_running({"status": {"containerStatuses": [pulling]}}) == (
        'container "probe" waiting: ErrImagePull (no)'
    )
    assert "could not translate" in testplan.why_not_running({"status": {"phase": "Running"}})


def test_remote_probe_pods_tolerate_the_virtual_node_taint_and_local_ones_do_not() -> None:
    remote = testplan.probe_pod("r", namespace="ns", node="liqo-rome", image="img", virtual=True)
    local = testplan.probe_pod("l", namespace="ns", node="n1", image="img", virtual=False)
    assert remote["spec"]["tolerations"]
    assert local["spec"]["tolerations"] == []
    assert remote["spec"]["nodeName"] == "liqo-rome"


def test_through_the_service_any_answer_will_do_and_a_failure_points_at_the_service() -> None:
    [tcp, udp] = testplan.service_probes(local=LOCAL[:1], cluster_ip="10.96.0.10")
    assert (tcp.protocol, udp.protocol, tcp.target.address) == ("tcp", "udp", "10.96.0.10")
    assert testplan.judge(tcp, exit_code=0, stdout="10.72.0.1\n", stderr="")[0]
    hop = testplan.diagnose(tcp, "no answer", tunnel=None, gateway_running=True)
    assert hop.startswith("service:")
    service = testplan.probe_service("ns")
    assert service["spec"]["selector"] == {testplan.ROLE_LABEL: "remote"}
