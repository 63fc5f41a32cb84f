import ipaddress
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.realnodes.configs import (
    ALLOWED_UNSAFE_SYSCTLS,
    CNI_CONF_DIR,
    CNI_TEMPLATE,
    CONTAINERD_SOCKET,
    KUBE_PROXY_HEALTHZ_PORT,
    KUBELET_HEALTHZ_PORT,
    KUBELET_PORT,
    NODE_LABEL,
    cni_template,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    node_labels,
    toml_text,
)

# -- toml_text ---------------------------------------------------------------------------------------------

# Any Unicode scalar value TOML can carry: lone surrogates are not UTF-8, so no TOML file holds them.
_TEXT = st.text(st.characters(codec="utf-8"))
_TRICKY_TEXT = st.one_of(
    _TEXT,
    st.sampled_from(['"', "\\", "\n", "\r\n", "\t", "\x00", "\x1f", "\x7f", "é", "日本", "🙂", '\\"', "'''", '"""']),
)
_KEYS = st.one_of(
    _TRICKY_TEXT,
    st.from_regex(r"[A-Za-z0-9_-]+", fullmatch=True),
    st.sampled_from(["io.containerd.cri.v1.images", "bare_key\n", "a b", "a=b", "[x]", "#", "1.5", "true", ""]),
)
_SCALARS = st.one_of(
    _TRICKY_TEXT,
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.lists(_TRICKY_TEXT, max_size=4),
)
_DOCUMENTS: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.dictionaries(_KEYS, _SCALARS, max_size=4),
    lambda children: st.dictionaries(_KEYS, st.one_of(_SCALARS, children), max_size=4),
    max_leaves=20,
)


@given(document=_DOCUMENTS)
def test_toml_text_round_trips_through_tomllib(document: dict[str, Any]) -> None:
    assert tomllib.loads(toml_text(document)) == document


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"plugins": {"io.containerd.cri.v1.images": {"pinned_images": {"sandbox": "localhost/liqo/pause:1"}}}},
        {"only": {"tables": {"below": {}}}},
        {"s": 'quote " backslash \\ newline \n tab \t nul \x00 del \x7f é 🙂'},
        {"list": ["a", 'b"', "c\\"], "empty": [], "zero": 0, "neg": -1, "t": True, "f": False},
        {"a": {"x": 1, "b": {"y": 2}, "c": {}}},
        {"trailing-newline\n": {"key\n": 1}},
    ],
)
def test_toml_text_examples(document: dict[str, Any]) -> None:
    text = toml_text(document)
    assert text.endswith("\n")
    assert tomllib.loads(text) == document


def test_toml_text_rejects_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="float"):
        toml_text({"x": 1.5})


# -- containerd_config -------------------------------------------------------------------------------------


def containerd() -> dict[str, Any]:
    return tomllib.loads(
        containerd_config(sandbox_image="localhost/liqo/pause:1", runc="/opt/bin/runc", cni_bin_dir="/opt/cni/bin")
    )


def test_containerd_config_is_version_3_toml_listening_on_the_node_socket() -> None:
    config = containerd()
    assert config["version"] == 3
    assert config["grpc"]["address"] == CONTAINERD_SOCKET


def test_containerd_config_runtime_settings_this_machine_needs() -> None:
    runtime = containerd()["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"][runtime["containerd"]["default_runtime_name"]]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"BinaryName": "/opt/bin/runc", "SystemdCgroup": False}
    assert runtime["cni"] == {"bin_dirs": ["/opt/cni/bin"], "conf_dir": CNI_CONF_DIR, "conf_template": CNI_TEMPLATE}


