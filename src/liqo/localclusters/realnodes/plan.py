"""A real node's processes for the supervisor, the files they read, and what the cluster's API needs for them.

Three components per node, named after it so that ``liqoctl local stop rome kubelet-real-1`` works as
for the control plane: ``containerd-real-N``, ``kubelet-real-N`` (after containerd and the API server)
and ``kube-proxy-real-N``. Each command line starts with the :mod:`liqo.localclusters.realnodes.enter` launcher.
The kubelet's launcher also waits for containerd's socket and imports the preloaded images the node
lacks, so a fresh node has the sandbox image before its first pod (and the others soon after).

Identities: the kubelet presents ``system:node:<name>`` (group ``system:nodes``: the Node authorizer and
NodeRestriction apply to it as to any kubelet) and serves TLS with its underlay address in the
certificate, which the API server verifies against the cluster CA; kube-proxy is ``system:kube-proxy``.
Both reach the API server at the underlay's host address, verified under the name ``localhost`` (the
API server's certificate names loopback only; the host's NAT table forwards).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from liqo.kube import pki
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ENDPOINT_SLICES,
    STORAGE_CLASSES,
    Resource,
)
from liqo.localclusters.components import Component, Probe
from liqo.localclusters.realnodes import configs, volumes
from liqo.localclusters.realnodes.nodes import UNDERLAY_HOST, RealNode


def component_names(node: RealNode) -> list[str]:
    """The supervisor's names for the node's processes."""
    return [f"{program}-real-{node.index}" for program in ("containerd", "kubelet", "kube-proxy")]


def registry_url(port: int) -> str:
    """Where the cluster's image registry listens: the underlay's host address, seen from every node."""
    return f"http://{UNDERLAY_HOST}:{port}"


def registry_component(*, cluster_root: Path, preloaded: Sequence[Path], port: int) -> Component:
    """The cluster's read-only image registry (:mod:`liqo.localclusters.realnodes.registry`): what its nodes hold."""
    return Component(
        name="image-registry",
        argv=[
            sys.executable,
            "-m",
            "liqo.localclusters.realnodes.registry",
            f"--listen={UNDERLAY_HOST}:{port}",
            *(f"--archives={archive}" for archive in preloaded),
            f"--archives={images_dir(cluster_root)}",
        ],
        probe=Probe(url=f"{registry_url(port)}/v2/", ca=""),
    )


def images_dir(cluster_root: Path) -> Path:
    """Where ``liqoctl local load-image`` keeps a cluster's archives (every real node imports them at start)."""
    return cluster_root / "images"


def node_components(
    *, node: RealNode, node_bin: Path, sandbox: Path, archives: Sequence[Path], labels: dict[str, str]
) -> list[Component]:
    """The supervisor components of one real node (pure).

    The kubelet's launcher imports the ``sandbox`` archive and the cluster's loaded ones before the kubelet
    starts, and the other preloaded ``archives`` while it runs: liqo's image alone takes seconds to import,
    and a pod that wants one of them sooner pulls it from the cluster's registry.
    """
    config = node.config_dir
    enter = [
        sys.executable, "-m", "liqo.localclusters.realnodes.enter",
        f"--cgroup={node.daemons_cgroup}", f"--net={node.netns}", f"--mount={node.mountns}",
    ]  # fmt: skip
    containerd_name, kubelet_name, proxy_name = component_names(node)
    containerd = Component(
        name=containerd_name,
        argv=[
            *enter,
            f"--path={node_bin}",
            "--",
            str(node_bin / "containerd"),
            f"--config={config / 'containerd.toml'}",
        ],
    )
    # fmt: off
    kubelet = Component(
        name=kubelet_name,
        argv=[
            *enter,
            f"--wait-socket={configs.CONTAINERD_SOCKET}",
            f"--ctr={node_bin / 'ctr'}",
            f"--image={sandbox}",
            f"--images-dir={images_dir(node.cluster_root)}",
            *(f"--image-later={archive}" for archive in archives),
            "--",
            str(node_bin / "kubelet"),
            f"--config={config / 'kubelet.yaml'}",
            f"--kubeconfig={config / 'kubelet.kubeconfig'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--node-labels={configs.node_labels(labels)}",
        ],
        probe=Probe(url=f"http://{node.ip}:{configs.KUBELET_HEALTHZ_PORT}/healthz", ca=""),
        after=["kube-apiserver", containerd_name],
    )
    # fmt: on
    proxy = Component(
        name=proxy_name,
        argv=[*enter, "--", str(node_bin / "kube-proxy"), f"--config={config / 'kube-proxy.yaml'}"],
        probe=Probe(url=f"http://{node.ip}:{configs.KUBE_PROXY_HEALTHZ_PORT}/healthz", ca=""),
        after=["kube-apiserver"],
    )
    return [containerd, kubelet, proxy]


