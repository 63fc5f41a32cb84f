"""The processes of a local cluster, as pure data: command lines, start order, health probes.

``plan`` turns a spec, its ports and the binary directory into :class:`Component` records. The supervisor
knows nothing about Kubernetes: it runs whatever records ``components.json`` holds, starting each one
once the components it comes ``after`` are healthy. That keeps the flags reviewable in one place and
lets later features (liqo's own processes on a local cluster) reuse the same supervisor.

Flag choices worth knowing:
- everything binds to 127.0.0.1, and every connection is TLS with a per-component identity;
- ``--endpoint-reconciler-type=none``: several API servers share 127.0.0.1, and a loopback address is not
  a valid endpoint for the ``kubernetes`` Service anyway;
- kube-controller-manager signs CSRs with the cluster CA (``certificates.k8s.io`` works) and allocates
  node pod CIDRs, which kwok then uses for pod IPs;
- kube-controller-manager and kube-scheduler get generous client QPS: on a simulated cluster the
  interesting limits are the API server's and ours, not the default 20 QPS client throttle;
- KWOK's ``podPlayStageParallelism`` (how many pod stage transitions it plays at once, all nodes
  together) is set explicitly to its default, :data:`KWOK_POD_PARALLELISM`: benchmarks print it, and a
  change of KWOK's default must not move their figures unnoticed. KWOK's client has no rate limit at all;
- ``--watch-cache=false``: the watch cache keeps a goroutine per resource type that wakes every second
  (bookmarks, ~80 types). Without it an idle cluster's control plane takes 9% of a core instead of 14%,
  etcd included (it serves the lists and watches itself, which at this size costs less than the cache's
  timers): what a laptop pays for every cluster left running. Under the test suite's load the API servers'
  CPU fell by 7% only (1208 to 1122 CPU-seconds in a run): serving requests, not idling, is most of it;
- the API server presents a client certificate to admission webhooks (``--admission-control-config-file``),
  signed by a CA of its own that signs nothing else: liqo's webhook listener accepts that CA only. Not the
  cluster CA, which also signs (through CSRs) the identities this cluster issues to its peers.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from liqo.localclusters.layout import ClusterDir, Ports
from liqo.localclusters.spec import ClusterSpec

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
WEBHOOK_CLIENT_CA = "webhook-client-ca"
"""PKI name of the CA whose only certificate is the API server's webhook client identity."""
WEBHOOK_CLIENT = "apiserver-webhook-client"
"""PKI name of the client certificate the API server presents to admission webhooks."""
CLIENT_QPS = 500
CLIENT_BURST = 1000
KWOK_POD_PARALLELISM = 4
"""KWOK's ``podPlayStageParallelism``: its default, written down."""
KWOK_OPTIONS: dict[str, Any] = {
    "cidr": "10.0.0.0/24",
    "manageAllNodes": False,
    "enableDebuggingHandlers": True,
    "enableContentionProfiling": False,
    "enableProfilingHandler": True,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}
"""KWOK's defaults (v0.8.0's ``SetObjectDefaults_KwokConfiguration``): a KwokConfiguration read from a file
is not defaulted, and a zero parallelism stops KWOK at start, so a file that sets one option sets them all."""


@dataclass(frozen=True)
class Probe:
    """An HTTPS health endpoint and the TLS material to call it with."""

    url: str
    ca: str
    cert: str = ""
    key: str = ""


@dataclass(frozen=True)
class Component:
    """One supervised process."""

    name: str
    argv: list[str]
    probe: Probe | None = None
    after: list[str] = field(default_factory=list)
    enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as stored in ``components.json``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Component:
        """The inverse of :meth:`to_dict`."""
        probe = data.get("probe")
        return cls(
            name=data["name"],
            argv=list(data["argv"]),
            probe=Probe(**probe) if probe else None,
            after=list(data.get("after") or []),
            enabled=bool(data.get("enabled", True)),
        )


def pki_file(cluster: ClusterDir, name: str) -> str:
    """The path of a PKI file as a string (for command lines)."""
    return str(cluster.pki / name)


