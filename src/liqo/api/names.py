"""Names, labels and annotations every liqo component agrees on.

Cleanup and ownership never depend on guesses: every object liqo creates carries ``MANAGED_BY``, and every
object about a peer carries that peer's cluster ID under ``REMOTE_CLUSTER_ID``. Unpeer and uninstall find
what to delete by these labels alone.
"""

from __future__ import annotations

LIQO_NAMESPACE = "liqo"
"""Where liqo's own components, the cluster identity and the authentication token live."""

CLUSTER_IDENTITY = "liqo-cluster-identity"
"""ConfigMap in LIQO_NAMESPACE: ``clusterID``, ``clusterName``, ``apiServerURL``, ``authURL``."""

AUTH_TOKEN_SECRET = "liqo-auth-token"
"""Secret in LIQO_NAMESPACE (key ``token``): what a new consumer must prove it knows to enrol."""

CLUSTER_KEY_SECRET = "liqo-cluster-key"
"""Secret in LIQO_NAMESPACE (key ``privateKey``): this cluster's Ed25519 key (:mod:`liqo.api.clusterkey`)."""

PEER_TOKEN_SECRET = "liqo-peer-token"
"""Secret in a consumer's tenant namespace (key ``token``): the provider's token, given out of band."""

IDENTITY_SECRET = "liqo-identity"
"""Secret in a consumer's tenant namespace (key ``kubeconfig``): the identity the provider issued."""

TENANT_NAMESPACE_PREFIX = "liqo-tenant-"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "liqo"
REMOTE_CLUSTER_ID = "liqo.io/remote-cluster-id"
"""On every object about a peer: the peer's cluster ID."""
TENANT = "liqo.io/tenant"
"""``"true"`` on tenant namespaces."""
REPLICATED = "liqo.io/replicated"
"""``"true"`` on objects the replicator copied from a peer (never edit them by hand)."""
VIRTUAL_NODE_TYPE = "liqo.io/type"
"""``VIRTUAL_NODE`` on virtual Nodes (and VirtualNode resources): never counted as local capacity."""
VIRTUAL_NODE = "virtual-node"
EXPIRES_AT = "liqo.io/expires-at"
"""On identity Secrets: when the certificate expires (RFC 3339)."""

PEER_USER_PREFIX = "liqo.io:peer:"
"""Peers authenticate as the user ``liqo.io:peer:<cluster-id>`` (their certificate's CN)."""

FINALIZER = "liqo.io/cleanup"


def tenant_namespace(cluster_id: str) -> str:
    """The namespace holding everything about peer ``cluster_id``, on either side of a peering."""
    return f"{TENANT_NAMESPACE_PREFIX}{cluster_id}"


def peer_user(cluster_id: str) -> str:
    """The Kubernetes user name of peer ``cluster_id``'s identity."""
    return f"{PEER_USER_PREFIX}{cluster_id}"


def peer_labels(cluster_id: str) -> dict[str, str]:
    """The labels of every object liqo creates about peer ``cluster_id``."""
    return {MANAGED_BY: MANAGED_BY_VALUE, REMOTE_CLUSTER_ID: cluster_id}


# -- offloading ------------------------------------------------------------------------------------------

OFFLOADING = "offloading"
"""The only name a NamespaceOffloading may have: one per namespace, as in Liqo."""
SCHEDULING_ENABLED = "liqo.io/scheduling-enabled"
"""``"true"`` on home namespaces being offloaded: the pod webhook is called for those only."""
ORIGIN_NAMESPACE = "liqo.io/origin-namespace"
"""On twin namespaces (provider side): the home namespace they stand for."""
VIRTUAL_NODE_TAINT = "virtual-node.liqo.io/not-allowed"
"""Key of the NoExecute taint on virtual nodes; only pods the webhook let through tolerate it."""
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
LARGEST_SLOTS = "liqo.io/largest-slots"
"""On virtual Nodes: the provider's largest slots (JSON), the biggest pods it can still place on one node."""
TWIN_PREFIX_LENGTH = 8
"""How many characters of the home cluster ID suffix a twin namespace's DefaultName."""
_DNS_LABEL_MAX = 63


def twin_namespace(namespace: str, *, home_cluster_id: str, enforce_same_name: bool = False) -> str:
    """The provider-side name of home ``namespace`` (``<ns>-<home-id-prefix>`` unless the same name is enforced).

    The suffix keeps two consumers' namespaces of the same name apart on one provider; a long name is cut so
    that the result stays a DNS label and the suffix survives.
    """
    if enforce_same_name:
        return namespace
    suffix = "-" + home_cluster_id[:TWIN_PREFIX_LENGTH]
    return namespace[: _DNS_LABEL_MAX - len(suffix)].rstrip("-") + suffix
