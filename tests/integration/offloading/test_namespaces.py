"""Namespace offloading between real local clusters: twins on providers, the consumer's rights, conflicts.

``rome`` consumes from ``milan`` (and, in one test, ``naples``). Each test undoes its offloadings and
peerings and checks that nothing is left: no liqo object (``expect_clean``) and no twin namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from typing import Any

import orjson
import pytest

from liqo.api import names
from liqo.api.peers import kubeconfig_of
from liqo.api.resources import NAMESPACE_MAPS, NAMESPACE_OFFLOADINGS, SHARING_POLICIES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import CLUSTER_ROLES, CONFIGMAPS, EVENTS, NAMESPACES, PODS, ROLE_BINDINGS, ROLES, SECRETS
from liqo.offloading import operations as offloading
from liqo.offloading.operations import OffloadingError
from liqo.offloading.twins import twin_rules
from liqo.peering import operations as peering
from tests.integration.helpers import Site, liqo_objects, liqoctl_run, stopped, unique
from tests.integration.helpers import expect_clean as _expect_clean
from tests.shared import eventually


def namespace_manifest(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def configmap(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def get_or_none(client: KubeClient, resource: Any, name: str, namespace: str | None = None) -> Obj | None:
    try:
        found: Obj = await client.get(resource, name, namespace=namespace)
    except NotFoundError:
        return None
    return found


async def twins_on(client: KubeClient, consumer_id: str) -> list[str]:
    items, _ = await client.list_all(
        NAMESPACES, label_selector=f"{names.REMOTE_CLUSTER_ID}={consumer_id},{names.ORIGIN_NAMESPACE}"
    )
    return [ns["metadata"]["name"] for ns in items]


async def expect_no_twins(client: KubeClient, consumer_id: str) -> None:
    async def none() -> bool:
        return not await twins_on(client, consumer_id)

    await eventually(none, timeout=60, message=f"no twin namespace of {consumer_id} left on {client.name}")


async def expect_clean(*clients: KubeClient) -> None:
    """:func:`tests.integration.helpers.expect_clean`, naming what is left when it fails."""
    try:
        await _expect_clean(*clients)
    except AssertionError as exc:
        left = {client.name: await liqo_objects(client) for client in clients}
        raise AssertionError(f"{exc}; left: {left}") from None


async def release(client: KubeClient, home: str) -> None:
    """Unoffload ``home`` if it still is, and delete it (the manager must release its finalizer)."""
    with contextlib.suppress(NotFoundError):
        await client.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
    with contextlib.suppress(NotFoundError):
        await client.delete(NAMESPACES, home)


def twin_names_policy(name: str, *, consumer_id: str, allowed: list[str]) -> Obj:
    """A SharingPolicy of the provider letting ``consumer_id`` choose the twin names ``allowed``."""
    return {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": name},
        "spec": {"action": "Share", "peers": [consumer_id], "allowedTwinNames": allowed},
    }


async def check_twin(provider: KubeClient, *, consumer_id: str, home: str, twin: str) -> None:
    """The twin on ``provider`` is labelled for the consumer and its home, and holds the consumer's rights."""
    twin_ns = await provider.get(NAMESPACES, twin)
    labels = twin_ns["metadata"]["labels"]
    assert labels[names.REMOTE_CLUSTER_ID] == consumer_id
    assert labels[names.ORIGIN_NAMESPACE] == home
    assert labels[names.MANAGED_BY] == names.MANAGED_BY_VALUE
    role = await provider.get(CLUSTER_ROLES, names.PEER_TWIN_ROLE)
    assert role["rules"] == twin_rules()
    roles, _ = await provider.list_all(ROLES, namespace=twin)
    assert roles == []  # the manager writes no Role: it binds the installed ClusterRole
    binding = await provider.get(ROLE_BINDINGS, names.PEER_BINDING, namespace=twin)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "liqo-peer-twin",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": names.peer_user(consumer_id)}
    ]


