"""A peer's claims on its provider: only the storage offered to it, and within its storage budget.

docs/security.md, "Storage". rome consumes from milan; milan's policy offers rome a StorageClass made here for
each test, which waits for a first consumer and which no provisioner serves: no volume is ever made, what is
judged is what the peer may store and run. The attacks use rome's own identity on milan (the kubeconfig milan
issued it) with rome's manager and virtual kubelet stopped: only milan's RBAC, admission policy, ShadowPod
webhook and budget stand.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.resources import RESOURCE_OFFERS, SHADOW_PODS
from liqo.api.shadowpods import ShadowPodReason
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, NAMESPACES, NODES, PERSISTENT_VOLUME_CLAIMS, PODS, STORAGE_CLASSES
from liqo.peering import operations
from tests.integration.helpers import Offloaded, Site, peer_identity, shadow_pod, sharing_policy, stopped, unique
from tests.shared import eventually

ROME_COMPONENTS = [MANAGER, VIRTUAL_KUBELET]


def storage_class_body(name: str, *, binding: str) -> Obj:
    """A StorageClass of milan's binding claims as ``binding`` says, which no provisioner serves."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "claims.test.liqo.io/nobody",
        "volumeBindingMode": binding,
    }


@pytest.fixture
async def storage_class(milan: KubeClient) -> AsyncIterator[str]:
    """A StorageClass of milan's waiting for a first consumer, which no provisioner serves."""
    name = unique("t-claims")
    await milan.create(STORAGE_CLASSES, storage_class_body(name, binding="WaitForFirstConsumer"))
    try:
        yield name
    finally:
        await milan.delete(STORAGE_CLASSES, name, missing_ok=True)


def claim(name: str, twin: str, *, storage_class: str, size: str = "1Gi", **spec: Any) -> Obj:
    """A claim as a peer may write it, ``spec`` overriding its fields."""
    body = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": twin},
        "spec": body | spec,
    }


def with_claim(shadow: Obj, volume: Obj) -> Obj:
    """``shadow`` with ``volume`` mounted in its container."""
    pod = shadow["spec"]["pod"]
    pod["volumes"] = [volume]
    pod["containers"][0]["volumeMounts"] = [{"name": volume["name"], "mountPath": "/data"}]
    return shadow


async def annotation(milan: KubeClient, twin: str) -> str:
    found = await milan.get(NAMESPACES, twin)
    return str((found["metadata"].get("annotations") or {}).get(names.STORAGE_CLASSES, ""))


async def offered(milan: KubeClient, twin: str, expected: str) -> None:
    """Wait until milan's twin tells its admission policy ``expected`` (the accepted offer's storage)."""

    async def says() -> bool:
        return await annotation(milan, twin) == expected

    await eventually(says, timeout=30, message=lambda: f"{twin} says {expected!r} of its storage")


async def refusal(peer: KubeClient, milan: KubeClient, body: Obj) -> str:
    """The 403 refusing ``body`` to the peer; nothing of it stored on milan."""
    meta = body["metadata"]
    with pytest.raises(ApiError) as caught:
        await peer.create(PERSISTENT_VOLUME_CLAIMS, body)
    assert caught.value.status == 403, caught.value
    with pytest.raises(NotFoundError):
        await milan.get(PERSISTENT_VOLUME_CLAIMS, meta["name"], namespace=meta["namespace"])
    return caught.value.message


@contextlib.asynccontextmanager
async def offering(
    milan: KubeClient, rome_id: str, storage_class: str, twin: str, capacity: str
) -> AsyncIterator[None]:
    """milan's policy for rome offering ``capacity`` of ``storage_class``, seen by the twin's admission."""
    async with sharing_policy(
        milan, rome_id, prefix="claims", storage=[{"class": storage_class, "capacity": capacity}]
    ):
        await offered(milan, twin, f"{storage_class}:ReadWriteOnce:{capacity}")
        yield
    await offered(milan, twin, "")