def write_node_files(
    node: RealNode,
    *,
    ca: pki.KeyPair,
    cluster: str,
    apiserver_port: int,
    pod_cidr: str,
    max_pods: int,
    sandbox_image: str,
    runc: str,
    cni_bin_dir: str,
    registry_port: int,
) -> None:
    """Write the node's configuration files and credentials (certificates only when missing)."""
    config = node.config_dir
    config.mkdir(parents=True, exist_ok=True)
    identities = {
        "kubelet-client": {"common_name": f"system:node:{node.name}", "organizations": ["system:nodes"],
                           "client": True},
        "kubelet-serving": {"common_name": node.name, "dns_names": [node.name], "ip_addresses": [node.ip],
                            "server": True},
        "kube-proxy-client": {"common_name": "system:kube-proxy", "client": True},
    }  # fmt: skip
    for name, params in identities.items():
        if not (config / f"{name}.crt").exists():
            pair = pki.issue(ca, **params)  # type: ignore[arg-type]
            pki.write_private(config / f"{name}.key", pair.key)
            (config / f"{name}.crt").write_bytes(pair.cert)
    (config / "ca.crt").write_bytes(ca.cert)
    server = f"https://{UNDERLAY_HOST}:{apiserver_port}"
    for user, file in (("kubelet-client", "kubelet.kubeconfig"), ("kube-proxy-client", "kube-proxy.kubeconfig")):
        kubeconfig = pki.kubeconfig(
            cluster=cluster,
            server=server,
            ca=ca.cert,
            user=f"{cluster}-{user}",
            cert=(config / f"{user}.crt").read_bytes(),
            key=(config / f"{user}.key").read_bytes(),
            tls_server_name="localhost",
        )
        pki.write_private(config / file, yaml.safe_dump(kubeconfig, sort_keys=False).encode())
    (config / "containerd.toml").write_text(
        configs.containerd_config(sandbox_image=sandbox_image, runc=runc, cni_bin_dir=cni_bin_dir)
    )
    hosts = node.inside(configs.REGISTRY_HOSTS_DIR) / "_default" / "hosts.toml"
    hosts.parent.mkdir(parents=True, exist_ok=True)
    hosts.write_text(configs.registry_hosts(registry=registry_url(registry_port)))
    template = node.inside(configs.CNI_TEMPLATE)
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(configs.cni_template())
    node.inside(configs.CNI_CONF_DIR).mkdir(parents=True, exist_ok=True)
    (config / "kubelet.yaml").write_text(
        configs.kubelet_config(
            node_ip=node.ip,
            cgroup_root=node.cgroup,
            client_ca=str(config / "ca.crt"),
            tls_cert=str(config / "kubelet-serving.crt"),
            tls_key=str(config / "kubelet-serving.key"),
            max_pods=max_pods,
        )
    )
    (config / "kube-proxy.yaml").write_text(
        configs.kube_proxy_config(
            node_ip=node.ip, node_name=node.name, kubeconfig=str(config / "kube-proxy.kubeconfig"), pod_cidr=pod_cidr
        )
    )


def api_objects(*, apiserver_port: int) -> list[tuple[Resource, dict[str, Any]]]:
    """What a cluster with real nodes needs in its API, each with its resource (pure).

    The API server calls kubelets as ``kube-apiserver-kubelet-client`` (logs, exec, port-forward), which
    real kubelets authorize by asking the API server: it needs ``system:kubelet-api-admin``. The
    ``kubernetes`` Service gets an endpoint pods can reach, the underlay's host address (NATed to the API
    server): the API server itself publishes none (``--endpoint-reconciler-type=none``). The nodes' volumes
    come with a default StorageClass and what their provisioner may do (:mod:`~.volumes`).
    """
    rbac = "rbac.authorization.k8s.io"
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "liqo-local:apiserver-kubelet-client"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}
        ],
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "liqoctl-local",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [UNDERLAY_HOST], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}],
    }
    role, role_binding = volumes.rbac()
    return [
        (CLUSTER_ROLE_BINDINGS, binding),
        (ENDPOINT_SLICES, endpoints),
        (CLUSTER_ROLES, role),
        (CLUSTER_ROLE_BINDINGS, role_binding),
        (STORAGE_CLASSES, volumes.storage_class()),
    ]


def provisioner_component(*, nodes: Sequence[RealNode], kubeconfig: Path, capacity: str) -> Component:
    """The volume provisioner of the real nodes (:mod:`~.provisioner`), after the API server."""
    return Component(
        name="volume-provisioner",
        argv=[
            sys.executable,
            "-m",
            "liqo.localclusters.realnodes.provisioner",
            f"--kubeconfig={kubeconfig}",
            f"--capacity={capacity}",
            *(f"--node={node.name}={node.inside(volumes.VOLUMES_DIR)}" for node in nodes),
        ],
        after=["kube-apiserver"],
    )
