"""Pure translations between home objects and what the provider gets or reports (no I/O).

As in Liqo's reflection, every transformation lives here so that it can be property-tested and the
controllers only compare and apply. Three directions:

- VirtualNode → Node (metadata and status) and its Lease;
- home Pod → ShadowPod: the pod to run, minus what only means something in the home cluster (its node,
  scheduling constraints that name home nodes, priority classes), its service-account mount taken from a
  Secret the virtual kubelet keeps filled with a home token;
- remote Pod → home Pod status: what ``kubectl get pods`` at home must show;
- reflection (last section): home ConfigMaps and Secrets → copies in the twin, the pod's home token → a
  Secret in the twin, the provider's pod Events → Events at home.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from typing import Any

from liqo.api import names
from liqo.api.crds import SHADOW_POD_WAIT_REASONS
from liqo.api.resources import SHADOW_PODS
from liqo.kube.events import MAX_MESSAGE_LENGTH
from liqo.kube.resources import CONFIGMAPS, LEASES, NODES, SECRETS, Resource

Obj = dict[str, Any]

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
KUBELET_VERSION = "v1.37.2-liqo"
EXEC_OVER_WEBSOCKETS = "ExtendWebSocketsToKubelet"
"""The node-declared feature telling the API server this kubelet takes exec over WebSockets."""

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
        "runtimeClassName",  # home runtime classes mean nothing remotely (and the provider refuses them)
    }
)
_TOKEN_VOLUME_PREFIX = "kube-api-access-"
"""The projected volume the home ServiceAccount admission adds (token, CA, namespace): the provider mounts
the pod-token Secret in its place, under the same volume name so that the containers' mounts stay as they are."""
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


_CLEARED_FIELDS = ("reason", "message")
"""Status fields a refusal sets at home and the remote pod, once running, may not have."""


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


def node_is_ours(node: Obj, *, provider_id: str) -> bool:
    """Whether ``node`` is liqo's virtual node for ``provider_id``: the only Node a virtual kubelet touches (pure)."""
    labels = node["metadata"].get("labels") or {}
    return bool(
        labels.get(names.MANAGED_BY) == names.MANAGED_BY_VALUE
        and labels.get(names.VIRTUAL_NODE_TYPE) == names.VIRTUAL_NODE
        and labels.get(names.REMOTE_CLUSTER_ID) == provider_id
    )


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
    since = before["lastTransitionTime"] if before and before.get("status") == status else _time(now)
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
            # The API server then passes exec WebSockets through to us instead of translating them to SPDY.
            "declaredFeatures": [EXEC_OVER_WEBSOCKETS],
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


def remote_pod_spec(home_spec: Obj, *, token_secret: str) -> Obj:
    """The spec the provider runs for a home pod: scheduling removed, the home token from ``token_secret`` (pure)."""
    spec = {key: value for key, value in home_spec.items() if key not in _DROPPED_POD_FIELDS}
    if "volumes" in spec:
        spec["volumes"] = [_token_secret_volume(v, token_secret) if _is_token_volume(v) else v for v in spec["volumes"]]
    # The provider's default ServiceAccount must not mount its own token into a consumer's workload.
    spec["automountServiceAccountToken"] = False
    return spec


def _is_token_volume(volume: Obj) -> bool:
    return bool(str(volume.get("name", "")).startswith(_TOKEN_VOLUME_PREFIX) and "projected" in volume)


def _token_secret_volume(volume: Obj, secret: str) -> Obj:
    source: Obj = {"secretName": secret}
    if "defaultMode" in volume["projected"]:
        source["defaultMode"] = volume["projected"]["defaultMode"]
    return {"name": volume["name"], "secret": source}