async def test_storage_offered_shows_at_home_and_a_peers_claims_name_only_it_and_nothing_of_the_providers(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded, storage_class: str
) -> None:
    rome_id, milan_id, twin = sites["rome"].cluster_id, sites["milan"].cluster_id, offloaded.twin
    label = f"storage.liqo.io/{storage_class}"
    async with offering(milan, rome_id, storage_class, twin, "10Gi"):

        async def shown_at_home() -> bool:
            node = await rome.get(NODES, offloaded.node)
            report = await operations.info(rome)
            accepted = next(p["accepted"] for p in report["peers"] if p["clusterID"] == milan_id)
            return (node["metadata"].get("labels") or {}).get(label) == "true" and accepted.get(
                f"storage/{storage_class}"
            ) == "10Gi"

        await eventually(shown_at_home, timeout=30, message=f"rome's virtual node and liqoctl info show {label}")
        async with peer_identity(rome, milan_id, name="rome@milan") as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            made = await peer.create(PERSISTENT_VOLUME_CLAIMS, claim(unique("ok"), twin, storage_class=storage_class))
            name = made["metadata"]["name"]
            attacks = {
                "is not a StorageClass this cluster offers you": claim(unique("c"), twin, storage_class="standard"),
                "this cluster offers ReadWriteOnce": claim(
                    unique("c"), twin, storage_class=storage_class, accessModes=["ReadWriteMany"]
                ),
                "is more than the 10Gi": claim(unique("c"), twin, storage_class=storage_class, size="11Gi"),
                "never binds a volume of this cluster by name": claim(
                    unique("c"), twin, storage_class=storage_class, volumeName="pv-of-milan"
                ),
                "never selects volumes of this cluster by label": claim(
                    unique("c"), twin, storage_class=storage_class, selector={"matchLabels": {"team": "milan"}}
                ),
                "never filled from this cluster's claims": claim(
                    unique("c"),
                    twin,
                    storage_class=storage_class,
                    dataSource={"kind": "PersistentVolumeClaim", "name": name},
                ),
            }
            for words, body in attacks.items():
                assert words in await refusal(peer, milan, body), words
            selected = claim(unique("c"), twin, storage_class=storage_class)
            selected["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "milan-node-1"}
            assert "carries no annotation" in await refusal(peer, milan, selected)
            # Made, a claim stays as it was: here, a node chosen for it by the peer (a resize of a claim not bound
            # is refused by the API server's own validation, before admission).
            chosen = made | {
                "metadata": made["metadata"] | {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}
            }
            with pytest.raises(ApiError) as caught:
                await peer.replace(PERSISTENT_VOLUME_CLAIMS, chosen)
            assert "does not change once made" in caught.value.message, caught.value
            # A pod's generic ephemeral volume is a claim too, judged by the ShadowPod webhook.
            template = {"spec": claim("x", twin, storage_class="standard")["spec"]}
            ephemeral = with_claim(
                shadow_pod(unique("eph"), twin, rome_id, cpu="10m"),
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}},
            )
            with pytest.raises(ApiError) as caught:
                await peer.create(SHADOW_PODS, ephemeral)
            assert "volumeClaimTemplate.spec.storageClassName" in caught.value.message, caught.value
            await peer.delete(PERSISTENT_VOLUME_CLAIMS, name, namespace=twin)
    # The offer gone from the policy, no claim of rome's is accepted at all.
    async with peer_identity(rome, milan_id, name="rome@milan") as peer:
        assert "offers you (none)" in await refusal(peer, milan, claim(unique("c"), twin, storage_class=storage_class))


async def test_the_claims_of_a_peers_pods_hold_its_storage_budget_until_deleted(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded, storage_class: str
) -> None:
    """Each claim fits the offer alone; two pods' claims together do not: the second pod waits for room."""
    rome_id, milan_id, twin = sites["rome"].cluster_id, sites["milan"].cluster_id, offloaded.twin
    async with (
        offering(milan, rome_id, storage_class, twin, "3Gi"),
        peer_identity(rome, milan_id, name="rome@milan") as peer,
        stopped(sites["rome"], *ROME_COMPONENTS),
    ):
        first, second = unique("a"), unique("b")
        for name in (first, second):
            await peer.create(PERSISTENT_VOLUME_CLAIMS, claim(name, twin, storage_class=storage_class, size="2Gi"))
        pods = {}
        for name in (first, second):
            volume = {"name": "data", "persistentVolumeClaim": {"claimName": name}}
            pods[name] = with_claim(shadow_pod(f"pod-{name}", twin, rome_id, cpu="10m"), volume)
        await peer.create(SHADOW_PODS, pods[first])

        async def made(name: str) -> bool:
            return await milan.get_or_none(PODS, f"pod-{name}", namespace=twin) is not None

        await eventually(lambda: made(first), timeout=30, message=f"milan made pod-{first}")
        await peer.create(SHADOW_PODS, pods[second])

        async def waiting() -> bool:
            status = (await milan.get(SHADOW_PODS, f"pod-{second}", namespace=twin)).get("status") or {}
            return status.get("reason") == ShadowPodReason.OVER_BUDGET and "storage of class" in status.get(
                "message", ""
            )

        await eventually(waiting, timeout=30, message=f"pod-{second} waits for storage")
        assert not await made(second)
        # The first pod and its claim go: the room is the second's.
        await peer.delete(SHADOW_PODS, f"pod-{first}", namespace=twin)
        await peer.delete(PERSISTENT_VOLUME_CLAIMS, first, namespace=twin)
        await eventually(lambda: made(second), timeout=60, message=f"milan made pod-{second} once room freed")
        await peer.delete(SHADOW_PODS, f"pod-{second}", namespace=twin)
        await peer.delete(PERSISTENT_VOLUME_CLAIMS, second, namespace=twin)


async def test_a_class_no_budget_can_hold_is_not_offered_and_the_policy_says_why(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, storage_class: str
) -> None:
    """An Immediate class would make a volume for every claim a peer stores; a class that does not exist, nothing."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    immediate = unique("t-immediate")
    await milan.create(STORAGE_CLASSES, storage_class_body(immediate, binding="Immediate"))
    classes = [{"class": name, "capacity": "1Gi"} for name in (storage_class, immediate, "t-no-such-class")]
    try:
        async with sharing_policy(milan, rome_id, prefix="claims", storage=classes) as policy:
            await offered(milan, offloaded.twin, f"{storage_class}:ReadWriteOnce:1Gi")
            offer = await milan.get(RESOURCE_OFFERS, milan_id, namespace=names.tenant_namespace(rome_id))
            assert [item["class"] for item in offer["spec"]["storage"]] == [storage_class]

            async def said() -> list[str]:
                events, _ = await milan.list_all(
                    EVENTS, namespace="default", field_selector=f"involvedObject.name={policy}"
                )
                return sorted(e["message"] for e in events if e.get("reason") == "StorageNotOffered")

            async def both_said() -> bool:
                return len(await said()) == 2

            await eventually(both_said, timeout=30, message=f"two StorageNotOffered Events on {policy}")
            messages = await said()
            assert any(immediate in m and "volumeBindingMode is Immediate" in m for m in messages), messages
            assert any("t-no-such-class" in m and "no such StorageClass here" in m for m in messages), messages
    finally:
        await milan.delete(STORAGE_CLASSES, immediate, missing_ok=True)
