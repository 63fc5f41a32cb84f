"""What the installed listener runs for each DiscoverySource, from the sources and the cluster's identity (pure)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from liqo.api.discoverysources import Clusters, PeeringPolicy, SourceType, neighbours_of, source_of
from liqo.discovery.announcements import Announcement
from liqo.discovery.neighbours import Neighbours
from liqo.discovery.sources import DnsConfig, LanConfig, status_of, wanted, why_silent

T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
ID = str(uuid.UUID(int=7))
KEY = "sha256:" + "ab" * 32


def _identity(**data: str) -> dict[str, Any]:
    base = {
        "clusterID": ID,
        "clusterName": "rome",
        "apiServerURL": "https://10.0.0.1:6443",
        "authURL": "https://172.30.0.2:30443",
        "keyFingerprint": KEY,
    }
    return {"metadata": {"name": "liqo-cluster-identity", "namespace": "liqo"}, "data": base | data}


def _source(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "lan"}, "spec": {"type": "LAN"} | spec}


def test_the_lan_source_announces_the_identity_with_its_limit() -> None:
    assert wanted([_source(limit=8)], _identity(), lan_source="lan") == {
        "lan": LanConfig(
            limit=8,
            announcement=Announcement(
                cluster_id=ID, cluster_name="rome", auth_url="https://172.30.0.2:30443", key_fingerprint=KEY
            ),
        )
    }


def test_announce_off_listens_only_and_other_lan_sources_or_unknown_types_run_nothing() -> None:
    assert wanted([_source(announce=False)], _identity(), lan_source="lan") == {
        "lan": LanConfig(limit=64, announcement=None)
    }
    other_lan = {"metadata": {"name": "second"}, "spec": {"type": "LAN"}}
    pigeons = {"metadata": {"name": "p"}, "spec": {"type": "Carrier-pigeon"}}
    assert wanted([other_lan, pigeons], _identity(), lan_source="lan") == {}


def test_every_dns_source_is_looked_up_in_its_zone() -> None:
    dns = {
        "metadata": {"name": "corp"},
        "spec": {"type": "DNS", "domain": "corp.example", "nameservers": ["10.0.0.53"]},
    }
    assert wanted([dns, _source()], None, lan_source="lan") == {
        "corp": DnsConfig(domain="corp.example", nameservers=("10.0.0.53",), limit=64),
        "lan": LanConfig(limit=64, announcement=None),  # no identity yet: listening only
    }


def test_an_identity_that_cannot_be_announced_says_why() -> None:
    assert why_silent(None) == "liqo's identity is not there yet"
    assert "key fingerprint" in why_silent(_identity(keyFingerprint=""))
    assert "authentication URL" in why_silent(_identity(authURL="http://plain"))
    assert wanted([_source()], _identity(keyFingerprint=""), lan_source="lan")["lan"] == LanConfig(
        limit=64, announcement=None
    )


def test_the_status_is_the_table_with_the_listener_and_its_heartbeat() -> None:
    status = status_of(Neighbours(), address="172.30.0.2", now=T0)
    assert status == {
        "neighbours": [],
        "refused": 0,
        "listener": {"address": "172.30.0.2", "heartbeat": "2026-11-28T12:00:00Z"},
    }


def test_a_source_read_back_with_the_schema_defaults() -> None:
    source = source_of({"metadata": {"name": "lan"}, "spec": {"type": "LAN", "deny": {"clusterNames": ["x*"]}}})
    assert (source.type, source.peering, source.limit, source.announce, source.allow) == (
        SourceType.LAN,
        PeeringPolicy.MANUAL,
        64,
        True,
        None,
    )
    assert source.deny == Clusters(cluster_names=("x*",))


def test_a_status_entry_that_cannot_be_read_whole_is_skipped() -> None:
    good = {"clusterID": ID, "authURL": "https://a", "keyFingerprint": KEY, "expiresAt": "2026-11-28T12:01:00Z"}
    status = {"neighbours": [good, {"clusterID": ID}, good | {"expiresAt": "yesterday"}, "text"]}
    assert [h.cluster_id for h in neighbours_of({"status": status})] == [ID]
