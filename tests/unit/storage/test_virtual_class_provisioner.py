"""The virtual class's provisioner against the in-memory API: what it makes, what it deletes, in which order.

Its caches are seeded as their lists would fill them. Real clusters:
``tests/integration/offloading/test_real_nodes.py``.
"""

from __future__ import annotations

from typing import cast

from liqo.api.storage import STORAGE_NAMESPACE, VIRTUAL_CLASS, VIRTUAL_PROVISIONER
from liqo.api.volumes import DEFAULT_CLASS, PROVISIONED_BY, SELECTED_NODE
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, object_key
from liqo.storage.provisioner import VirtualClassProvisioner
from liqo.storage.volumes import BACKS
from tests.unit.fakeapi import FakeApi


def put(informer: Informer, obj: Obj) -> None:
    """What the informer's list or watch would put in its cache."""
    informer._cache[object_key(obj)] = obj


def drop(informer: Informer, key: str) -> None:
    informer._cache.pop(key, None)


def claim(node: str) -> Obj:
    return {
        "metadata": {"name": "data", "namespace": "shop", "uid": "u-1", "annotations": {SELECTED_NODE: node}},
        "spec": {"storageClassName": VIRTUAL_CLASS, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def provisioner(api: FakeApi) -> VirtualClassProvisioner:
    client = cast(KubeClient, api)
    made = VirtualClassProvisioner(
        client=client, informers=SharedInformers(client), events=EventRecorder(client=client, component="test")
    )
    put(made.virtual_nodes, {"metadata": {"name": "liqo-milan", "namespace": "t"}, "spec": {"clusterID": "milan"}})
    for node in ("liqo-milan", "rome-1"):
        put(made.nodes, {"metadata": {"name": node}})
    put(made.classes, {"metadata": {"name": "local", "annotations": {DEFAULT_CLASS: "true"}}})
    return made


def reasons(api: FakeApi) -> list[str]:
    return [call.body["reason"] for call in api.called("create", EVENTS)]


async def test_a_claim_on_a_virtual_node_gets_its_pv_once_and_a_released_one_is_deleted() -> None:
    api = FakeApi()
    storage = provisioner(api)
    put(storage.claims, claim("liqo-milan"))
    await storage.provision("shop/data")
    volume = api.stored(PERSISTENT_VOLUMES, "pvc-u-1")
    assert volume is not None
    assert volume["metadata"]["annotations"][PROVISIONED_BY] == VIRTUAL_PROVISIONER
    assert reasons(api) == ["ProvisioningSucceeded"]

    # The cache behind (the PV not shown yet): the second attempt's create conflicts, and nothing more is said.
    await storage.provision("shop/data")
    assert len([c for c in api.called("create", PERSISTENT_VOLUMES) if c.landed]) == 1
    assert reasons(api) == ["ProvisioningSucceeded"]

    # Its claim deleted, kube-controller-manager releases it; its provisioner deletes it.
    drop(storage.claims, "shop/data")
    put(storage.volumes, volume | {"status": {"phase": "Released"}})
    await storage.reclaim("pvc-u-1")
    assert api.stored(PERSISTENT_VOLUMES, "pvc-u-1") is None


async def backed_local_claim() -> tuple[FakeApi, VirtualClassProvisioner, Obj]:
    """A claim placed on the local node rome-1, provisioned once: its real claim made in liqo's namespace."""
    api = FakeApi()
    storage = provisioner(api)
    put(storage.claims, claim("rome-1"))
    await storage.provision("shop/data")
    backing = api.stored(PERSISTENT_VOLUME_CLAIMS, "pvc-u-1", namespace=STORAGE_NAMESPACE)
    assert backing is not None
    return api, storage, backing


async def test_a_claim_on_a_local_node_gets_a_real_claim_then_a_pv_and_both_go_with_it() -> None:
    api, storage, backing = await backed_local_claim()
    assert backing["metadata"]["annotations"][BACKS] == "shop/data"
    assert api.stored(PERSISTENT_VOLUMES, "pvc-u-1") is None  # not before the real claim is bound

    real = {"metadata": {"name": "pvc-b"}, "spec": {"local": {"path": "/v/pvc-b"}, "claimRef": {
        "namespace": STORAGE_NAMESPACE, "name": "pvc-u-1"}}}  # fmt: skip
    put(storage.volumes, real)
    put(storage.claims, backing | {"spec": backing["spec"] | {"volumeName": "pvc-b"}})
    assert storage._bound_claim(real) == ["shop/data"]
    await storage.provision("shop/data")
    volume = api.stored(PERSISTENT_VOLUMES, "pvc-u-1")
    assert volume is not None
    assert volume["spec"]["local"] == {"path": "/v/pvc-b"}

    drop(storage.claims, "shop/data")
    put(storage.volumes, volume | {"status": {"phase": "Released"}})
    await storage.reclaim("pvc-u-1")
    assert api.stored(PERSISTENT_VOLUME_CLAIMS, "pvc-u-1", namespace=STORAGE_NAMESPACE) is None
    assert api.stored(PERSISTENT_VOLUMES, "pvc-u-1") is None


async def test_a_real_claim_made_for_a_claim_deleted_before_its_pv_is_deleted() -> None:
    api, storage, backing = await backed_local_claim()
    put(storage.claims, backing)
    await storage.reclaim("pvc-u-1")
    assert api.stored(PERSISTENT_VOLUME_CLAIMS, "pvc-u-1", namespace=STORAGE_NAMESPACE) is not None  # still wanted
    drop(storage.claims, "shop/data")
    await storage.reclaim("pvc-u-1")
    assert api.stored(PERSISTENT_VOLUME_CLAIMS, "pvc-u-1", namespace=STORAGE_NAMESPACE) is None


async def test_a_claim_whose_node_is_gone_is_given_back_to_the_scheduler() -> None:
    api = FakeApi()
    storage = provisioner(api)
    api.put(PERSISTENT_VOLUME_CLAIMS, claim("gone-node"))
    put(storage.claims, claim("gone-node"))
    await storage.provision("shop/data")
    stored = api.stored(PERSISTENT_VOLUME_CLAIMS, "data", namespace="shop")
    assert stored is not None
    assert SELECTED_NODE not in stored["metadata"]["annotations"]
    assert reasons(api) == ["UnknownNode"]