async def check_consumer_rights(consumer: KubeClient, *, consumer_id: str, provider_id: str, twin: str) -> None:
    """The consumer's identity: ConfigMaps in its twin, nothing elsewhere, and never pods directly."""
    secret = await consumer.get(SECRETS, names.IDENTITY_SECRET, namespace=names.tenant_namespace(provider_id))
    async with KubeClient.from_kubeconfig_dict(kubeconfig_of(secret), name="consumer@provider") as as_consumer:
        created = await as_consumer.create(CONFIGMAPS, configmap("reflected"), namespace=twin)
        assert created["metadata"]["namespace"] == twin
        for namespace in ("default", names.tenant_namespace(consumer_id)):
            with pytest.raises(ApiError) as denied:
                await as_consumer.create(CONFIGMAPS, configmap("intruder"), namespace=namespace)
            assert denied.value.status == 403
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "direct"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        with pytest.raises(ApiError) as denied:
            await as_consumer.create(PODS, pod, namespace=twin)
        assert denied.value.status == 403
        with pytest.raises(ApiError) as denied:  # the map's status is the provider's report
            await as_consumer.apply(
                NAMESPACE_MAPS,
                {
                    "apiVersion": NAMESPACE_MAPS.api_version,
                    "kind": NAMESPACE_MAPS.kind,
                    "metadata": {"name": consumer_id, "namespace": names.tenant_namespace(consumer_id)},
                    "status": {"mappings": {}},
                },
                subresource="status",
            )
        assert denied.value.status == 403


async def test_default_name_twin_holds_the_consumers_rights_and_goes_on_unoffload(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await peering.peer(rome, milan, timeout=60)
    home = unique("shop")
    await rome.create(NAMESPACES, namespace_manifest(home))
    try:
        await offloading.offload(rome, home)
        ready = await offloading.wait_offloaded(rome, home, timeout=60)
        twin = names.twin_namespace(home, home_cluster_id=rome_id)
        assert twin == f"{home}-{rome_id[:8]}"
        status = ready["status"]
        assert status["remoteNamespaceName"] == twin
        assert status["offloadingPhase"] == "Ready"
        (condition,) = status["remoteNamespacesConditions"]
        assert condition["clusterID"] == milan_id
        assert condition["remoteNamespace"] == twin
        assert condition["phase"] == "Ready"
        assert condition["clusterName"]
        assert names.FINALIZER in ready["metadata"]["finalizers"]
        home_ns = await rome.get(NAMESPACES, home)
        assert home_ns["metadata"]["labels"][names.SCHEDULING_ENABLED] == "true"

        await check_twin(milan, consumer_id=rome_id, home=home, twin=twin)
        namespace_map = await milan.get(NAMESPACE_MAPS, rome_id, namespace=names.tenant_namespace(rome_id))
        assert namespace_map["spec"]["mappings"] == {home: twin}
        assert namespace_map["status"]["mappings"] == {home: {"remoteNamespace": twin, "phase": "Ready"}}
        assert names.FINALIZER in namespace_map["metadata"]["finalizers"]

        await check_consumer_rights(rome, consumer_id=rome_id, provider_id=milan_id, twin=twin)

        await offloading.unoffload(rome, home, timeout=60)
        # Unoffload returns once milan reports the twin gone: it is, not merely terminating.
        assert await get_or_none(milan, NAMESPACES, twin) is None
        assert await get_or_none(rome, NAMESPACE_OFFLOADINGS, names.OFFLOADING, home) is None
        home_ns = await rome.get(NAMESPACES, home)
        assert names.SCHEDULING_ENABLED not in (home_ns["metadata"].get("labels") or {})

        async def map_gone() -> bool:
            return await get_or_none(milan, NAMESPACE_MAPS, rome_id, names.tenant_namespace(rome_id)) is None

        await eventually(map_gone, timeout=30, message="the emptied NamespaceMap deleted from milan")
    finally:
        await release(rome, home)
        await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)
    await expect_no_twins(milan, rome_id)