def plan(*, spec: ClusterSpec, ports: Ports, cluster: ClusterDir, bin_dir: Path) -> list[Component]:
    """The components of a cluster, in start order."""

    def pki(name: str) -> str:
        return pki_file(cluster, name)

    def binary(name: str) -> str:
        return str(bin_dir / name)

    ca = pki("ca.crt")
    admin = {"ca": ca, "cert": pki("admin.crt"), "key": pki("admin.key")}
    serving = ["--tls-cert-file=" + pki("serving.crt"), "--tls-private-key-file=" + pki("serving.key")]
    always_allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
    etcd_peer = f"http://127.0.0.1:{ports.etcd_peer}"
    etcd_client = f"https://127.0.0.1:{ports.etcd_client}"
    api = f"https://127.0.0.1:{ports.apiserver}"

    etcd = Component(
        name="etcd",
        argv=[
            binary("etcd"),
            f"--name={spec.name}",
            f"--data-dir={cluster.etcd_data}",
            f"--listen-client-urls={etcd_client}",
            f"--advertise-client-urls={etcd_client}",
            f"--listen-peer-urls={etcd_peer}",
            f"--initial-advertise-peer-urls={etcd_peer}",
            f"--initial-cluster={spec.name}={etcd_peer}",
            "--client-cert-auth=true",
            f"--trusted-ca-file={ca}",
            f"--cert-file={pki('etcd.crt')}",
            f"--key-file={pki('etcd.key')}",
            # A laptop/CI cluster: losing the last writes on a power cut is fine, fsync latency is not.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
            "--log-level=warn",
        ],
        probe=Probe(
            url=f"{etcd_client}/health",
            ca=ca,
            cert=pki("apiserver-etcd-client.crt"),
            key=pki("apiserver-etcd-client.key"),
        ),
    )
    apiserver = Component(
        name="kube-apiserver",
        argv=[
            binary("kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--etcd-servers={etcd_client}",
            f"--etcd-cafile={ca}",
            f"--etcd-certfile={pki('apiserver-etcd-client.crt')}",
            f"--etcd-keyfile={pki('apiserver-etcd-client.key')}",
            f"--tls-cert-file={pki('apiserver.crt')}",
            f"--tls-private-key-file={pki('apiserver.key')}",
            f"--client-ca-file={ca}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={spec.service_cidr}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki('sa.pub')}",
            f"--service-account-signing-key-file={pki('sa.key')}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            f"--kubelet-client-certificate={pki('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={pki('apiserver-kubelet-client.key')}",
            f"--kubelet-certificate-authority={ca}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--admission-control-config-file={cluster.config / 'admission.yaml'}",
            "--profiling=false",
            "--watch-cache=false",
        ],
        probe=Probe(url=f"{api}/readyz", **admin),
        # No wait for etcd: the API server retries its storage until etcd answers, so starting both at
        # once saves etcd's start-up time (a second) on every cluster start.
    )
    controller_manager = Component(
        name="kube-controller-manager",
        argv=[
            binary("kube-controller-manager"),
            *_kubeconfig_flags(pki("controller-manager.kubeconfig")),
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.controller_manager}",
            *serving,
            always_allow,
            f"--cluster-signing-cert-file={ca}",
            f"--cluster-signing-key-file={pki('ca.key')}",
            f"--root-ca-file={ca}",
            f"--service-account-private-key-file={pki('sa.key')}",
            "--use-service-account-credentials=true",
            "--allocate-node-cidrs=true",
            f"--cluster-cidr={spec.pod_cidr}",
            f"--node-cidr-mask-size={spec.node_mask}",
            f"--service-cluster-ip-range={spec.service_cidr}",
            "--leader-elect=false",
            f"--kube-api-qps={CLIENT_QPS}",
            f"--kube-api-burst={CLIENT_BURST}",
            "--profiling=false",
        ],
        probe=Probe(url=f"https://127.0.0.1:{ports.controller_manager}/healthz", **admin),
        after=["kube-apiserver"],
    )
    scheduler = Component(
        name="kube-scheduler",
        argv=[
            binary("kube-scheduler"),
            f"--config={cluster.config / 'scheduler.yaml'}",
            f"--authentication-kubeconfig={pki('scheduler.kubeconfig')}",
            f"--authorization-kubeconfig={pki('scheduler.kubeconfig')}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.scheduler}",
            *serving,
            always_allow,
            "--profiling=false",
        ],
        probe=Probe(url=f"https://127.0.0.1:{ports.scheduler}/healthz", **admin),
        after=["kube-apiserver"],
    )
    kwok = Component(
        name="kwok",
        argv=[
            binary("kwok"),
            f"--kubeconfig={pki('kwok.kubeconfig')}",
            f"--config={cluster.config / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1",
            f"--node-port={ports.kwok}",
            f"--server-address=127.0.0.1:{ports.kwok}",
            *serving,
            "--node-lease-duration-seconds=40",
        ],
        probe=Probe(url=f"https://127.0.0.1:{ports.kwok}/healthz", ca=ca),
        after=["kube-apiserver"],
    )
    return [etcd, apiserver, controller_manager, scheduler, kwok]


def _kubeconfig_flags(kubeconfig: str) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]


def scheduler_config(*, kubeconfig: str) -> str:
    """kube-scheduler's configuration file (client QPS can only be raised there)."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": CLIENT_QPS, "burst": CLIENT_BURST},
        "leaderElection": {"leaderElect": False},
    }
    return yaml.safe_dump(config, sort_keys=False)


def admission_config(*, kubeconfig: str) -> str:
    """kube-apiserver's admission configuration: the webhooks' client credentials come from ``kubeconfig``."""
    webhook = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration"}
    config = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": name, "configuration": webhook | {"kubeConfigFile": kubeconfig}}
            for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def webhook_client_kubeconfig(*, cert: bytes, key: bytes) -> dict[str, Any]:
    """The credentials the API server presents to every webhook (user ``*``: whatever host it calls)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": "*", "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
    }


