"""liqo.kube.cache.Derived: derived again exactly when an input's version changes."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.cache import Derived, version_of


def obj(uid: str, version: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": version}}


def test_the_value_is_kept_until_an_input_changes() -> None:
    derived: Derived[str, int] = Derived()
    calls: list[int] = []

    def derive() -> int:
        calls.append(1)
        return len(calls)

    first = [obj("a", "1"), None]
    assert derived.get("k", first, derive) == 1
    assert derived.get("k", [obj("a", "1"), None], derive) == 1  # equal versions, new dicts: kept
    assert derived.get("k", [obj("a", "2"), None], derive) == 2  # a new resourceVersion
    assert derived.get("k", [obj("b", "2"), None], derive) == 3  # replaced by a namesake (new UID)
    assert derived.get("k", [obj("b", "2"), obj("c", "1")], derive) == 4  # an input appeared
    assert derived.get("k", [obj("b", "2")], derive) == 5  # one went away
    assert derived.get("other", [obj("b", "2")], derive) == 6  # keys are apart


@given(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("12")), max_size=3), st.data())
def test_it_gives_what_derive_would_give_now(versions: list[tuple[str, str]], data: st.DataObject) -> None:
    derived: Derived[str, tuple[Any, ...]] = Derived()
    for _ in range(4):
        inputs = [obj(*v) for v in data.draw(st.lists(st.sampled_from(versions), max_size=3))] if versions else []
        now = tuple(version_of(o) for o in inputs)
        assert derived.get("k", inputs, lambda: now) == now  # noqa: B023 - called at once, inside the loop
