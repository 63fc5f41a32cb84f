import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.realnodes.nodes import (
    CGROUP_PARENT,
    MAX_CLUSTERS,
    MAX_REAL_NODES,
    NODE_PRIVATE_DIRS,
    UNDERLAY_HOST,
    UNDERLAY_NETWORK,
    RealNode,
    UnderlayFullError,
    real_nodes,
    underlay_index,
)
from liqo.localclusters.spec import MAX_REAL_NODES as SPEC_MAX_REAL_NODES

ROOT = Path("/state/rome")
UNDERLAYS = st.integers(min_value=1, max_value=MAX_CLUSTERS)
INDEXES = st.integers(min_value=1, max_value=MAX_REAL_NODES)

# -- underlay_index ----------------------------------------------------------------------------------------


def test_underlay_index_keeps_a_free_previous_index() -> None:
    assert underlay_index(previous=7, taken=[1, 2, 3]) == 7


def test_underlay_index_takes_the_smallest_free_one_otherwise() -> None:
    assert underlay_index(previous=None, taken=[]) == 1
    assert underlay_index(previous=None, taken=[1, 2, 4]) == 3
    assert underlay_index(previous=2, taken=[1, 2, 4]) == 3
    assert underlay_index(previous=0, taken=[]) == 1
    assert underlay_index(previous=MAX_CLUSTERS + 1, taken=[1]) == 2


def test_underlay_index_raises_when_every_slot_is_taken() -> None:
    with pytest.raises(UnderlayFullError):
        underlay_index(previous=None, taken=range(1, MAX_CLUSTERS + 1))
    with pytest.raises(UnderlayFullError):
        underlay_index(previous=5, taken=iter(range(1, MAX_CLUSTERS + 1)))


@given(
    previous=st.one_of(st.none(), st.integers(min_value=-5, max_value=MAX_CLUSTERS + 5)),
    taken=st.sets(st.integers(min_value=-5, max_value=MAX_CLUSTERS + 5)),
)
def test_underlay_index_is_a_free_slot(previous: int | None, taken: set[int]) -> None:
    free = set(range(1, MAX_CLUSTERS + 1)) - taken
    if not free:
        with pytest.raises(UnderlayFullError):
            underlay_index(previous=previous, taken=taken)
        return
    index = underlay_index(previous=previous, taken=taken)
    assert 1 <= index <= MAX_CLUSTERS
    assert index not in taken
    assert index == (previous if previous in free else min(free))


# -- RealNode ----------------------------------------------------------------------------------------------


def test_real_node_names_and_paths() -> None:
    node = RealNode("rome", 2, 3, ROOT)
    assert node.name == "rome-real-2"
    assert node.ip == "172.30.3.2"
    assert node.veth == "lq3n2"
    assert node.cgroup == f"/{CGROUP_PARENT}/rome-real-2"
    assert node.daemons_cgroup == f"/{CGROUP_PARENT}/rome-real-2/daemons"
    assert node.root == ROOT / "nodes" / "real-2"
    assert node.netns.parent == node.mountns.parent == node.ns_dir
    assert node.netns != node.mountns
    for path in (node.ns_dir, node.sysctl_dir, node.config_dir):
        assert path.is_relative_to(node.root)


def test_real_nodes_are_numbered_from_one() -> None:
    nodes = real_nodes(cluster="rome", count=3, underlay=4, cluster_root=ROOT)
    assert [n.index for n in nodes] == [1, 2, 3]
    assert {n.underlay for n in nodes} == {4}
    assert real_nodes(cluster="rome", count=0, underlay=4, cluster_root=ROOT) == []


def test_the_spec_never_asks_for_more_nodes_than_the_underlay_holds() -> None:
    assert SPEC_MAX_REAL_NODES <= MAX_REAL_NODES


@given(underlay=UNDERLAYS, index=INDEXES)
def test_node_ip_is_on_the_underlay_and_not_the_host(underlay: int, index: int) -> None:
    ip = ipaddress.IPv4Address(RealNode("c", index, underlay, ROOT).ip)
    assert ip in UNDERLAY_NETWORK
    assert ip not in (UNDERLAY_NETWORK.network_address, UNDERLAY_NETWORK.broadcast_address)
    assert str(ip) != UNDERLAY_HOST


@given(a=st.tuples(UNDERLAYS, INDEXES), b=st.tuples(UNDERLAYS, INDEXES))
def test_node_ips_are_unique_across_clusters_and_nodes(a: tuple[int, int], b: tuple[int, int]) -> None:
    ip_a = RealNode("a", a[1], a[0], ROOT).ip
    ip_b = RealNode("b", b[1], b[0], ROOT).ip
    assert (ip_a == ip_b) == (a == b)


def test_every_node_ip_is_distinct() -> None:
    ips = [RealNode("c", i, u, ROOT).ip for u in range(1, MAX_CLUSTERS + 1) for i in range(1, MAX_REAL_NODES + 1)]
    assert len(set(ips)) == len(ips)
    assert UNDERLAY_HOST not in ips


@given(underlay=UNDERLAYS, index=INDEXES)
def test_veth_names_fit_an_interface_name(underlay: int, index: int) -> None:
    veth = RealNode("a-cluster-name-of-forty-characters-xxxxx", index, underlay, ROOT).veth
    assert 0 < len(veth.encode()) <= 15
    assert veth.isascii()
    assert "/" not in veth
    assert " " not in veth


def test_veth_names_are_unique() -> None:
    names = [RealNode("c", i, u, ROOT).veth for u in range(1, MAX_CLUSTERS + 1) for i in range(1, MAX_REAL_NODES + 1)]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ("/var/lib/kubelet", "fs/var-lib/kubelet"),
        ("/var/lib/cni/net.d", "fs/var-lib/cni/net.d"),
        ("/var/lib", "fs/var-lib"),
        ("/var/lib/", "fs/var-lib"),
        ("/var/log/pods/x.log", "fs/var-log/pods/x.log"),
        ("/run/containerd/containerd.sock", "fs/run/containerd/containerd.sock"),
        ("/run", "fs/run"),
    ],
)
def test_inside_maps_private_paths_into_the_node_directory(path: str, where: str) -> None:
    node = RealNode("rome", 1, 1, ROOT)
    assert node.inside(path) == node.root / where


@pytest.mark.parametrize("path", ["/etc/hosts", "/var/library", "/var", "/runner/x", "/", "", "run/x", "var/lib/x"])
def test_inside_refuses_paths_the_node_shares_with_the_host(path: str) -> None:
    with pytest.raises(ValueError, match="not under"):
        RealNode("rome", 1, 1, ROOT).inside(path)


@given(private=st.sampled_from(NODE_PRIVATE_DIRS), rest=st.lists(st.from_regex(r"[a-z0-9._-]{1,8}", fullmatch=True)))
def test_inside_stays_in_the_private_directory(private: str, rest: list[str]) -> None:
    rest = [part for part in rest if part not in (".", "..")]
    node = RealNode("rome", 1, 1, ROOT)
    host = node.inside("/".join([private, *rest]))
    assert host.is_relative_to(node.private_dir(private))
    assert host.relative_to(node.private_dir(private)).parts == tuple(rest)


def test_private_dirs_are_distinct_and_under_the_node() -> None:
    node = RealNode("rome", 1, 1, ROOT)
    dirs = [node.private_dir(private) for private in NODE_PRIVATE_DIRS]
    assert len(set(dirs)) == len(dirs)
    assert all(d.is_relative_to(node.root) for d in dirs)
