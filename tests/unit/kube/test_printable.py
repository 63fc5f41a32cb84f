"""What a peer named, shown: unprintable characters found, described and escaped; printable text untouched."""

from __future__ import annotations

import unicodedata
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.printable import ELLIPSIS, UNPRINTABLE, describe, printable, unprintable


def shown(text: str) -> bool:
    return not any(unicodedata.category(char) in UNPRINTABLE for char in text)


CATEGORIES: tuple[Literal["Cc", "Cf", "Cs", "Co", "Zl", "Zp"], ...] = ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")
printable_text = st.text(st.characters(exclude_categories=CATEGORIES))


def test_unprintable_is_control_format_surrogate_private_use_and_separators() -> None:
    assert frozenset(CATEGORIES) == UNPRINTABLE


@given(st.text())
def test_whatever_a_peer_wrote_comes_out_printable(text: str) -> None:
    out = printable(text)
    assert shown(out)
    assert "\n" not in out
    assert "\r" not in out
    assert "\x1b" not in out


@given(printable_text)
def test_printable_text_comes_back_unchanged(text: str) -> None:
    assert unprintable(text) is None
    assert printable(text) == text


@given(st.text(), st.integers(0, 40))
def test_a_limit_bounds_the_output_and_a_cut_says_so(text: str, limit: int) -> None:
    out = printable(text, limit=limit)
    assert len(out) <= limit
    assert shown(out)
    if len(printable(text)) > limit and limit:
        assert out.endswith(ELLIPSIS)


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("evil\n2026-01-01 INFO forged line\x1b[2J", "evil\\n2026-01-01 INFO forged line\\x1b[2J"),
        ("a\rb\tc\x00", "a\\rb\\tc\\x00"),
        ("next\x85line", "next\\x85line"),
        ("emor\u202e", "emor\\u202e"),
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("Milano città, 東京\u00a01", "Milano città, 東京\u00a01"),  # letters of any script, any space
    ],
)
def test_each_unprintable_character_is_written_as_python_writes_it(text: str, escaped: str) -> None:
    assert printable(text) == escaped


@pytest.mark.parametrize(
    ("text", "found", "described"),
    [
        ("rome\n", "\n", "U+000A, a control character"),
        ("rome\u202e", "\u202e", "U+202E, a format character"),
        ("rome\u2028", "\u2028", "U+2028, a line separator"),
        ("rome\ue000", "\ue000", "U+E000, a private-use character"),
        ("rome east", None, None),
    ],
)
def test_the_first_unprintable_character_is_found_and_named(
    text: str, found: str | None, described: str | None
) -> None:
    assert unprintable(text) == found
    if found is not None:
        assert describe(found) == described
