"""The identities this cluster holds on its providers: stored as Secrets, turned into clients, renewed.

An identity is a kubeconfig with a short-lived client certificate, kept in Secret ``liqo-identity`` of
the provider's tenant namespace. :class:`PeerClients` keeps one API client per provider, rebuilt whenever
the Secret changes (a renewal), so controllers always talk to a provider with a valid certificate and never
hold credentials of their own.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
from collections.abc import Callable
from typing import Any

import orjson

from liqo.api import names
from liqo.kube.client import KubeClient

IDENTITY_LABEL = "liqo.io/identity"
ISSUED_AT = "liqo.io/issued-at"
RENEW_AFTER = 2 / 3
"""Renew once two thirds of the certificate's lifetime have passed."""


def _parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def identity_secret(
    *,
    provider_id: str,
    kubeconfig: dict[str, Any],
    issued_at: datetime.datetime,
    expires_at: datetime.datetime,
) -> dict[str, Any]:
    """The Secret holding the identity issued by ``provider_id`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.IDENTITY_SECRET,
            "namespace": names.tenant_namespace(provider_id),
            "labels": names.peer_labels(provider_id) | {IDENTITY_LABEL: "true"},
            "annotations": {ISSUED_AT: _format_time(issued_at), names.EXPIRES_AT: _format_time(expires_at)},
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(orjson.dumps(kubeconfig)).decode()},
    }


def kubeconfig_of(secret: dict[str, Any]) -> dict[str, Any]:
    """The kubeconfig stored in an identity Secret."""
    decoded: dict[str, Any] = orjson.loads(base64.b64decode(secret["data"]["kubeconfig"]))
    return decoded


def renewal_due(secret: dict[str, Any] | None) -> datetime.datetime | None:
    """When the identity in ``secret`` must be renewed (None: there is no usable identity: get one now)."""
    if not secret or not (secret.get("data") or {}).get("kubeconfig"):
        return None
    annotations = secret["metadata"].get("annotations") or {}
    try:
        issued = _parse_time(annotations[ISSUED_AT])
        expires = _parse_time(annotations[names.EXPIRES_AT])
    except (KeyError, ValueError):
        return None
    return issued + (expires - issued) * RENEW_AFTER


def expires_at(secret: dict[str, Any] | None) -> str | None:
    """The expiry annotation of an identity Secret."""
    return ((secret or {}).get("metadata", {}).get("annotations") or {}).get(names.EXPIRES_AT)


def token_of(secret: dict[str, Any] | None) -> str | None:
    """The provider's token from a ``liqo-peer-token`` Secret."""
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data["token"]).decode() if data.get("token") else None


class PeerClients:
    """One API client per provider we hold an identity for, following the identity Secrets.

    ``update`` and ``remove`` are called from informer handlers: they build or drop clients (no I/O: a
    client connects lazily) and call ``on_change(provider_id)`` so that dependents (replicator, status)
    re-reconcile that peer. ``on_change`` may be set after construction (the dependents need the registry).
    """

    def __init__(self, *, on_change: Callable[[str], None] = lambda _: None) -> None:
        self._clients: dict[str, tuple[str, KubeClient]] = {}
        self.on_change = on_change
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, provider_id: str) -> KubeClient | None:
        """The client for ``provider_id``, if we hold an identity."""
        entry = self._clients.get(provider_id)
        return entry[1] if entry else None

    def providers(self) -> list[str]:
        """Providers we hold an identity for."""
        return list(self._clients)

    def update(self, secret: dict[str, Any]) -> None:
        """Follow a created or renewed identity Secret."""
        labels = secret["metadata"].get("labels") or {}
        provider_id = labels.get(names.REMOTE_CLUSTER_ID)
        if labels.get(IDENTITY_LABEL) != "true" or not provider_id or not (secret.get("data") or {}).get("kubeconfig"):
            return
        version = secret["metadata"].get("resourceVersion", "")
        current = self._clients.get(provider_id)
        if current and current[0] == version:
            return
        client = KubeClient.from_kubeconfig_dict(kubeconfig_of(secret), name=f"peer {provider_id[:8]}")
        self._clients[provider_id] = (version, client)
        if current:
            self._close_later(current[1])
        self.on_change(provider_id)

    def remove(self, secret: dict[str, Any]) -> None:
        """Forget the client of a deleted identity Secret."""
        labels = secret["metadata"].get("labels") or {}
        if labels.get(IDENTITY_LABEL) != "true":
            return
        provider_id = labels.get(names.REMOTE_CLUSTER_ID)
        entry = self._clients.pop(provider_id or "", None)
        if entry:
            self._close_later(entry[1])
            self.on_change(provider_id or "")

    def _close_later(self, client: KubeClient) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every client."""
        for _, client in self._clients.values():
            await client.close()
        self._clients.clear()
