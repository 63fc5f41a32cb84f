"""Names, labels and annotations every liqo component agrees on.

Cleanup and ownership never depend on guesses: every object liqo creates carries ``MANAGED_BY``, and every
object about a peer carries that peer's cluster ID under ``REMOTE_CLUSTER_ID``. Unpeer and uninstall find
what to delete by these labels alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

LIQO_NAMESPACE = "liqo"
"""Where liqo's own components, the cluster identity and the enrolment tokens live."""

CLUSTER_IDENTITY = "liqo-cluster-identity"
"""ConfigMap in LIQO_NAMESPACE: ``clusterID``, ``clusterName``, ``apiServerURL``, ``authURL`` (by the manager)."""

CLUSTER_SETTINGS = "liqo-settings"
"""ConfigMap in LIQO_NAMESPACE: what the install was told (name, labels, URLs, network), for the manager."""

LEGACY_AUTH_TOKEN_SECRET = "liqo-auth-token"
"""Secret in LIQO_NAMESPACE of earlier versions: one token every consumer enrolled with. Deleted at start-up:
each consumer now enrols with a token of its own (:mod:`liqo.peering.tokens`)."""

CLUSTER_KEY_SECRET = "liqo-cluster-key"
"""Secret in LIQO_NAMESPACE (key ``privateKey``): this cluster's Ed25519 key (:mod:`liqo.api.clusterkey`)."""

PEER_TOKEN_SECRET = "liqo-peer-token"
"""Secret in a consumer's tenant namespace (key ``token``): the enrolment token the provider minted for it."""

IDENTITY_SECRET = "liqo-identity"
"""Secret in a consumer's tenant namespace (key ``kubeconfig``): the identity the provider issued."""

TENANT_NAMESPACE_PREFIX = "liqo-tenant-"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "liqo"
REMOTE_CLUSTER_ID = "liqo.io/remote-cluster-id"
"""On every object about a peer: the peer's cluster ID."""
DISCOVERED_BY = "discovery.liqo.io/source"
"""On a ForeignCluster made from an announcement: the DiscoverySource it was heard in (it expires with it)."""
TENANT = "liqo.io/tenant"
"""``"true"`` on tenant namespaces."""
REPLICATED = "liqo.io/replicated"
"""``"true"`` on objects the replicator copied from a peer (never edit them by hand)."""
VIRTUAL_NODE_TYPE = "liqo.io/type"
"""``VIRTUAL_NODE`` on virtual Nodes (and VirtualNode resources): never counted as local capacity."""
VIRTUAL_NODE = "virtual-node"
EXPIRES_AT = "liqo.io/expires-at"
"""On identity Secrets: when the certificate expires; on enrolment tokens' Secrets: when the token does (RFC 3339)."""

PEER_USER_PREFIX = "liqo.io:peer:"
"""Peers authenticate as the user ``liqo.io:peer:<cluster-id>`` (their certificate's CN)."""

FINALIZER = "liqo.io/cleanup"

PEER_TENANT_ROLE = "liqo-peer-tenant"
"""ClusterRole (installed by ``liqoctl install``) of a consumer's user in its tenant namespace, bound there only."""
PEER_TWIN_ROLE = "liqo-peer-twin"
"""ClusterRole (installed by ``liqoctl install``) of a consumer's user in its twin namespaces, bound there only:
what it holds there at all times (read, and delete what it wrote)."""
PEER_TWIN_WRITER_ROLE = "liqo-peer-twin-writer"
"""ClusterRole (installed by ``liqoctl install``) of a consumer's user in its twins while it holds an accepted offer:
create and change its objects there, and open streams to its pods."""
PEER_BINDING = "liqo-peer"
"""Name of the RoleBinding of a consumer's user in its tenant namespace and in each of its twins."""
PEER_WRITER_BINDING = "liqo-peer-writer"
"""Name of the RoleBinding of :data:`PEER_TWIN_WRITER_ROLE` in a twin (present only while the offer is accepted)."""
PEER_QUOTA = "liqo-peer-objects"
"""Name of the ResourceQuota bounding the objects a peer may make in each of its namespaces (liqo.api.bounds)."""
PEER_NETWORK_POLICY = "liqo-peer-traffic"
"""Name of the NetworkPolicy of every twin: where the consumer's pods there may connect, and who may reach them."""

MAX_CLUSTER_NAME = 253
"""The longest cluster name a peer may claim (a DNS subdomain's length); printable text, as a name is shown."""

_NAME_BASE_MAX = 48
"""A peer's name is cut to this, so that ``liqo-<name>-<8 ID characters>`` is a node name of at most 62."""
_ID_PREFIX = 8


