"""Home EndpointSlices → slices in the twin: the Service's endpoints at home, as the provider must dial them (pure).

A Service copied into a twin keeps its selector, so the provider's own EndpointSlice controller lists the
pods running there. What it cannot see are the endpoints elsewhere: the pods running at home (and the
Service's hand-made endpoints, for a Service without selector). So, for every home slice of a reflected
Service, a slice in the twin lists them, each address translated to what the provider must dial
(:func:`liqo.api.networks.translate`, with home as the owner and the provider as the reader). Per endpoint:

- on this provider's virtual node: skipped — the provider's controller already lists that pod, under the
  address the provider itself gave it;
- on another virtual node: refused — that pod runs in a third cluster, which the provider could only reach
  through this one, and liqo does not route through the reflecting cluster (docs/offloading.md says why);
- otherwise each address translated, or the endpoint refused with the translation's reason (overlapping pod
  CIDRs before the network fabric remaps them, an unknown network, an address outside the home pod CIDR).

Refused endpoints are never written under a wrong address: they are left out, and their reasons go back to
the caller for an Event on the home Service. Conditions (ready, serving, terminating) and hostnames (DNS
records of headless Services) are kept; node names, zones and target references are home's and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from liqo.api import names
from liqo.api.networks import Refused, Translation
from liqo.kube.objects import Obj
from liqo.kube.resources import ENDPOINT_SLICES
from liqo.virtualkubelet.forge.common import copy_metadata, is_copy, same_metadata

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = names.SLICE_MANAGED_BY
MANAGED_BY = names.REFLECTION_MANAGER
_ADDRESS_TYPES = ("IPv4", "IPv6")
_KEPT_ENDPOINT_FIELDS = ("conditions", "hostname")


@dataclass(frozen=True)
class ReflectedSlice:
    """What reflecting one home slice gives.

    Attributes:
        slice: The slice for the twin; None when none is wanted (no endpoint to list).
        refused: Why endpoints were left out, one reason per refused endpoint, in order.
    """

    slice: Obj | None
    refused: list[str]


def service_of(endpoint_slice: Obj) -> str | None:
    """The name of the Service a slice belongs to (its ``kubernetes.io/service-name`` label)."""
    return (endpoint_slice["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)


def reflected_slice(
    home_slice: Obj,
    *,
    namespace: str,
    home_cluster_id: str,
    virtual_node: str,
    virtual_nodes: Collection[str],
    translate: Callable[[str], Translation],
) -> ReflectedSlice:
    """The slice in twin ``namespace`` for ``home_slice``, the endpoints of the Service the provider lacks (pure).

    Args:
        home_slice: An EndpointSlice of a reflected Service, at home.
        namespace: The twin.
        home_cluster_id: Home's cluster ID (the copy's marker).
        virtual_node: The provider's virtual node at home: its endpoints are the provider's own pods.
        virtual_nodes: Every virtual node of home: endpoints there run in other providers.
        translate: An address owned by home → what the provider must dial, or why it cannot.
    """
    address_type = home_slice.get("addressType")
    if address_type not in _ADDRESS_TYPES:
        return ReflectedSlice(None, [f"address type {address_type} is not reflected (only IP addresses are)"])
    endpoints: list[Obj] = []
    refused: list[str] = []
    for endpoint in home_slice.get("endpoints") or []:
        node = endpoint.get("nodeName")
        if node == virtual_node:
            continue
        if node in virtual_nodes:
            refused.append(
                f"the endpoint on {node} runs in another provider: endpoints in a third cluster are not reflected"
            )
            continue
        addresses: list[str] = []
        for address in endpoint.get("addresses") or []:
            translation = translate(address)
            if isinstance(translation, Refused):
                refused.append(translation.reason)
                break
            addresses.append(str(translation.address))
        else:
            if addresses:
                kept = {field: endpoint[field] for field in _KEPT_ENDPOINT_FIELDS if field in endpoint}
                endpoints.append({"addresses": addresses, **kept})
    if not endpoints:
        return ReflectedSlice(None, refused)
    copy = copy_metadata(home_slice, resource=ENDPOINT_SLICES, namespace=namespace, home_cluster_id=home_cluster_id)
    copy["metadata"]["labels"][MANAGED_BY_LABEL] = MANAGED_BY
    copy["addressType"] = address_type
    copy["endpoints"] = endpoints
    copy["ports"] = home_slice.get("ports") or []
    return ReflectedSlice(copy, refused)


def is_reflected(endpoint_slice: Obj, *, origin: str) -> bool:
    """Whether a slice in a twin is one we reflected from cluster ``origin`` (pure).

    The marker is not enough: the provider's EndpointSlice controller copies the Service's labels onto its
    own slices, so those of a Service copy carry the marker too. Only the manager label tells them apart.
    """
    labels = endpoint_slice["metadata"].get("labels") or {}
    return is_copy(endpoint_slice, origin=origin) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY


def slice_is_current(current: Obj, desired: Obj) -> bool:
    """Whether the slice as read already lists what ``desired`` lists (pure)."""
    return bool(
        current.get("addressType") == desired["addressType"]
        and (current.get("endpoints") or []) == desired["endpoints"]
        and (current.get("ports") or []) == desired["ports"]
        and same_metadata(current, desired)
    )


def must_replace(current: Obj, desired: Obj) -> bool:
    """Whether the slice must be deleted and made anew: its address type never changes in place (pure)."""
    return bool(current.get("addressType") != desired["addressType"])