async def test_the_cluster_selector_picks_providers_and_moving_it_moves_the_twin(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, naples: KubeClient
) -> None:
    rome_id, milan_id, naples_id = (sites[s].cluster_id for s in ("rome", "milan", "naples"))
    await asyncio.gather(peering.peer(rome, milan, timeout=60), peering.peer(rome, naples, timeout=60))
    home = unique("north")
    await rome.create(NAMESPACES, namespace_manifest(home))
    twin = names.twin_namespace(home, home_cluster_id=rome_id)
    try:
        await offloading.offload(rome, home, cluster_selector={names.REMOTE_CLUSTER_ID: milan_id})
        ready = await offloading.wait_offloaded(rome, home, timeout=60)
        assert [c["clusterID"] for c in ready["status"]["remoteNamespacesConditions"]] == [milan_id]
        assert await twins_on(milan, rome_id) == [twin]
        assert await twins_on(naples, rome_id) == []
        maps, _ = await naples.list_all(NAMESPACE_MAPS, namespace=names.tenant_namespace(rome_id))
        assert maps == []

        # Only the selector changes (the strategies are kept): the twin moves from milan to naples.
        await offloading.offload(rome, home, cluster_selector={names.REMOTE_CLUSTER_ID: naples_id})
        moved = await offloading.wait_offloaded(rome, home, timeout=60)
        assert [c["clusterID"] for c in moved["status"]["remoteNamespacesConditions"]] == [naples_id]
        assert moved["spec"]["podOffloadingStrategy"] == "LocalAndRemote"
        assert await twins_on(naples, rome_id) == [twin]
        await expect_no_twins(milan, rome_id)

        # Every provider (empty selector).
        await offloading.offload(rome, home, cluster_selector={})
        everywhere = await offloading.wait_offloaded(rome, home, timeout=60)
        assert {c["clusterID"] for c in everywhere["status"]["remoteNamespacesConditions"]} == {milan_id, naples_id}
        await offloading.unoffload(rome, home, timeout=60)
        assert await twins_on(milan, rome_id) == []
        assert await twins_on(naples, rome_id) == []
    finally:
        await release(rome, home)
        await asyncio.gather(peering.unpeer(rome, milan_id, timeout=60), peering.unpeer(rome, naples_id, timeout=60))
    await expect_clean(rome, milan, naples)


