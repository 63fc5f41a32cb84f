"""What bounds a consumer in its twins (liqo.offloading.twins): its NetworkPolicy and its two roles (no cluster)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.networks import SPECIAL_PURPOSE, ClusterNetwork, InvalidNetwork, IPNetwork, NetworkPeer, PodNetwork
from liqo.kube.objects import Obj
from liqo.offloading.twins import (
    NAMESPACE_NAME,
    PEER_REFUSED_SECRET_TYPES,
    network_policy_matches,
    open_block,
    twin_network_policy,
    twin_role_binding,
    twin_rules,
    twin_writer_rules,
    twins_selector,
)

ROME = "rome0000-1111-2222-3333-444455556666"
MILAN = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.96.0.0/16")
HOME_PODS = ipaddress.ip_network("10.0.0.0/16")
METADATA = ipaddress.ip_address("169.254.169.254")


def ipv4_networks() -> st.SearchStrategy[IPNetwork]:
    return st.builds(
        lambda address, prefix: ipaddress.ip_network((address, prefix), strict=False),
        st.integers(0, 2**32 - 1),
        st.integers(0, 32),
    )


def peers() -> st.SearchStrategy[NetworkPeer]:
    cidrs = st.builds(
        lambda cidr, excepted: NetworkPeer(cidr=cidr, excepted=tuple(excepted)),
        ipv4_networks(),
        st.lists(ipv4_networks(), max_size=3),
    )
    namespaces = st.builds(
        lambda name: NetworkPeer(namespace=name), st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
    )
    return cidrs | namespaces


def blocks(policy: Obj) -> list[Obj]:
    spec = policy["spec"]
    every = [peer for rule in spec["egress"] for peer in rule["to"]] + [
        p for rule in spec["ingress"] for p in rule["from"]
    ]
    return [peer["ipBlock"] for peer in every if "ipBlock" in peer]


def admits(block: Obj, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    cidr = ipaddress.ip_network(block["cidr"])
    if address.version != cidr.version or address not in cidr:
        return False
    return not any(address in ipaddress.ip_network(excepted) for excepted in block.get("except", ()))


def closed_addresses(network: ClusterNetwork) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """An address at both ends of every block no CIDR of a policy may open."""
    found = []
    for block in (*SPECIAL_PURPOSE, network.pod_cidr, network.service_cidr):
        if block.version == 4:
            found += [block.network_address, block.broadcast_address]
    return [*found, METADATA]


@given(
    egress=st.lists(peers(), max_size=4),
    ingress=st.lists(peers(), max_size=3),
    home=st.none() | st.just(HOME_PODS),
)
def test_no_cidr_of_a_policy_ever_opens_this_clusters_pods_services_or_special_ranges(
    egress: list[NetworkPeer], ingress: list[NetworkPeer], home: IPNetwork | None
) -> None:
    allowed = PodNetwork(egress=tuple(egress), ingress=tuple(ingress))
    policy = twin_network_policy(
        namespace="shop-rome0000", consumer_id=ROME, home_pods=home, local=MILAN, allowed=allowed
    )
    for block in blocks(policy):
        cidr = ipaddress.ip_network(block["cidr"])
        # What Kubernetes validates: every exception strictly within the block.
        assert all(
            ipaddress.ip_network(e).subnet_of(cidr) and ipaddress.ip_network(e) != cidr  # type: ignore[arg-type]
            for e in block.get("except", ())
        ), block
        for address in closed_addresses(MILAN):
            assert not admits(block, address), (block, address)
    # What the policy names by address is the consumer's home pods and what the admin gave, nothing else.
    given_cidrs = {str(peer.cidr) for peer in (*egress, *ingress) if peer.cidr is not None}
    assert {block["cidr"] for block in blocks(policy)} <= given_cidrs | ({str(home)} if home else set())


@given(st.lists(peers(), max_size=4))
def test_the_consumers_own_pods_dns_and_gateway_are_always_there_and_nothing_else_by_selector(
    egress: list[NetworkPeer],
) -> None:
    policy = twin_network_policy(
        namespace="shop-rome0000",
        consumer_id=ROME,
        home_pods=None,
        local=MILAN,
        allowed=PodNetwork(egress=tuple(egress)),
    )
    spec = policy["spec"]
    assert policy["metadata"] == {
        "name": names.PEER_NETWORK_POLICY,
        "namespace": "shop-rome0000",
        "labels": names.peer_labels(ROME),
    }
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    own = {"namespaceSelector": twins_selector(ROME)}
    assert own in spec["egress"][0]["to"]
    assert own in spec["ingress"][0]["from"]
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: names.LIQO_NAMESPACE}},
        "podSelector": {"matchLabels": names.gateway_labels(ROME)},
    }
    assert gateway in spec["ingress"][0]["from"]
    assert spec["egress"][1] == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    # Namespaces opened by the admin are named by name (the label the API server writes), never by a peer's label.
    selected = [p["namespaceSelector"] for p in spec["egress"][0]["to"] if "namespaceSelector" in p and p != own]
    assert selected == [{"matchLabels": {NAMESPACE_NAME: peer.namespace}} for peer in egress if peer.namespace]
    assert twins_selector(ROME)["matchLabels"] == {names.REMOTE_CLUSTER_ID: ROME}
    assert twins_selector(ROME)["matchExpressions"] == [{"key": names.ORIGIN_NAMESPACE, "operator": "Exists"}]


def test_home_pods_are_reached_where_the_fabric_puts_them_both_ways() -> None:
    without = twin_network_policy(namespace="t", consumer_id=ROME, home_pods=None, local=MILAN, allowed=PodNetwork())
    assert blocks(without) == []
    with_fabric = twin_network_policy(
        namespace="t", consumer_id=ROME, home_pods=HOME_PODS, local=MILAN, allowed=PodNetwork()
    )
    assert {"ipBlock": {"cidr": "10.0.0.0/16"}} in with_fabric["spec"]["egress"][0]["to"]
    assert {"ipBlock": {"cidr": "10.0.0.0/16"}} in with_fabric["spec"]["ingress"][0]["from"]
    assert network_policy_matches(with_fabric, with_fabric)
    assert not network_policy_matches(without, with_fabric)
    assert not network_policy_matches(None, with_fabric)


@pytest.mark.parametrize(
    ("cidr", "excepted", "expected"),
    [
        (
            "0.0.0.0/0",
            (),
            [
                "0.0.0.0/8",
                "10.96.0.0/16",
                "10.245.0.0/16",
                "127.0.0.0/8",
                "169.254.0.0/16",
                "224.0.0.0/4",
                "240.0.0.0/4",
            ],
        ),
        ("169.254.169.254/32", (), None),  # the metadata endpoint alone: nothing left
        ("10.245.1.0/24", (), None),  # a block of milan's pods: opened by namespace only
        ("192.168.0.0/16", ("192.168.1.0/24",), ["192.168.1.0/24"]),
        ("192.168.0.0/16", ("10.0.0.0/8",), []),  # an exception elsewhere says nothing
        ("192.168.1.0/24", ("192.168.0.0/16",), None),  # an exception holding the whole block
    ],
)
def test_a_block_loses_what_is_closed_within_it(
    cidr: str, excepted: tuple[str, ...], expected: list[str] | None
) -> None:
    peer = NetworkPeer(cidr=ipaddress.ip_network(cidr), excepted=tuple(ipaddress.ip_network(e) for e in excepted))
    closed = (*SPECIAL_PURPOSE, MILAN.pod_cidr, MILAN.service_cidr)
    block = open_block(peer, closed=closed)
    if expected is None:
        assert block is None
    else:
        assert block is not None
        assert block["ipBlock"].get("except", []) == expected


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"egress": [{}]}, "'podNetwork.egress[0]' must give either a cidr or a namespace"),
        ({"ingress": [{"cidr": "10.0.0.0/8", "namespace": "a"}]}, "'podNetwork.ingress[0]' must give either"),
        ({"egress": [{"cidr": "10.0.0.1/8"}]}, "'podNetwork.egress[0].cidr'"),
        ({"egress": [{"cidr": "10.0.0.0/8", "except": ["x"]}]}, "'podNetwork.egress[0].except[0]'"),
    ],
)
def test_a_malformed_pod_network_is_refused_naming_the_entry(spec: Obj, named: str) -> None:
    with pytest.raises(InvalidNetwork, match="podNetwork") as refused:
        PodNetwork.from_spec(spec)
    assert named in str(refused.value)


def test_pod_network_reads_a_policy_and_defaults_to_nothing() -> None:
    assert PodNetwork.from_spec(None) == PodNetwork()
    read = PodNetwork.from_spec(
        {"egress": [{"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}], "ingress": [{"namespace": "ingress"}]}
    )
    assert read.egress == (
        NetworkPeer(cidr=ipaddress.ip_network("0.0.0.0/0"), excepted=(ipaddress.ip_network("10.0.0.0/8"),)),
    )
    assert read.ingress == (NetworkPeer(namespace="ingress"),)


# -- the consumer's two roles in its twins ----------------------------------------------------------------------


def granted(rules: list[Obj]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_reader_holds_no_write_and_the_writer_holds_every_write_the_consumer_has() -> None:
    reader, writer = granted(twin_rules()), granted(twin_writer_rules())
    writes = {"create", "update", "patch"}
    assert not [r for r in reader if r[2] in writes]
    assert {v for _, _, v in writer} <= {*writes, "get"}
    assert not reader & writer
    kinds = {"shadowpods", "configmaps", "secrets", "services", "ingresses", "endpointslices", "persistentvolumeclaims"}
    for kind in kinds:
        assert {v for _, r, v in reader if r == kind} == {"get", "list", "watch", "delete"}
        assert {v for _, r, v in writer if r == kind} == writes
    # Never pods themselves, nor anything but what it writes.
    assert not [
        r
        for r in reader | writer
        if r[1] in ("pods", "pods/status") and r[2] != "get" and r[2] not in ("list", "watch")
    ]
    assert {r for _, r, _ in writer} == kinds | {"pods/exec", "pods/attach", "pods/portforward"}


def test_the_two_bindings_name_their_roles_and_the_consumers_user() -> None:
    reader = twin_role_binding(namespace="t", consumer_id=ROME)
    writer = twin_role_binding(namespace="t", consumer_id=ROME, writer=True)
    assert (reader["metadata"]["name"], reader["roleRef"]["name"]) == (names.PEER_BINDING, names.PEER_TWIN_ROLE)
    assert (writer["metadata"]["name"], writer["roleRef"]["name"]) == (
        names.PEER_WRITER_BINDING,
        names.PEER_TWIN_WRITER_ROLE,
    )
    assert (
        reader["subjects"]
        == writer["subjects"]
        == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": names.peer_user(ROME)}]
    )


def test_the_service_account_token_type_is_refused_first() -> None:
    assert PEER_REFUSED_SECRET_TYPES[0] == "kubernetes.io/service-account-token"
