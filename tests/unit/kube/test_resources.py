import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.resources import CONFIGMAPS, DEPLOYMENTS, NODES, object_key, split_key


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