async def test_enforce_same_name_over_an_unrelated_namespace_is_a_conflict_that_touches_nothing(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    home = unique("payments")
    await milan.create(NAMESPACES, namespace_manifest(home, {"team": "milan-payments"}))
    await milan.create(CONFIGMAPS, configmap("precious"), namespace=home)
    await rome.create(NAMESPACES, namespace_manifest(home))
    # Milan lets rome choose this name: what stands in the way is the namespace alone.
    policy = unique("rome-names")
    await milan.create(SHARING_POLICIES, twin_names_policy(policy, consumer_id=rome_id, allowed=[home]))
    await peering.peer(rome, milan, timeout=60)
    try:
        await offloading.offload(rome, home, namespace_mapping_strategy="EnforceSameName")
        with pytest.raises(OffloadingError) as failed:
            await offloading.wait_offloaded(rome, home, timeout=60)
        assert "Conflict" in str(failed.value)
        assert "already exists" in str(failed.value)
        current = await rome.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
        assert current["status"]["offloadingPhase"] == "AllFailed"
        (condition,) = current["status"]["remoteNamespacesConditions"]
        assert condition["phase"] == "Conflict"
        assert condition["remoteNamespace"] == home
        assert "left untouched" in condition["message"]

        async def conflict_event() -> bool:
            events, _ = await rome.list_all(
                EVENTS, namespace=home, field_selector=f"involvedObject.name={names.OFFLOADING}"
            )
            return any(e["reason"] == "TwinConflict" and e["type"] == "Warning" for e in events)

        await eventually(conflict_event, timeout=20, message="a TwinConflict Event on the NamespaceOffloading")

        # The mapping strategy is immutable, and the refusal reads as such.
        with pytest.raises(OffloadingError, match="namespaceMappingStrategy is immutable"):
            await offloading.offload(rome, home, namespace_mapping_strategy="DefaultName")

        await offloading.unoffload(rome, home, timeout=60)
        unrelated = await milan.get(NAMESPACES, home)
        assert unrelated["metadata"].get("deletionTimestamp") is None
        assert unrelated["metadata"]["labels"].get("team") == "milan-payments"
        assert names.REMOTE_CLUSTER_ID not in unrelated["metadata"]["labels"]
        assert await get_or_none(milan, ROLE_BINDINGS, names.PEER_BINDING, home) is None
        assert (await milan.get(CONFIGMAPS, "precious", namespace=home))["data"] == {"k": "v"}
    finally:
        await release(rome, home)
        await peering.unpeer(rome, milan_id, timeout=60)
        await milan.delete(SHARING_POLICIES, policy)
        with contextlib.suppress(NotFoundError):
            await milan.delete(NAMESPACES, home)
    await expect_clean(rome, milan)
    await expect_no_twins(milan, rome_id)


async def conditions_of(client: KubeClient, home: str) -> list[Obj]:
    offloading = await client.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
    return list((offloading.get("status") or {}).get("remoteNamespacesConditions") or [])


async def expect_refused(rome: KubeClient, milan: KubeClient, *, home: str, reason: str) -> None:
    """Rome's user sees milan's ``reason`` on the NamespaceOffloading (status and Warning Event); no twin made."""

    async def reported() -> bool:
        return [(c["phase"], c["remoteNamespace"], c.get("message")) for c in await conditions_of(rome, home)] == [
            ("Conflict", home, reason)
        ]

    await eventually(reported, timeout=30, message=f"milan's refusal of {home} reported at home")

    async def warned() -> bool:
        events, _ = await rome.list_all(
            EVENTS, namespace=home, field_selector=f"involvedObject.name={names.OFFLOADING}"
        )
        return any(e["type"] == "Warning" and e["reason"] == "TwinConflict" and reason in e["message"] for e in events)

    await eventually(warned, timeout=20, message="a TwinConflict Event with milan's reason")
    assert await get_or_none(milan, NAMESPACES, home) is None


async def test_enforce_same_name_needs_the_providers_policy_and_a_name_it_allows(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    kubeconfig = f"--kubeconfig={sites['rome'].cluster.kubeconfig}"
    chosen, other = unique("team-a"), unique("payments")

    def reason(home: str, allowed: str) -> str:
        return (
            f"the twin of {home} is named {names.twin_namespace(home, home_cluster_id=rome_id)} on this cluster;"
            f" {home}, a name of the consumer's choosing, is not allowed by this cluster's SharingPolicy for it"
            f" (allowedTwinNames: {allowed})"
        )

    for home in (chosen, other):
        await rome.create(NAMESPACES, namespace_manifest(home))
    policy = unique("rome-names")
    await peering.peer(rome, milan, timeout=60)
    try:
        # No policy of milan lets rome choose: liqoctl fails with milan's reason, which stays on the offloading.
        refused = await run(
            "offload", "namespace", chosen, "--namespace-mapping-strategy", "EnforceSameName", kubeconfig
        )
        assert refused.returncode == 1
        assert reason(chosen, "none") in " ".join(refused.stderr.split())
        await expect_refused(rome, milan, home=chosen, reason=reason(chosen, "none"))

        # Milan's admin lets rome choose team-a-*: milan looks again by itself, and the chosen name is made.
        await milan.create(SHARING_POLICIES, twin_names_policy(policy, consumer_id=rome_id, allowed=["team-a-*"]))

        async def made() -> bool:
            return [(c["phase"], c["remoteNamespace"]) for c in await conditions_of(rome, chosen)] == [
                ("Ready", chosen)
            ]

        await eventually(made, timeout=30, message=f"twin {chosen} made once milan's policy allows it")
        await check_twin(milan, consumer_id=rome_id, home=chosen, twin=chosen)

        # A name outside the pattern is still refused, and the reason says what is allowed.
        await offloading.offload(rome, other, namespace_mapping_strategy="EnforceSameName")
        with pytest.raises(OffloadingError) as failed:
            await offloading.wait_offloaded(rome, other, timeout=60)
        assert reason(other, "team-a-*") in str(failed.value)
        await expect_refused(rome, milan, home=other, reason=reason(other, "team-a-*"))

        # The admin takes the permission back: the twin it allowed goes (a name outside milan's rules is not kept).
        await milan.delete(SHARING_POLICIES, policy)
        await expect_no_twins(milan, rome_id)
        await expect_refused(rome, milan, home=chosen, reason=reason(chosen, "none"))

        for home in (chosen, other):
            await offloading.unoffload(rome, home, timeout=60)
    finally:
        for home in (chosen, other):
            await release(rome, home)
        with contextlib.suppress(NotFoundError):
            await milan.delete(SHARING_POLICIES, policy)
        await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)
    await expect_no_twins(milan, rome_id)


async def test_unpeer_removes_the_twins_and_the_map_of_an_offloaded_namespace(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await peering.peer(rome, milan, timeout=60)
    home = unique("left")
    await rome.create(NAMESPACES, namespace_manifest(home))
    try:
        await offloading.offload(rome, home)
        await offloading.wait_offloaded(rome, home, timeout=60)
        assert await twins_on(milan, rome_id) == [names.twin_namespace(home, home_cluster_id=rome_id)]
        await peering.unpeer(rome, milan_id, timeout=60)
        await expect_clean(milan)
        await expect_no_twins(milan, rome_id)

        # The offloading stays (it is the user's intent), with no provider left to offload to.
        async def no_provider() -> bool:
            current = await rome.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
            return bool((current.get("status") or {}).get("offloadingPhase") == "NoClusterSelected")

        await eventually(no_provider, timeout=30, message="the offloading reports no provider after unpeer")
        await offloading.unoffload(rome, home, timeout=30)
    finally:
        await release(rome, home)
        with contextlib.suppress(peering.PeeringError):
            await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)


async def test_unpeer_of_one_direction_of_a_bidirectional_peering_removes_that_consumers_twins(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """Milan keeps rome's tenant namespace (it consumes from rome), but rome's map and twins there go."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await peering.peer(rome, milan, timeout=60)
    await peering.peer(milan, rome, timeout=60)
    home = unique("both")
    await rome.create(NAMESPACES, namespace_manifest(home))
    try:
        await offloading.offload(rome, home)
        await offloading.wait_offloaded(rome, home, timeout=60)
        await peering.unpeer(rome, milan_id, timeout=60)
        await expect_no_twins(milan, rome_id)

        async def map_gone() -> bool:
            maps, _ = await milan.list_all(NAMESPACE_MAPS, namespace=names.tenant_namespace(rome_id))
            return not maps

        await eventually(map_gone, timeout=30, message="rome's NamespaceMap gone from milan")
        assert await get_or_none(milan, NAMESPACES, names.tenant_namespace(rome_id)) is not None
    finally:
        await release(rome, home)
        for consumer, provider_id in ((milan, rome_id), (rome, milan_id)):
            with contextlib.suppress(peering.PeeringError):
                await peering.unpeer(consumer, provider_id, timeout=60)
    await expect_clean(rome, milan)


async def test_an_unreachable_provider_is_reported_and_retried_until_it_is_back(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await peering.peer(rome, milan, timeout=60)
    home = unique("flaky")
    await rome.create(NAMESPACES, namespace_manifest(home))
    try:
        await offloading.offload(rome, home)
        await offloading.wait_offloaded(rome, home, timeout=60)
        async with stopped(sites["milan"], "kube-apiserver"):

            async def reported() -> bool:
                current = await rome.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
                status = current.get("status") or {}
                conditions = status.get("remoteNamespacesConditions") or []
                return status.get("offloadingPhase") == "AllFailed" and any(
                    c["phase"] == "Error" and "is unreachable" in c.get("message", "") for c in conditions
                )

            await eventually(reported, timeout=45, message="the unreachable provider reported as Error")

        # Right after its restart the API server may still refuse (its RBAC caches warm up): retried too.
        async def recovered() -> bool:
            current = await rome.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=home)
            return bool((current.get("status") or {}).get("offloadingPhase") == "Ready")

        await eventually(recovered, timeout=120, message="the offloading Ready again once the provider is back")
        await offloading.unoffload(rome, home, timeout=60)
    finally:
        await release(rome, home)
        await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)
    await expect_no_twins(milan, rome_id)


async def run(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(liqoctl_run, *args)


async def test_liqoctl_offload_and_unoffload_round_trip(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    kubeconfig = f"--kubeconfig={sites['rome'].cluster.kubeconfig}"
    await peering.peer(rome, milan, timeout=60)
    home = unique("cli")
    await rome.create(NAMESPACES, namespace_manifest(home))
    try:
        missing = await run("offload", "namespace", unique("nowhere"), kubeconfig)
        assert missing.returncode == 1
        assert "does not exist" in missing.stderr

        offload_result = await run(
            "offload", "namespace", home, "--pod-offloading-strategy", "Remote",
            "--selector", f"{names.REMOTE_CLUSTER_ID}={milan_id}", "-o", "json", kubeconfig,
        )  # fmt: skip
        assert offload_result.returncode == 0, offload_result.stderr
        summary = orjson.loads(offload_result.stdout)
        twin = names.twin_namespace(home, home_cluster_id=rome_id)
        assert summary["phase"] == "Ready"
        assert summary["podOffloadingStrategy"] == "Remote"
        assert summary["remoteNamespace"] == twin
        assert [(c["clusterID"], c["phase"]) for c in summary["clusters"]] == [(milan_id, "Ready")]
        assert await twins_on(milan, rome_id) == [twin]

        table = await run("offload", "namespace", home, kubeconfig)  # the same again: idempotent, a table
        assert table.returncode == 0, table.stderr
        assert twin in table.stdout
        assert "Ready" in table.stdout

        refused = await run("offload", "namespace", home, "--namespace-mapping-strategy", "EnforceSameName", kubeconfig)
        assert refused.returncode == 1
        assert "namespaceMappingStrategy is immutable" in " ".join(refused.stderr.split())

        unoffloaded = await run("unoffload", "namespace", home, kubeconfig)
        assert unoffloaded.returncode == 0, unoffloaded.stderr
        assert await twins_on(milan, rome_id) == []
        again = await run("unoffload", "namespace", home, kubeconfig)
        assert again.returncode == 1
        assert "is not offloaded" in again.stderr
    finally:
        await release(rome, home)
        await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)
