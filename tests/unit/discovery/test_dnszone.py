"""A zone's records judged as announcements, TTLs honoured, failures changing nothing held (pure parts)."""

from __future__ import annotations

import datetime
import uuid

import dns.zone
import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.discovery.announcements import Announcement, Unusable
from liqo.discovery.dnszone import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    Found,
    Round,
    apply_round,
    dns_records,
    judge,
    next_round_in,
    resolve,
)
from liqo.discovery.neighbours import Neighbours
from liqo.kube.printable import unprintable

T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
MILAN = Announcement(
    cluster_id=str(uuid.UUID(int=5)),
    cluster_name="milan",
    auth_url="https://milan.corp.example:30443",
    key_fingerprint="sha256:" + "cd" * 32,
)


def _strings(announcement: Announcement) -> list[bytes]:
    return [f"{k}={v}".encode() for k, v in announcement.txt().items()]


def _instance(announcement: Announcement, domain: str = "corp.example") -> str:
    return f"{announcement.instance}._liqo._tcp.{domain}."


def test_an_instance_whose_records_agree_is_found_at_its_srv_target() -> None:
    found = judge(
        _instance(MILAN), strings=_strings(MILAN), srv_ports=[30443], srv_target="milan.corp.example.", ttl=120
    )
    assert found == Found(announcement=MILAN, target="milan.corp.example", ttl=120)


def test_a_name_that_is_not_the_id_and_key_or_a_port_that_is_not_the_endpoints_is_refused() -> None:
    other = Announcement(MILAN.cluster_id, "milan", MILAN.auth_url, "sha256:" + "ee" * 32)
    with pytest.raises(Unusable, match="instance name"):
        judge(_instance(other), strings=_strings(MILAN), srv_ports=[30443], srv_target="m.", ttl=60)
    with pytest.raises(Unusable, match="port"):
        judge(_instance(MILAN), strings=_strings(MILAN), srv_ports=[443], srv_target="m.", ttl=60)
    with pytest.raises(Unusable, match="txtvers"):
        judge(_instance(MILAN), strings=[b"id=x"], srv_ports=[30443], srv_target="m.", ttl=60)


def test_a_round_holds_what_it_found_for_its_ttl_and_what_it_no_longer_lists_runs_out_on_its_own() -> None:
    found = Found(announcement=MILAN, target="milan.corp.example", ttl=120)
    table = apply_round(Neighbours(), Round(found=[found], ttl=120), now=T0)
    assert [n.expires_at for n in table.held.values()] == [T0 + datetime.timedelta(seconds=120)]
    # Withdrawn from the zone: the next round lists nothing, and milan is still believed until its TTL ends.
    later = apply_round(table, Round(ttl=MAX_INTERVAL), now=T0 + datetime.timedelta(seconds=60))
    assert len(later.held) == 1
    gone = apply_round(later, Round(ttl=MAX_INTERVAL), now=T0 + datetime.timedelta(seconds=121))
    assert not gone.held


def test_a_failed_round_is_a_refusal_and_loses_nothing_held() -> None:
    table = apply_round(Neighbours(), Round(found=[Found(MILAN, "m", 300)]), now=T0)
    failed = apply_round(table, Round(refused=[("corp.example", "cannot list: Timeout")], ttl=MIN_INTERVAL), now=T0)
    assert failed.held == table.held
    assert failed.refused == 1
    assert failed.last_refusal is not None
    assert failed.last_refusal.reason == "cannot list: Timeout"


@pytest.mark.parametrize(("nameserver", "why"), [("999.0.0.1", "999"), ("127.0.0.1:99999", "no such port")])
async def test_a_lookup_that_cannot_be_made_is_the_rounds_refusal(nameserver: str, why: str) -> None:
    # The listener serves every source in one process: one source's unusable nameserver must not end it.
    round_ = await resolve([nameserver], "corp.example", limit=5)
    assert not round_.found
    assert [domain for domain, _ in round_.refused] == ["corp.example"]
    assert why in round_.refused[0][1]
    assert round_.ttl == MIN_INTERVAL


@given(st.integers(min_value=0, max_value=10**7))
def test_the_zone_is_asked_again_after_its_shortest_ttl_within_bounds(ttl: int) -> None:
    assert MIN_INTERVAL <= next_round_in(Round(ttl=ttl)) <= MAX_INTERVAL


def test_the_records_to_publish_read_back_as_the_announcement() -> None:
    lines = dns_records(MILAN, domain="corp.example", ttl=60)
    instance = f"{MILAN.instance}._liqo._tcp.corp.example."
    assert lines[0] == f"_liqo._tcp.corp.example. 60 IN PTR {instance}"
    assert f"{instance} 60 IN SRV 0 0 30443 milan.corp.example." in lines
    [txt] = [line for line in lines if " TXT " in line]
    zone = dns.zone.from_text("\n".join(lines), origin="corp.example.", check_origin=False)
    strings = [s for rdata in zone.find_rdataset(instance, "TXT") for s in rdata.strings]
    assert (
        judge(instance, strings=strings, srv_ports=[30443], srv_target="milan.corp.example.", ttl=60).announcement
        == MILAN
    )
    assert txt.startswith(f"{instance} 60 IN TXT ")


@given(st.text(min_size=1, max_size=60).filter(lambda name: unprintable(name) is None))
def test_any_printable_name_survives_the_zone_file(name: str) -> None:
    ip_endpoint = Announcement(MILAN.cluster_id, name, "https://172.30.2.1:30443", MILAN.key_fingerprint)
    lines = dns_records(ip_endpoint, domain="corp.example")
    zone = dns.zone.from_text("\n".join(lines), origin="corp.example.", check_origin=False)
    instance = f"{ip_endpoint.instance}._liqo._tcp.corp.example."
    strings = [s for rdata in zone.find_rdataset(instance, "TXT") for s in rdata.strings]
    target = f"{MILAN.cluster_id}.corp.example."
    assert [str(r) for r in zone.find_rdataset(target, "A")] == ["172.30.2.1"]
    assert judge(instance, strings=strings, srv_ports=[30443], srv_target=target, ttl=1).announcement == ip_endpoint