def shadow_pod(home_pod: Obj, *, namespace: str, home_cluster_id: str) -> Obj:
    """The ShadowPod asking the provider to run ``home_pod`` in twin ``namespace`` (pure)."""
    meta = home_pod["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    labels = dict(meta.get("labels") or {}) | names.peer_labels(home_cluster_id)
    # The provider's finalizer comes with the creation: one write less per pod than the provider adding it.
    metadata: Obj = {"name": meta["name"], "namespace": namespace, "labels": labels, "finalizers": [names.FINALIZER]}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": metadata,
        "spec": {
            "pod": remote_pod_spec(home_pod["spec"], token_secret=token_secret_name(meta["name"])),
            "homePodUID": meta["uid"],
        },
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
    for field in _CLEARED_FIELDS:
        # A refusal's reason (refused_status) must not outlive it: kubectl shows status.reason as the pod's
        # STATUS, so a running pod would read "DoesNotFitRemote". None deletes it in the strategic merge.
        status.setdefault(field, None)
    status["hostIP"] = node_address
    status["hostIPs"] = [{"ip": node_address}]
    return status


PROVIDER_REFUSED = "ProviderRefused"
"""The reason on a home pod the provider refused (its ShadowPod, or the pod made from it)."""


def held_back(shadow: Obj) -> tuple[str, str] | None:
    """Why the provider runs no pod for ``shadow``, as ``(reason, message)`` for the home pod; None if it does (pure).

    A ShadowPod waiting for its consumer's budget keeps the provider's reason (``OverBudget``,
    ``NoAcceptedOffer``); any other reason a provider writes is shown as ``ProviderRefused``, its message kept.
    """
    status = shadow.get("status") or {}
    message = str(status.get("message", ""))
    if status.get("phase") == "Refused":
        return PROVIDER_REFUSED, message
    if status.get("phase") == "Waiting":
        reason = status.get("reason")
        return (reason if reason in SHADOW_POD_WAIT_REASONS else PROVIDER_REFUSED), message
    return None


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


# -- reflection: ConfigMaps, Secrets, ServiceAccount tokens, Events ------------------------------------------
#
# What the virtual kubelet copies between home and a provider besides pods (liqo.virtualkubelet.reflection
# does the I/O). Every copy is marked with ``names.ORIGIN`` (the cluster it comes from), and nothing unmarked
# is ever updated or deleted: a twin, or a home namespace, may hold objects of the same name made by others.

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
"""Published by every cluster into every namespace: the provider's own must stay (its pods trust its API)."""
SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
"""Legacy token Secrets: home tokens the provider's token controller would fight over (and must not read)."""
DEFAULT_TOKEN_SECONDS = 3600
TOKEN_RENEWAL = 0.8
"""Tokens are replaced at this fraction of their lifetime, as the kubelet does for projected tokens."""
_COPIED_FIELDS = ("data", "binaryData", "type", "immutable")
_CONTENT_FIELDS = ("data", "binaryData", "immutable")
_NAME_MAX = 253
_TOKEN_DIGEST_LENGTH = 10


def reflectable(obj: Obj, *, resource: Resource) -> bool:
    """Whether a home ConfigMap or Secret is ever copied to a provider, whatever the policy (pure).

    Never: the cluster's root CA ConfigMap, ServiceAccount token Secrets, objects annotated
    ``liqo.io/skip-reflection: "true"``, and copies or pod tokens themselves (a namespace that is both a twin
    and offloaded onwards would otherwise bounce them from cluster to cluster).
    """
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    if (meta.get("annotations") or {}).get(names.SKIP_REFLECTION) == "true":
        return False
    if names.ORIGIN in labels or names.POD_TOKEN in labels:
        return False
    if resource == CONFIGMAPS:
        return bool(meta["name"] != ROOT_CA_CONFIGMAP)
    return bool(resource == SECRETS and obj.get("type") != SERVICE_ACCOUNT_TOKEN_TYPE)


def reflected_copy(obj: Obj, *, resource: Resource, namespace: str, home_cluster_id: str) -> Obj:
    """The copy of home ConfigMap or Secret ``obj`` in twin ``namespace``: same name, content and metadata (pure)."""
    meta = obj["metadata"]
    labels = dict(meta.get("labels") or {}) | names.peer_labels(home_cluster_id) | {names.ORIGIN: home_cluster_id}
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    copy_meta: Obj = {"name": meta["name"], "namespace": namespace, "labels": labels}
    if kept:
        copy_meta["annotations"] = kept
    copy: Obj = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": copy_meta}
    return copy | {field: obj[field] for field in _COPIED_FIELDS if field in obj}


def is_copy(obj: Obj, *, origin: str) -> bool:
    """Whether ``obj`` is a copy this virtual kubelet keeps of an object of cluster ``origin`` (pure)."""
    return bool((obj["metadata"].get("labels") or {}).get(names.ORIGIN) == origin)


def _same(current: Obj, desired: Obj, fields: tuple[str, ...]) -> bool:
    # The API server leaves empty maps and a false ``immutable`` out of what it returns.
    return all((current.get(field) or None) == (desired.get(field) or None) for field in fields)


def copy_is_current(current: Obj, desired: Obj) -> bool:
    """Whether the copy ``current`` (as read) already says what ``desired`` says (pure)."""
    meta, wanted = current["metadata"], desired["metadata"]
    return bool(
        _same(current, desired, _COPIED_FIELDS)
        and (meta.get("labels") or {}) == wanted.get("labels", {})
        and (meta.get("annotations") or {}) == wanted.get("annotations", {})
    )


def must_replace(current: Obj, desired: Obj) -> bool:
    """Whether the copy cannot be updated into ``desired`` and must be deleted and made anew (pure).

    A Secret's type never changes, nor does an immutable object's content: the home object was deleted and
    re-created differently under the same name.
    """
    if current.get("type") != desired.get("type"):
        return True
    return bool(current.get("immutable")) and not _same(current, desired, _CONTENT_FIELDS)


def token_secret_name(pod_name: str) -> str:
    """The pod-token Secret of home pod ``pod_name`` in its twin (pure).

    The digest keeps it apart from the home Secrets copied into the same twin (a ``<pod>-token`` of the user's
    is plausible); the name is cut so that the result is still a valid Secret name.
    """
    suffix = "-token-" + hashlib.sha256(pod_name.encode()).hexdigest()[:_TOKEN_DIGEST_LENGTH]
    return pod_name[: _NAME_MAX - len(suffix)].rstrip("-.") + suffix


def token_volume(home_spec: Obj) -> Obj | None:
    """The projected ServiceAccount volume the home admission added to a pod, if any (pure)."""
    return next((v for v in home_spec.get("volumes") or [] if _is_token_volume(v)), None)


def token_seconds(volume: Obj) -> int:
    """The token lifetime the projected volume asks for (pure)."""
    for source in volume["projected"].get("sources") or []:
        token = source.get("serviceAccountToken")
        if token is not None:
            return int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
    return DEFAULT_TOKEN_SECONDS


def service_account_of(home_pod: Obj) -> str:
    """The home ServiceAccount a pod runs as (pure)."""
    spec = home_pod["spec"]
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def token_request(home_pod: Obj, *, seconds: int) -> Obj:
    """The TokenRequest for the pod's ServiceAccount, bound to the pod: it dies with the pod (pure).

    No audiences: the API server's own, as for the projected volume it replaces.
    """
    meta = home_pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds, "boundObjectRef": bound},
    }