def foreign_cluster_names(*, cluster_id: str, cluster_name: str) -> list[str]:
    """Names to try, in order, for the ForeignCluster of peer ``cluster_id`` that calls itself ``cluster_name``.

    The peer picks its name, so it is only a hint: lowercased, every run of anything but ``a-z0-9`` made a
    ``-``, cut short; then the same with the first characters of the ID, for when another peer has that name;
    then the ID. The caller takes the first one no other peer's ForeignCluster has (pure).
    """
    base = re.sub(r"[^a-z0-9]+", "-", cluster_name.lower()).strip("-")[:_NAME_BASE_MAX].rstrip("-")
    tried = [base, f"{base}-{cluster_id[:_ID_PREFIX]}"] if base else []
    return list(dict.fromkeys([*tried, cluster_id]))


def tenant_namespace(cluster_id: str) -> str:
    """The namespace holding everything about peer ``cluster_id``, on either side of a peering."""
    return f"{TENANT_NAMESPACE_PREFIX}{cluster_id}"


def tenant_peer_id(namespace: str) -> str | None:
    """The peer whose tenant namespace ``namespace`` is, if it is one: the one reading of that name (pure)."""
    if namespace.startswith(TENANT_NAMESPACE_PREFIX):
        return namespace.removeprefix(TENANT_NAMESPACE_PREFIX) or None
    return None


def tenant_peer(obj: Mapping[str, Any]) -> list[str]:
    """The peer whose tenant namespace holds ``obj``, as a controller's watch maps it: one ID, or none (pure)."""
    peer = tenant_peer_id((obj.get("metadata") or {}).get("namespace") or "")
    return [peer] if peer else []


def labelled_peer_id(obj: Mapping[str, Any]) -> str | None:
    """The peer ``obj``'s ``REMOTE_CLUSTER_ID`` label names, if any: the one reading of that label (pure).

    A label says only what the object's writer claims; who that writer may be is the caller's to know (an
    object of a cache of what this cluster writes, or a namespace the peer was never given).
    """
    peer = ((obj.get("metadata") or {}).get("labels") or {}).get(REMOTE_CLUSTER_ID)
    return str(peer) if peer else None


def labelled_peer(obj: Mapping[str, Any]) -> list[str]:
    """The peer ``obj``'s label names, as a controller's watch maps it: one ID, or none (pure)."""
    peer = labelled_peer_id(obj)
    return [peer] if peer else []


def peer_user(cluster_id: str) -> str:
    """The Kubernetes user name of peer ``cluster_id``'s identity."""
    return f"{PEER_USER_PREFIX}{cluster_id}"


def peer_labels(cluster_id: str) -> dict[str, str]:
    """The labels of every object liqo creates about peer ``cluster_id``."""
    return {MANAGED_BY: MANAGED_BY_VALUE, REMOTE_CLUSTER_ID: cluster_id}


COMPONENT = "liqo.io/component"
GATEWAY = "gateway"


def gateway_labels(peer_id: str) -> dict[str, str]:
    """The labels of everything that makes up ``peer_id``'s gateway.

    What finds it for clean-up, and what a twin's NetworkPolicy lets reach the consumer's pods.
    """
    return peer_labels(peer_id) | {COMPONENT: GATEWAY}


# -- offloading ------------------------------------------------------------------------------------------

OFFLOADING = "offloading"
"""The only name a NamespaceOffloading may have: one per namespace, as in Liqo."""
SCHEDULING_ENABLED = "liqo.io/scheduling-enabled"
"""``"true"`` on home namespaces being offloaded: the pod webhook is called for those only."""
ORIGIN_NAMESPACE = "liqo.io/origin-namespace"
"""On twin namespaces (provider side): the home namespace they stand for."""
MADE_FOR_TETHER = "liqo.io/made-for-tether"
"""On a NamespaceOffloading the working-mode switch made (``"true"``): the tether undoes it, and only it."""
TETHERED_DEVICE = "liqo.io/tethered-device"
"""``"true"`` on a consumer's virtual node for a provider tethered to it (its offer says so)."""
STAYS_LOCAL = "liqo.io/stays-local"
"""``"true"`` on a namespace a tether must not offload (the admin's choice, besides the system namespaces)."""
PEER_PODS = "liqo.io/peer-pods"
"""On twin namespaces (provider side): the CIDR this cluster sees the consumer's pods at; the only addresses
the consumer's EndpointSlices there may list (absent: none). Kept by the provider's manager; a peer never
writes namespaces, so the API server's admission policies may trust it."""
INGRESS_CLASSES = "liqo.io/ingress-classes"
"""On twin namespaces: the IngressClasses the provider's policy offers the consumer's Ingresses, comma-separated
(absent: none, so no Ingress of the consumer's is accepted)."""
INGRESS_HOSTS = "liqo.io/ingress-hosts"
"""On twin namespaces: the hosts those Ingresses may name, comma-separated: ``shop.example.com``, or
``*.example.com`` for any name under that domain."""
INGRESS_ANNOTATIONS = "liqo.io/ingress-annotations"
"""On twin namespaces: the annotation keys those Ingresses may carry beyond the built-in few, comma-separated."""
STORAGE_CLASSES = "liqo.io/storage-classes"
"""On twin namespaces: the StorageClasses the provider's policy offers the consumer's claims, each as
``<class>:<access mode>|<access mode>...:<capacity>``, comma-separated (absent: none, so no claim of the consumer's
is accepted)."""
VIRTUAL_NODE_TAINT = "virtual-node.liqo.io/not-allowed"
"""Key of the NoExecute taint on virtual nodes; only pods the webhook let through tolerate it."""


