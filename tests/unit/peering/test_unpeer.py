"""When `liqoctl unpeer` is done waiting, as the manager's teardown ends it (against the in-memory API).

The manager is played by the test: it finishes the teardown the way the real one does, including the case where
the peer enrols as our consumer while our side is being undone (its tenant namespace then rightly stays).
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_REQUESTS
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES
from liqo.peering import operations
from liqo.peering.operations import PeeringError
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi

PEER = "0f4a8b62-7e1c-4d55-9a3e-2b6c1d0e9f71"
TENANT = names.tenant_namespace(PEER)


def record() -> Obj:
    return {
        "metadata": {"name": "milan", "finalizers": [names.FINALIZER]},
        "spec": {"clusterID": PEER, "outgoingPeeringEnabled": "Yes"},
    }


async def deleted(api: FakeApi) -> None:
    async def asked() -> bool:
        return bool(api.called("delete", FOREIGN_CLUSTERS))

    await eventually(asked, timeout=5, message="unpeer never deleted the ForeignCluster")


async def test_a_peer_that_enrols_as_our_consumer_during_the_teardown_keeps_its_namespace_and_unpeer_ends() -> None:
    api = FakeApi((FOREIGN_CLUSTERS, record()), (NAMESPACES, {"metadata": {"name": TENANT}}))
    unpeer = asyncio.create_task(operations.unpeer(cast(KubeClient, api), "milan", timeout=5))
    await deleted(api)
    # The manager: the peer's request lands, our record's finalizer is done, the provisioner records the peer
    # again as our consumer (a new record), and the namespace stays for its request.
    api.put(RESOURCE_REQUESTS, {"metadata": {"name": PEER, "namespace": TENANT}, "spec": {"consumerClusterID": PEER}})
    api.remove(FOREIGN_CLUSTERS, "milan")
    api.put(FOREIGN_CLUSTERS, {"metadata": {"name": "milan"}, "spec": {"clusterID": PEER}})
    await asyncio.wait_for(unpeer, timeout=5)


async def test_unpeer_waits_for_the_tenant_namespace_when_nobody_consumes_from_us() -> None:
    api = FakeApi((FOREIGN_CLUSTERS, record()), (NAMESPACES, {"metadata": {"name": TENANT}}))
    unpeer = asyncio.create_task(operations.unpeer(cast(KubeClient, api), "milan", timeout=1))
    await deleted(api)
    api.remove(FOREIGN_CLUSTERS, "milan")
    with pytest.raises(PeeringError, match="the teardown of milan did not finish"):
        await unpeer
