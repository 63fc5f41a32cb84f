"""Home Ingresses → their copies in the twin: the same rules, the provider's own ingress class (pure).

The rules name Services and TLS Secrets of the namespace, which are reflected too, so a copy works as it is,
except for its class: a home IngressClass means nothing on the provider. ``ingressClassName`` is mapped
through the operator's table (``--ingress-class home=provider``) when it has an entry, and cleared
otherwise, so that the provider's default class (if any) serves it. The legacy
``kubernetes.io/ingress.class`` annotation is never copied (:data:`~.common.DROPPED_ANNOTATIONS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from liqo.kube.resources import INGRESSES
from liqo.virtualkubelet.forge.common import copy_metadata, reflected_by_default, same_metadata

Obj = dict[str, Any]


def reflectable(ingress: Obj) -> bool:
    """Whether a home Ingress is ever copied (pure)."""
    return reflected_by_default(ingress)


def reflected_ingress(
    ingress: Obj, *, namespace: str, home_cluster_id: str, classes: Mapping[str, str] | None = None
) -> Obj:
    """The copy of home Ingress ``ingress`` in twin ``namespace``, its class mapped by ``classes`` (pure)."""
    spec = dict(ingress.get("spec") or {})
    home_class = spec.pop("ingressClassName", None)
    if home_class is not None and classes and home_class in classes:
        spec["ingressClassName"] = classes[home_class]
    copy = copy_metadata(ingress, resource=INGRESSES, namespace=namespace, home_cluster_id=home_cluster_id)
    return copy | {"spec": spec}


def ingress_is_current(current: Obj, desired: Obj) -> bool:
    """Whether the copy as read already says what ``desired`` says (pure)."""
    return bool((current.get("spec") or {}) == desired["spec"] and same_metadata(current, desired))


def must_replace(current: Obj, desired: Obj) -> bool:
    """Never: every field of an Ingress copy can be updated (pure)."""
    del current, desired
    return False
