"""liqoctl mode's operations: a tether that cannot be made is refused before anything is written."""

from __future__ import annotations

import datetime
import uuid
from typing import cast

import pytest

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, WORKING_MODES
from liqo.api.workingmodes import ACCEPTS_TETHERING, NAME, Mode
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.modes.operations import ModeError, shown, switch
from tests.unit.fakeapi import FakeApi

ENTERPRISE = str(uuid.UUID(int=9))


def _api(*, accepts: bool = True, incoming: str = "Established") -> FakeApi:
    conditions = [
        {"type": "OutgoingPeering", "status": "Established"},
        {"type": "IncomingPeering", "status": incoming},
    ]
    record = {
        "metadata": {"name": "enterprise"},
        "spec": {"clusterID": ENTERPRISE, "clusterName": "acme"},
        "status": {"conditions": conditions},
    }
    offer: Obj = {"metadata": {"name": ENTERPRISE, "namespace": names.tenant_namespace(ENTERPRISE)}, "spec": {}}
    if accepts:
        offer["spec"][ACCEPTS_TETHERING] = True
    return FakeApi((FOREIGN_CLUSTERS, record), (RESOURCE_OFFERS, offer))


@pytest.mark.parametrize("name", ["enterprise", "acme", ENTERPRISE])
async def test_a_tether_names_its_peer_any_way_a_person_would_and_records_its_id(name: str) -> None:
    api = _api()
    await switch(cast(KubeClient, api), mode=Mode.TETHERED, to=name, fallback_after=datetime.timedelta(minutes=5))
    stored = api.stored(WORKING_MODES, NAME)
    assert stored is not None
    assert stored["spec"] == {"mode": "Tethered", "peer": ENTERPRISE, "fallbackAfterSeconds": 300}


@pytest.mark.parametrize(
    ("api", "to", "fallback", "said"),
    [
        (_api(), "nobody", None, "no peer named 'nobody' (known: enterprise)"),
        (_api(), None, None, "a tether names its peer"),
        (_api(accepts=False), "acme", None, "refused (NotAccepted): the sharing policy of"),
        (_api(incoming="Pending"), "acme", None, "refused (NotProvidingToPeer)"),
        (_api(), "acme", 10.0, "--fallback-after must be at least 30s"),
    ],
)
async def test_a_tether_that_cannot_be_made_is_refused_saying_why_and_nothing_is_written(
    api: FakeApi, to: str | None, fallback: float | None, said: str
) -> None:
    after = None if fallback is None else datetime.timedelta(seconds=fallback)
    with pytest.raises(ModeError, match=said.replace("(", r"\(").replace(")", r"\)")):
        await switch(cast(KubeClient, api), mode=Mode.TETHERED, to=to, fallback_after=after)
    assert api.stored(WORKING_MODES, NAME) is None
    assert not api.called("apply")


async def test_autonomous_needs_no_peer() -> None:
    api = _api()
    await switch(cast(KubeClient, api), mode=Mode.AUTONOMOUS)
    stored = api.stored(WORKING_MODES, NAME)
    assert stored is not None
    assert stored["spec"] == {"mode": "Autonomous"}


def test_what_liqoctl_mode_shows_of_a_cluster_that_never_switched_and_of_a_tether() -> None:
    assert shown(None) == {
        "mode": "Autonomous",
        "phase": "Autonomous",
        "switched": "True",
        "reason": "Switched",
        "message": "",
        "offloaded": [],
    }
    working_mode = {
        "metadata": {"name": NAME},
        "spec": {"mode": "Tethered", "peer": ENTERPRISE},
        "status": {
            "phase": "Tethering",
            "peer": ENTERPRISE,
            "offloaded": ["default"],
            "conditions": [{"type": "Switched", "status": "False", "reason": "InProgress", "message": "offloading"}],
        },
    }
    row = shown(working_mode)
    assert (row["mode"], row["peer"], row["phase"], row["switched"], row["offloaded"]) == (
        "Tethered",
        ENTERPRISE,
        "Tethering",
        "False",
        ["default"],
    )
