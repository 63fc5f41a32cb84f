"""The manager's first act: turn the install's settings into this cluster's identity and key.

Why the manager, not the installer: ``helm install`` runs none of our code, and the chart may hold nothing
generated — a Helm template cannot read the ``kube-system`` UID at ``helm template`` time, and a key or token
it rendered would be replaced by every ``helm upgrade``. So the install writes only what it was told (the
``liqo-settings`` ConfigMap) and every manager replica, at start-up, makes sure that:

- the cluster key exists: *created* if absent, never replaced (peers pin it). Two replicas racing both
  create; the loser reads the winner's;
- the shared authentication token of earlier versions is gone: it enrols no one any more (each consumer now
  gets a token of its own, :mod:`liqo.peering.tokens`), and a credential that looks alive but is not
  misleads whoever finds it;
- the identity ConfigMap says what the settings say, with the cluster ID (the UID of ``kube-system``:
  stable for the life of the cluster, the same after a re-install) and the key's public half. Every
  replica computes the same object, so concurrent applies agree.

The identity is derived by a pure function, so a wrong setting fails here, with the key it came from,
before anything listens.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import orjson

from liqo.api import names
from liqo.api.clusterkey import ClusterKey, InvalidKey
from liqo.api.identity import ClusterIdentity
from liqo.api.networks import ClusterNetwork, InvalidNetwork
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.resources import CONFIGMAPS, NAMESPACES, SECRETS

log = logging.getLogger(__name__)

DEFAULT_AUTH_URL = f"https://liqo-auth.{names.LIQO_NAMESPACE}.svc"


class InvalidSettings(ValueError):
    """The settings ConfigMap says something no identity can be made of; the message names the key."""


def identity_from_settings(data: Mapping[str, str], *, cluster_id: str, key: ClusterKey) -> ClusterIdentity:
    """The identity the settings describe (pure).

    Raises:
        InvalidSettings: a required key is empty, the labels are not a JSON object of strings, or the
            network is one no cluster may claim.
    """
    where = f"ConfigMap {names.LIQO_NAMESPACE}/{names.CLUSTER_SETTINGS}"
    missing = [k for k in ("apiServerURL", "podCIDR", "serviceCIDR") if not data.get(k)]
    if missing:
        raise InvalidSettings(f"{where}: {', '.join(missing)} must be set (values apiServer.url, network.*)")
    try:
        labels = orjson.loads(data.get("clusterLabels") or "{}")
    except orjson.JSONDecodeError:
        labels = None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise InvalidSettings(f"{where}: clusterLabels must be a JSON object of strings")
    try:
        network = ClusterNetwork.parse(pod_cidr=data["podCIDR"], service_cidr=data["serviceCIDR"])
    except InvalidNetwork as exc:
        raise InvalidSettings(f"{where}: {exc}") from None
    return ClusterIdentity(
        cluster_id=cluster_id,
        cluster_name=data.get("clusterName") or f"cluster-{cluster_id[:8]}",
        api_server_url=data["apiServerURL"],
        auth_url=data.get("authURL") or DEFAULT_AUTH_URL,
        cluster_labels=labels,
        public_key=key.public_pem,
        key_fingerprint=key.fingerprint,
        network=network,
    )


def identity_configmap(identity: ClusterIdentity) -> dict[str, Any]:
    """The ConfigMap every component reads to know which cluster it runs in (pure)."""
    assert identity.network is not None  # made by identity_from_settings, which always records one
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.CLUSTER_IDENTITY,
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE},
        },
        "data": {
            "clusterID": identity.cluster_id,
            "clusterName": identity.cluster_name,
            "clusterLabels": orjson.dumps(identity.cluster_labels, option=orjson.OPT_SORT_KEYS).decode(),
            "apiServerURL": identity.api_server_url,
            "authURL": identity.auth_url,
            "publicKey": identity.public_key,
            "keyFingerprint": identity.key_fingerprint,
            **identity.network.to_message(),
        },
    }


def cluster_key_secret(key: ClusterKey) -> dict[str, Any]:
    """The Secret holding this cluster's private key (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.CLUSTER_KEY_SECRET,
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE},
        },
        "type": "Opaque",
        "stringData": {"privateKey": key.private_pem()},
    }


async def read_settings(client: KubeClient) -> dict[str, str] | None:
    """The settings' data; None before the install wrote them."""
    configmap = await client.get_or_none(CONFIGMAPS, names.CLUSTER_SETTINGS, namespace=names.LIQO_NAMESPACE)
    return None if configmap is None else dict(configmap.get("data") or {})


async def ensure_identity(client: KubeClient, settings: Mapping[str, str]) -> tuple[ClusterIdentity, ClusterKey]:
    """Make sure the key and the identity exist and agree with ``settings``; return both.

    Raises:
        InvalidSettings: see :func:`identity_from_settings`; also a key Secret holding no Ed25519 key.
    """
    cluster_id = (await client.get(NAMESPACES, "kube-system"))["metadata"]["uid"]
    key_secret = await _created_or_existing(client, names.CLUSTER_KEY_SECRET, cluster_key_secret(ClusterKey.generate()))
    try:
        key = ClusterKey.from_pem(base64.b64decode(key_secret["data"]["privateKey"]).decode())
    except (KeyError, ValueError, InvalidKey) as exc:
        raise InvalidSettings(f"Secret {names.LIQO_NAMESPACE}/{names.CLUSTER_KEY_SECRET}: {exc}") from None
    with contextlib.suppress(NotFoundError):
        await client.delete(SECRETS, names.LEGACY_AUTH_TOKEN_SECRET, namespace=names.LIQO_NAMESPACE)
        log.info("deleted the shared token of earlier versions (%s): it enrols no one", names.LEGACY_AUTH_TOKEN_SECRET)
    identity = identity_from_settings(settings, cluster_id=cluster_id, key=key)
    await client.apply(CONFIGMAPS, identity_configmap(identity))
    return identity, key


async def _created_or_existing(client: KubeClient, name: str, fresh: dict[str, Any]) -> dict[str, Any]:
    """The Secret ``name``: the one there, else ``fresh`` once created (another replica's if it won)."""
    for _ in range(3):
        try:
            return await client.get(SECRETS, name, namespace=names.LIQO_NAMESPACE)
        except NotFoundError:
            pass
        try:
            return await client.create(SECRETS, fresh)
        except ConflictError:
            continue  # created meanwhile: read it
    raise ConflictError(409, "Conflict", f"Secret {names.LIQO_NAMESPACE}/{name} keeps appearing and vanishing")
