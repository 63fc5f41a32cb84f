"""A gateway's objects, made from the install's template, what the agent routes to them, and what both refuse."""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import Any, cast

import pytest

from liqo.install import fabric, manifests
from liqo.install.values import Values
from liqo.kube.client import KubeClient
from liqo.network import agent, gateway_loop, gateway_objects, ipam, rules, wireguard
from liqo.network.links import Role, our_word
from tests.unit.network.fakes import RecordingRunner

VALUES = Values(api_server_url="https://k", pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/12", image="img:1")


def test_a_gateway_deployment_is_the_template_told_its_peer_key_and_route() -> None:
    template = fabric.gateway_template(VALUES)
    deployment = gateway_objects.deployment(template, peer_id="rome", local_id="milan", peer_cidr="10.71.0.0/16")
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
    assert pod["metadata"]["annotations"] == {gateway_objects.PEER_CIDR: "10.71.0.0/16"}
    [container] = pod["spec"]["containers"]
    assert {"name": "LIQO_PEER_ID", "value": "rome"} in container["env"]
    assert {"name": "key", "mountPath": gateway_objects.KEY_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": "key", "secret": {"secretName": "gw-rome", "defaultMode": 0o400}} in pod["spec"]["volumes"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert template["template"]["spec"].get("volumes") == fabric.gateway_template(VALUES)["template"]["spec"]["volumes"]


def test_the_pools_reach_the_manager_every_gateway_and_every_node_agent_alike() -> None:
    pooled = Values(**{**VALUES.__dict__, "peer_pools": ("10.0.0.0/8", "100.64.0.0/10")})
    flag = "--peer-pools=10.0.0.0/8,100.64.0.0/10"
    [gw] = fabric.gateway_template(pooled)["template"]["spec"]["containers"]
    [node] = fabric.network_agent(pooled)["spec"]["template"]["spec"]["containers"]
    [manager] = manifests.manager_workload(pooled)[0]["spec"]["template"]["spec"]["containers"]
    for container in (gw, node, manager):
        assert flag in container["args"], container["args"]
    # None given: none passed, and each falls back to the same default.
    [gw] = fabric.gateway_template(VALUES)["template"]["spec"]["containers"]
    [node] = fabric.network_agent(VALUES)["spec"]["template"]["spec"]["containers"]
    [manager] = manifests.manager_workload(VALUES)[0]["spec"]["template"]["spec"]["containers"]
    for container in (gw, node, manager):
        assert not any(arg.startswith("--peer-pools") for arg in container["args"]), container["args"]


def test_no_fabric_without_the_value() -> None:
    assert fabric.fabric_workloads(VALUES)
    assert fabric.fabric_workloads(Values(**{**VALUES.__dict__, "network_fabric": False})) == []


def test_node_port_and_running_host() -> None:
    assert gateway_objects.node_port(None) is None
    service = gateway_objects.service(peer_id="rome")
    assert gateway_objects.node_port(service) is None
    service["spec"]["ports"][0]["nodePort"] = 31820
    assert gateway_objects.node_port(service) == 31820
    pending = {"metadata": {}, "status": {"phase": "Pending", "hostIP": "172.30.1.1"}}
    running = {"metadata": {}, "status": {"phase": "Running", "hostIP": "172.30.1.2"}}
    assert gateway_objects.running_host([pending]) is None
    assert gateway_objects.running_host([pending, running]) == "172.30.1.2"


def gateway_pod(name: str, *, node: str, cidr: str | None, phase: str = "Running", **status: Any) -> dict[str, Any]:
    annotations = {gateway_objects.PEER_CIDR: cidr} if cidr else {}
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


# -- the agent's and the gateway's own check of the routes they are asked for ---------------------------

LAN = ipaddress.IPv4Network("192.168.1.0/24")
NODE_ROUTES = json.dumps(
    [
        {"dst": "default", "gateway": "192.168.1.1", "dev": "eth0"},
        {"dst": str(LAN), "dev": "eth0", "protocol": "kernel", "scope": "link"},
        {"dst": "10.244.1.0/24", "dev": "cni0", "protocol": "kernel", "scope": "link"},
        {"dst": "8.8.0.0/16", "gateway": "10.244.1.6", "dev": "cni0", "protocol": "76"},
    ]
)
"""A node's ``ip -4 -j route show table all``: its LAN, its pods, and a liqo route an earlier version made."""
LIQO_ROUTES = json.dumps([{"dst": "8.8.0.0/16", "gateway": "10.244.1.6", "dev": "cni0"}])


def route(destination: str, via: str) -> rules.RouteSpec:
    return rules.RouteSpec(destination=ipaddress.IPv4Network(destination), via=ipaddress.IPv4Address(via))


def test_the_agent_allows_only_routes_into_the_pools_clear_of_the_nodes_own() -> None:
    asked = [
        route("10.71.0.0/16", "10.244.1.5"),
        route("8.8.0.0/16", "10.244.1.6"),
        route("192.168.0.0/16", "10.0.0.9"),
    ]
    allowed, refused = agent.allowed_routes(asked, pools=ipam.DEFAULT_POOLS, foreign=rules.foreign_routes(NODE_ROUTES))
    assert allowed == [route("10.71.0.0/16", "10.244.1.5")]
    assert list(refused) == ["8.8.0.0/16 via 10.244.1.6", "192.168.0.0/16 via 10.0.0.9"]
    assert refused["8.8.0.0/16 via 10.244.1.6"].startswith("8.8.0.0/16 is outside the peer pools")
    assert refused["192.168.0.0/16 via 10.0.0.9"].startswith(
        "192.168.0.0/16 overlaps this node's route to 192.168.1.0/24, which is not liqo's"
    )


async def test_the_agent_never_makes_a_refused_route_removes_its_own_there_and_says_why_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = RecordingRunner(outputs={rules.SHOW_ALL_ROUTES: NODE_ROUTES, rules.SHOW_ROUTES: LIQO_ROUTES})
    node_agent = agent.NodeAgent(client=cast(KubeClient, object()), runner=runner, node_name="n1")
    for name, cidr, ip in (
        ("a", "10.71.0.0/16", "10.244.1.5"),
        ("b", "8.8.0.0/16", "10.244.1.6"),
        ("c", "192.168.1.0/25", "10.244.1.7"),
    ):
        node_agent.pods._cache[f"liqo/{name}"] = gateway_pod(name, node="n1", cidr=cidr, podIP=ip)
    with caplog.at_level(logging.WARNING, logger="liqo.network.agent"):
        await node_agent.reconcile(agent.KEY)
    route_commands = [argv for argv in runner.argvs if argv[:2] == ["ip", "route"]]
    assert route_commands == [
        ["ip", "route", "del", "8.8.0.0/16", "via", "10.244.1.6", "proto", rules.ROUTE_PROTO],
        ["ip", "route", "add", "10.71.0.0/16", "via", "10.244.1.5", "proto", rules.ROUTE_PROTO],
    ]
    [script] = [call.input for call in runner.calls if call.argv[0] == "nft"]
    assert script is not None
    assert "10.71.0.0/16" in script
    assert "8.8.0.0/16" not in script
    assert "192.168.1.0/25" not in script
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "route to 192.168.1.0/25 via 10.244.1.7 refused: 192.168.1.0/25 overlaps this node's route to 192.168.1.0/24,"
        " which is not liqo's: that traffic would go to the peer",
        "route to 8.8.0.0/16 via 10.244.1.6 refused: 8.8.0.0/16 is outside the peer pools (10.0.0.0/8, 172.16.0.0/12,"
        " 192.168.0.0/16): a peer's pods are only ever named inside them, and a route there would send this node's"
        " own traffic to the peer",
    ]
    # The next pass finds the same refusals: nothing said again.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="liqo.network.agent"):
        await node_agent.reconcile(agent.KEY)
    assert caplog.records == []


async def test_the_agent_makes_nothing_when_it_cannot_read_the_nodes_routes() -> None:
    runner = RecordingRunner(outputs={rules.SHOW_ALL_ROUTES: "garbage", rules.SHOW_ROUTES: "[]"})
    node_agent = agent.NodeAgent(client=cast(KubeClient, object()), runner=runner, node_name="n1")
    node_agent.pods._cache["liqo/a"] = gateway_pod("a", node="n1", cidr="10.71.0.0/16", podIP="10.244.1.5")
    with pytest.raises(rules.RouteParseError):
        await node_agent.reconcile(agent.KEY)
    assert runner.argvs == [list(rules.SHOW_ALL_ROUTES)]


def word(author: str, *, about: str, pod_cidr: str, remapped: str, role: Role, key: str) -> dict[str, Any]:
    made = our_word(
        local_id=author,
        peer_id=about,
        pod_cidr=ipaddress.ip_network(pod_cidr),
        remapped_pod_cidr=ipaddress.ip_network(remapped),
        gateway_role=role,
        public_key=key,
        endpoint=None,
    )
    made["metadata"]["namespace"] = "liqo-tenant-rome"
    return made


async def test_a_gateway_routes_no_block_outside_the_pools_and_leaves_its_namespace_as_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = RecordingRunner()
    gw = gateway_loop.Gateway(
        client=cast(KubeClient, object()), runner=runner, local_id="milan", peer_id="rome", key_file="/nonexistent"
    )
    key = wireguard.public_key(wireguard.generate_private_key())
    ours = word("milan", about="rome", pod_cidr="10.244.0.0/16", remapped="8.8.0.0/16", role=Role.SERVER, key=key)
    theirs = word("rome", about="milan", pod_cidr="10.244.0.0/16", remapped="10.0.0.0/16", role=Role.CLIENT, key=key)
    gw.configs._cache["liqo-tenant-rome/milan"] = ours
    gw.configs._cache["liqo-tenant-rome/rome"] = theirs
    with caplog.at_level(logging.WARNING, logger="liqo.network.gateway_loop"):
        await gw.reconcile(gateway_loop.KEY)
    assert runner.calls == []
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("our network config is refused: 8.8.0.0/16 is outside the peer pools"), message
