"""Home Services → their copies in the twin: the same ports and selector, none of the home cluster's addresses (pure).

A pod on the provider resolves ``web.demo`` in its twin, so the Service must exist there, selecting the same
pods (the provider's own EndpointSlice controller then lists the pods running there) and exposing the same
ports. What the copy never carries:

- the home cluster's allocations: ``clusterIP(s)`` (the provider allocates its own; a headless Service's
  ``None`` is kept, it is semantics, not an allocation), ``nodePort``s, ``healthCheckNodePort``, IP families;
- anything that would open the provider's nodes or load balancers to the consumer: a ``NodePort`` or
  ``LoadBalancer`` Service becomes ``ClusterIP`` there, and ``externalIPs`` (which would let a consumer capture
  traffic to any address inside the provider, CVE-2020-8554) and the load-balancer fields are dropped.

An ``ExternalName`` Service is not copied at all (:func:`refusal`, said at home with an Event): it is a DNS
alias, inside the provider, of any name, and the provider's API server refuses it from peers.
"""

from __future__ import annotations

from liqo.kube.objects import Obj
from liqo.kube.resources import SERVICES
from liqo.virtualkubelet.forge.common import copy_metadata, reflected_by_default, same_metadata

HEADLESS = "None"
_KEPT_SPEC = (
    "selector",
    "ports",
    "type",
    "sessionAffinity",
    "sessionAffinityConfig",
    "publishNotReadyAddresses",
    "internalTrafficPolicy",
    "trafficDistribution",
)
"""What a copy's spec may say; everything else is the home cluster's or the provider's business."""
_PROVIDER_TYPES = {"NodePort": "ClusterIP", "LoadBalancer": "ClusterIP", "ExternalName": "ClusterIP"}
"""What a copy's type becomes: only ``ClusterIP`` is a peer's on the provider (ExternalName copies never go)."""
EXTERNAL_NAME = "ExternalName"
_DROPPED_PORT_FIELDS = ("nodePort",)


def reflectable(service: Obj) -> bool:
    """Whether a home Service is ever copied: not opted out, not a copy itself, not the API server's (pure)."""
    meta = service["metadata"]
    return reflected_by_default(service) and not (meta["name"] == "kubernetes" and meta.get("namespace") == "default")


def refusal(service: Obj) -> str | None:
    """Why a reflectable home Service is not copied (for an Event at home); None when it is (pure)."""
    if (service.get("spec") or {}).get("type") == EXTERNAL_NAME:
        return (
            "an ExternalName Service is not reflected: on the provider it would be a DNS alias of any name, which"
            " providers refuse from their consumers"
        )
    return None


def remote_spec(spec: Obj) -> Obj:
    """The spec of a home Service's copy (pure)."""
    remote = {key: spec[key] for key in _KEPT_SPEC if key in spec}
    if "type" in remote:
        remote["type"] = _PROVIDER_TYPES.get(remote["type"], remote["type"])
    if "ports" in remote:
        remote["ports"] = [{k: v for k, v in port.items() if k not in _DROPPED_PORT_FIELDS} for port in spec["ports"]]
    if spec.get("clusterIP") == HEADLESS:
        remote["clusterIP"] = HEADLESS
    return remote


def reflected_service(service: Obj, *, namespace: str, home_cluster_id: str) -> Obj:
    """The copy of home Service ``service`` in twin ``namespace`` (pure)."""
    copy = copy_metadata(service, resource=SERVICES, namespace=namespace, home_cluster_id=home_cluster_id)
    return copy | {"spec": remote_spec(service.get("spec") or {})}


def _headless(service: Obj) -> bool:
    return bool((service.get("spec") or {}).get("clusterIP") == HEADLESS)


def service_is_current(current: Obj, desired: Obj) -> bool:
    """Whether the copy as read already says what ``desired`` says (pure).

    Only the fields a copy may carry are compared: the provider fills in its own allocations and defaults.
    """
    have, want = current.get("spec") or {}, desired["spec"]
    return (
        all((have.get(key) or None) == (want.get(key) or None) for key in _KEPT_SPEC)
        and _headless(current) == _headless(desired)
        and same_metadata(current, desired)
    )


def must_replace(current: Obj, desired: Obj) -> bool:
    """Whether the copy must be deleted and made anew: a Service never turns headless or back (pure)."""
    return _headless(current) != _headless(desired)
