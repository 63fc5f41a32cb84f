"""Whatever a stranger multicasts on the LAN, the listener stays up, bounded, and keeps what it knew.

The stranger is a process in a namespace of its own on the bridge, sending raw multicast DNS answers
(:mod:`tests.integration.discovery.sender`) made up by hypothesis: any instance names, TXT records of any
bytes, well-formed announcements of invented clusters by the hundred. The listener holds at most 8
neighbours; rome announces itself the whole time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liqo.discovery.announcements import Announcement
from tests.integration.discovery.lan import Host, Listener, lan, listeners
from tests.integration.discovery.test_lan import cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip")

LIMIT = 8
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Watched:
    listener: Listener
    stranger: Host
    rome: Announcement


@pytest.fixture(scope="module")
def watched() -> Iterator[Watched]:
    rome = cluster("rome")
    with lan() as net, listeners() as running:
        running.append(listener := Listener(net.add_host(), announcement=None, limit=LIMIT))
        running.append(Listener(net.add_host(), announcement=rome))
        for each in running:
            each.wait_up()
        listener.wait_for(lambda t: len(t["neighbours"]) == 1, timeout=10, what="rome")
        yield Watched(listener=listener, stranger=net.add_host(), rome=rome)


def send(host: Host, claims: list[dict[str, Any]]) -> None:
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            host.namespace,
            sys.executable,
            "-m",
            "tests.integration.discovery.sender",
            host.address,
        ],
        input=json.dumps(claims),
        text=True,
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


def assert_intact(watched: Watched) -> None:
    table = watched.listener.table
    assert watched.listener.process.poll() is None, "the listener died"
    log = watched.listener.log_tail()
    assert "Traceback" not in log, f"what a stranger sent made the listener log an error:\n{log}"
    assert len(table["neighbours"]) <= LIMIT
    rome = [n for n in table["neighbours"] if n["clusterID"] == watched.rome.cluster_id]
    assert [(n["keyFingerprint"], n["authURL"], n["conflict"]) for n in rome] == [
        (watched.rome.key_fingerprint, watched.rome.auth_url, False)
    ]


def well_formed(announcement: Announcement, **changes: str) -> list[str]:
    return [f"{key}={value}".encode().hex() for key, value in (announcement.txt() | changes).items()]


# A DNS label is at most 63 bytes on the wire (its length byte's top bits mark a compression pointer).
labels = st.text(st.characters(codec="utf-8", exclude_characters=".\x00"), min_size=1, max_size=40).filter(
    lambda label: len(label.encode()) <= 63
)
raw_txt = st.lists(st.binary(max_size=300).map(bytes.hex), max_size=20)
claims = st.lists(
    st.fixed_dictionaries(
        {
            "instance": st.one_of(labels, st.builds(lambda: f"{uuid.uuid4()}-{uuid.uuid4().hex[:12]}")),
            "txt": st.one_of(
                raw_txt,
                st.builds(lambda name: well_formed(cluster("x"), name=name), st.text(max_size=100)),
                st.builds(lambda fp: well_formed(cluster("x"), fp=fp), st.text(max_size=80)),
            ),
            "port": st.integers(0, 65535),
            "ttl": st.integers(1, 120),
        }
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=25, deadline=None)
@given(batch=claims)
def test_anything_heard_leaves_the_listener_up_bounded_and_rome_untouched(
    watched: Watched, batch: list[dict[str, Any]]
) -> None:
    send(watched.stranger, batch)
    judged(watched)
    assert_intact(watched)


def judged(watched: Watched) -> None:
    """Wait until the listener judged a fresh cluster sent after what came before: held, or refused as one too many.

    Sent again each second: a listener busy resolving a flood skips what arrives meanwhile (it would hear it
    again at the cluster's next announcement, which a real cluster makes every third of its records' life).
    """
    sentinel = cluster("sentinel")
    claim = {"instance": sentinel.instance, "txt": well_formed(sentinel), "port": 443, "ttl": 120}
    refused = watched.listener.table["refused"]
    deadline = time.monotonic() + 30
    while True:
        send(watched.stranger, [claim])
        try:
            watched.listener.wait_for(
                lambda t: (
                    sentinel.cluster_id in {n["clusterID"] for n in t["neighbours"]}
                    or (t["refused"] > refused and t["lastRefusal"]["reason"] == f"{LIMIT} neighbours held already")
                ),
                timeout=1,
                what="a fresh cluster judged",
            )
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_a_flood_of_invented_clusters_fills_the_table_to_its_limit_and_no_further(watched: Watched) -> None:
    invented = [cluster(f"fake{i}") for i in range(300)]
    send(
        watched.stranger,
        [{"instance": c.instance, "txt": well_formed(c), "port": 443, "ttl": 120} for c in invented],
    )
    table = watched.listener.wait_for(
        lambda t: len(t["neighbours"]) == LIMIT and t["lastRefusal"]["reason"] == f"{LIMIT} neighbours held already",
        timeout=30,
        what="a full table refusing more",
    )
    assert table["refused"] > 0
    assert_intact(watched)
