"""The configuration files of a real node's containerd, CNI, kubelet and kube-proxy (pure).

Settings this machine needs, each learnt the hard way (``docs/operations.md`` has the story):

- containerd: ``restrict_oom_score_adj`` — without CAP_SYS_RESOURCE every sandbox fails in runc with
  "can't get final child's PID from pipe: EOF"; the sandbox image is the locally built one; the CNI
  configuration is a template, because a node's pod CIDR is only known once kube-controller-manager
  allocated it; the plugins that would write outside the node (``/opt/containerd``, NRI's socket) are off.
- kubelet: ``failCgroupV1: false`` (this machine has cgroup v1 only), the cgroupfs driver under the node's
  own cgroup, relaxed eviction and image GC (a laptop's disk is not a node's), TLS with the cluster CA on
  both sides, health on the node's underlay address so the supervisor can probe it, and
  ``net.ipv4.ip_forward`` allowed as a pod sysctl (:data:`ALLOWED_UNSAFE_SYSCTLS`).
- kube-proxy: nftables mode, its rules in the node's network namespace; ``conntrack.maxPerCore: 0``
  because ``nf_conntrack_max`` is machine-wide and only settable from the host's namespace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import yaml

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CNI_CONF_DIR = "/var/lib/cni/net.d"
CNI_TEMPLATE = "/var/lib/cni/template.json"
REGISTRY_HOSTS_DIR = "/var/lib/liqo/registry-hosts"
"""containerd's per-registry settings (``hosts.toml``): ``_default`` asks the cluster's registry first."""
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
NODE_LABEL = "liqo.io/local-node"
"""Real nodes carry ``liqo.io/local-node=real`` (and ``type=real``, as fake ones carry ``type=kwok``)."""

ALLOWED_UNSAFE_SYSCTLS = ("net.ipv4.ip_forward",)
"""Sysctls a pod may set in its ``securityContext.sysctls`` beyond the kubelet's safe set.

The network fabric's gateway pod forwards packets between its WireGuard tunnel and its ``eth0``, so it
needs ``net.ipv4.ip_forward=1`` in its own network namespace. The kubelet counts that sysctl as unsafe
(namespaced, but not on its safe list) and refuses such a pod with ``SysctlForbidden`` unless it is allowed
here. The alternative would be a privileged init container writing ``/proc/sys/net/ipv4/ip_forward``: a
privileged container for one value. The sysctl is per network namespace, so allowing it changes nothing
on the node or in other pods; real nodes are the project's own local nodes, and Pod Security admission
still refuses unsafe sysctls in namespaces held to the baseline or restricted level.
"""

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_text(document: Mapping[str, Any]) -> str:
    """TOML for a nested mapping of strings, booleans, integers and lists of strings (pure).

    Enough for containerd's configuration; the standard library reads TOML but does not write it.
    """
    lines: list[str] = []
    _toml_table(document, prefix=(), lines=lines)
    return "\n".join(lines).strip() + "\n"


def _toml_table(table: Mapping[str, Any], *, prefix: tuple[str, ...], lines: list[str]) -> None:
    scalars = {key: value for key, value in table.items() if not isinstance(value, Mapping)}
    tables = {key: value for key, value in table.items() if isinstance(value, Mapping)}
    if prefix and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_toml_key(part) for part in prefix) + "]")
    lines.extend(f"{_toml_key(key)} = {_toml_value(value)}" for key, value in scalars.items())
    for key, value in tables.items():
        _toml_table(value, prefix=(*prefix, key), lines=lines)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes) once DEL, which JSON leaves raw, is escaped.
        return orjson.dumps(value).decode().replace("\x7f", "\\u007f")
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def containerd_config(*, sandbox_image: str, runc: str, cni_bin_dir: str) -> str:
    """containerd's configuration (version 3 format, read by containerd 2.x)."""
    cri_runtime = {
        "restrict_oom_score_adj": True,
        "netns_mounts_under_state_dir": True,
        "enable_selinux": False,
        "disable_apparmor": True,
        "containerd": {
            "default_runtime_name": "runc",
            "runtimes": {
                "runc": {
                    "runtime_type": "io.containerd.runc.v2",
                    "options": {"BinaryName": runc, "SystemdCgroup": False},
                }
            },
        },
        "cni": {"bin_dirs": [cni_bin_dir], "conf_dir": CNI_CONF_DIR, "conf_template": CNI_TEMPLATE},
    }
    document = {
        "version": 3,
        "imports": [],
        "disabled_plugins": [
            "io.containerd.internal.v1.opt",
            "io.containerd.nri.v1.nri",
            "io.containerd.snapshotter.v1.erofs",
            "io.containerd.differ.v1.erofs",
            "io.containerd.snapshotter.v1.blockfile",
        ],
        "grpc": {"address": CONTAINERD_SOCKET},
        "plugins": {
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                "pinned_images": {"sandbox": sandbox_image},
                "registry": {"config_path": REGISTRY_HOSTS_DIR},
            },
            "io.containerd.cri.v1.runtime": cri_runtime,
            "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
        },
    }
    return toml_text(document)


def registry_hosts(*, registry: str) -> str:
    """The ``hosts.toml`` that makes ``registry`` (``http://HOST:PORT``) the first place any image is pulled from.

    A mirror for every registry: containerd tells it which one with ``?ns=``; what it lacks is then asked
    of the real registry, as without it.
    """
    return toml_text({"host": {registry: {"capabilities": ["pull", "resolve"]}}})


def cni_template(*, network: str = "liqo-local") -> str:
    """The CNI configuration template containerd fills with the node's pod CIDR (Go template syntax).

    A bridge with host-local addresses from the node's pod CIDR, masquerading what leaves the node,
    ``portmap`` for ``hostPort``. containerd adds the loopback itself.
    """
    ranges = '{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}'
    routes = '{{range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst": "{{$route}}"}{{end}}'
    return (
        "{\n"
        '  "cniVersion": "1.0.0",\n'
        f'  "name": "{network}",\n'
        '  "plugins": [\n'
        '    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,\n'
        f'     "ipam": {{"type": "host-local", "ranges": [{ranges}], "routes": [{routes}]}}}},\n'
        '    {"type": "portmap", "capabilities": {"portMappings": true}}\n'
        "  ]\n"
        "}\n"
    )


def kubelet_config(
    *, node_ip: str, cgroup_root: str, client_ca: str, tls_cert: str, tls_key: str, max_pods: int
) -> str:
    """The KubeletConfiguration of a real node."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": node_ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": client_ca},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": tls_cert,
        "tlsPrivateKeyFile": tls_key,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "clusterDomain": "cluster.local",
        "maxPods": max_pods,
        "serializeImagePulls": False,
        "protectKernelDefaults": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "resolvConf": "/etc/resolv.conf",
        "allowedUnsafeSysctls": list(ALLOWED_UNSAFE_SYSCTLS),
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(*, node_ip: str, node_name: str, kubeconfig: str, pod_cidr: str) -> str:
    """The KubeProxyConfiguration of a real node (nftables mode)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "mode": "nftables",
        "clusterCIDR": pod_cidr,
        "hostnameOverride": node_name,
        "bindAddress": node_ip,
        "healthzBindAddress": f"{node_ip}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {"maxPerCore": 0, "min": 0},
    }
    return yaml.safe_dump(config, sort_keys=False)


def node_labels(extra: Mapping[str, str]) -> str:
    """The ``--node-labels`` flag value of a real node's kubelet (its own labels win over ``extra``)."""
    labels = {**extra, "type": "real", NODE_LABEL: "real"}
    return ",".join(f"{key}={value}" for key, value in labels.items())
