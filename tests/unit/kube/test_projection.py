"""Projections: what they keep, that applying one twice changes nothing, and that a union keeps both."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.objects import Obj
from liqo.kube.projection import LAST_APPLIED, keep, project, strip_bookkeeping, widest

POD: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "labels": {"app": "x"},
        "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {
        "nodeName": "n1",
        "containers": [
            {"name": "a", "image": "nginx", "env": [{"name": "E"}], "resources": {"requests": {"cpu": "1"}}},
            {"name": "b", "image": "busybox"},
        ],
        "volumes": [{"name": "v"}],
    },
    "status": {"phase": "Running", "conditions": [{"type": "Ready"}]},
}


def test_bookkeeping_is_stripped_and_the_input_left_alone() -> None:
    stripped = strip_bookkeeping(POD)
    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["annotations"] == {"keep": "me"}
    assert stripped["spec"] is POD["spec"]
    assert "managedFields" in POD["metadata"]
    assert LAST_APPLIED in POD["metadata"]["annotations"]
    assert strip_bookkeeping(stripped) is stripped  # nothing left to strip: not even copied


def test_a_projection_keeps_the_declared_paths_only() -> None:
    projected = keep("metadata.name", "spec.nodeName", "spec.containers[].resources", "status.phase")(POD)
    assert projected == {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "1"}}}, {}]},
        "status": {"phase": "Running"},
    }


def test_a_shorter_path_keeps_the_whole_subtree() -> None:
    projected = keep("metadata", "metadata.name", "spec")(POD)
    assert projected["spec"] == POD["spec"]
    assert projected["metadata"] == strip_bookkeeping(POD)["metadata"]


def test_a_value_of_another_shape_than_declared_is_kept_whole() -> None:
    odd = {"spec": {"containers": {"not": "a list"}, "nodeName": ["a", "list"]}}
    assert keep("spec.containers[].resources", "spec.nodeName.x")(odd) == odd


def test_no_projection_strips_the_bookkeeping_only() -> None:
    assert project(None, POD) == strip_bookkeeping(POD)


def test_a_path_cannot_be_both_a_list_and_a_mapping() -> None:
    with pytest.raises(ValueError, match="both"):
        keep("spec.containers[].image", "spec.containers.image")(POD)
    with pytest.raises(ValueError, match="empty"):
        keep("spec..x")(POD)


def test_widest() -> None:
    assert widest(keep("a"), keep("b")) == keep("a", "b")
    assert widest(keep("a"), None) is None
    assert widest(None, keep("a")) is None


_KEYS = st.sampled_from(["metadata", "spec", "status", "containers", "resources", "name", "phase", "env"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)
_PATHS = st.lists(
    st.lists(_KEYS.map(lambda k: k + "[]") | _KEYS, min_size=1, max_size=3).map(".".join), min_size=1, max_size=4
)


def _valid(paths: list[str]) -> bool:
    try:
        keep(*paths)({})
    except ValueError:
        return False
    return True


def _contained(small: Any, big: Any) -> bool:
    """Whether ``small`` is ``big`` with some mapping keys dropped, at any depth."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and _contained(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(_contained, small, big))
    return bool(small == big)


@given(obj=st.dictionaries(_KEYS, _JSON, max_size=4), paths=_PATHS.filter(_valid), more=_PATHS.filter(_valid))
def test_projection_properties(obj: Obj, paths: list[str], more: list[str]) -> None:
    projection = keep(*paths)
    projected = projection(obj)
    assert projection(projected) == projected  # idempotent: a cached object projected again is unchanged
    assert _contained(projected, obj)  # only ever drops, never invents or alters
    union = projection | keep(*more) if _valid(paths + more) else projection
    assert _contained(projected, union(obj))  # a union keeps everything either keeps
