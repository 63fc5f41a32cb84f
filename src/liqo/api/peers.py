"""Clients for the providers this cluster holds an identity on, following the identity Secrets.

The identity Secret (``liqo-identity`` in a provider's tenant namespace, key ``kubeconfig``) is written
by peering (:mod:`liqo.peering.identities`) and read by every component that talks to providers: the
manager's controllers and the virtual kubelet. This module is that shared contract: the Secret's format
and :class:`PeerClients`, which keeps one client per provider, rebuilt whenever the Secret is renewed, so
that nobody holds credentials of their own.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from liqo.api import names
from liqo.kube.client import KubeClient

IDENTITY_LABEL = "liqo.io/identity"
"""``"true"`` on identity Secrets."""


def kubeconfig_of(secret: dict[str, Any]) -> dict[str, Any]:
    """The kubeconfig stored in an identity Secret."""
    decoded: dict[str, Any] = orjson.loads(base64.b64decode(secret["data"]["kubeconfig"]))
    return decoded


class PeerClientSource(Protocol):
    """What a controller talking to providers needs of :class:`PeerClients` (tests give a dict-backed one)."""

    def get(self, provider_id: str) -> KubeClient | None:
        """The client for ``provider_id``, if we hold an identity."""

    def providers(self) -> list[str]:
        """Providers we hold an identity for."""

    def clients(self) -> dict[str, KubeClient]:
        """Provider ID → client, for every identity held."""


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

    def clients(self) -> dict[str, KubeClient]:
        """Provider ID → client, for every identity held (what :class:`~liqo.kube.following.Following` follows)."""
        return {provider_id: client for provider_id, (_, client) in self._clients.items()}

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
