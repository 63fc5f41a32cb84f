"""Twin namespaces: the namespaces a provider creates for a consumer's offloaded ones, and the consumer's rights.

A twin carries the consumer's ID under ``REMOTE_CLUSTER_ID`` (so its pods count against that consumer's
budget and not as the provider's free capacity, and unpeer finds it) and its home namespace under
``ORIGIN_NAMESPACE``. The consumer's identity gets, in the twin only, what the virtual kubelet needs: its
ShadowPods and reflected objects, read access to the pods the provider made and to their logs and events,
and exec. It never gets to create pods directly: the provider decides what runs, from the ShadowPod. Those
rights are two roles: reading and deleting what it wrote (always), and writing (only while it holds an
accepted offer: a consumer denied or without an offer no longer steers this cluster's Services, slices and
Ingresses).

A twin is bounded before any of that is granted: a quota of object counts (:mod:`liqo.api.bounds`) and a
NetworkPolicy (:func:`twin_network_policy`: its pods reach their own, their home pods, DNS and what the
provider opens, nothing of the provider's), neither of which the consumer may touch; and a peer writes no
Secret of a type this cluster's controllers act on (:data:`PEER_REFUSED_SECRET_TYPES`).

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from liqo.api import names
from liqo.api.networks import SPECIAL_PURPOSE, ClusterNetwork, IPNetwork, NetworkPeer, PodNetwork
from liqo.api.quantity import format_quantity
from liqo.api.resources import VIRTUAL_KUBELET
from liqo.api.storage import ClassOffer

_RBAC = "rbac.authorization.k8s.io"
_READ = ["get", "list", "watch"]
_WRITE = ["create", "update", "patch"]


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


TWIN_ANNOTATIONS = (
    names.PEER_PODS,
    names.INGRESS_CLASSES,
    names.INGRESS_HOSTS,
    names.INGRESS_ANNOTATIONS,
    names.STORAGE_CLASSES,
)
"""The annotations of a twin the provider keeps: every one absent means "nothing allowed"."""


def twin_annotations(
    *, peer_pods: IPNetwork | None, ingress: IngressOffer, storage: Sequence[ClassOffer]
) -> dict[str, str]:
    """What a twin of a consumer tells the API server's policies: its pods' block, its Ingresses', its claims' offer.

    Pure. Lists are joined with commas (the CEL side splits them; no class, host, annotation key, access mode or
    quantity holds one, nor a ``:`` or ``|``). An empty value is left out: the policies read an absent annotation as
    "nothing allowed".
    """
    values = {
        names.PEER_PODS: str(peer_pods) if peer_pods is not None else "",
        names.INGRESS_CLASSES: ",".join(ingress.classes),
        names.INGRESS_HOSTS: ",".join(ingress.hosts),
        names.INGRESS_ANNOTATIONS: ",".join(ingress.annotations),
        names.STORAGE_CLASSES: ",".join(
            f"{offer.name}:{'|'.join(offer.access_modes)}:{format_quantity(offer.capacity, resource='storage')}"
            for offer in storage
        ),
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


_PEER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (VIRTUAL_KUBELET, ("shadowpods",)),
    ("", ("configmaps", "secrets", "services", "persistentvolumeclaims")),
    ("networking.k8s.io", ("ingresses",)),
    ("discovery.k8s.io", ("endpointslices",)),
)
"""What a consumer writes in its twins: its ShadowPods, the copies of its objects and its claims."""
_STREAMS = ["pods/exec", "pods/attach", "pods/portforward"]


def twin_rules() -> list[dict[str, Any]]:
    """What a consumer's identity may do in its twins at all times: ClusterRole ``liqo-peer-twin`` (pure).

    Read, and delete what it wrote: a consumer whose offer is gone still withdraws its ShadowPods and copies (its
    home pods go with its virtual node), and nothing it deletes is this cluster's.
    """
    return [
        *(
            {"apiGroups": [group], "resources": list(kinds), "verbs": [*_READ, "delete"]}
            for group, kinds in _PEER_KINDS
        ),
        {"apiGroups": [VIRTUAL_KUBELET], "resources": ["shadowpods/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": _READ},
    ]


def twin_writer_rules() -> list[dict[str, Any]]:
    """What it may do there while it holds an accepted offer: ClusterRole ``liqo-peer-twin-writer`` (pure).

    Create and change its ShadowPods, ConfigMaps, Secrets, Services, Ingresses and EndpointSlices (the last three
    steer this cluster's traffic), and open streams to its pods. Never pods themselves: the provider decides what
    runs, from the ShadowPod.
    """
    return [
        *({"apiGroups": [group], "resources": list(kinds), "verbs": _WRITE} for group, kinds in _PEER_KINDS),
        # The kubelet API's streams (liqo.virtualkubelet.kubeletapi), opened as WebSockets: a GET, so "get", and
        # "create" as well since Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission).
        {"apiGroups": [""], "resources": _STREAMS, "verbs": ["get", "create"]},
    ]


def twin_role_binding(*, namespace: str, consumer_id: str, writer: bool = False) -> dict[str, Any]:
    """The RoleBinding of ``consumer_id``'s user in twin ``namespace`` (pure).

    To :func:`twin_rules`, or with ``writer`` to :func:`twin_writer_rules`.
    """
    name, role = (
        (names.PEER_WRITER_BINDING, names.PEER_TWIN_WRITER_ROLE)
        if writer
        else (names.PEER_BINDING, names.PEER_TWIN_ROLE)
    )
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": names.peer_labels(consumer_id)},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": names.peer_user(consumer_id)}],
    }


PEER_REFUSED_SECRET_TYPES = ("kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token")
"""Secret types a peer may not write (the policy ``liqo-peer-secrets``): this cluster's controllers act on them.

A ``kubernetes.io/service-account-token`` Secret naming a ServiceAccount of the twin (``default`` is in every
namespace) is filled by the token controller with a token that never expires: a credential of this cluster, minted
at the peer's word, readable by it. A ``bootstrap.kubernetes.io/token`` is a node-join credential (read only in
``kube-system``, never a twin, but no copy of a consumer's has any use here). Every other type is data the peer's
own pods and Ingresses read (``Opaque``, ``kubernetes.io/tls``, ``kubernetes.io/dockerconfigjson``...)."""


# -- the twin's NetworkPolicy ---------------------------------------------------------------------------------

NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""A namespace's name as a label: the API server writes it, so selecting by it is selecting by name."""
KUBE_DNS = {"k8s-app": "kube-dns"}
"""The cluster DNS's pods in ``kube-system`` (CoreDNS keeps kube-dns's label)."""
_DNS_PORTS = [{"protocol": protocol, "port": 53} for protocol in ("UDP", "TCP")]


def twins_selector(consumer_id: str) -> dict[str, Any]:
    """The namespaces that are ``consumer_id``'s twins, by the labels this cluster alone writes on them (pure)."""
    return {
        "matchLabels": {names.REMOTE_CLUSTER_ID: consumer_id},
        "matchExpressions": [{"key": names.ORIGIN_NAMESPACE, "operator": "Exists"}],
    }


def closed_blocks(local: ClusterNetwork) -> tuple[IPNetwork, ...]:
    """What no CIDR of a policy opens to a consumer's pods (pure).

    This cluster's pods and Services (opened by namespace, if at all) and the special-purpose ranges (loopback,
    link-local where cloud metadata endpoints answer...).
    """
    return (*SPECIAL_PURPOSE, local.pod_cidr, local.service_cidr)


def open_block(peer: NetworkPeer, *, closed: Sequence[IPNetwork]) -> dict[str, Any] | None:
    """The ``ipBlock`` opening ``peer``'s CIDR but its exceptions and the ``closed`` blocks; None if nothing is left.

    Pure. Nothing is left when the CIDR lies within a closed block or an exception. Networks are either disjoint
    or nested, so a closed block either holds the whole CIDR, lies inside it (an exception), or does not touch it.
    """
    cidr = peer.cidr
    assert cidr is not None
    within: set[IPNetwork] = set()
    for block in (*peer.excepted, *closed):
        if block.version != cidr.version or not block.overlaps(cidr):
            continue
        if cidr.subnet_of(block):  # type: ignore[arg-type]  # same version, checked above
            return None
        within.add(block)
    rendered: dict[str, Any] = {"cidr": str(cidr)}
    if within:
        rendered["except"] = [str(block) for block in sorted(within, key=lambda b: (b.network_address, b.prefixlen))]
    return {"ipBlock": rendered}


def _peers(allowed: Iterable[NetworkPeer], *, closed: Sequence[IPNetwork]) -> list[dict[str, Any]]:
    rendered = []
    for peer in allowed:
        if peer.namespace:
            rendered.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: peer.namespace}}})
        elif (block := open_block(peer, closed=closed)) is not None:
            rendered.append(block)
    return rendered


