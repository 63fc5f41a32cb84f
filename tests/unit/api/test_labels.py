"""Labels a stranger claims: only Kubernetes labels pass, one line holds them, a selector needs every pair."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.labels import MAX_LABELS, decode, encode, label_problem, selects

_NAME = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,20}[a-z0-9])?", fullmatch=True)
_KEY = st.one_of(_NAME, st.builds(lambda prefix, name: f"{prefix}.example/{name}", _NAME, _NAME))
_LABELS = st.dictionaries(_KEY, st.one_of(st.just(""), _NAME), max_size=MAX_LABELS).filter(
    lambda labels: all(not label_problem(k, v) for k, v in labels.items())
)


@given(_LABELS)
def test_any_labels_read_back_as_they_were_written(labels: dict[str, str]) -> None:
    assert decode(encode(labels)) == labels


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tier", "has no '='"),
        ("-tier=edge", "is not a label name"),
        ("Corp.Example/tier=edge", "has no DNS subdomain as its prefix"),
        ("tier=" + "e" * 64, "is not a label value"),
        ("tier=edge,tier=core", "comes twice"),
        (",".join(f"k{i}=v" for i in range(MAX_LABELS + 1)), "more than 16"),
    ],
)
def test_what_is_no_label_is_refused_naming_it(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode(text)


def test_a_selector_needs_every_pair_and_an_empty_one_selects_nothing() -> None:
    labels = {"tier": "edge", "region": "eu"}
    assert selects({"tier": "edge"}, labels)
    assert not selects({"tier": "edge", "region": "us"}, labels)
    assert not selects({}, labels)  # an allow or deny list without labels names no cluster by them
