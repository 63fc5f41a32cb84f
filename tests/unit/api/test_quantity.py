from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.crds.schema import QUANTITY_PATTERN
from liqo.api.quantity import QuantityError, format_quantity, is_byte_resource, parse_quantity, round_down

RESOURCES = ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "pods", "nvidia.com/gpu"]
# Within what a Kubernetes quantity holds (int64 nano-units), to the nano-unit like the API server.
AMOUNTS = st.decimals(min_value=0, max_value=10**12, places=9, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", Decimal(4)),
        (4, Decimal(4)),
        ("500m", Decimal("0.5")),
        ("16Gi", Decimal(16 * 2**30)),
        ("2G", Decimal(2 * 10**9)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2E", Decimal(2 * 10**18)),
        ("1.5Ki", Decimal(1536)),
        ("100n", Decimal("1e-7")),
        (".5", Decimal("0.5")),
        (" 3 ", Decimal(3)),
    ],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "4 cores", "-1", "16GB", "1.2.3", "1e99999999", "1e" + "9" * 5000])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_quantity_errors_are_value_errors() -> None:
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize("written", [["1"], {"cpu": 1}, None, True, 1.5])
def test_whatever_a_peer_writes_is_judged_by_its_text(written: object) -> None:
    """Parsing is cached by text: a value of another type (unhashable too) is still a QuantityError or a value."""
    if isinstance(written, float):
        assert parse_quantity(written) == Decimal("1.5")  # type: ignore[arg-type]
        return
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(written)  # type: ignore[arg-type]


@given(digits=st.text(alphabet="0123456789", min_size=1, max_size=80), suffix=st.sampled_from(["", "m", "Ki", "G"]))
def test_cached_or_not_a_text_parses_the_same_every_time(digits: str, suffix: str) -> None:
    text = digits + suffix  # past 32 characters parsed anew every time, under it from the cache
    first = parse_quantity(text)
    assert parse_quantity(text) == first == parse_quantity(" " + text + " ")
    assert first == Decimal(digits) * parse_quantity("1" + suffix)


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (Decimal(2), "cpu", "2"),
        (Decimal("1.5"), "cpu", "1500m"),
        (Decimal("0.0015"), "cpu", "1m"),
        (Decimal("0.0009"), "cpu", "0"),
        (Decimal("3.9999"), "cpu", "3999m"),
        (Decimal(4 * 2**30), "memory", "4Gi"),
        (Decimal(1536 * 2**10), "memory", "1536Ki"),
        (Decimal(2**60), "memory", "1Ei"),
        (Decimal(1000), "memory", "1000"),
        (Decimal("1073741824.9"), "memory", "1Gi"),
        (Decimal(0), "memory", "0"),
        (Decimal(2 * 2**30), "ephemeral-storage", "2Gi"),
        (Decimal(2**21), "hugepages-2Mi", "2Mi"),
        (Decimal("55.5"), "pods", "55"),
        (Decimal("1.99"), "nvidia.com/gpu", "1"),
        (Decimal(1024), "nvidia.com/gpu", "1024"),  # units, never a binary suffix
    ],
)
def test_format_quantity(value: Decimal, resource: str, text: str) -> None:
    assert format_quantity(value, resource=resource) == text


@pytest.mark.parametrize("value", [Decimal(-1), Decimal("-0.001"), Decimal("NaN"), Decimal("Infinity")])
def test_format_quantity_refuses_what_no_offer_can_hold(value: Decimal) -> None:
    with pytest.raises(QuantityError):
        format_quantity(value, resource="cpu")


def test_byte_resources() -> None:
    assert [r for r in RESOURCES if is_byte_resource(r)] == ["memory", "ephemeral-storage", "hugepages-2Mi"]


@given(value=AMOUNTS, resource=st.sampled_from(RESOURCES))
def test_formatting_rounds_down_to_the_resolution(value: Decimal, resource: str) -> None:
    text = format_quantity(value, resource=resource)
    written = parse_quantity(text)
    resolution = Decimal("0.001") if resource == "cpu" else Decimal(1)
    assert 0 <= written <= value
    assert value - written < resolution
    assert written == round_down(value, resource=resource)
    assert round_down(written, resource=resource) == written  # idempotent: nothing left to round


@given(value=AMOUNTS, resource=st.sampled_from(RESOURCES))
def test_formatted_quantities_pass_the_api_servers_pattern(value: Decimal, resource: str) -> None:
    assert re.match(QUANTITY_PATTERN, format_quantity(value, resource=resource))


@given(value=st.decimals(min_value=0, allow_nan=False, allow_infinity=False), resource=st.sampled_from(RESOURCES))
def test_rounding_is_exact_whatever_the_digits(value: Decimal, resource: str) -> None:
    # Beyond the context's 28 digits, Decimal arithmetic could round up; the integer route never does.
    assert 0 <= round_down(value, resource=resource) <= value
