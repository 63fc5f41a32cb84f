"""The controlling peer's side: the twins of a consumer tethered here, with this cluster's consent, are offloaded
back to it; nothing else is touched, and the tether's end takes them back."""

from __future__ import annotations

import uuid
from typing import Any

from liqo.api import names
from liqo.api.workingmodes import ACCEPTS_TETHERING, TETHERED, tether_offloading
from liqo.modes.controlling import Changes, changes, tethered_here

LOCAL = str(uuid.UUID(int=1))
LAPTOP = str(uuid.UUID(int=2))
OTHER = str(uuid.UUID(int=3))


def _offer(peer: str, name: str, **flags: bool) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": names.tenant_namespace(peer)}, "spec": dict(flags)}


def _twin(name: str, consumer: str) -> dict[str, Any]:
    labels = names.peer_labels(consumer) | {names.ORIGIN_NAMESPACE: name.rsplit("-", 1)[0]}
    return {"metadata": {"name": name, "labels": labels}}


def test_a_consumer_is_tethered_here_only_when_it_says_so_and_this_cluster_accepts() -> None:
    both = [_offer(LAPTOP, LAPTOP, **{TETHERED: True}), _offer(LAPTOP, LOCAL, **{ACCEPTS_TETHERING: True})]
    assert tethered_here(both, local_id=LOCAL) == {LAPTOP}
    assert tethered_here(both[:1], local_id=LOCAL) == set()  # this cluster's policy does not accept it
    assert tethered_here(both[1:], local_id=LOCAL) == set()  # accepted, not asked
    # A consumer cannot say this cluster accepts: only this cluster's own offer (named after it) counts.
    forged = [_offer(LAPTOP, LAPTOP, **{TETHERED: True, ACCEPTS_TETHERING: True})]
    assert tethered_here(forged, local_id=LOCAL) == set()


def test_only_the_twins_of_tethered_consumers_are_offloaded_back_and_only_the_tethers_offloadings_go() -> None:
    namespaces = [
        _twin("default-00000000", LAPTOP),
        _twin("shop-00000000", LAPTOP),
        _twin("web-00000000", OTHER),
        {"metadata": {"name": "default"}},
    ]
    admins = {"metadata": {"name": names.OFFLOADING, "namespace": "shop-00000000"}, "spec": {}}
    assert changes(frozenset({LAPTOP}), namespaces=namespaces, offloadings=[admins]) == Changes(
        offload=(("default-00000000", LAPTOP),)
    )
    made = tether_offloading("default-00000000", peer=LAPTOP, strategy="LocalAndRemote")
    # This cluster's own tether (to another peer) offloads its own namespaces: never this side's to undo.
    own = tether_offloading("default", peer=OTHER, strategy="Remote")
    assert changes(frozenset({LAPTOP}), namespaces=namespaces, offloadings=[admins, made, own]) == Changes()
    assert changes(frozenset(), namespaces=namespaces, offloadings=[admins, made, own]) == Changes(
        unoffload=("default-00000000",)
    )
    # Changed by someone (its strategy turned Local): made as it should be again.
    turned = tether_offloading("default-00000000", peer=LAPTOP, strategy="Local")
    assert changes(frozenset({LAPTOP}), namespaces=namespaces, offloadings=[admins, turned]) == Changes(
        offload=(("default-00000000", LAPTOP),)
    )
