"""Peers' networks on real clusters: exchanged at authentication, recorded, reported, and refused when malformed.

The session sites: ``milan``'s pod CIDR (10.245.0.0/16) is its own, ``rome`` and ``naples`` keep the local
default (10.244.0.0/16), so rome ↔ milan route directly and rome ↔ naples overlap. Each test undoes the
peerings it made and checks it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from liqo.api.identity import read_cluster_key
from liqo.api.networks import ClusterNetwork
from liqo.api.resources import FOREIGN_CLUSTERS
from liqo.kube.client import KubeClient
from liqo.kube.resources import EVENTS
from liqo.peering import operations
from tests.integration.helpers import Site, expect_clean, held_for, liqoctl_run, signed_identity_request
from tests.shared import eventually

ROME = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
MILAN = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.96.0.0/16")
NAPLES = ROME


async def foreign_cluster(client: KubeClient, peer_id: str) -> dict[str, Any]:
    fc = await operations.foreign_cluster(client, peer_id)
    assert fc is not None
    return fc


async def network_condition(client: KubeClient, peer_id: str) -> dict[str, Any]:
    fc = await foreign_cluster(client, peer_id)
    conditions = (fc.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "NetworkStatus"), {})


async def wait_network_reason(client: KubeClient, peer_id: str, reason: str) -> dict[str, Any]:
    async def reported() -> bool:
        return (await network_condition(client, peer_id)).get("reason") == reason

    await eventually(reported, timeout=30, message=f"{client.name} reports NetworkStatus {reason} for {peer_id}")
    return await network_condition(client, peer_id)


async def overlap_events(client: KubeClient, fc: dict[str, Any]) -> list[dict[str, Any]]:
    """The CIDROverlap Warnings about this very ForeignCluster (an earlier one of that name may have had its own)."""
    meta = fc["metadata"]
    selector = f"involvedObject.name={meta['name']},involvedObject.uid={meta['uid']},reason=CIDROverlap,type=Warning"
    events, _ = await client.list_all(EVENTS, namespace="default", field_selector=selector)
    return events


async def test_peers_record_each_others_network_and_disjoint_pod_cidrs_route_directly(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """The --remote-kubeconfig path (operations.peer reads milan's identity)."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    try:
        assert (await foreign_cluster(rome, milan_id))["spec"]["network"] == MILAN.to_message()
        assert (await foreign_cluster(milan, rome_id))["spec"]["network"] == ROME.to_message()
        for client, peer_id in ((rome, milan_id), (milan, rome_id)):
            condition = await wait_network_reason(client, peer_id, "DirectRouting")
            assert condition["status"] == "Established"
            assert condition["message"].startswith("pod CIDRs do not overlap: addresses pass unchanged")
        report = await operations.info(rome)
        assert report["local"]["network"] == ROME.to_message()
        [peer] = [p for p in report["peers"] if p["clusterID"] == milan_id]
        assert peer["network"] == MILAN.to_message()
        assert not [line for line in operations.problems(report) if "NetworkStatus" in line]
        # Peering again applies the ForeignCluster's spec (server-side apply, no network in it): the recorded
        # network, written by a merge patch, stays.
        await operations.peer(rome, milan, timeout=30)
        assert (await foreign_cluster(rome, milan_id))["spec"]["network"] == MILAN.to_message()
    finally:
        await operations.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)