def renewal_time(*, issued: datetime.datetime, expires: datetime.datetime) -> datetime.datetime:
    """When a token issued at ``issued`` and expiring at ``expires`` is replaced (pure)."""
    return issued + (expires - issued) * TOKEN_RENEWAL


def parse_time(value: str) -> datetime.datetime:
    """An RFC 3339 time as the API server writes it (pure)."""
    return datetime.datetime.fromisoformat(value).astimezone(datetime.UTC)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def token_secret(
    home_pod: Obj, *, namespace: str, home_cluster_id: str, token: str, ca: str, renew_at: datetime.datetime
) -> Obj:
    """The Secret in twin ``namespace`` the remote pod mounts as its ServiceAccount directory (pure).

    Its keys are the projected volume's (``token``, ``ca.crt``, ``namespace``): the home token, the home CA
    and the home namespace, so that the pod's client speaks to the home API server as at home.
    """
    meta = home_pod["metadata"]
    return {
        "apiVersion": SECRETS.api_version,
        "kind": SECRETS.kind,
        "metadata": {
            "name": token_secret_name(meta["name"]),
            "namespace": namespace,
            "labels": names.peer_labels(home_cluster_id) | {names.POD_TOKEN: "true"},
            "annotations": {
                names.HOME_POD: meta["name"],
                names.HOME_POD_UID: meta["uid"],
                names.RENEW_AT: _time(renew_at),
            },
        },
        "type": "Opaque",
        "data": {"token": _b64(token), "ca.crt": _b64(ca), "namespace": _b64(meta["namespace"])},
    }


