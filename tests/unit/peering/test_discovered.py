"""What a discovered cluster becomes: each rule of liqo.peering.discovered, in the order it is checked."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.discoverysources import Clusters, Heard, PeeringPolicy, Source, SourceType, Verdict
from liqo.peering.discovered import counted, decide, expired_records, record_manifest, report_rows

T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
OWN = str(uuid.UUID(int=999))
KEY = "sha256:" + "ab" * 32
OTHER_KEY = "sha256:" + "cd" * 32


def _id(index: int) -> str:
    return str(uuid.UUID(int=index))


def _heard(index: int, *, key: str = KEY, expires: int = 60, conflict: bool = False, name: str = "") -> Heard:
    return Heard(
        cluster_id=_id(index),
        cluster_name=name or f"site-{index}",
        auth_url=f"https://172.30.0.{index}:30443",
        key_fingerprint=key,
        address=f"172.30.0.{index}",
        last_seen=T0,
        expires_at=T0 + datetime.timedelta(seconds=expires),
        conflict=conflict,
    )


def _source(name: str = "lan", **fields: Any) -> Source:
    return Source(name=name, type=SourceType.LAN, **fields)


def _fc(index: int, *, key: str = "", made_by: str = "", outgoing: str = "No", name: str = "") -> dict[str, Any]:
    labels = names.peer_labels(_id(index)) | ({names.DISCOVERED_BY: made_by} if made_by else {})
    spec = {"clusterID": _id(index), "outgoingPeeringEnabled": outgoing} | ({"keyFingerprint": key} if key else {})
    return {"metadata": {"name": name or f"site-{index}", "labels": labels}, "spec": spec}


def _one(sources: list[tuple[Source, list[Heard]]], fcs: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    decisions = decide(sources, fcs or [], own_id=OWN, tokens=kw.pop("tokens", {}), now=kw.pop("now", T0))
    assert len(decisions) == 1
    return decisions[0]


def test_a_neighbour_heard_under_manual_is_known_and_its_record_pins_the_announced_key() -> None:
    decision = _one([(_source(), [_heard(1)])])
    assert decision.verdict is Verdict.KNOWN
    record = record_manifest(decision, name="site-1")
    assert record["spec"] == {
        "clusterID": _id(1),
        "clusterName": "site-1",
        "authURL": "https://172.30.0.1:30443",
        "keyFingerprint": KEY,
        "outgoingPeeringEnabled": "No",
    }
    assert record["metadata"]["labels"][names.DISCOVERED_BY] == "lan"


def test_ourselves_and_the_expired_are_not_decided_on() -> None:
    own = Heard(**{**_heard(1).__dict__, "cluster_id": OWN})
    later = T0 + datetime.timedelta(seconds=61)
    assert decide([(_source(), [own, _heard(2)])], [], own_id=OWN, tokens={}, now=later) == []


def test_two_keys_for_one_id_across_sources_are_a_conflict_and_nothing_is_made() -> None:
    decision = _one([(_source("a"), [_heard(1)]), (_source("b"), [_heard(1, key=OTHER_KEY)])])
    assert decision.verdict is Verdict.CONFLICT
    assert "a, b" in decision.reason
    assert _one([(_source(), [_heard(1, conflict=True)])]).verdict is Verdict.CONFLICT


def test_a_record_pinning_another_key_is_a_mismatch_left_untouched() -> None:
    decision = _one([(_source(), [_heard(1)])], [_fc(1, key=OTHER_KEY)])
    assert decision.verdict is Verdict.KEY_MISMATCH
    assert decision.record == "site-1"
    assert OTHER_KEY in decision.reason


def test_deny_wins_over_allow_and_names_match_by_prefix() -> None:
    denied = _source(allow=Clusters(cluster_names=("site-*",)), deny=Clusters(cluster_ids=frozenset({_id(1)})))
    assert _one([(denied, [_heard(1)])]).verdict is Verdict.DENIED
    assert _one([(denied, [_heard(2)])]).verdict is Verdict.KNOWN
    only_rome = _source(allow=Clusters(cluster_names=("rome",)))
    assert _one([(only_rome, [_heard(3)])]).verdict is Verdict.DENIED
    assert _one([(only_rome, [_heard(3, name="rome")])]).verdict is Verdict.KNOWN


def test_labels_announced_allow_and_deny_and_deny_wins() -> None:
    edge = Heard(**{**_heard(1).__dict__, "labels": {"tier": "edge", "region": "eu"}})
    core = Heard(**{**_heard(2).__dict__, "labels": {"tier": "core"}})
    only_edge = _source(allow=Clusters(labels=(("tier", "edge"),)))
    assert _one([(only_edge, [edge])]).verdict is Verdict.KNOWN
    assert _one([(only_edge, [core])]).verdict is Verdict.DENIED
    assert _one([(only_edge, [_heard(3)])]).verdict is Verdict.DENIED  # no labels announced: not allowed
    not_eu = _source(allow=Clusters(labels=(("tier", "edge"),)), deny=Clusters(labels=(("region", "eu"),)))
    assert _one([(not_eu, [edge])]).verdict is Verdict.DENIED


def test_never_only_lists() -> None:
    assert _one([(_source(peering=PeeringPolicy.NEVER), [_heard(1)])]).verdict is Verdict.LISTED


def test_auto_peers_only_with_a_token_for_that_very_cluster() -> None:
    auto = _source(peering=PeeringPolicy.AUTO, token_secret="tokens")
    with_token = _one([(auto, [_heard(1)])], tokens={"tokens": frozenset({_id(1)})})
    assert (with_token.verdict, with_token.token_secret) == (Verdict.AUTO, "tokens")
    without = _one([(auto, [_heard(1)])], tokens={"tokens": frozenset({_id(2)})})
    assert without.verdict is Verdict.KNOWN
    assert "holds no token" in without.reason


def test_expiry_forgets_only_unused_records_discovery_made() -> None:
    fcs = [
        _fc(1, made_by="lan"),  # no longer heard, unused: goes
        _fc(2, made_by="lan", outgoing="Yes"),  # a peering asked: stays
        _fc(3, made_by="lan"),  # its peer has a tenant namespace (peered the other way): stays
        _fc(4),  # made by hand: stays
        _fc(5, made_by="lan"),  # still heard: stays
    ]
    decisions = decide([(_source(), [_heard(5)])], fcs, own_id=OWN, tokens={}, now=T0)
    gone = expired_records(decisions, fcs, tenants=frozenset({_id(3)}))
    assert [fc["metadata"]["name"] for fc in gone] == ["site-1"]


_heards = st.builds(
    _heard,
    index=st.integers(min_value=1, max_value=6),
    key=st.sampled_from([KEY, OTHER_KEY]),
    expires=st.integers(min_value=-5, max_value=60),
    conflict=st.booleans(),
)


@given(
    heard=st.lists(_heards, max_size=12),
    peering=st.sampled_from(list(PeeringPolicy)),
    pinned=st.lists(st.integers(min_value=1, max_value=6), max_size=3, unique=True),
)
def test_whatever_is_heard_one_decision_per_live_id_and_none_trusts_a_disputed_key(
    heard: list[Heard], peering: PeeringPolicy, pinned: list[int]
) -> None:
    source = _source(peering=peering, token_secret="t")
    fcs = [_fc(i, key=KEY) for i in pinned]
    decisions = decide([(source, heard)], fcs, own_id=OWN, tokens={"t": frozenset(_id(i) for i in range(7))}, now=T0)
    live = {h.cluster_id for h in heard if h.expires_at > T0}
    assert [d.cluster_id for d in decisions] == sorted(live)
    for d in decisions:
        keys = {h.key_fingerprint for h in heard if h.cluster_id == d.cluster_id and h.expires_at > T0}
        disputed = len(keys) > 1 or any(h.conflict for h in heard if h.cluster_id == d.cluster_id and h.expires_at > T0)
        if disputed:
            assert d.verdict is Verdict.CONFLICT
        elif d.verdict in (Verdict.KNOWN, Verdict.AUTO):
            assert d.heard.key_fingerprint in keys
            assert all(
                fc["spec"]["keyFingerprint"] == d.heard.key_fingerprint
                for fc in fcs
                if fc["spec"]["clusterID"] == d.cluster_id
            )


def test_the_report_shows_each_decision_with_its_reason_and_remaining_life() -> None:
    decisions = decide([(_source(), [_heard(1)])], [_fc(1, key=KEY)], own_id=OWN, tokens={}, now=T0)
    [row] = report_rows(decisions, now=T0 + datetime.timedelta(seconds=20))
    assert row == {
        "source": "lan",
        "clusterName": "site-1",
        "clusterID": _id(1),
        "authURL": "https://172.30.0.1:30443",
        "keyFingerprint": KEY,
        "address": "172.30.0.1",
        "lastSeen": "2026-11-28T12:00:00Z",
        "expiresInSeconds": 40,
        "verdict": "Known",
        "reason": "peering Manual: liqoctl peer with it to consume its resources",
        "foreignCluster": "site-1",
    }


def test_the_metric_counts_decisions_by_source_and_verdict() -> None:
    never = _source("quiet", peering=PeeringPolicy.NEVER)
    decisions = decide([(_source(), [_heard(1), _heard(2)]), (never, [_heard(3)])], [], own_id=OWN, tokens={}, now=T0)
    assert counted(decisions) == [(("lan", "Known"), 2.0), (("quiet", "Listed"), 1.0)]