async def test_the_same_pod_cidr_is_an_overlap_on_both_sides_with_a_warning_event(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient
) -> None:
    """The out-of-band path: rome knows naples only by the command naples generated."""
    rome_id, naples_id = sites["rome"].cluster_id, sites["naples"].cluster_id
    command = await operations.peer_command(naples)
    await operations.peer_out_of_band(rome, command)
    await operations.wait_established(rome, naples_id, timeout=30)  # an overlap does not stop the peering
    try:
        rome_fc, naples_fc = await foreign_cluster(rome, naples_id), await foreign_cluster(naples, rome_id)
        assert rome_fc["spec"]["network"] == NAPLES.to_message()
        assert naples_fc["spec"]["network"] == ROME.to_message()
        rome_view = await wait_network_reason(rome, naples_id, "CIDROverlap")
        naples_view = await wait_network_reason(naples, rome_id, "CIDROverlap")
        assert rome_view["status"] == naples_view["status"] == "Error"
        name = rome_fc["metadata"]["name"]
        assert rome_view["message"].startswith(
            f"pod CIDR 10.244.0.0/16 of {name} overlaps ours (10.244.0.0/16): its addresses cannot be reached until"
            " the network fabric remaps them"
        )
        for client, fc in ((rome, rome_fc), (naples, naples_fc)):

            async def warned(client: KubeClient = client, fc: dict[str, Any] = fc) -> bool:
                return bool(await overlap_events(client, fc))

            await eventually(warned, timeout=20, message=f"a CIDROverlap Warning Event on {client.name}")
            [event] = await overlap_events(client, fc)
            assert event["involvedObject"]["kind"] == "ForeignCluster"
            assert "overlaps" in event["message"]
        done = await asyncio.to_thread(liqoctl_run, "status", f"--kubeconfig={sites['rome'].cluster.kubeconfig}")
        output = " ".join(done.stdout.split())
        assert f"{name}: NetworkStatus is Error (CIDROverlap) pod CIDR 10.244.0.0/16 of {name} overlaps" in output
    finally:
        await operations.unpeer(rome, naples_id, timeout=60)
    await expect_clean(rome, naples)


async def test_a_peering_without_a_recorded_network_is_unknown_until_the_next_handshake(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """As after an upgrade: the ForeignClusters have no network; reported unknown, never guessed, then learnt."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    try:
        forget = {"spec": {"network": None}}
        await milan.patch(FOREIGN_CLUSTERS, (await foreign_cluster(milan, rome_id))["metadata"]["name"], forget)
        condition = await wait_network_reason(milan, rome_id, "NetworkUnknown")
        assert condition["status"] == "Pending"
        assert "is not known yet" in condition["message"]
        # The consumer's record goes too: its manager authenticates again at once, and both sides learn.
        await rome.patch(FOREIGN_CLUSTERS, (await foreign_cluster(rome, milan_id))["metadata"]["name"], forget)
        await wait_network_reason(milan, rome_id, "DirectRouting")
        await wait_network_reason(rome, milan_id, "DirectRouting")
        assert (await foreign_cluster(rome, milan_id))["spec"]["network"] == MILAN.to_message()
        assert (await foreign_cluster(milan, rome_id))["spec"]["network"] == ROME.to_message()
    finally:
        await operations.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)


MALFORMED = {"podCIDR": "169.254.0.0/16", "serviceCIDR": "10.96.0.0/16"}
"""Link-local: where cloud metadata endpoints answer. A peer claiming it could have us dial them."""


async def test_a_handshake_with_a_malformed_network_is_refused_and_leaves_nothing(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """rome's own cluster key and milan's real token: well signed, so only milan's checks stand in the way."""
    rome_id = sites["rome"].cluster_id
    command = await operations.peer_command(milan)
    key = await read_cluster_key(rome)
    assert key is not None
    before = await held_for(milan, rome_id)
    for network in (MALFORMED, {"podCIDR": "10.244.3.0/16", "serviceCIDR": "10.96.0.0/16"}, "10.244.0.0/16", None):
        status, answer = await signed_identity_request(
            command.auth_url, consumer=rome_id, key=key, token=command.token, network=network
        )
        assert status == 400, answer
        assert "'network" in answer["reason"]
    assert await held_for(milan, rome_id) == before == {"foreign clusters": [], "csrs": [], "tenant": None}

    # Enrolled, the same: its record is not touched.
    await operations.peer(rome, milan, timeout=30)
    try:
        record = await foreign_cluster(milan, rome_id)
        before = await held_for(milan, rome_id)
        status, answer = await signed_identity_request(
            command.auth_url, consumer=rome_id, key=key, token=None, network=MALFORMED
        )
        assert (status, answer["reason"]) == (
            400,
            "'network.podCIDR': 169.254.0.0/16 overlaps the special-purpose range 169.254.0.0/16",
        )
        after = await foreign_cluster(milan, rome_id)
        # Its status may move on meanwhile (the offer being accepted): its spec may not.
        assert (after["metadata"]["generation"], after["spec"]) == (record["metadata"]["generation"], record["spec"])
        assert after["spec"]["network"] == ROME.to_message()
        assert {k: v for k, v in (await held_for(milan, rome_id)).items() if k != "foreign clusters"} == {
            k: v for k, v in before.items() if k != "foreign clusters"
        }
    finally:
        await operations.unpeer(rome, sites["milan"].cluster_id, timeout=60)
    await expect_clean(rome, milan)
