import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.spec import MAX_REAL_NODES, ClusterSpec, SpecError, node_cidr_mask


def test_real_nodes_default_to_none() -> None:
    spec = ClusterSpec(name="rome")
    assert spec.real_nodes == 0
    assert spec.all_nodes == spec.nodes == 1


@pytest.mark.parametrize("real_nodes", [0, 1, MAX_REAL_NODES])
def test_real_nodes_within_bounds(real_nodes: int) -> None:
    assert ClusterSpec(name="rome", real_nodes=real_nodes).real_nodes == real_nodes


@pytest.mark.parametrize("real_nodes", [-1, MAX_REAL_NODES + 1, 1000])
def test_real_nodes_out_of_bounds(real_nodes: int) -> None:
    with pytest.raises(SpecError, match="--real-nodes"):
        ClusterSpec(name="rome", real_nodes=real_nodes)


def test_no_fake_node_only_with_real_nodes() -> None:
    spec = ClusterSpec(name="rome", nodes=0, real_nodes=1)
    assert spec.all_nodes == 1
    with pytest.raises(SpecError, match="--nodes"):
        ClusterSpec(name="rome", nodes=0)
    with pytest.raises(SpecError, match="--nodes"):
        ClusterSpec(name="rome", nodes=-1, real_nodes=2)


def test_real_nodes_round_trip_and_differences() -> None:
    spec = ClusterSpec(name="rome", nodes=0, real_nodes=2)
    assert ClusterSpec.from_dict(spec.to_dict()) == spec
    assert spec.differences(ClusterSpec(name="rome", nodes=0, real_nodes=3)) == ["real_nodes: 2 -> 3"]


def test_real_nodes_count_towards_the_pod_cidr() -> None:
    # A /24 pod CIDR holds 4 nodes' /26 subnets of 50 pods: 4 fake nodes fit, 3 fake and 2 real do not.
    ClusterSpec(name="rome", nodes=4, node_pods=50, pod_cidr="10.0.0.0/24")
    ClusterSpec(name="rome", nodes=2, real_nodes=2, node_pods=50, pod_cidr="10.0.0.0/24")
    with pytest.raises(SpecError, match="too small"):
        ClusterSpec(name="rome", nodes=3, real_nodes=2, node_pods=50, pod_cidr="10.0.0.0/24")


@given(
    nodes=st.integers(min_value=0, max_value=1000),
    real_nodes=st.integers(min_value=0, max_value=MAX_REAL_NODES),
    prefix=st.integers(min_value=8, max_value=20),
)
def test_node_mask_counts_fake_and_real_nodes(nodes: int, real_nodes: int, prefix: int) -> None:
    pods = ipaddress.IPv4Network((0x64000000, prefix))  # 100.0.0.0/8 and below: clear of the services
    kwargs = {"name": "rome", "nodes": nodes, "real_nodes": real_nodes, "pod_cidr": str(pods)}
    if nodes == real_nodes == 0:
        with pytest.raises(SpecError, match="--nodes"):
            ClusterSpec(**kwargs)  # type: ignore[arg-type]
        return
    try:
        mask = node_cidr_mask(pods, nodes=nodes + real_nodes, pods_per_node=110)
    except SpecError:
        with pytest.raises(SpecError, match="too small"):
            ClusterSpec(**kwargs)  # type: ignore[arg-type]
        return
    spec = ClusterSpec(**kwargs)  # type: ignore[arg-type]
    assert spec.all_nodes == nodes + real_nodes
    assert spec.node_mask == mask
    assert 2 ** (mask - prefix) >= nodes + real_nodes
