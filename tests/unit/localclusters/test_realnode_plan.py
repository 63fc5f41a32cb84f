import sys
from pathlib import Path

import pytest

from liqo.localclusters.components import Component
from liqo.localclusters.realnodes import configs
from liqo.localclusters.realnodes.host import apiserver_nat, nat_table
from liqo.localclusters.realnodes.nodes import UNDERLAY_BRIDGE, UNDERLAY_HOST, RealNode
from liqo.localclusters.realnodes.plan import api_objects, component_names, images_dir, node_components

ROOT = Path("/state/rome")
NODE = RealNode("rome", 2, 5, ROOT)
NODE_BIN = Path("/cache/node-bin")
SANDBOX = Path("/cache/images/pause-x.tar")
ARCHIVES = [Path("/cache/images/toolbox-y.tar"), Path("/cache/images/liqo-z.tar")]
ENTER = [sys.executable, "-m", "liqo.localclusters.realnodes.enter"]

# -- plan --------------------------------------------------------------------------------------------------


def components() -> list[Component]:
    return node_components(node=NODE, node_bin=NODE_BIN, sandbox=SANDBOX, archives=ARCHIVES, labels={"zone": "north"})


def by_name() -> dict[str, Component]:
    return {component.name: component for component in components()}


def test_component_names() -> None:
    assert component_names(NODE) == ["containerd-real-2", "kubelet-real-2", "kube-proxy-real-2"]
    assert [c.name for c in components()] == component_names(NODE)


def test_every_component_enters_the_node_first() -> None:
    for component in components():
        assert component.argv[: len(ENTER)] == ENTER
        launcher = component.argv[: component.argv.index("--")]
        assert f"--cgroup={NODE.daemons_cgroup}" in launcher
        assert f"--net={NODE.netns}" in launcher
        assert f"--mount={NODE.mountns}" in launcher
        program = component.argv[component.argv.index("--") + 1]
        assert Path(program).parent == NODE_BIN


def test_the_kubelet_starts_after_the_api_server_and_its_containerd() -> None:
    components = by_name()
    assert set(components["kubelet-real-2"].after) == {"kube-apiserver", "containerd-real-2"}
    assert components["kube-proxy-real-2"].after == ["kube-apiserver"]
    assert components["containerd-real-2"].after == []


def test_the_kubelet_waits_for_containerd_and_imports_the_sandbox_first_the_rest_later() -> None:
    kubelet = by_name()["kubelet-real-2"]
    launcher = kubelet.argv[: kubelet.argv.index("--")]
    assert f"--wait-socket={configs.CONTAINERD_SOCKET}" in launcher
    assert f"--ctr={NODE_BIN / 'ctr'}" in launcher
    assert [a for a in launcher if a.startswith("--image=")] == [f"--image={SANDBOX}"]
    assert f"--images-dir={images_dir(ROOT)}" in launcher
    assert [a for a in launcher if a.startswith("--image-later=")] == [f"--image-later={a}" for a in ARCHIVES]


def test_the_kubelet_is_the_node_and_is_probed_on_its_underlay_address() -> None:
    kubelet = by_name()["kubelet-real-2"]
    program = kubelet.argv[kubelet.argv.index("--") + 1 :]
    assert program[0] == str(NODE_BIN / "kubelet")
    assert f"--hostname-override={NODE.name}" in program
    assert f"--node-ip={NODE.ip}" in program
    assert f"--node-labels={configs.node_labels({'zone': 'north'})}" in program
    assert f"--config={NODE.config_dir / 'kubelet.yaml'}" in program
    assert kubelet.probe is not None
    assert kubelet.probe.url == f"http://{NODE.ip}:{configs.KUBELET_HEALTHZ_PORT}/healthz"


def test_containerd_and_kube_proxy_read_their_configuration_files() -> None:
    components = by_name()
    containerd = components["containerd-real-2"].argv
    assert f"--path={NODE_BIN}" in containerd
    assert containerd[-2:] == [str(NODE_BIN / "containerd"), f"--config={NODE.config_dir / 'containerd.toml'}"]
    proxy = components["kube-proxy-real-2"]
    assert proxy.argv[-2:] == [str(NODE_BIN / "kube-proxy"), f"--config={NODE.config_dir / 'kube-proxy.yaml'}"]
    assert proxy.probe is not None
    assert proxy.probe.url == f"http://{NODE.ip}:{configs.KUBE_PROXY_HEALTHZ_PORT}/healthz"


def test_node_components_round_trip() -> None:
    for component in components():
        assert Component.from_dict(component.to_dict()) == component


def test_two_nodes_share_no_component_name() -> None:
    other = RealNode("rome", 3, 5, ROOT)
    assert not set(component_names(NODE)) & set(component_names(other))


# -- host NAT ----------------------------------------------------------------------------------------------


def test_nat_table() -> None:
    assert nat_table("rome") == "liqo-local-rome"
    assert nat_table("rome") != nat_table("milan")


@pytest.mark.parametrize("port", [6443, 34567])
def test_apiserver_nat_recreates_one_table_forwarding_the_underlay_to_loopback(port: int) -> None:
    script = apiserver_nat(cluster="rome", port=port)
    lines = [line.strip() for line in script.splitlines()]
    table = nat_table("rome")
    # Declaring the table first makes the delete succeed when it does not exist yet.
    assert lines[:3] == [f"table ip {table}", f"delete table ip {table}", f"table ip {table} {{"]
    assert {line.split()[2] for line in lines if line.startswith("table ")} == {table}
    assert "type nat hook prerouting priority dstnat; policy accept;" in lines
    assert "type nat hook output priority -100; policy accept;" in lines
    arriving, local = [line for line in lines if "dnat to" in line]
    assert arriving == (
        f'iifname "{UNDERLAY_BRIDGE}" ip daddr {UNDERLAY_HOST} tcp dport {port} dnat to 127.0.0.1:{port}'
    )
    # This machine's own processes reach the same address (no interface: local traffic has none).
    assert local == f"ip daddr {UNDERLAY_HOST} tcp dport {port} dnat to 127.0.0.1:{port}"
    assert script.count("{") == script.count("}")


# -- objects in the cluster's API --------------------------------------------------------------------------


def test_real_node_api_objects() -> None:
    objects = api_objects(apiserver_port=34567)
    assert [(resource.kind, obj["kind"]) for resource, obj in objects] == [
        (obj["kind"], obj["kind"]) for _, obj in objects
    ], "each object is applied as its own kind"
    binding, slice_ = (obj for _, obj in objects[:2])
    classes = [obj for _, obj in objects if obj["kind"] == "StorageClass"]
    assert [c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] for c in classes] == ["true"]
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}
    ]
    assert slice_["kind"] == "EndpointSlice"
    assert slice_["apiVersion"] == "discovery.k8s.io/v1"
    assert (slice_["metadata"]["name"], slice_["metadata"]["namespace"]) == ("kubernetes", "default")
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes"
    assert slice_["addressType"] == "IPv4"
    assert [endpoint["addresses"] for endpoint in slice_["endpoints"]] == [[UNDERLAY_HOST]]
    assert UNDERLAY_HOST == "172.30.0.1"
    assert slice_["ports"] == [{"name": "https", "port": 34567, "protocol": "TCP"}]
