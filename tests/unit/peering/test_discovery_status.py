"""A ForeignCluster's ``status.discovery``: which sources hear the peer now, and when that is rewritten."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api.discoverysources import MAX_HEARD_BY, heard_by, heard_ids
from liqo.kube.timefmt import format_time
from liqo.peering.status import hearing_changed, peer_status
from tests.unit.peering.status_support import NOW, PEER, peer_state

OTHER = "0f1e2d3c-4b5a-4968-8776-655443322110"


def _entry(cluster_id: str, *, address: str = "172.30.0.2", expires: int = 60, seen: int = 0) -> dict[str, Any]:
    return {
        "clusterID": cluster_id,
        "clusterName": "milan",
        "authURL": "https://172.30.0.2:30443",
        "keyFingerprint": "sha256:" + "ab" * 32,
        "address": address,
        "lastSeen": format_time(NOW - datetime.timedelta(seconds=seen)),
        "expiresAt": format_time(NOW + datetime.timedelta(seconds=expires)),
    }


def _source(name: str, *entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"type": "LAN"}, "status": {"neighbours": list(entries)}}


def test_each_source_hearing_the_peer_unexpired_is_named_with_its_address_in_name_order() -> None:
    sources = [
        _source("zone", _entry(PEER, address="milan.corp.example")),
        _source("lan", _entry(OTHER), _entry(PEER)),
        _source("stale", _entry(PEER, expires=-1)),
        _source("elsewhere", _entry(OTHER)),
    ]
    minute = format_time(NOW.replace(second=0))
    assert heard_by(sources, PEER, now=NOW) == [
        {"source": "lan", "type": "LAN", "address": "172.30.0.2", "lastSeen": minute},
        {"source": "zone", "type": "LAN", "address": "milan.corp.example", "lastSeen": minute},
    ]
    assert heard_ids(sources[1]) == {PEER, OTHER}


def test_an_entry_the_status_cannot_read_is_skipped_not_trusted_in_part() -> None:
    broken = _entry(PEER) | {"expiresAt": "tomorrow"}
    assert heard_by([_source("lan", broken)], PEER, now=NOW) == []


@given(st.integers(min_value=0, max_value=3 * MAX_HEARD_BY))
def test_the_sources_named_are_bounded_by_the_schema(count: int) -> None:
    sources = [_source(f"s{index:03}", _entry(PEER)) for index in range(count)]
    assert len(heard_by(sources, PEER, now=NOW)) == min(count, MAX_HEARD_BY)


def test_the_status_carries_the_sources_only_while_one_hears_the_peer() -> None:
    heard = [{"source": "lan", "address": "172.30.0.2"}]
    assert peer_status(dataclasses.replace(peer_state(), heard_by=heard), now=NOW)["discovery"] == heard
    assert "discovery" not in peer_status(peer_state(), now=NOW)  # applied without it: the field goes


def test_a_renewed_announcement_rewrites_a_record_once_a_minute_a_new_address_or_a_gone_neighbour_at_once() -> None:
    before = _source("lan", _entry(PEER, seen=60))  # NOW is on a minute: heard a minute before
    renewed = _source("lan", _entry(PEER, expires=120, seen=30))  # half a minute later: the same minute
    assert not hearing_changed(before, renewed)
    assert hearing_changed(before, _source("lan", _entry(PEER, seen=0)))  # on NOW: the next minute
    assert hearing_changed(before, _source("lan", _entry(PEER, address="172.30.0.9")))
    assert hearing_changed(before, _source("lan"))
