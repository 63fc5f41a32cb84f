"""Home ConfigMaps and Secrets → their copies in the twin: same name, content and metadata, marked (pure).

Pods mount them by name from their namespace, so the copy keeps everything; never copied are what each
cluster has of its own (its root CA ConfigMap, ServiceAccount token Secrets).
"""

from __future__ import annotations

from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS, SECRETS, Resource
from liqo.virtualkubelet.forge.common import (
    copy_metadata,
    goes_back_to,
    not_skipped,
    reflected_by_default,
    same_metadata,
)

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
"""Published by every cluster into every namespace: the provider's own must stay (its pods trust its API)."""
SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
"""Legacy token Secrets: home tokens the provider's token controller would fight over (and must not read)."""
_COPIED_FIELDS = ("data", "binaryData", "type", "immutable")
_CONTENT_FIELDS = ("data", "binaryData", "immutable")


def reflectable(obj: Obj, *, resource: Resource, provider_id: str) -> bool:
    """Whether a home ConfigMap or Secret is ever copied to provider ``provider_id``, whatever the policy (pure).

    Never: the cluster's root CA ConfigMap, ServiceAccount token Secrets, objects annotated
    ``liqo.io/skip-reflection: "true"``, and copies or pod tokens themselves, but back to the cluster they
    came from (:func:`~liqo.virtualkubelet.forge.common.goes_back_to`).
    """
    if not reflected_by_default(obj) and not (not_skipped(obj) and goes_back_to(obj, provider_id=provider_id)):
        return False
    if resource == CONFIGMAPS:
        return bool(obj["metadata"]["name"] != ROOT_CA_CONFIGMAP)
    return bool(resource == SECRETS and obj.get("type") != SERVICE_ACCOUNT_TOKEN_TYPE)


def reflected_copy(obj: Obj, *, resource: Resource, namespace: str, home_cluster_id: str) -> Obj:
    """The copy of home ConfigMap or Secret ``obj`` in twin ``namespace``: same name, content and metadata (pure)."""
    copy = copy_metadata(obj, resource=resource, namespace=namespace, home_cluster_id=home_cluster_id)
    return copy | {field: obj[field] for field in _COPIED_FIELDS if field in obj}


def _same(current: Obj, desired: Obj, fields: tuple[str, ...]) -> bool:
    # The API server leaves empty maps and a false ``immutable`` out of what it returns.
    return all((current.get(field) or None) == (desired.get(field) or None) for field in fields)


def copy_is_current(current: Obj, desired: Obj) -> bool:
    """Whether the copy ``current`` (as read) already says what ``desired`` says (pure)."""
    return _same(current, desired, _COPIED_FIELDS) and same_metadata(current, desired)


def must_replace(current: Obj, desired: Obj) -> bool:
    """Whether the copy cannot be updated into ``desired`` and must be deleted and made anew (pure).

    A Secret's type never changes, nor does an immutable object's content: the home object was deleted and
    re-created differently under the same name.
    """
    if current.get("type") != desired.get("type"):
        return True
    return bool(current.get("immutable")) and not _same(current, desired, _CONTENT_FIELDS)
