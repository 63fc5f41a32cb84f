"""Peers by condition and the peer names, from ForeignClusters as the cache holds them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.peering.metrics import peer_info, peers_by_condition

TYPES = ["AuthenticationStatus", "OutgoingPeering", "IncomingPeering", "APIServerStatus", "NetworkStatus"]
STATUSES = ["Established", "Pending", "None", "Denied", "Error"]


def foreign_cluster(name: str, cluster_id: str, **conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"clusterID": cluster_id},
        "status": {"conditions": [{"type": kind, "status": status} for kind, status in conditions.items()]},
    }


def test_peers_are_counted_per_condition_and_status() -> None:
    peers = [
        foreign_cluster("milan", "id-milan", OutgoingPeering="Established", NetworkStatus="Established"),
        foreign_cluster("naples", "id-naples", OutgoingPeering="Pending"),
        foreign_cluster("turin", "id-turin", OutgoingPeering="Established"),
        {"metadata": {"name": "new"}, "spec": {"clusterID": "id-new"}},  # no status yet
    ]
    assert dict(peers_by_condition(peers)) == {
        ("NetworkStatus", "Established"): 1,
        ("OutgoingPeering", "Established"): 2,
        ("OutgoingPeering", "Pending"): 1,
    }


def test_peer_info_maps_cluster_ids_to_names() -> None:
    peers = [foreign_cluster("milan", "id-milan"), {"metadata": {"name": "half"}, "spec": {}}]
    assert list(peer_info(peers)) == [(("id-milan", "milan"), 1.0)]


conditions = st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(STATUSES)), max_size=8)


@given(st.lists(conditions, max_size=10))
def test_each_peer_counts_once_per_condition_type(peers_conditions: list[list[tuple[str, str]]]) -> None:
    peers = [
        {"metadata": {"name": f"p{i}"}, "spec": {}, "status": {"conditions": [{"type": t, "status": s} for t, s in cs]}}
        for i, cs in enumerate(peers_conditions)
    ]
    per_type: Counter[str] = Counter()
    for (kind, _), count in peers_by_condition(peers):
        per_type[kind] += int(count)
    assert per_type == Counter(kind for cs in peers_conditions for kind in {t for t, _ in cs})