def virtual_node_toleration() -> dict[str, str]:
    """The toleration of the virtual nodes' taint (and only of it: no ``tolerationSeconds``)."""
    return {"key": VIRTUAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoExecute"}


SHADOW_POD = "liqo.io/shadow-pod"
"""On pods a provider runs for a consumer: the name of their ShadowPod (same namespace)."""
HOME_POD_UID = "liqo.io/home-pod-uid"
"""On ShadowPods and their pods: the UID of the home pod they stand for."""
GRACE_PERIOD = "liqo.io/grace-period-seconds"
"""On a ShadowPod about to be deleted: the home pod's grace period, which the provider honours."""
SKIP_REFLECTION = "liqo.io/skip-reflection"
"""``"true"`` on a ConfigMap or Secret: never copy it to providers."""
ORIGIN = "offloading.liqo.io/origin"
"""On the copies a virtual kubelet keeps of another cluster's objects (home ConfigMaps and Secrets in a twin,
a provider's pod Events at home): that cluster's ID. Reflection updates and deletes nothing without it."""
POD_TOKEN = "offloading.liqo.io/pod-token"
"""``"true"`` on the Secret in a twin holding the home ServiceAccount token of one offloaded pod."""
HOME_POD = "liqo.io/home-pod"
"""On a pod-token Secret: the home pod's name (the Secret's own name is a digest of it)."""
RENEW_AT = "liqo.io/renew-at"
"""On a pod-token Secret: when its token is replaced (at 80% of its lifetime, RFC 3339)."""
TOKEN_CA = "liqo.io/home-ca-sha256"
"""On a pod-token Secret: the digest of the home CA it holds, so that a CA change is seen from metadata."""
LARGEST_SLOTS = "liqo.io/largest-slots"
"""On virtual Nodes: the provider's largest slots (JSON), the biggest pods it can still place on one node."""
SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
REFLECTION_MANAGER = "reflection.liqo.io"
"""The manager of the EndpointSlices a consumer reflects into its twins (the provider's EndpointSlice and
mirroring controllers leave slices of other managers alone)."""
CONSUMER_HEARTBEAT = "liqo-consumer-heartbeat"
"""The Lease a consumer's virtual kubelet renews in its tenant namespace on a provider while it reaches it:
the provider turns the endpoints that consumer reflected not-ready when it stops."""
TWIN_PREFIX_LENGTH = 8
"""How many characters of the home cluster ID suffix a twin namespace's DefaultName."""
_DNS_LABEL_MAX = 63
VIRTUAL_NODE_PREFIX = "liqo-"
_DIGEST_LENGTH = 12


def virtual_node_name(foreign_cluster: str) -> str:
    """The virtual node of the provider whose ForeignCluster is named ``foreign_cluster`` (pure).

    ForeignCluster names are unique on a cluster and there is one per provider, so node names are too; a node
    name is also its ``kubernetes.io/hostname`` label, hence at most 63 characters. Names up to 62 are used
    as they are; longer ones are cut and end in a digest of the whole, which makes them exactly 63 long, so a
    cut name never equals another provider's uncut one.
    """
    name = f"{VIRTUAL_NODE_PREFIX}{foreign_cluster}"
    if len(name) < _DNS_LABEL_MAX:
        return name
    digest = hashlib.sha256(foreign_cluster.encode()).hexdigest()[:_DIGEST_LENGTH]
    # A dot of the ForeignCluster's name may not precede the "-" (DNS), so the cut part keeps none.
    return f"{name[: _DNS_LABEL_MAX - _DIGEST_LENGTH - 1].replace('.', '-')}-{digest}"


def twin_namespace(namespace: str, *, home_cluster_id: str, enforce_same_name: bool = False) -> str:
    """The provider-side name of home ``namespace`` (``<ns>-<home-id-prefix>`` unless the same name is enforced).

    The suffix keeps two consumers' namespaces of the same name apart on one provider; a long name is cut so
    that the result stays a DNS label and the suffix survives. A provider gives the suffixed name; the same
    name only where its SharingPolicy for the consumer allows it (``liqo.offloading.provider_namespaces``).
    """
    if enforce_same_name:
        return namespace
    suffix = "-" + home_cluster_id[:TWIN_PREFIX_LENGTH]
    return namespace[: _DNS_LABEL_MAX - len(suffix)].rstrip("-") + suffix
