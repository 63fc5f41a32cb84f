"""Pure translations between home objects and what the provider gets or reports (no I/O).

As in Liqo's reflection, every transformation lives here so that it can be property-tested and the
controllers only compare and apply. Three directions:

- VirtualNode → Node (metadata and status) and its Lease;
- home Pod → ShadowPod: the pod to run, minus what only means something in the home cluster (its node,
  scheduling constraints that name home nodes, priority classes and service-account mounts that do not
  exist remotely);
- remote Pod → home Pod status: what ``kubectl get pods`` at home must show.
"""

from __future__ import annotations

import datetime
from typing import Any

from liqo.api import names
from liqo.api.resources import SHADOW_PODS
from liqo.kube.resources import LEASES, NODES

Obj = dict[str, Any]

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
KUBELET_VERSION = "v1.37.2-liqo"

_DROPPED_POD_FIELDS = frozenset(
    {
        "nodeName",  # the virtual node's name means nothing remotely; the provider's scheduler decides
        "nodeSelector",
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "schedulerName",
        "priority",  # set by the home priority admission; the provider computes its own
        "priorityClassName",
        "preemptionPolicy",
        "overhead",
        "serviceAccount",  # deprecated alias
        "serviceAccountName",  # home service accounts do not exist remotely (tokens are reflected instead)
        "automountServiceAccountToken",
        "schedulingGates",
        "resourceClaims",
    }
)
_TOKEN_VOLUME_PREFIX = "kube-api-access-"
"""The projected volume the home ServiceAccount admission adds: its token is only valid at home."""
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_STATUS_FIELDS = (
    "phase",
    "conditions",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "podIP",
    "podIPs",
    "startTime",
    "reason",
    "message",
    "qosClass",
)


def _time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- node --------------------------------------------------------------------------------------------------


def node_manifest(virtual_node: Obj) -> Obj:
    """The Node's metadata and spec for ``virtual_node`` (pure; status is :func:`node_status`)."""
    spec = virtual_node["spec"]
    labels = dict(spec.get("labels") or {}) | {
        names.VIRTUAL_NODE_TYPE: names.VIRTUAL_NODE,
        names.REMOTE_CLUSTER_ID: spec["clusterID"],
        "kubernetes.io/hostname": virtual_node["metadata"]["name"],
        "kubernetes.io/role": "agent",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        names.MANAGED_BY: names.MANAGED_BY_VALUE,
    }
    return {
        "apiVersion": NODES.api_version,
        "kind": NODES.kind,
        "metadata": {"name": virtual_node["metadata"]["name"], "labels": labels},
        "spec": {"taints": [{"key": names.VIRTUAL_NODE_TAINT, "value": "true", "effect": "NoExecute"}]},
    }


def node_resources(virtual_node: Obj) -> dict[str, str]:
    """Capacity (= allocatable) of the node: the accepted offer, with a pod count a kubelet would have."""
    resources = {name: str(value) for name, value in (virtual_node["spec"].get("resources") or {}).items()}
    resources.setdefault("pods", "110")
    return resources


def node_status(
    virtual_node: Obj,
    *,
    ready: bool,
    message: str,
    address: str,
    port: int,
    now: datetime.datetime,
    previous: Obj | None = None,
) -> Obj:
    """The Node's status: Ready follows the provider's API health (pure).

    ``lastTransitionTime`` is carried over from ``previous`` unless the status changes, as a kubelet does,
    so that ``kubectl describe node`` tells since when the provider is (un)reachable.
    """
    before = {c["type"]: c for c in ((previous or {}).get("status") or {}).get("conditions") or []}
    stamp = _time(now)

    def condition(kind: str, status: str, reason: str, text: str) -> Obj:
        old = before.get(kind)
        since = old["lastTransitionTime"] if old and old.get("status") == status else stamp
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": text,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": since,
        }

    healthy = [
        condition(kind, "False", f"No{kind}", "the provider's nodes are the ones under pressure")
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    readiness = (
        condition("Ready", "True", "ProviderReady", message)
        if ready
        else condition("Ready", "False", "ProviderUnreachable", message)
    )
    resources = node_resources(virtual_node)
    return {
        "apiVersion": NODES.api_version,
        "kind": NODES.kind,
        "metadata": {"name": virtual_node["metadata"]["name"]},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [readiness, *healthy],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": virtual_node["metadata"]["name"]},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "osImage": f"liqo virtual node for {virtual_node['spec'].get('clusterName', '')}",
                "kernelVersion": "",
                "containerRuntimeVersion": "liqo://remote",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def node_lease(node: Obj, *, holder: str, now: datetime.datetime) -> Obj:
    """The node's heartbeat Lease, owned by the Node so that it goes away with it (pure)."""
    micro = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    meta = node["metadata"]
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": micro},
    }


# -- pods --------------------------------------------------------------------------------------------------


def remote_pod_spec(home_spec: Obj) -> Obj:
    """The spec the provider runs for a home pod: scheduling and home-only identity removed (pure)."""
    spec = {key: value for key, value in home_spec.items() if key not in _DROPPED_POD_FIELDS}
    tokens = {v["name"] for v in spec.get("volumes") or [] if v.get("name", "").startswith(_TOKEN_VOLUME_PREFIX)}
    if tokens:
        spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in tokens]
        for field in ("containers", "initContainers"):
            if field in spec:
                spec[field] = [_without_mounts(c, tokens) for c in spec[field]]
    # The provider's default ServiceAccount must not mount its own token into a consumer's workload.
    spec["automountServiceAccountToken"] = False
    return spec


