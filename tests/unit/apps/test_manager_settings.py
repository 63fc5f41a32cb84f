"""The manager restarts when the install's settings change, and only then (the watch's decision)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liqo.apps.manager import settings_differ

SETTINGS = st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=5)


@given(SETTINGS)
def test_the_same_data_is_no_change(settings: dict[str, str]) -> None:
    assert not settings_differ({"metadata": {"resourceVersion": "9"}, "data": dict(settings)}, settings)


@given(SETTINGS, st.text(min_size=1, max_size=8), st.text(max_size=8))
def test_any_added_or_edited_key_is_a_change(settings: dict[str, str], key: str, value: str) -> None:
    edited = settings | {key: value + "x"}
    assert settings_differ({"data": edited}, settings)


def test_a_configmap_without_data_differs_from_settings_that_had_some() -> None:
    assert settings_differ({"metadata": {}}, {"podCIDR": "10.244.0.0/16"})
    assert not settings_differ({"metadata": {}}, {})
