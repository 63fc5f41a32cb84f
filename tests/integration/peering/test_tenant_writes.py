"""In a bidirectional peering a peer writes only its side of the tenant namespace (docs/security.md, "Identities").

rome consumes from milan with ``offerPolicy: Manual`` and milan consumes from rome, so rome's
``liqo-tenant-<milan>`` holds both conversations: milan's request and rome's offer to it, but also rome's
request to milan and the replica of milan's offer to rome, whose status is rome's admin's verdict. milan's
identity on rome (what a hostile milan holds) tries to give that verdict itself, and to rewrite rome's request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from liqo.api import names
from liqo.api.resources import RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.peering import operations
from tests.integration.helpers import Site, expect_clean
from tests.shared import eventually


@pytest.fixture
async def both_ways(sites: dict[str, Site], rome: KubeClient, milan: KubeClient) -> AsyncIterator[None]:
    command = await operations.peer_command(milan)
    await operations.peer_out_of_band(rome, command, offer_policy={"mode": "Manual"})
    try:
        await operations.peer(milan, rome, timeout=30)
        yield
    finally:
        await operations.unpeer(milan, sites["rome"].cluster_id, timeout=60)
        await operations.unpeer(rome, sites["milan"].cluster_id, timeout=60)
    await expect_clean(rome, milan)


async def test_a_peer_cannot_give_our_verdict_on_its_offer_nor_write_our_request(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, both_ways: None
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    tenant = names.tenant_namespace(milan_id)  # on rome

    async def awaiting_romes_admin() -> bool:
        try:
            offer = await rome.get(RESOURCE_OFFERS, milan_id, namespace=tenant)
        except NotFoundError:
            return False
        return (offer.get("status") or {}).get("phase") == "ManualActionRequired"

    await eventually(awaiting_romes_admin, timeout=30, message="milan's offer waits for rome's admin")
    async with KubeClient.from_kubeconfig_dict(await operations.peer_kubeconfig(milan, rome_id)) as as_milan:
        # What rome's admin would run (operations.manual_decision), run by milan.
        verdict = {"status": {"phase": "Accepted", "reason": "approved"}}
        with pytest.raises(ApiError) as refused:
            await as_milan.patch(RESOURCE_OFFERS, milan_id, verdict, namespace=tenant, subresource="status")
        assert refused.value.status == 403
        assert "a peer may accept only the offers made to it" in str(refused.value)
        for write in (
            as_milan.patch(RESOURCE_REQUESTS, rome_id, {"spec": {"consumerClusterName": "x"}}, namespace=tenant),
            as_milan.delete(RESOURCE_REQUESTS, rome_id, namespace=tenant),
        ):
            with pytest.raises(ApiError) as refused:
                await write
            assert refused.value.status == 403
            assert "a peer writes only its own ResourceRequest" in str(refused.value)
        # Its own side still works: milan's manager accepted rome's offer (named after rome) with this identity.
        ours = await rome.get(RESOURCE_OFFERS, rome_id, namespace=tenant)
        assert ours["status"]["phase"] == "Accepted"
    offer = await rome.get(RESOURCE_OFFERS, milan_id, namespace=tenant)
    assert offer["status"]["phase"] == "ManualActionRequired"
    assert (await rome.get(RESOURCE_REQUESTS, rome_id, namespace=tenant))["spec"]["consumerClusterName"] != "x"
    nodes, _ = await rome.list_all(VIRTUAL_NODES, namespace=tenant)
    assert nodes == []
