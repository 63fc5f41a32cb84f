"""VirtualNode → the Node that stands for the provider at home, its status and its heartbeat Lease (pure).

The Node's capacity is the accepted offer and its Ready condition the provider's API health; what makes it
liqo's (labels checked before any write, :func:`node_is_ours`) is set by its first apply and never moves.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Collection, Iterable

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.kube.resources import LEASES, NODES
from liqo.kube.timefmt import format_micro_time, format_time

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
KUBELET_VERSION = "v1.37.2-liqo"
STREAMS_OVER_WEBSOCKETS = "ExtendWebSocketsToKubelet"
"""The node-declared feature telling the API server this kubelet takes exec, attach and port-forward WebSockets."""


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
    metadata: Obj = {"name": virtual_node["metadata"]["name"], "labels": labels}
    if "largestSlots" in spec:
        # Capacity stays the offer (a sum over the provider's nodes); the slots, which the scheduler cannot
        # use, are shown to people here and enforced by the pod reflector (liqo.virtualkubelet.fit).
        slots = json.dumps(spec["largestSlots"], sort_keys=True, separators=(",", ":"))
        metadata["annotations"] = {names.LARGEST_SLOTS: slots}
    return {
        "apiVersion": NODES.api_version,
        "kind": NODES.kind,
        "metadata": metadata,
        "spec": {"taints": [{"key": names.VIRTUAL_NODE_TAINT, "value": "true", "effect": "NoExecute"}]},
    }


_OWNERSHIP_LABELS = (names.MANAGED_BY, names.REMOTE_CLUSTER_ID, names.VIRTUAL_NODE_TYPE)
REGISTERED = "Registered"
"""The VirtualNode condition saying whether its Node is ours (``True``) or its name taken by another Node."""


def node_claim(virtual_node: Obj) -> Obj:
    """The Node as first created: its name, the labels that make it ours, its taint (pure).

    Only what never changes: a create's fields stay co-owned by it under server-side apply, so what may later
    go (the offer's labels, the slots) comes with the first apply, which can then drop it.
    """
    manifest = node_manifest(virtual_node)
    labels = manifest["metadata"]["labels"]
    metadata = {"name": manifest["metadata"]["name"], "labels": {key: labels[key] for key in _OWNERSHIP_LABELS}}
    return manifest | {"metadata": metadata}


def node_is_ours(node: Obj, *, provider_id: str | None) -> bool:
    """Whether ``node`` is liqo's virtual node for ``provider_id`` (None: any provider's) (pure).

    The only kind of Node a virtual kubelet touches.
    """
    labels = node["metadata"].get("labels") or {}
    provider = names.labelled_peer_id(node)
    return bool(
        labels.get(names.MANAGED_BY) == names.MANAGED_BY_VALUE
        and labels.get(names.VIRTUAL_NODE_TYPE) == names.VIRTUAL_NODE
        and provider
        and provider == (provider_id or provider)
    )


OURS_SELECTOR = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE},{names.VIRTUAL_NODE_TYPE}={names.VIRTUAL_NODE}"
"""The label selector of the Nodes a virtual kubelet watches for :func:`orphans` (checked again one by one)."""


def orphans(nodes: Iterable[Obj], *, wanted: Collection[str]) -> list[Obj]:
    """Our virtual Nodes with no VirtualNode ``wanted`` of their name: to delete (pure).

    A virtual kubelet deletes a Node as it stops one that runs; these were left by a VirtualNode that went while
    no virtual kubelet ran (an unpeer during a manager restart) or by a delete that failed. Only Nodes that pass
    :func:`node_is_ours`: the home cluster's own Nodes are never candidates.
    """
    return [n for n in nodes if node_is_ours(n, provider_id=None) and n["metadata"]["name"] not in wanted]


def registration_condition(virtual_node: Obj, *, squatter: Obj | None, now: datetime.datetime) -> Obj:
    """The ``Registered`` condition of ``virtual_node``: its Node is ours, or ``squatter`` holds the name (pure).

    ``lastTransitionTime`` is kept while the status stays the same.
    """
    name = virtual_node["metadata"]["name"]
    if squatter is None:
        status, reason, message = "True", "NodeRegistered", f"Node {name} is this provider's virtual node"
    else:
        labels = squatter["metadata"].get("labels") or {}
        owner = ", ".join(f"{key}={labels[key]}" for key in _OWNERSHIP_LABELS if key in labels) or "no liqo labels"
        status, reason = "False", "NodeNameTaken"
        message = (
            f"Node {name} already exists and is not this provider's virtual node ({owner}): it is left untouched,"
            " and no pod is offloaded through it; the virtual node registers once that Node is gone"
        )
    before = next(
        (c for c in (virtual_node.get("status") or {}).get("conditions") or [] if c.get("type") == REGISTERED), None
    )
    since = before["lastTransitionTime"] if before and before.get("status") == status else format_time(now)
    return {"type": REGISTERED, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}


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
    stamp = format_time(now)

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
            # The API server then passes the client's exec, attach and port-forward WebSockets through to us
            # instead of translating them to SPDY (liqo.virtualkubelet.kubeletapi).
            "declaredFeatures": [STREAMS_OVER_WEBSOCKETS],
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
    meta = node["metadata"]
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": format_micro_time(now),
        },
    }


HEARTBEAT_DURATION_SECONDS = 40


def consumer_heartbeat(*, home_cluster_id: str, holder: str, now: datetime.datetime) -> Obj:
    """The Lease telling a provider this consumer's virtual kubelet reaches it, in our tenant namespace there (pure).

    The provider reads only that it changes (liqo.offloading.heartbeats); ``renewTime`` is for people.
    """
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {
            "name": names.CONSUMER_HEARTBEAT,
            "namespace": names.tenant_namespace(home_cluster_id),
            "labels": names.peer_labels(home_cluster_id),
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": HEARTBEAT_DURATION_SECONDS,
            "renewTime": format_micro_time(now),
        },
    }
