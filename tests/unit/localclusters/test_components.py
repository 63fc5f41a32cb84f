from pathlib import Path

import yaml

from liqo.localclusters.components import (
    KWOK_POD_PARALLELISM,
    Component,
    admission_config,
    kwok_config,
    node_manifest,
    plan,
    scheduler_config,
    webhook_client_kubeconfig,
)
from liqo.localclusters.layout import ClusterDir, Ports
from liqo.localclusters.spec import ClusterSpec

PORTS = Ports(apiserver=6443, etcd_client=2379, etcd_peer=2380, controller_manager=10257, scheduler=10259, kwok=10250)


def components() -> list[Component]:
    spec = ClusterSpec(name="rome", nodes=2, pod_cidr="10.200.0.0/16")
    return plan(spec=spec, ports=PORTS, cluster=ClusterDir(Path("/state/rome")), bin_dir=Path("/bin"))


def test_plan_orders_components_by_dependency() -> None:
    planned = components()
    names = [c.name for c in planned]
    assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
    for index, component in enumerate(planned):
        assert all(dep in names[:index] for dep in component.after)


def test_every_component_binds_to_loopback_only() -> None:
    for component in components():
        for arg in component.argv:
            flag = arg.split("=", 1)[0]
            if flag.endswith(("-address", "-urls")):
                assert "0.0.0.0" not in arg, arg
                assert "127.0.0.1" in arg, arg
        assert component.probe is not None
        assert component.probe.url.startswith("https://127.0.0.1:")


def test_controller_manager_allocates_node_cidrs_and_signs_csrs() -> None:
    kcm = next(c for c in components() if c.name == "kube-controller-manager")
    assert "--allocate-node-cidrs=true" in kcm.argv
    assert "--cluster-cidr=10.200.0.0/16" in kcm.argv
    assert "--node-cidr-mask-size=24" in kcm.argv
    assert any(a.startswith("--cluster-signing-cert-file=") for a in kcm.argv)


def test_component_round_trip() -> None:
    for component in components():
        assert Component.from_dict(component.to_dict()) == component


def test_node_manifest_carries_capacity_and_labels() -> None:
    spec = ClusterSpec(name="naples", node_cpu="4", node_memory="8Gi", node_pods=50, node_labels={"zone": "s"})
    node = node_manifest(spec=spec, index=2)
    assert node["metadata"]["name"] == "naples-node-2"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["zone"] == "s"
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "50"}


def test_generated_configs_are_valid_yaml() -> None:
    stage = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: s\n"
    docs = list(yaml.safe_load_all(kwok_config(stages=[stage, stage], logs_file="/logs/c.log", exec_dir="/x")))
    kinds = ["Stage", "Stage", "KwokConfiguration", "ClusterLogs", "ClusterExec", "ClusterAttach", "ClusterPortForward"]
    assert [d["kind"] for d in docs] == kinds
    configuration, logs, exec_, attach, port_forward = docs[2:]
    assert configuration["options"]["podPlayStageParallelism"] == KWOK_POD_PARALLELISM
    assert configuration["options"]["nodeLeaseParallelism"] > 0  # read from a file, nothing is defaulted
    assert logs["spec"]["logs"][0]["logsFile"] == attach["spec"]["attaches"][0]["logsFile"] == "/logs/c.log"
    assert exec_["spec"]["execs"][0]["local"]["workDir"] == "/x"
    assert port_forward["spec"]["forwards"] == [{"command": ["cat"]}]  # an echo on every port
    scheduler = yaml.safe_load(scheduler_config(kubeconfig="/k"))
    assert scheduler["clientConnection"]["kubeconfig"] == "/k"
    assert scheduler["leaderElection"]["leaderElect"] is False


def test_the_api_server_presents_its_webhook_client_certificate_to_both_webhook_plugins() -> None:
    apiserver = next(c for c in components() if c.name == "kube-apiserver")
    assert "--admission-control-config-file=/state/rome/config/admission.yaml" in apiserver.argv
    config = yaml.safe_load(admission_config(kubeconfig="/state/rome/pki/webhook-client.kubeconfig"))
    assert config["kind"] == "AdmissionConfiguration"
    plugins = {p["name"]: p["configuration"] for p in config["plugins"]}
    assert sorted(plugins) == ["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"]
    for plugin in plugins.values():
        assert plugin["kind"] == "WebhookAdmissionConfiguration"
        assert plugin["kubeConfigFile"] == "/state/rome/pki/webhook-client.kubeconfig"
    credentials = webhook_client_kubeconfig(cert=b"CERT", key=b"KEY")
    (user,) = credentials["users"]
    assert user["name"] == "*"  # whatever webhook host the API server calls
    assert set(user["user"]) == {"client-certificate-data", "client-key-data"}
