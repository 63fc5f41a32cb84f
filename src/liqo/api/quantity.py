"""Kubernetes quantities (``500m``, ``16Gi``, ``1e3``...) read as exact decimals and written back canonically.

Every amount liqo reasons about (allocatable, requests, offers, limits, prices) is a quantity. Reading them
as :class:`~decimal.Decimal` keeps the arithmetic exact: ``0.1 + 0.2`` CPUs must be ``300m``, not
``300.00000000000004m``. Writing goes the other way and has to round, since the API server only keeps
millicores of CPU and whole bytes or units of everything else; it always rounds *down*, because an offer
must never promise more than the provider computed it has.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal, DecimalException

_QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)} | {
    s: Decimal(10) ** (3 * (i + 1)) for i, s in enumerate("kMGTPE")
}
# Largest first, so a value is written with the biggest suffix that represents it exactly.
_BINARY_LARGEST_FIRST = sorted(_BINARY.items(), key=lambda item: -item[1])

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
_BYTE_RESOURCE_PREFIXES = ("hugepages-",)


class QuantityError(ValueError):
    """A text is not a Kubernetes quantity, or a value cannot be written as one."""


def parse_quantity(text: str | int) -> Decimal:
    """The value of a Kubernetes quantity, as an exact decimal.

    Args:
        text: A quantity such as ``4``, ``500m``, ``16Gi``, ``2G`` or ``1e3``. Integers are accepted too:
            custom resources declare quantities ``x-kubernetes-int-or-string``, so ``cpu: 2`` written in
            YAML comes back from the API server as a number.

    Returns:
        The value in base units (cores, bytes, units).

    Raises:
        QuantityError: ``text`` is not a quantity, or a negative one (liqo never deals in negative amounts).
    """
    # A peer writes many of these texts: whatever its type, what is judged is its text.
    text = text if isinstance(text, str) else str(text)
    return _parse_cached(text) if len(text) <= _CACHED_LENGTH else _parse(text)


_CACHED_LENGTH = 32
"""Texts up to this long are cached: every real quantity, and no memory for a peer to fill with long ones."""


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Decimal:
    """:func:`_parse`, cached by text (a :class:`~decimal.Decimal` is immutable).

    A provider reads the same few quantities, the requests of one Deployment's pods, at every pod event:
    parsing them was about 4% of its manager's CPU during a rollout. Bounded, so a peer writing ever new
    texts only evicts; errors are not cached.
    """
    return _parse(text)


def _parse(text: str) -> Decimal:
    match = _QUANTITY.match(text.strip())
    if not match:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (examples: 4, 500m, 16Gi, 2G)")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:  # before exponents: a lone ``E`` is exa
        return number * _DECIMAL[suffix]
    try:
        return number * Decimal(10) ** int(suffix[1:])
    except (DecimalException, ValueError) as exc:  # an exponent beyond what a Decimal (or int()) holds
        raise QuantityError(f"{text!r} is not a Kubernetes quantity: its exponent is out of range") from exc


def is_byte_resource(resource: str) -> bool:
    """Whether ``resource`` is measured in bytes (memory, storage, huge pages) rather than cores or units."""
    return resource in _BYTE_RESOURCES or resource.startswith(_BYTE_RESOURCE_PREFIXES)


def round_down(value: Decimal, *, resource: str) -> Decimal:
    """The largest amount of ``resource`` not above ``value`` that a quantity can express.

    CPU is kept to the millicore, everything else to the whole unit (bytes for memory and storage; pods and
    extended resources such as ``nvidia.com/gpu`` only come in whole units). ``format_quantity`` writes
    exactly this amount, so ``parse_quantity(format_quantity(v)) == round_down(v)``.

    Args:
        value: A non-negative, finite amount in base units.
        resource: The resource name, which decides the resolution.

    Raises:
        QuantityError: ``value`` is negative or not finite.
    """
    units = _floor_units(value, resource=resource)
    # Built from a string, so exact whatever the number of digits: Decimal arithmetic would round.
    return Decimal(f"{units}e-3") if resource == "cpu" else Decimal(units)


def format_quantity(value: Decimal, *, resource: str) -> str:
    """The canonical quantity for ``value`` of ``resource``, rounded down to what the API server keeps.

    CPU is written in whole cores (``2``) or millicores (``1500m``); byte resources with the largest binary
    suffix that is exact (``4Gi``, ``1536Ki``) or else as plain bytes; everything else as an integer.

    Args:
        value: A non-negative, finite amount in base units (cores, bytes, units).
        resource: The resource name (``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``...).

    Raises:
        QuantityError: ``value`` is negative or not finite.
    """
    units = _floor_units(value, resource=resource)
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if units and is_byte_resource(resource):
        for suffix, size in _BINARY_LARGEST_FIRST:
            if units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)


def _floor_units(value: Decimal, *, resource: str) -> int:
    if not value.is_finite() or value < 0:
        raise QuantityError(f"{resource}: {value} is not a non-negative amount")
    # Exact integer arithmetic: scaling a Decimal would round to the context's precision, possibly upwards.
    numerator, denominator = value.as_integer_ratio()
    if resource == "cpu":
        numerator *= 1000  # the API server keeps millicores of CPU, whole units of everything else
    return numerator // denominator
