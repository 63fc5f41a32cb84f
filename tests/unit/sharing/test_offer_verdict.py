"""The consumer writes its verdict on an offer only over the version it decided from.

In ``Manual`` mode a human writes ``Accepted`` into the offer's status. A reconcile that read the offer
before that write (its cache a step behind) decides ``ManualActionRequired``; a forced apply would then
undo the human's verdict for good, since the next reconcile sees its own write. The write carries the
cached resourceVersion, and a conflict ends the reconcile quietly: the newer version's event brings the
key back.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError
from liqo.sharing.virtualnodes import OfferAcceptance
from tests.unit.fakeapi import FakeApi

PROVIDER = "milan-id"
NAMESPACE = names.tenant_namespace(PROVIDER)


def status_writes(api: FakeApi) -> list[dict[str, Any]]:
    """The offer statuses applied, each with the resourceVersion it was conditional on."""
    return [call.body for call in api.called("apply", RESOURCE_OFFERS) if call.options["subresource"] == "status"]


def applies(api: FakeApi) -> list[dict[str, Any]]:
    """Every other apply (the VirtualNode)."""
    return [call.body for call in api.called("apply") if call.options["subresource"] != "status"]


def offer(status: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": PROVIDER,
            "namespace": NAMESPACE,
            "labels": {names.REPLICATED: "true"},
        },
        "spec": {"providerClusterName": "milan", "resources": {"cpu": "4"}},
        **({"status": status} if status is not None else {}),
    }


def foreign_cluster(mode: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "milan"},
        "spec": {"clusterID": PROVIDER, "outgoingPeeringEnabled": "Yes", "offerPolicy": {"mode": mode}},
    }


async def reconciled(api: FakeApi) -> None:
    informers = SharedInformers(cast(KubeClient, api))
    acceptance = OfferAcceptance(client=cast(KubeClient, api), informers=informers)
    running = asyncio.create_task(informers.run())
    try:
        assert await informers.wait_synced(5)
        await acceptance.reconcile(PROVIDER)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_the_verdict_is_written_over_the_version_it_was_decided_from() -> None:
    api = FakeApi((FOREIGN_CLUSTERS, foreign_cluster("Manual")))
    decided_from = api.put(RESOURCE_OFFERS, offer(None))["metadata"]["resourceVersion"]
    await reconciled(api)
    [write] = status_writes(api)
    assert write["status"]["phase"] == "ManualActionRequired"
    assert write["metadata"]["resourceVersion"] == decided_from


async def test_a_conflict_ends_the_reconcile_without_touching_the_virtual_node() -> None:
    api = FakeApi((RESOURCE_OFFERS, offer(None)), (FOREIGN_CLUSTERS, foreign_cluster("Auto")))
    api.refuse("apply", RESOURCE_OFFERS, ConflictError(409, "Conflict", "the object has been modified"))
    await reconciled(api)  # no exception: the newer version's event brings the key back
    assert [w["status"]["phase"] for w in status_writes(api)] == ["Accepted"]
    assert applies(api) == []


async def test_a_human_verdict_in_manual_mode_is_kept() -> None:
    verdict = {"phase": "Accepted", "reason": "approved"}
    api = FakeApi((RESOURCE_OFFERS, offer(verdict)), (FOREIGN_CLUSTERS, foreign_cluster("Manual")))
    await reconciled(api)
    [write] = status_writes(api)
    assert write["status"] == verdict | {"virtualNode": names.virtual_node_name("milan")}
    assert [a["metadata"]["name"] for a in applies(api)] == [names.virtual_node_name("milan")]