def kwok_config(*, stages: list[str], logs_file: str, exec_dir: str) -> str:
    """kwok's configuration: its stages (pod and node lifecycles), container logs, exec, attach, port-forward.

    ``stages`` are the YAML texts of the Stage files shipped with kwok's module. Every container of every
    pod reads its logs from ``logs_file`` (CRI log format), which is what ``kubectl logs`` then shows, and
    ``kubectl attach`` follows from the moment it attaches (kwok ignores its stdin).
    ``kubectl exec`` runs the command on this machine, in ``exec_dir``, as kwok's user: a local cluster is
    a development tool on loopback, and this is what lets exec be tested end to end without containers.
    ``kubectl port-forward`` reaches an echo on every port of every pod (``cat`` on the forwarded stream).
    """
    cluster_logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "all-containers"},
        "spec": {"logs": [{"containers": [], "logsFile": logs_file, "follow": True}]},
    }
    cluster_exec = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "all-containers"},
        "spec": {"execs": [{"containers": [], "local": {"workDir": exec_dir}}]},
    }
    cluster_attach = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterAttach",
        "metadata": {"name": "all-containers"},
        "spec": {"attaches": [{"containers": [], "logsFile": logs_file}]},
    }
    cluster_port_forward = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterPortForward",
        "metadata": {"name": "all-ports"},
        "spec": {"forwards": [{"command": ["cat"]}]},
    }
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": KWOK_OPTIONS | {"podPlayStageParallelism": KWOK_POD_PARALLELISM},
    }
    extras = (configuration, cluster_logs, cluster_exec, cluster_attach, cluster_port_forward)
    documents = [stage.strip() for stage in stages] + [
        yaml.safe_dump(document, sort_keys=False).strip() for document in extras
    ]
    return "\n---\n".join(documents) + "\n"


def node_manifest(*, spec: ClusterSpec, index: int) -> dict[str, Any]:
    """The Node object of fake node ``index`` (1-based), which kwok then keeps Ready."""
    name = f"{spec.name}-node-{index}"
    resources = {"cpu": spec.node_cpu, "memory": spec.node_memory, "pods": str(spec.node_pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **spec.node_labels,
            },
        },
        # Both addresses from the start: kwok's node-initialize stage, run again after the node went
        # NotReady (an API server outage), rewrites the list whole when either is missing, and loses the IP.
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }
