"""The manager's start-up against a fake API: the key made once and kept, the shared token of earlier versions gone."""

from __future__ import annotations

from typing import cast

from liqo.api import names
from liqo.kube.client import KubeClient
from liqo.kube.resources import NAMESPACES, SECRETS
from liqo.peering.bootstrap import ensure_identity
from tests.unit.fakeapi import FakeApi
from tests.unit.helpers import install_manifests


def settings() -> dict[str, str]:
    [configmap] = [m for m in install_manifests() if m["metadata"]["name"] == names.CLUSTER_SETTINGS]
    return dict(configmap["data"])


async def test_the_key_is_made_once_and_the_shared_token_of_earlier_versions_is_deleted() -> None:
    api = FakeApi((NAMESPACES, {"metadata": {"name": "kube-system", "uid": "u-1"}}))
    legacy = ("secrets", names.LIQO_NAMESPACE, names.LEGACY_AUTH_TOKEN_SECRET)
    metadata = {"name": names.LEGACY_AUTH_TOKEN_SECRET, "namespace": names.LIQO_NAMESPACE}
    api.put(SECRETS, {"metadata": metadata, "data": {"token": "dG9rZW4="}})
    client = cast(KubeClient, api)
    identity, key = await ensure_identity(client, settings())
    assert legacy not in api.objects
    assert [k for k in api.objects if k[0] == "secrets"] == [
        ("secrets", names.LIQO_NAMESPACE, names.CLUSTER_KEY_SECRET)
    ]
    again, same = await ensure_identity(client, settings())  # another replica, or a restart: nothing replaced
    assert (again, same.fingerprint) == (identity, key.fingerprint)
    assert identity.key_fingerprint == key.fingerprint
