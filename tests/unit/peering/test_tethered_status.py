"""A ForeignCluster says when its peer is tethered to this cluster: the peer's own offer says so."""

from __future__ import annotations

import dataclasses

from liqo.api.workingmodes import TETHERED
from liqo.peering.status import peer_status
from tests.unit.peering.status_support import NOW, PEER, peer_state


def test_the_record_of_a_peer_whose_offer_says_tethered_says_so_and_only_then() -> None:
    offer = {"metadata": {"name": PEER}, "spec": {"providerClusterID": PEER, TETHERED: True}}
    assert peer_status(dataclasses.replace(peer_state(), their_offer=offer), now=NOW)["tethered"] is True
    assert "tethered" not in peer_status(peer_state(), now=NOW)
    untethered = {"metadata": {"name": PEER}, "spec": {"providerClusterID": PEER}}
    assert "tethered" not in peer_status(dataclasses.replace(peer_state(), their_offer=untethered), now=NOW)