def _without_mounts(container: Obj, volumes: set[str]) -> Obj:
    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") not in volumes]
    trimmed = {key: value for key, value in container.items() if key != "volumeMounts"}
    return trimmed | ({"volumeMounts": mounts} if mounts else {})


def shadow_pod(home_pod: Obj, *, namespace: str, home_cluster_id: str) -> Obj:
    """The ShadowPod asking the provider to run ``home_pod`` in twin ``namespace`` (pure)."""
    meta = home_pod["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    labels = dict(meta.get("labels") or {}) | names.peer_labels(home_cluster_id)
    metadata: Obj = {"name": meta["name"], "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": metadata,
        "spec": {"pod": remote_pod_spec(home_pod["spec"]), "homePodUID": meta["uid"]},
    }


def shadow_is_current(shadow: Obj, desired: Obj) -> bool:
    """Whether ``shadow`` (as read) already asks for what ``desired`` asks (pure)."""
    meta, wanted = shadow["metadata"], desired["metadata"]
    return bool(
        shadow.get("spec") == desired["spec"]
        and (meta.get("labels") or {}) == wanted.get("labels", {})
        and (meta.get("annotations") or {}) == wanted.get("annotations", {})
    )


def runs_home_pod(remote_pod: Obj, home_pod: Obj) -> bool:
    """Whether ``remote_pod`` runs this very home pod, not a deleted namesake (pure)."""
    annotations = remote_pod["metadata"].get("annotations") or {}
    return bool(annotations.get(names.HOME_POD_UID) == home_pod["metadata"]["uid"])


def home_status(remote_pod: Obj, *, node_address: str) -> Obj:
    """The home pod's status mirroring the remote pod's (pure).

    ``hostIP`` is the virtual node's address: the remote node means nothing at home.
    """
    remote = remote_pod.get("status") or {}
    status = {field: remote[field] for field in _STATUS_FIELDS if field in remote}
    status["hostIP"] = node_address
    status["hostIPs"] = [{"ip": node_address}]
    return status


def refused_status(*, reason: str, message: str) -> Obj:
    """The home pod's status when the provider will not run it: Pending, with the reason on a condition."""
    return {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}],
        "reason": reason,
        "message": message,
    }


def status_differs(home_pod: Obj, desired: Obj) -> bool:
    """Whether the home pod's status lacks something of ``desired`` (pure).

    Conditions are compared by type, since the home scheduler owns ``PodScheduled``.
    """
    current = home_pod.get("status") or {}
    for field, value in desired.items():
        if field == "conditions":
            mine = {c["type"]: c for c in current.get("conditions") or []}
            if any(mine.get(c["type"]) != c for c in value):
                return True
        elif current.get(field) != value:
            return True
    return False


_REPLACED_LISTS = ("podIPs", "hostIPs")
"""Lists a strategic merge patch would merge by ``ip``: a re-created remote pod has a new IP, not two."""


def status_patch(status: Obj) -> Obj:
    """The strategic-merge body setting ``status`` on a home pod (pure).

    Conditions merge by type (the scheduler's ``PodScheduled`` stays); the IP lists are replaced whole.
    """
    body = dict(status)
    for field in _REPLACED_LISTS:
        if field in body:
            body[field] = [{"$patch": "replace"}, *body[field]]
    return {"status": body}
