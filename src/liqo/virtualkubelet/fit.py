"""Whether a pod fits the provider: the check that keeps a virtual node from being a black hole (pure).

A virtual node's capacity is the whole offer, a sum over the provider's nodes, and the home scheduler
knows nothing else: it binds any pod smaller than that sum, even one no single provider node can hold
(8 CPUs free as 4 + 4 cannot run a pod of 6). Such a pod, once sent, would wait on the provider for a
node that never comes. Making the capacity the largest slot instead would not do: the scheduler would then
put at most one slot's worth of pods on the virtual node, and the rest of the offer would go unused. So
capacity stays the offer, the provider publishes its largest slots with it (the biggest pods it can
still place on one node, carried by the VirtualNode), and the virtual kubelet checks a pod against them
before sending it: a pod no slot holds stays Pending at home, saying why, and is checked again whenever
the slots change.

A pod's size is the scheduler's own (:func:`liqo.api.podrequests.pod_requests`: containers, init
containers and sidecars, pod-level requests, overhead), compared in every resource the slots describe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from liqo.api.podrequests import Resources, covers, pod_requests
from liqo.api.quantity import QuantityError, format_quantity, parse_quantity

DOES_NOT_FIT = "DoesNotFitRemote"
"""The reason on a home pod (condition and Event) that no slot of the provider holds."""


def slots_of(virtual_node: Mapping[str, Any] | None) -> list[Resources] | None:
    """The provider's largest slots, as the VirtualNode carries them.

    Returns:
        The slots (possibly none: the provider can place no pod at all), or ``None`` when they are not
        known — no VirtualNode, a provider that does not publish slots, or an amount that is not a
        quantity. Unknown slots are no reason to hold pods back: the provider's scheduler still decides.
    """
    spec = (virtual_node or {}).get("spec") or {}
    if "largestSlots" not in spec:
        return None
    try:
        return [{name: parse_quantity(amount) for name, amount in slot.items()} for slot in spec["largestSlots"]]
    except QuantityError:
        return None


def fits(pod: Mapping[str, Any], slots: Sequence[Mapping[str, Decimal]]) -> bool:
    """Whether some slot holds ``pod``'s effective request, in every resource the slots describe."""
    request = _request(pod, slots)
    return any(covers(slot, request) for slot in slots)


def misfit_message(pod: Mapping[str, Any], slots: Sequence[Mapping[str, Decimal]]) -> str:
    """Why ``pod`` is not sent, for a pod that does not :func:`fit <fits>`: its request and the largest slot."""
    if not slots:
        return (
            "no node of the provider can take a pod now (none is Ready, schedulable, untainted and with room"
            " left); the pod waits here until one can"
        )
    request = {name: amount for name, amount in _request(pod, slots).items() if amount}
    largest = slots[0]  # the provider orders its slots largest first
    shown = request.keys() | ({"cpu", "memory"} & largest.keys())
    return (
        f"the pod requests {_describe(request, request.keys())} but no node of the provider has that much free:"
        f" its largest slot is {_describe(largest, shown)}"
        + (f" (of {len(slots)} slots, none holds the pod)" if len(slots) > 1 else "")
        + "; the pod waits here until a slot holds it"
    )


def _request(pod: Mapping[str, Any], slots: Sequence[Mapping[str, Decimal]]) -> Resources:
    described = {name for slot in slots for name in slot}
    return {name: amount for name, amount in pod_requests(pod).items() if name in described}


def _describe(resources: Mapping[str, Decimal], names: Iterable[str]) -> str:
    return ", ".join(
        f"{name}={format_quantity(resources.get(name, Decimal(0)), resource=name)}" for name in sorted(names)
    )
