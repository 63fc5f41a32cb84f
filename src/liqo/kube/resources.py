"""Which API resources we speak to, described as plain data, and what every controller reads off any object.

A :class:`Resource` is everything needed to build a request path: no discovery round-trip, no generated
model classes. Keeping the description pure (as lightkube does with its request data) lets the path
logic be unit-tested without a server, and keeps the hot path on plain dicts.

Objects are plain dicts too, so the few facts every controller reads off one live here, once: its cache key
(:func:`object_key`, which informers index by and work queues carry, and :func:`split_key` back) and whether
it is being deleted (:func:`terminating`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """An API resource: group/version/plural plus the kind and scope that go with it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field value of objects of this resource."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object when ``name`` is given.

        A namespaced resource without ``namespace`` addresses the collection across all namespaces.
        """
        if not self.namespaced and namespace:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace expected, got {namespace!r}")
        if subresource and not name:
            raise ValueError("a subresource needs an object name")
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
CSI_DRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
INGRESSES = Resource("networking.k8s.io", "v1", "ingresses", "Ingress", namespaced=True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
POD_TEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", namespaced=True)
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", namespaced=True)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
CSRS = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", namespaced=False
)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
VALIDATING_ADMISSION_POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
MUTATING_ADMISSION_POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", "MutatingAdmissionPolicy", namespaced=False
)
MUTATING_ADMISSION_POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingadmissionpolicybindings",
    "MutatingAdmissionPolicyBinding",
    namespaced=False,
)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)


def object_key(obj: Mapping[str, Any]) -> str:
    """The cache key of an object: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValueError("object has no metadata")
    name = meta.get("name")
    namespace = meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """The (namespace, name) pair of a cache key made by :func:`object_key`."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, namespace)


def split_namespaced_key(key: str) -> tuple[str, str]:
    """The (namespace, name) pair of the cache key of a namespaced object.

    Raises:
        ValueError: ``key`` is a cluster-scoped object's.
    """
    namespace, name = split_key(key)
    if namespace is None:
        raise ValueError(f"{key!r} is not the key of a namespaced object")
    return namespace, name


def terminating(obj: Mapping[str, Any] | None) -> bool:
    """Whether ``obj`` exists and is being deleted (its ``metadata.deletionTimestamp`` is set)."""
    return obj is not None and bool((obj.get("metadata") or {}).get("deletionTimestamp"))


_BOOKKEEPING = frozenset({"resourceVersion", "managedFields"})
"""Metadata the API server rewrites on every write, status writes included."""


def changed_beyond_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an update changed more than the object's status (pure): an update predicate for ``Controller.watch``.

    A reconciler that writes the status of the very object it watches, and reads nothing of it, would
    otherwise wake itself with its own write: a loop, at the pace of the API server.
    """

    def beyond_status(obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _BOOKKEEPING}
        return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}

    return beyond_status(old) != beyond_status(new)
