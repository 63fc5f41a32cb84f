"""Clusters find each other on a LAN by multicast DNS, across real network namespaces on a real bridge.

Each listener is liqo's discovery process (``--print``: it writes its table to stdout instead of a
cluster), bound to its namespace's address on the bridge. What one sends, the others really receive.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid

import pytest

from liqo.discovery.announcements import Announcement
from tests.integration.discovery.lan import Listener, lan, listeners

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip")


def cluster(name: str, *, key: str = "") -> Announcement:
    return Announcement(
        cluster_id=str(uuid.uuid4()),
        cluster_name=name,
        auth_url=f"https://{name}.example:30443",
        key_fingerprint="sha256:" + (key or uuid.uuid4().hex + uuid.uuid4().hex),
    )


def test_three_clusters_find_each_other_and_forget_one_that_leaves_or_dies() -> None:
    with lan() as net, listeners() as running:
        clusters = [cluster(name) for name in ("rome", "milan", "naples")]
        for each in clusters:
            # naples' records live 4 s: killed without a goodbye, it must be forgotten within that.
            running.append(Listener(net.add_host(), announcement=each, ttl=4 if each.cluster_name == "naples" else 60))
        for started in running:
            started.wait_up()
        ids = {each.cluster_id for each in clusters}
        for listener, own in zip(running, clusters, strict=True):
            table = listener.wait_for(
                lambda t, own=own: {n["clusterID"] for n in t["neighbours"]} == ids - {own.cluster_id},
                timeout=10,
                what="the two others",
            )
            heard = {n["clusterID"]: n for n in table["neighbours"]}
            assert {n["address"] for n in heard.values()} == {h.address for h in net.hosts} - {listener.host.address}
            other = next(c for c in clusters if c.cluster_id in heard)
            assert heard[other.cluster_id]["keyFingerprint"] == other.key_fingerprint
            assert heard[other.cluster_id]["authURL"] == other.auth_url
            assert not any(n["conflict"] for n in heard.values())
        rome, milan, naples = running
        # milan leaves: its goodbye takes it off the others' tables at once.
        milan.stop(signal.SIGTERM)
        assert milan.process.returncode == 0
        for listener in (rome, naples):
            listener.wait_for(
                lambda t: clusters[1].cluster_id not in {n["clusterID"] for n in t["neighbours"]},
                timeout=5,
                what="milan gone",
            )
        # naples dies: no goodbye; rome forgets it once its records run out.
        naples.stop(signal.SIGKILL)
        rome.wait_for(lambda t: not t["neighbours"], timeout=4 + 10, what="naples expired")


def test_an_impostor_claiming_a_known_cluster_id_with_another_key_is_a_conflict_that_ends_when_it_leaves() -> None:
    with lan() as net, listeners() as running:
        rome = cluster("rome")
        impostor = Announcement(rome.cluster_id, "rome", "https://evil.example:443", "sha256:" + "e" * 64)
        running.append(listener := Listener(net.add_host(), announcement=None))
        running.append(Listener(net.add_host(), announcement=rome))
        for started in running:
            started.wait_up()
        listener.wait_for(lambda t: len(t["neighbours"]) == 1, timeout=10, what="rome")
        running.append(evil := Listener(net.add_host(), announcement=impostor))
        evil.wait_up()
        table = listener.wait_for(lambda t: len(t["neighbours"]) == 2, timeout=10, what="the impostor beside rome")
        assert [n["conflict"] for n in table["neighbours"]] == [True, True]
        assert {n["keyFingerprint"] for n in table["neighbours"]} == {rome.key_fingerprint, impostor.key_fingerprint}
        evil.stop(signal.SIGTERM)
        table = listener.wait_for(lambda t: len(t["neighbours"]) == 1, timeout=5, what="the impostor gone")
        assert table["neighbours"][0]["keyFingerprint"] == rome.key_fingerprint
        assert not table["neighbours"][0]["conflict"]
