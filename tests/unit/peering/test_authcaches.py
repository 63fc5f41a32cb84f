"""The authentication endpoint's caches: what it knows of consumers without listing anything per request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from liqo.api import names
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import ROLE_BINDINGS
from liqo.peering.authcaches import AuthCaches
from liqo.peering.enrolment import KubeEnrolments, TenantLimits
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi

LOCAL = "0f7e9b3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
ROME = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
NAPLES = "b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
KEY = "sha256:" + "a" * 64


def lists(api: FakeApi) -> list[tuple[str, str | None]]:
    """Every list the caches made: (resource, field selector)."""
    return [(c.plural, c.options["field_selector"]) for c in api.called("list")]


def foreign_cluster(name: str, cluster_id: str, **spec: Any) -> Obj:
    return {"metadata": {"name": name}, "spec": {"clusterID": cluster_id, **spec}}


def binding(consumer: str) -> Obj:
    namespace = names.tenant_namespace(consumer)
    return {
        "metadata": {"name": names.PEER_BINDING, "namespace": namespace},
        "roleRef": {"name": names.PEER_TENANT_ROLE},
    }


def offer(consumer: str) -> Obj:
    namespace = names.tenant_namespace(consumer)
    return {
        "metadata": {"name": LOCAL, "namespace": namespace},
        "status": {"phase": "Accepted"},
    }


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[FakeApi, AuthCaches]]:
    api = FakeApi(
        (FOREIGN_CLUSTERS, foreign_cluster("rome", ROME, keyFingerprint=KEY)),
        (FOREIGN_CLUSTERS, foreign_cluster("other", NAPLES[::-1])),
        (ROLE_BINDINGS, binding(ROME)),
        (RESOURCE_OFFERS, offer(ROME)),
    )
    informers = SharedInformers(cast(KubeClient, api))
    caches = AuthCaches(informers, local_id=LOCAL)
    assert not informers.has_synced
    task = asyncio.create_task(informers.run())
    assert await informers.wait_synced(5)
    assert informers.has_synced
    yield api, caches
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_consumer_is_found_by_its_cluster_id_and_its_tenants_counted_without_a_request(
    cluster: tuple[FakeApi, AuthCaches],
) -> None:
    api, caches = cluster
    listed = sorted(lists(api), key=str)
    assert listed == sorted(
        [
            ("foreignclusters", None),
            ("rolebindings", f"metadata.name={names.PEER_BINDING}"),
            ("resourceoffers", f"metadata.name={LOCAL}"),
            ("discoverysources", None),
        ],
        key=str,
    )  # once each, when the caches start
    fc = caches.foreign_cluster(ROME)
    assert fc is not None
    assert fc["metadata"]["name"] == "rome"
    assert caches.foreign_cluster(NAPLES) is None
    enrolments = KubeEnrolments(client=cast(KubeClient, api), caches=caches, limits=TenantLimits(max_pending=1))
    assert await enrolments.refusal() is None  # rome is enrolled and accepted: no one pending
    api.put(ROLE_BINDINGS, binding(NAPLES))

    async def seen() -> bool:
        return f"{names.tenant_namespace(NAPLES)}/{names.PEER_BINDING}" in caches.bindings.store

    await eventually(seen, timeout=5, message="naples' binding is in the cache")
    assert not caches.enrolled(NAPLES, key_fingerprint=KEY)  # a binding, but no record pinning its key
    refusal = await enrolments.refusal()
    assert refusal is not None
    assert refusal.status == 429
    assert len(lists(api)) == 4  # nothing listed since
    assert {c.verb for c in api.calls} == {"list", "watch"}  # nor asked anything else


async def test_an_enrolment_settles_once_the_caches_show_its_record_and_its_binding(
    cluster: tuple[FakeApi, AuthCaches], caplog: pytest.LogCaptureFixture
) -> None:
    api, caches = cluster
    enrolments = KubeEnrolments(client=cast(KubeClient, api), caches=caches, limits=TenantLimits())
    settling = asyncio.create_task(enrolments.settle(NAPLES, key_fingerprint=KEY))
    api.put(FOREIGN_CLUSTERS, foreign_cluster("naples", NAPLES, keyFingerprint=KEY))
    api.put(ROLE_BINDINGS, binding(NAPLES))
    await asyncio.wait_for(settling, timeout=5)
    assert caches.enrolled(NAPLES, key_fingerprint=KEY)
    assert not caches.enrolled(NAPLES, key_fingerprint="sha256:" + "b" * 64)
    assert "do not show the enrolment" not in caplog.text


async def test_a_pin_discovery_made_is_no_enrolment_until_the_enrolling_write_takes_its_label(
    cluster: tuple[FakeApi, AuthCaches],
) -> None:
    api, caches = cluster
    discovered = foreign_cluster("naples", NAPLES, keyFingerprint=KEY)
    discovered["metadata"]["labels"] = {names.DISCOVERED_BY: "lan"}
    api.put(FOREIGN_CLUSTERS, discovered)
    api.put(ROLE_BINDINGS, binding(NAPLES))
    enrolments = KubeEnrolments(client=cast(KubeClient, api), caches=caches, limits=TenantLimits())
    settling = asyncio.create_task(enrolments.settle(NAPLES, key_fingerprint=KEY))

    async def bound() -> bool:
        return f"{names.tenant_namespace(NAPLES)}/{names.PEER_BINDING}" in caches.bindings.store

    await eventually(bound, timeout=5, message="naples' binding is in the cache")
    assert not caches.enrolled(NAPLES, key_fingerprint=KEY)  # the announced pin, still discovery's
    assert not settling.done()
    api.put(FOREIGN_CLUSTERS, foreign_cluster("naples", NAPLES, keyFingerprint=KEY))  # the label gone
    await asyncio.wait_for(settling, timeout=5)
    assert caches.enrolled(NAPLES, key_fingerprint=KEY)


async def test_an_enrolment_the_caches_never_show_is_answered_after_a_bound_and_logged(
    cluster: tuple[FakeApi, AuthCaches], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, caches = cluster
    monkeypatch.setattr("liqo.peering.authcaches.SETTLE_TIMEOUT", 0.05)
    enrolments = KubeEnrolments(client=cast(KubeClient, api), caches=caches, limits=TenantLimits())
    with caplog.at_level(logging.WARNING):
        await enrolments.settle(NAPLES, key_fingerprint=KEY)
    assert f"do not show the enrolment of {NAPLES} yet" in caplog.text
