"""Home Ingresses → their copies in the twin: the same rules, on a class of the provider's (pure).

The rules name Services and TLS Secrets of the namespace, which are reflected too, so a copy works as it is,
on a class the provider serves. A provider accepts a consumer's Ingress only on a class its SharingPolicy
offers that consumer, named in ``ingressClassName`` (docs/security.md, "Ingresses"), so the copy always names
one: the home class mapped through the operator's table (``--ingress-class home=provider``), or the home class
as it is when the table has no entry (both sides often call theirs ``nginx``). An Ingress naming no class
(left to home's default) is not copied (:func:`refusal`, said at home with an Event): the provider's default
class may well be its public one, which is exactly what it must choose to offer. The legacy
``kubernetes.io/ingress.class`` annotation is never copied (:data:`~.common.DROPPED_ANNOTATIONS`).
"""

from __future__ import annotations

from collections.abc import Mapping

from liqo.kube.objects import Obj
from liqo.kube.resources import INGRESSES
from liqo.virtualkubelet.forge.common import copy_metadata, reflected_by_default, same_metadata


def reflectable(ingress: Obj) -> bool:
    """Whether a home Ingress is ever copied (pure)."""
    return reflected_by_default(ingress)


def refusal(ingress: Obj) -> str | None:
    """Why a reflectable home Ingress is not copied (for an Event at home); None when it is (pure)."""
    if not (ingress.get("spec") or {}).get("ingressClassName"):
        return (
            "an Ingress naming no class (spec.ingressClassName) is not reflected: a provider serves its consumers'"
            " Ingresses on the classes it offers them only; name one (--ingress-class maps a home class to the"
            " provider's)"
        )
    return None


def reflected_ingress(
    ingress: Obj, *, namespace: str, home_cluster_id: str, classes: Mapping[str, str] | None = None
) -> Obj:
    """The copy of home Ingress ``ingress`` in twin ``namespace``, its class mapped by ``classes`` (pure)."""
    spec = dict(ingress.get("spec") or {})
    home_class = spec.get("ingressClassName")
    if home_class and classes and home_class in classes:
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
