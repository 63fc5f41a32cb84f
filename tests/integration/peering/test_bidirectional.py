"""Bidirectional peerings end clean whatever the order and timing, with one ForeignCluster per peer throughout.

rome and milan each consume from the other, so each cluster's ForeignCluster for the other has two writers:
``liqoctl peer`` (our own peering with it) and the provisioner (its enrolment as our consumer). They race when
both peerings are declared at once; unpeering, each side decides whether the record stays (the peer still
consumes from us) from what it sees at that instant, while the peer may be withdrawing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest

from liqo.api import names
from liqo.api.components import MANAGER
from liqo.api.identity import read_identity
from liqo.api.provisioner import AuthenticatedConsumer
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_REQUESTS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, ROLE_BINDINGS, Resource
from liqo.peering import operations
from liqo.peering.authcaches import AuthCaches
from liqo.peering.authprotocol import make_csr
from liqo.peering.incoming import REQUESTED
from liqo.peering.provisioning import KubeProvisioner
from tests.integration.helpers import Site, expect_clean, stopped
from tests.shared import eventually


class Records:
    """Every ForeignCluster two clusters hold, as their watches see them: any moment one held two of one peer."""

    def __init__(self) -> None:
        self.made: dict[str, list[str]] = defaultdict(list)  # "<cluster> <peer ID>" -> names, in creation order
        self.doubles: list[str] = []

    def watch(self, client: KubeClient) -> Informer:
        informer = Informer(client=client, resource=FOREIGN_CLUSTERS, name=f"records of {client.name}")

        def added(fc: Obj) -> None:
            peer = fc["spec"].get("clusterID")
            self.made[f"{client.name} {peer}"].append(fc["metadata"]["name"])
            # The store holds the new one already; a terminating namesake or a live one counts alike.
            held = [o["metadata"]["name"] for o in informer.store.list() if o["spec"].get("clusterID") == peer]
            if len(held) > 1:
                self.doubles.append(f"{client.name}: {', '.join(sorted(held))} for {peer}")

        informer.add_handler(HandlerFuncs(add=added))
        return informer


@contextlib.asynccontextmanager
async def records_of(*clients: KubeClient) -> AsyncIterator[Records]:
    records = Records()
    informers = [records.watch(client) for client in clients]
    tasks = [asyncio.create_task(informer.run(), name=informer.name) for informer in informers]
    try:
        for informer in informers:
            assert await informer.wait_synced(30)
        yield records
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("first", ["milan", "rome"])
async def test_either_unpeer_order_leaves_nothing_and_never_two_records_of_one_peer(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, first: str
) -> None:
    """Both peerings declared at once (rome's enrolment on milan races milan's own declaration), then undone
    milan's side first (as test_tenant_writes.py does) or rome's first (as test_peer_unpeer.py does)."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    async with records_of(rome, milan) as records:
        command = await operations.peer_command(milan)
        await operations.peer_out_of_band(rome, command, offer_policy={"mode": "Manual"})
        try:
            await operations.peer(milan, rome, timeout=30)

            # Both peerings stand before either is undone: rome's enrolment may land after milan's peering.
            async def enrolled() -> bool:
                request = await milan.get_or_none(RESOURCE_REQUESTS, rome_id, namespace=names.tenant_namespace(rome_id))
                return request is not None

            await eventually(
                enrolled,
                timeout=30,
                message="rome's request never reached milan",
            )
        finally:
            order = [(milan, rome_id), (rome, milan_id)]
            for client, peer in order if first == "milan" else reversed(order):
                await operations.unpeer(client, peer, timeout=60)
        await expect_clean(rome, milan)
    assert records.doubles == []
    assert {key: len(made) for key, made in records.made.items()} == {
        f"{rome.name} {milan_id}": 1,
        f"{milan.name} {rome_id}": 1,
    }


class Interleaved:
    """``client``, except that the last read of its caller's look lets another writer act before it returns.

    The read is made first, so its caller goes on from what it saw before the other writer's work: the
    interleaving that, left to chance, happens once in a while when two writers start together. ``liqoctl
    peer`` looks with a list of ForeignClusters after reading the tenant namespace; the provisioner reads the
    tenant namespace, then its cache (here one that has seen nothing, so that what it sees is the namespace).
    """

    def __init__(
        self, client: KubeClient, meanwhile: Callable[[], Awaitable[Any]], *, looks_at: Resource = FOREIGN_CLUSTERS
    ) -> None:
        self._client = client
        self._meanwhile: Callable[[], Awaitable[Any]] | None = meanwhile
        self._looks_at = looks_at

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def _after(self, resource: Resource) -> None:
        if resource == self._looks_at and self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            await meanwhile()

    async def list_all(self, resource: Resource, **options: Any) -> tuple[list[Obj], str]:
        listed = await self._client.list_all(resource, **options)
        await self._after(resource)
        return listed

    async def get(self, resource: Resource, name: str, **options: Any) -> Obj:
        got: Obj = await self._client.get(resource, name, **options)
        await self._after(resource)
        return got