def test_containerd_config_pins_the_local_sandbox_image() -> None:
    images = containerd()["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "localhost/liqo/pause:1"


def test_containerd_config_disables_the_plugins_writing_outside_the_node() -> None:
    disabled = containerd()["disabled_plugins"]
    assert {"io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"} <= set(disabled)


# -- cni_template ------------------------------------------------------------------------------------------

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_RANGE = re.compile(r"^range (\$\w+), (\$\w+) := \.(\w+)$")
_IF = re.compile(r"^if (\$\w+)$")
_VAR = re.compile(r"^\$\w+$")
_FIELD = re.compile(r"^\.(\w+)$")


def render_go_template(template: str, data: Mapping[str, Any]) -> str:
    """Go's text/template, for exactly the constructs the CNI template uses.

    ``{{range $i, $x := .Field}}``, ``{{if $var}}`` (an integer's truth: non-zero), ``{{end}}``,
    ``{{$var}}`` and ``{{.Field}}``. Anything else raises, so a new construct cannot slip past this test.
    """
    tokens: list[tuple[str, str]] = []
    position = 0
    for match in _ACTION.finditer(template):
        tokens.append(("text", template[position : match.start()]))
        tokens.append(("action", match.group(1).strip()))
        position = match.end()
    tokens.append(("text", template[position:]))
    body, rest = _parse(tokens)
    if rest:
        raise ValueError(f"unexpected {{{{{rest[0][1]}}}}}")
    return _execute(body, data, {})


Node = tuple[str, Any]


def _parse(tokens: list[tuple[str, str]]) -> tuple[list[Node], list[tuple[str, str]]]:
    """Parse until ``{{end}}`` or the end; return the nodes and the tokens from that ``{{end}}`` on."""
    nodes: list[Node] = []
    while tokens:
        kind, value = tokens[0]
        tokens = tokens[1:]
        if kind == "text":
            nodes.append(("text", value))
        elif value == "end":
            return nodes, [(kind, value), *tokens]
        elif match := _RANGE.match(value):
            body, tokens = _parse(tokens)
            tokens = _expect_end(tokens)
            nodes.append(("range", (match.group(1), match.group(2), match.group(3), body)))
        elif match := _IF.match(value):
            body, tokens = _parse(tokens)
            tokens = _expect_end(tokens)
            nodes.append(("if", (match.group(1), body)))
        elif _VAR.match(value):
            nodes.append(("var", value))
        elif match := _FIELD.match(value):
            nodes.append(("field", match.group(1)))
        else:
            raise ValueError(f"this test's renderer does not know {{{{{value}}}}}")
    return nodes, []


def _expect_end(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if not tokens or tokens[0] != ("action", "end"):
        raise ValueError("missing {{end}}")
    return tokens[1:]


def _execute(nodes: Sequence[Node], data: Mapping[str, Any], variables: Mapping[str, Any]) -> str:
    out: list[str] = []
    for kind, value in nodes:
        if kind == "text":
            out.append(value)
        elif kind == "var":
            out.append(str(variables[value]))
        elif kind == "field":
            out.append(str(data[value]))
        elif kind == "range":
            index_var, item_var, field, body = value
            for i, item in enumerate(data[field]):
                out.append(_execute(body, data, {**variables, index_var: i, item_var: item}))
        elif kind == "if":
            var, body = value
            if variables[var]:
                out.append(_execute(body, data, variables))
    return "".join(out)


def test_the_test_renderer_follows_go_templates() -> None:
    template = "<{{range $i, $x := .Xs}}{{if $i}}, {{end}}{{$x}}{{end}}>{{.Y}}"
    assert render_go_template(template, {"Xs": ["a", "b", "c"], "Y": 1}) == "<a, b, c>1"
    assert render_go_template(template, {"Xs": [], "Y": 2}) == "<>2"
    with pytest.raises(ValueError, match="does not know"):
        render_go_template("{{printf .X}}", {})
    with pytest.raises(ValueError, match="missing"):
        render_go_template("{{if $i}}", {})


def containerd_routes(cidrs: Sequence[str]) -> list[str]:
    """What containerd passes as ``.Routes``: a default route per address family of the pod CIDRs."""
    families = {ipaddress.ip_network(cidr).version for cidr in cidrs}
    return [route for version, route in ((4, "0.0.0.0/0"), (6, "::/0")) if version in families]


@pytest.mark.parametrize("cidrs", [["10.244.1.0/24"], ["10.244.1.0/24", "10.245.1.0/24"], ["10.0.0.0/24", "fd00::/64"]])
def test_cni_template_renders_to_a_bridge_network_over_the_node_pod_cidrs(cidrs: list[str]) -> None:
    data = {"PodCIDR": cidrs[0], "PodCIDRRanges": cidrs, "Routes": containerd_routes(cidrs)}
    config = orjson.loads(render_go_template(cni_template(network="rome"), data))
    assert config["cniVersion"] == "1.0.0"
    assert config["name"] == "rome"
    bridge, portmap = config["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["isGateway"] is True
    assert bridge["ipMasq"] is True
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local"
    assert ipam["ranges"] == [[{"subnet": cidr}] for cidr in cidrs]
    assert ipam["routes"] == [{"dst": route} for route in data["Routes"]]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


def test_cni_template_default_network_name() -> None:
    data = {"PodCIDR": "10.1.0.0/24", "PodCIDRRanges": ["10.1.0.0/24"], "Routes": ["0.0.0.0/0"]}
    assert orjson.loads(render_go_template(cni_template(), data))["name"] == "liqo-local"


# -- kubelet_config / kube_proxy_config / node_labels ------------------------------------------------------


def test_kubelet_config() -> None:
    text = kubelet_config(
        node_ip="172.30.3.2",
        cgroup_root="/liqo/rome-real-2",
        client_ca="/c/ca.crt",
        tls_cert="/c/s.crt",
        tls_key="/c/s.key",
        max_pods=42,
    )
    config = yaml.safe_load(text)
    assert config["kind"] == "KubeletConfiguration"
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/liqo/rome-real-2"
    assert config["address"] == "172.30.3.2"
    assert config["healthzBindAddress"] == "172.30.3.2"
    assert config["port"] == KUBELET_PORT
    assert config["healthzPort"] == KUBELET_HEALTHZ_PORT
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/c/ca.crt"
    assert config["authorization"]["mode"] == "Webhook"
    assert (config["tlsCertFile"], config["tlsPrivateKeyFile"]) == ("/c/s.crt", "/c/s.key")
    assert config["containerRuntimeEndpoint"] == f"unix://{CONTAINERD_SOCKET}"
    assert config["maxPods"] == 42


def test_kubelet_config_allows_the_gateways_forwarding_sysctl_and_no_other() -> None:
    # The gateway pod sets net.ipv4.ip_forward=1 in its own netns; without this the kubelet refuses it
    # (SysctlForbidden). Nothing else: every other unsafe sysctl stays refused.
    text = kubelet_config(
        node_ip="172.30.3.2", cgroup_root="/r", client_ca="/c", tls_cert="/t", tls_key="/k", max_pods=1
    )
    assert yaml.safe_load(text)["allowedUnsafeSysctls"] == ["net.ipv4.ip_forward"]
    assert list(ALLOWED_UNSAFE_SYSCTLS) == ["net.ipv4.ip_forward"]


def test_kube_proxy_config() -> None:
    text = kube_proxy_config(
        node_ip="172.30.3.2", node_name="rome-real-2", kubeconfig="/c/kp.kubeconfig", pod_cidr="10.244.0.0/16"
    )
    config = yaml.safe_load(text)
    assert config["kind"] == "KubeProxyConfiguration"
    assert config["mode"] == "nftables"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["bindAddress"] == "172.30.3.2"
    assert config["healthzBindAddress"] == f"172.30.3.2:{KUBE_PROXY_HEALTHZ_PORT}"
    assert config["hostnameOverride"] == "rome-real-2"
    assert config["clusterCIDR"] == "10.244.0.0/16"
    assert config["clientConnection"]["kubeconfig"] == "/c/kp.kubeconfig"


def test_node_labels_mark_the_node_real_and_carry_the_extra_labels() -> None:
    assert node_labels({}) == f"type=real,{NODE_LABEL}=real"
    assert node_labels({"type": "kwok"}) == f"type=real,{NODE_LABEL}=real"
    flag = node_labels({"zone": "north", "liqo.io/provider": "x"})
    assert dict(item.split("=", 1) for item in flag.split(",")) == {
        "type": "real",
        NODE_LABEL: "real",
        "zone": "north",
        "liqo.io/provider": "x",
    }
