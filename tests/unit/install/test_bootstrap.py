"""The manager's start-up against a fake API: the key made once and kept, the shared token of earlier versions gone."""

from __future__ import annotations

import base64
from typing import Any, cast

from liqo.api import names
from liqo.install.bootstrap import ensure_identity
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.resources import Resource
from tests.unit.helpers import install_manifests

Key = tuple[str, str | None, str]


class FakeApi:
    """Objects by (plural, namespace, name): get, create, delete and apply as the API server does them."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {("namespaces", None, "kube-system"): {"metadata": {"uid": "u-1"}}}

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        try:
            return self.objects[(resource.plural, namespace, name)]
        except KeyError:
            raise NotFoundError(404, "NotFound", name) from None

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        key = (resource.plural, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in self.objects:
            raise ConflictError(409, "AlreadyExists", key[2])
        data = {k: base64.b64encode(v.encode()).decode() for k, v in (obj.get("stringData") or {}).items()}
        self.objects[key] = stored = {k: v for k, v in obj.items() if k != "stringData"} | {"data": data}
        return stored

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        try:
            return self.objects.pop((resource.plural, namespace, name))
        except KeyError:
            raise NotFoundError(404, "NotFound", name) from None

    async def apply(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[(resource.plural, obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
        return obj


def settings() -> dict[str, str]:
    [configmap] = [m for m in install_manifests() if m["metadata"]["name"] == names.CLUSTER_SETTINGS]
    return dict(configmap["data"])


async def test_the_key_is_made_once_and_the_shared_token_of_earlier_versions_is_deleted() -> None:
    api = FakeApi()
    legacy = ("secrets", names.LIQO_NAMESPACE, names.LEGACY_AUTH_TOKEN_SECRET)
    api.objects[legacy] = {"metadata": {"name": names.LEGACY_AUTH_TOKEN_SECRET}, "data": {"token": "dG9rZW4="}}
    client = cast(KubeClient, api)
    identity, key = await ensure_identity(client, settings())
    assert legacy not in api.objects
    assert [k for k in api.objects if k[0] == "secrets"] == [
        ("secrets", names.LIQO_NAMESPACE, names.CLUSTER_KEY_SECRET)
    ]
    again, same = await ensure_identity(client, settings())  # another replica, or a restart: nothing replaced
    assert (again, same.fingerprint) == (identity, key.fingerprint)
    assert identity.key_fingerprint == key.fingerprint
