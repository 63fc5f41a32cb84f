"""The consumer writes its verdict on an offer only over the version it decided from.

In ``Manual`` mode a human writes ``Accepted`` into the offer's status. A reconcile that read the offer
before that write (its cache a step behind) decides ``ManualActionRequired``; a forced apply would then
undo the human's verdict for good, since the next reconcile sees its own write. The write carries the
cached resourceVersion, and a conflict ends the reconcile quietly: the newer version's event brings the
key back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError
from liqo.kube.resources import Resource
from liqo.sharing.virtualnodes import OfferAcceptance

PROVIDER = "milan-id"
NAMESPACE = names.tenant_namespace(PROVIDER)


class RecordingApi:
    """Lists fixed objects, streams nothing; records status applies and may refuse them with a conflict."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], *, conflict: bool) -> None:
        self.objects = objects
        self.conflict = conflict
        self.status_writes: list[dict[str, Any]] = []
        self.applies: list[dict[str, Any]] = []

    async def list_all(self, resource: Resource, **_: Any) -> tuple[list[Any], str]:
        return list(self.objects.get(resource.plural, [])), "1"

    async def watch(self, resource: Resource, **_: Any) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}

    async def apply_status(self, resource: Resource, **kwargs: Any) -> dict[str, Any]:
        self.status_writes.append(kwargs)
        if self.conflict:
            raise ConflictError(409, "Conflict", "the object has been modified")
        return {}

    async def apply(self, resource: Resource, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.applies.append(obj)
        return obj

    async def delete(self, resource: Resource, name: str, **_: Any) -> dict[str, Any]:
        return {}


def offer(version: str, status: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": PROVIDER,
            "namespace": NAMESPACE,
            "resourceVersion": version,
            "labels": {names.REPLICATED: "true"},
        },
        "spec": {"providerClusterName": "milan", "resources": {"cpu": "4"}},
        **({"status": status} if status is not None else {}),
    }


def foreign_cluster(mode: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "milan", "resourceVersion": "3"},
        "spec": {"clusterID": PROVIDER, "outgoingPeeringEnabled": "Yes", "offerPolicy": {"mode": mode}},
    }


async def reconciled(api: RecordingApi) -> None:
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
    api = RecordingApi(
        {RESOURCE_OFFERS.plural: [offer("41", None)], FOREIGN_CLUSTERS.plural: [foreign_cluster("Manual")]},
        conflict=False,
    )
    await reconciled(api)
    [write] = api.status_writes
    assert write["status"]["phase"] == "ManualActionRequired"
    assert write["resource_version"] == "41"


async def test_a_conflict_ends_the_reconcile_without_touching_the_virtual_node() -> None:
    api = RecordingApi(
        {RESOURCE_OFFERS.plural: [offer("41", None)], FOREIGN_CLUSTERS.plural: [foreign_cluster("Auto")]},
        conflict=True,
    )
    await reconciled(api)  # no exception: the newer version's event brings the key back
    assert [w["status"]["phase"] for w in api.status_writes] == ["Accepted"]
    assert api.applies == []


async def test_a_human_verdict_in_manual_mode_is_kept() -> None:
    verdict = {"phase": "Accepted", "reason": "approved"}
    api = RecordingApi(
        {RESOURCE_OFFERS.plural: [offer("42", verdict)], FOREIGN_CLUSTERS.plural: [foreign_cluster("Manual")]},
        conflict=False,
    )
    await reconciled(api)
    [write] = api.status_writes
    assert write["status"] == verdict | {"virtualNode": names.virtual_node_name("milan")}
    assert [a["metadata"]["name"] for a in api.applies] == [names.virtual_node_name("milan")]
