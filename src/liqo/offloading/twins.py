"""Twin namespaces: the namespaces a provider creates for a consumer's offloaded ones, and the consumer's rights.

A twin carries the consumer's ID under ``REMOTE_CLUSTER_ID`` (so its pods count against that consumer's
budget and not as the provider's free capacity, and unpeer finds it) and its home namespace under
``ORIGIN_NAMESPACE``. The consumer's identity gets, in the twin only, what the virtual kubelet needs: its
ShadowPods and reflected objects, read access to the pods the provider made and to their logs and events,
and exec. It never gets to create pods directly: the provider decides what runs, from the ShadowPod.

A twin also carries the Pod Security Admission labels of the consumer's policy level (``enforce``, ``warn``
and ``audit``, version ``latest``): Kubernetes' own admission then checks the real pods too, a second
opinion on the provider's verdict that does not depend on liqo's code.

And it carries what the API server's admission policies on the consumer's other writes read
(:func:`twin_annotations`; docs/security.md, "Endpoints" and "Ingresses"): where this cluster sees the
consumer's pods, and what its policy lets the consumer's Ingresses say. On the namespace because a
ValidatingAdmissionPolicy reads the request's namespace (``namespaceObject``) and nothing else of ours, and
because a peer can never write a namespace: what is there is the provider's word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from liqo.api import names
from liqo.api.networks import IPNetwork
from liqo.api.resources import VIRTUAL_KUBELET

_RBAC = "rbac.authorization.k8s.io"
_ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
_READ = ["get", "list", "watch"]


PSA_MODES = ("enforce", "warn", "audit")


def pod_security_labels(level: str) -> dict[str, str]:
    """The Pod Security Admission labels enforcing ``level`` (``baseline`` or ``restricted``) (pure)."""
    labels = {}
    for mode in PSA_MODES:
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    return labels


class IngressOffer(Protocol):
    """What a provider lets one consumer's Ingresses say (``liqo.sharing.policy.IngressOffer`` is one)."""

    @property
    def classes(self) -> Sequence[str]:
        """The IngressClasses they may name."""

    @property
    def hosts(self) -> Sequence[str]:
        """The hosts they may name: exact, or ``*.`` and a domain."""

    @property
    def annotations(self) -> Sequence[str]:
        """The annotation keys they may carry beyond the built-in few."""


TWIN_ANNOTATIONS = (names.PEER_PODS, names.INGRESS_CLASSES, names.INGRESS_HOSTS, names.INGRESS_ANNOTATIONS)
"""The annotations of a twin the provider keeps: every one absent means "nothing allowed"."""


def twin_annotations(*, peer_pods: IPNetwork | None, ingress: IngressOffer) -> dict[str, str]:
    """What a twin of a consumer tells the API server's policies: its pods' block, its Ingresses' offer (pure).

    Lists are joined with commas (the CEL side splits them; no class, host or annotation key holds one).
    An empty value is left out: the policies read an absent annotation as "nothing allowed".
    """
    values = {
        names.PEER_PODS: str(peer_pods) if peer_pods is not None else "",
        names.INGRESS_CLASSES: ",".join(ingress.classes),
        names.INGRESS_HOSTS: ",".join(ingress.hosts),
        names.INGRESS_ANNOTATIONS: ",".join(ingress.annotations),
    }
    return {key: value for key, value in values.items() if value}


def twin_namespace_manifest(
    *, name: str, consumer_id: str, home_namespace: str, level: str, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The twin namespace ``name`` of ``consumer_id``'s ``home_namespace``, its pods held to ``level`` (pure).

    ``annotations``: :func:`twin_annotations`, so that the consumer's first writes there are judged by them.
    """
    labels = names.peer_labels(consumer_id) | {names.ORIGIN_NAMESPACE: home_namespace} | pod_security_labels(level)
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def twin_patch(namespace: dict[str, Any], *, level: str, annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """The merge patch bringing a twin's PSA labels to ``level`` and its :data:`TWIN_ANNOTATIONS` to ``annotations``.

    None if the twin says all that already (pure). Annotations of ours not in ``annotations`` are removed
    (``null`` in a merge patch); nobody else's are touched.
    """
    meta = namespace["metadata"]
    current_labels, current_annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    wanted_labels = pod_security_labels(level)
    patch: dict[str, Any] = {}
    if any(current_labels.get(key) != value for key, value in wanted_labels.items()):
        patch["labels"] = wanted_labels
    changed = {
        key: annotations.get(key) for key in TWIN_ANNOTATIONS if current_annotations.get(key) != annotations.get(key)
    }
    if changed:
        patch["annotations"] = changed
    return {"metadata": patch} if patch else None


def is_twin_of(namespace: dict[str, Any], *, consumer_id: str) -> bool:
    """Whether ``namespace`` is a twin this cluster made for ``consumer_id`` (never touch any other)."""
    labels = namespace["metadata"].get("labels") or {}
    return labels.get(names.REMOTE_CLUSTER_ID) == consumer_id and names.ORIGIN_NAMESPACE in labels


def twin_rules() -> list[dict[str, Any]]:
    """What a consumer's identity may do in its twins: ClusterRole ``liqo-peer-twin``, bound in each (pure)."""
    return [
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods"], "verbs": _ALL},
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"], "verbs": _ALL},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": _ALL},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _ALL},
        {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        # The kubelet API's streams (liqo.virtualkubelet.kubeletapi), opened as WebSockets: a GET, so "get", and
        # "create" as well since Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission).
        {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": _READ},
    ]


def twin_role_binding(*, namespace: str, consumer_id: str) -> dict[str, Any]:
    """The RoleBinding giving ``consumer_id``'s user :func:`twin_rules` in twin ``namespace`` (pure)."""
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": names.PEER_BINDING, "namespace": namespace, "labels": names.peer_labels(consumer_id)},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": names.PEER_TWIN_ROLE},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": names.peer_user(consumer_id)}],
    }