def is_pod_token(secret: Obj, *, home_cluster_id: str) -> bool:
    """Whether ``secret`` is a pod-token Secret this virtual kubelet keeps (pure)."""
    labels = secret["metadata"].get("labels") or {}
    return bool(labels.get(names.POD_TOKEN) == "true" and labels.get(names.REMOTE_CLUSTER_ID) == home_cluster_id)


def token_renew_at(secret: Obj, home_pod: Obj, *, ca: str) -> datetime.datetime | None:
    """When the pod-token Secret's token must be replaced; None when it must be now (pure).

    Now, too, when the Secret was written for a deleted namesake of the pod (its token died with it) or with
    another CA or namespace.
    """
    annotations = secret["metadata"].get("annotations") or {}
    data = secret.get("data") or {}
    meta = home_pod["metadata"]
    current = (
        annotations.get(names.HOME_POD_UID) == meta["uid"]
        and "token" in data
        and data.get("ca.crt") == _b64(ca)
        and data.get("namespace") == _b64(meta["namespace"])
    )
    renew = annotations.get(names.RENEW_AT)
    if not current or not renew:
        return None
    try:
        return parse_time(renew)
    except ValueError:
        return None


def mirrorable(event: Obj) -> bool:
    """Whether a provider Event may be mirrored at home: about a pod, and not itself a mirror (pure)."""
    involved = event.get("involvedObject") or {}
    labels = event["metadata"].get("labels") or {}
    return bool(involved.get("kind") == "Pod" and involved.get("name") and names.ORIGIN not in labels)


def _whole_seconds(stamp: str | None) -> str | None:
    """A ``Time`` from a ``Time`` or ``MicroTime`` (the events.k8s.io fields), which core Events need."""
    return _time(parse_time(stamp)) if stamp else None


def mirrored_event(event: Obj, *, home_pod: Obj, provider_id: str) -> Obj:
    """The home Event mirroring provider ``event`` onto ``home_pod``: same name, reason, message, type, count (pure).

    Same name as the provider's, so that every change of that Event (its count growing) updates one home Event
    and a re-list writes nothing new. Events written through events.k8s.io carry their count and times in
    ``series``/``eventTime`` instead: they are folded into the core fields.
    """
    meta = home_pod["metadata"]
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
    }
    if (event.get("involvedObject") or {}).get("fieldPath"):
        involved["fieldPath"] = event["involvedObject"]["fieldPath"]
    series = event.get("series") or {}
    first = _whole_seconds(event.get("firstTimestamp") or event.get("eventTime"))
    last = _whole_seconds(event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime"))
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or "provider"
    mirror: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event["metadata"]["name"],
            "namespace": meta["namespace"],
            "labels": names.peer_labels(provider_id) | {names.ORIGIN: provider_id},
        },
        "involvedObject": involved,
        "type": event.get("type") or "Normal",
        "reason": event.get("reason") or "",
        "message": (event.get("message") or "")[:MAX_MESSAGE_LENGTH],
        "count": max(int(event.get("count") or 0), int(series.get("count") or 0), 1),
        "source": {"component": component},
    }
    if first or last:
        mirror["firstTimestamp"] = first or last
        mirror["lastTimestamp"] = last or first
    return mirror