def twin_network_policy(
    *, namespace: str, consumer_id: str, home_pods: IPNetwork | None, local: ClusterNetwork, allowed: PodNetwork
) -> dict[str, Any]:
    """The NetworkPolicy of twin ``namespace``: where ``consumer_id``'s pods there may connect, and from where (pure).

    Out: the consumer's pods in its twins, its home pods where this cluster sees them (``home_pods``:
    :func:`liqo.api.networks.pods_seen_at`, the block the twin's ``liqo.io/peer-pods`` annotation names too; None
    while unknown), the cluster DNS, and what its SharingPolicy opens
    (``allowed``), never this cluster's pods, Services or special-purpose ranges by CIDR (:func:`open_block`). In:
    the same pods, and its gateway. Nothing else: not this cluster's nodes, its API server, the manager's webhook
    listener, other pods, ``169.254.169.254``. Only a CNI that enforces NetworkPolicy makes this hold.
    """
    closed = closed_blocks(local)
    own = [{"namespaceSelector": twins_selector(consumer_id)}]
    if home_pods is not None:
        own.append({"ipBlock": {"cidr": str(home_pods)}})
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: names.LIQO_NAMESPACE}},
        "podSelector": {"matchLabels": names.gateway_labels(consumer_id)},
    }
    dns = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: "kube-system"}},
        "podSelector": {"matchLabels": dict(KUBE_DNS)},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.PEER_NETWORK_POLICY,
            "namespace": namespace,
            "labels": names.peer_labels(consumer_id),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [*own, gateway, *_peers(allowed.ingress, closed=closed)]}],
            "egress": [
                {"to": [*own, *_peers(allowed.egress, closed=closed)]},
                {"to": [dns], "ports": [dict(port) for port in _DNS_PORTS]},
            ],
        },
    }


def network_policy_matches(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Whether the NetworkPolicy as read says what ``desired`` says (pure)."""
    return current is not None and current.get("spec") == desired["spec"]
