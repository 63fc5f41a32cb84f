"""A gateway's objects, made from the install's template, and what the agent routes to them (pure)."""

from __future__ import annotations

import ipaddress
from typing import Any

from liqo.install import fabric
from liqo.install.values import Values
from liqo.network import agent, gateways, rules

VALUES = Values(api_server_url="https://k", pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/12", image="img:1")


def test_a_gateway_deployment_is_the_template_told_its_peer_key_and_route() -> None:
    template = fabric.gateway_template(VALUES)
    deployment = gateways.deployment(template, peer_id="rome", local_id="milan", peer_cidr="10.71.0.0/16")
    pod = deployment["spec"]["template"]
    assert deployment["metadata"] == {
        "name": "gw-rome",
        "namespace": "liqo",
        "labels": {
            "app.kubernetes.io/managed-by": "liqo",
            "liqo.io/remote-cluster-id": "rome",
            "liqo.io/component": "gateway",
        },
    }
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["annotations"] == {gateways.PEER_CIDR: "10.71.0.0/16"}
    [container] = pod["spec"]["containers"]
    assert {"name": "LIQO_PEER_ID", "value": "rome"} in container["env"]
    assert {"name": "key", "mountPath": gateways.KEY_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": "key", "secret": {"secretName": "gw-rome", "defaultMode": 0o400}} in pod["spec"]["volumes"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert template["template"]["spec"].get("volumes") == fabric.gateway_template(VALUES)["template"]["spec"]["volumes"]


def test_no_fabric_without_the_value() -> None:
    assert fabric.fabric_workloads(VALUES)
    assert fabric.fabric_workloads(Values(**{**VALUES.__dict__, "network_fabric": False})) == []


def test_node_port_and_running_host() -> None:
    assert gateways.node_port(None) is None
    service = gateways.service(peer_id="rome")
    assert gateways.node_port(service) is None
    service["spec"]["ports"][0]["nodePort"] = 31820
    assert gateways.node_port(service) == 31820
    pending = {"metadata": {}, "status": {"phase": "Pending", "hostIP": "172.30.1.1"}}
    running = {"metadata": {}, "status": {"phase": "Running", "hostIP": "172.30.1.2"}}
    assert gateways.running_host([pending]) is None
    assert gateways.running_host([pending, running]) == "172.30.1.2"


def gateway_pod(name: str, *, node: str, cidr: str | None, phase: str = "Running", **status: Any) -> dict[str, Any]:
    annotations = {gateways.PEER_CIDR: cidr} if cidr else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node},
        "status": {"phase": phase, **status},
    }


def test_the_agent_routes_to_a_local_gateway_pod_and_through_the_node_of_a_remote_one() -> None:
    pods = [
        gateway_pod("a", node="n1", cidr="10.71.0.0/16", podIP="10.244.1.5", hostIP="172.30.1.1"),
        gateway_pod("b", node="n2", cidr="10.72.0.0/16", podIP="10.244.2.5", hostIP="172.30.1.2"),
        gateway_pod("c", node="n2", cidr="10.73.0.0/16", phase="Pending", hostIP="172.30.1.2"),
        gateway_pod("d", node="n2", cidr=None, podIP="10.244.2.9", hostIP="172.30.1.2"),
        gateway_pod("e", node="n1", cidr="not-a-cidr", podIP="10.244.1.9", hostIP="172.30.1.1"),
    ]
    assert agent.wanted_routes(pods, node_name="n1") == [
        rules.RouteSpec(destination=ipaddress.IPv4Network("10.71.0.0/16"), via=ipaddress.IPv4Address("10.244.1.5")),
        rules.RouteSpec(destination=ipaddress.IPv4Network("10.72.0.0/16"), via=ipaddress.IPv4Address("172.30.1.2")),
    ]
