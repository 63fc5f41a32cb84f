"""Concurrent ``liqoctl local``: two loops of up / peer / purge beside ``local list``, no error, nothing left.

The loops are :mod:`tests.local_stress` (``scripts/local-stress`` runs them longer by hand); here for a
bounded time, ``LIQO_STRESS_MINUTES`` (default 1: a round or two per loop, ~3 minutes on 2 busy cores; the
suite's lanes bring up and purge clusters concurrently all along besides). The second loop's provider has a
real node when the run is root, so underlay slots, veths and namespaces are made and released concurrently too.
"""

from __future__ import annotations

import os

import pytest

from tests import local_stress

MINUTES = float(os.environ.get("LIQO_STRESS_MINUTES", "1"))


# Rounds start until MINUTES are up; the last one then finishes (a few minutes on 2 busy cores).
@pytest.mark.timeout(MINUTES * 60 + 900)
def test_two_loops_of_up_peer_purge_beside_a_list_loop_end_with_no_error_and_nothing_left() -> None:
    # The list loop in this process: through the CLI it would take a core of its own from the other lanes.
    report = local_stress.run(
        minutes=MINUTES, prefix=f"t{os.getpid() % 100000}-st", real_node=os.geteuid() == 0, list_through_cli=False
    )
    assert report.problems == []
    assert len(report.rounds) == 2, "a loop finished no round"
    assert report.lists > 0