@pytest.mark.parametrize("who_looks_first", ["provisioner", "liqoctl"])
async def test_a_consumer_enrolling_while_we_declare_our_peering_with_it_gets_one_record(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, who_looks_first: str
) -> None:
    """The race behind a second ForeignCluster, made deterministic on milan (its manager stopped meanwhile).

    rome enrols as milan's consumer through milan's provisioner (the manager's code, run here with milan's
    admin), while milan's admin declares milan's peering with rome (``liqoctl peer out-of-band``, under a name
    of the admin's choosing when liqoctl looks first). Whichever looked for rome's record first and found none,
    the other writes in between: milan must end with one ForeignCluster for rome, carrying both the
    provisioner's pin of rome's key and liqoctl's intent.
    """
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    identity = await read_identity(rome)
    assert identity is not None
    assert identity.network is not None
    network = identity.network
    command = await operations.peer_command(rome)

    def provisioner(client: KubeClient) -> KubeProvisioner:
        # Its cache of ForeignClusters, never run: it has not seen the other writer's record (nor any).
        seen = AuthCaches(SharedInformers(client), local_id=milan_id)
        return KubeProvisioner(
            client=client, records=seen, api_server_url=milan.server, ca_pem=milan.access.ca_pem or "", identity_ttl=600
        )

    async def enrol(client: KubeClient) -> None:
        await provisioner(client).provision(
            AuthenticatedConsumer(
                consumer_id=rome_id,
                consumer_name=identity.cluster_name,
                auth_url=identity.auth_url,
                csr_pem=make_csr(rome_id)[1],
                key_fingerprint=identity.key_fingerprint,
                network=network,
            )
        )

    try:
        async with stopped(sites["milan"], MANAGER):
            if who_looks_first == "provisioner":
                declare = lambda: operations.peer_out_of_band(milan, command)  # noqa: E731
                await enrol(cast(KubeClient, Interleaved(milan, declare, looks_at=NAMESPACES)))
            else:
                ours = dataclasses.replace(command, name="rome-by-milans-admin")
                enrolling = Interleaved(milan, lambda: enrol(milan))
                await operations.peer_out_of_band(cast(KubeClient, enrolling), ours)
            records = [fc for fc in (await milan.list_all(FOREIGN_CLUSTERS))[0] if fc["spec"]["clusterID"] == rome_id]
            assert len(records) == 1, [fc["metadata"]["name"] for fc in records]
            [record] = records
            assert record["spec"]["keyFingerprint"] == identity.key_fingerprint
            assert record["spec"]["outgoingPeeringEnabled"] == "Yes"
        await operations.wait_established(milan, rome_id, timeout=60)
    finally:
        await operations.unpeer(milan, rome_id, timeout=60)
    await expect_clean(rome, milan)
    assert await operations.foreign_cluster(milan, rome_id) is None
    assert await operations.foreign_cluster(rome, milan_id) is None


async def test_turning_our_side_off_after_the_peer_left_leaves_nothing(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """What ``liqoctl unpeer`` on rome does when it saw milan's request an instant before milan withdrew it.

    milan's side goes first, and rome releases what milan had there while rome still consumes from milan;
    then rome turns its own side off (``outgoingPeeringEnabled: No``, the record kept as if milan still
    consumed). Nobody is left on either side of the record: rome must forget milan, not wait for milan to
    come back.
    """
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    await operations.peer(milan, rome, timeout=30)
    try:
        await operations.unpeer(milan, rome_id, timeout=60)
        tenant = names.tenant_namespace(milan_id)

        async def milans_part_released() -> bool:
            with contextlib.suppress(NotFoundError):
                await rome.get(ROLE_BINDINGS, names.PEER_BINDING, namespace=tenant)
                return False
            annotations = (await rome.get(NAMESPACES, tenant))["metadata"].get("annotations") or {}
            return annotations.get(REQUESTED) != "true"

        await eventually(milans_part_released, timeout=30, message="rome releasing what milan had as its consumer")
        fc = await operations.foreign_cluster(rome, milan_id)
        assert fc is not None
        await rome.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"outgoingPeeringEnabled": "No"}})
    finally:
        fc = await operations.foreign_cluster(rome, milan_id)
        if fc is not None and fc["spec"].get("outgoingPeeringEnabled") == "Yes":  # failed before turning it off
            await operations.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)
