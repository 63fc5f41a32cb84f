from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    NODES,
    changed_beyond_status,
    object_key,
    split_key,
    split_namespaced_key,
    terminating,
)


def test_paths() -> None:
    assert CONFIGMAPS.path() == "/api/v1/configmaps"
    assert CONFIGMAPS.path(namespace="ns") == "/api/v1/namespaces/ns/configmaps"
    assert (
        DEPLOYMENTS.path(namespace="ns", name="d", subresource="status")
        == "/apis/apps/v1/namespaces/ns/deployments/d/status"
    )
    assert NODES.path(name="n1") == "/api/v1/nodes/n1"
    assert DEPLOYMENTS.api_version == "apps/v1"


def test_scope_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.path(namespace="ns")
    with pytest.raises(ValueError, match="subresource needs"):
        NODES.path(subresource="status")


names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(namespace=st.none() | names, name=names)
def test_keys_round_trip(namespace: str | None, name: str) -> None:
    obj = {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
    assert split_key(object_key(obj)) == (namespace, name)


@given(namespace=names, name=names)
def test_namespaced_keys_round_trip(namespace: str, name: str) -> None:
    assert split_namespaced_key(object_key({"metadata": {"name": name, "namespace": namespace}})) == (namespace, name)


@given(name=names)
def test_a_cluster_scoped_key_is_no_namespaced_key(name: str) -> None:
    with pytest.raises(ValueError, match="not the key of a namespaced object"):
        split_namespaced_key(object_key({"metadata": {"name": name}}))


timestamps = st.none() | st.just("") | st.just("2030-01-02T03:04:05Z")


@given(deletion=timestamps, others=st.dictionaries(st.sampled_from(["name", "uid", "finalizers"]), names))
def test_terminating_is_a_set_deletion_timestamp(deletion: str | None, others: dict[str, str]) -> None:
    meta = others | ({"deletionTimestamp": deletion} if deletion is not None else {})
    assert terminating({"metadata": meta}) is bool(deletion)


def test_nothing_is_not_terminating() -> None:
    assert terminating(None) is False
    assert terminating({}) is False
    assert terminating({"metadata": None}) is False


META: dict[str, Any] = {"name": "milan", "resourceVersion": "7", "annotations": {"a": "1"}}
FC: dict[str, Any] = {
    "metadata": META,
    "spec": {"clusterID": "x"},
    "status": {"conditions": []},
}
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(status=_json, version=st.text(max_size=5))
def test_a_status_write_is_no_change_beyond_status(status: object, version: str) -> None:
    written = {**FC, "status": status, "metadata": {**META, "resourceVersion": version}}
    assert not changed_beyond_status(FC, written)


@pytest.mark.parametrize(
    "edit",
    [
        {"spec": {"clusterID": "y"}},
        {"metadata": {**META, "annotations": {"a": "2"}}},
        {"metadata": {**META, "deletionTimestamp": "2030-01-01T00:00:00Z"}},
        {"metadata": {**META, "finalizers": ["liqo.io/peering"]}},
    ],
)
def test_spec_annotations_finalizers_and_deletion_are_changes(edit: dict[str, object]) -> None:
    assert changed_beyond_status(FC, {**FC, **edit})
