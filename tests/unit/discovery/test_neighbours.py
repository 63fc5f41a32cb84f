"""A source's table stays bounded, never duplicates a neighbour, ages what is not heard again, marks conflicts."""

from __future__ import annotations

import datetime
import uuid

from hypothesis import given
from hypothesis import strategies as st

from liqo.discovery.announcements import Announcement
from liqo.discovery.neighbours import Neighbours

T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
TTL = datetime.timedelta(seconds=60)


def _cluster(index: int, *, key: str = "ab") -> Announcement:
    return Announcement(
        cluster_id=str(uuid.UUID(int=index)),
        cluster_name=f"c{index}",
        auth_url=f"https://172.30.{index % 250}.2:30443",
        key_fingerprint="sha256:" + key * 32,
    )


def test_a_reannouncement_replaces_its_entry_and_extends_its_life() -> None:
    table = Neighbours().heard(_cluster(1), address="172.30.1.2", now=T0, ttl=TTL)
    later = T0 + datetime.timedelta(seconds=50)
    table = table.heard(_cluster(1), address="172.30.1.2", now=later, ttl=TTL)
    assert len(table.held) == 1
    assert table.expired(T0 + datetime.timedelta(seconds=100)).held  # 50 + 60 > 100
    assert not table.expired(later + TTL).held


def test_a_goodbye_removes_the_neighbour() -> None:
    table = (
        Neighbours().heard(_cluster(1), address="a", now=T0, ttl=TTL).heard(_cluster(2), address="b", now=T0, ttl=TTL)
    )
    assert [key[0] for key in table.withdrawn(_cluster(1).cluster_id, now=T0).held] == [_cluster(2).cluster_id]


def test_one_cluster_id_with_two_keys_is_a_conflict_shown_on_both() -> None:
    table = Neighbours().heard(_cluster(1), address="a", now=T0, ttl=TTL)
    table = table.heard(_cluster(1, key="cd"), address="evil", now=T0, ttl=TTL)
    assert table.conflicts() == {_cluster(1).cluster_id}
    assert [n["conflict"] for n in table.status()["neighbours"]] == [True, True]
    # The impostor gone, the neighbour stands alone again.
    alone = table.expired(T0 + TTL * 2).heard(_cluster(1), address="a", now=T0 + TTL * 2, ttl=TTL)
    assert not alone.conflicts()


def test_beyond_the_limit_a_new_cluster_is_counted_and_dropped_and_the_held_ones_stay() -> None:
    table = Neighbours(limit=2)
    for index in range(5):
        table = table.heard(_cluster(index), address=f"10.0.0.{index}", now=T0, ttl=TTL)
    assert {key[0] for key in table.held} == {_cluster(0).cluster_id, _cluster(1).cluster_id}
    assert table.refused == 3
    assert table.last_refusal is not None
    assert table.last_refusal.reason == "2 neighbours held already"
    # A held one is still heard again at the limit.
    assert table.heard(_cluster(0), address="x", now=T0, ttl=TTL).refused == 3


def test_the_status_lists_neighbours_in_order_and_the_last_refusal_escaped() -> None:
    table = (
        Neighbours().heard(_cluster(2), address="b", now=T0, ttl=TTL).heard(_cluster(1), address="a", now=T0, ttl=TTL)
    )
    table = table.refuse(address="10.0.0.9", reason="the name holds \x1b", now=T0)
    status = table.status()
    assert [n["clusterName"] for n in status["neighbours"]] == ["c1", "c2"]
    assert status["neighbours"][0]["expiresAt"] == "2026-11-28T12:01:00Z"
    assert status["refused"] == 1
    assert status["lastRefusal"] == {
        "address": "10.0.0.9",
        "reason": "the name holds \\x1b",
        "at": "2026-11-28T12:00:00Z",
    }


events = st.lists(
    st.tuples(st.integers(0, 30), st.sampled_from(["ab", "cd"]), st.integers(0, 200), st.booleans()), max_size=80
)


@given(events, st.integers(1, 10))
def test_whatever_is_heard_the_table_holds_at_most_its_limit_and_one_entry_per_claim(
    heard: list[tuple[int, str, int, bool]], limit: int
) -> None:
    table = Neighbours(limit=limit)
    for index, key, seconds, goodbye in heard:
        now = T0 + datetime.timedelta(seconds=seconds)
        if goodbye:
            table = table.withdrawn(_cluster(index).cluster_id, now=now)
        else:
            table = table.heard(_cluster(index, key=key), address="a", now=now, ttl=TTL)
        assert len(table.held) <= limit
        listed = [(n["clusterID"], n["keyFingerprint"]) for n in table.status()["neighbours"]]
        assert len(listed) == len(set(listed))
