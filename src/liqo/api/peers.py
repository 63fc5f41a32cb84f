"""Clients for the providers this cluster holds an identity on, following the identity Secrets.

The identity Secret (``liqo-identity`` in a provider's tenant namespace, key ``kubeconfig``) is written
by peering (:mod:`liqo.peering.identities`) and read by every component that talks to providers: the
manager's controllers and the virtual kubelet. This module is that shared contract: the Secret's format
and :class:`PeerClients`, which keeps one client per provider, rebuilt whenever the Secret is renewed, so
that nobody holds credentials of their own.

A client is the most powerful thing a Secret can turn into, so what is read back is checked as if a
stranger wrote it (:func:`identity_access`). Peers do write Secrets here: in the twins of the namespaces
they offload to us, with any name and any labels, ``liqo.io/identity`` and ``liqo.io/remote-cluster-id``
included. So the provider an identity is for comes from *where* the Secret is — the fixed name in the
tenant namespace of that provider, which no peer can write — never from its labels; and its kubeconfig must
be the data-only kind liqo writes (:func:`liqo.kube.kubeconfig.load_sealed`): an exec plugin or a token file
in a Secret would run a command inside our manager or send its token to whoever the Secret names.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

from liqo.api import names
from liqo.api.crds.schema import CLUSTER_UUID_PATTERN
from liqo.kube.client import KubeClient
from liqo.kube.kubeconfig import Access, KubeconfigError, load_sealed
from liqo.kube.printable import printable

log = logging.getLogger(__name__)

IDENTITY_LABEL = "liqo.io/identity"
"""``"true"`` on identity Secrets."""


_CLUSTER_ID = re.compile(CLUSTER_UUID_PATTERN)


class UntrustedIdentity(ValueError):
    """A Secret that is not an identity liqo wrote where it writes them; the message says why."""


def kubeconfig_of(secret: dict[str, Any]) -> dict[str, Any]:
    """The kubeconfig stored in an identity Secret."""
    decoded: dict[str, Any] = orjson.loads(base64.b64decode(secret["data"]["kubeconfig"]))
    return decoded


def identity_provider(secret: Mapping[str, Any]) -> str:
    """The provider whose identity ``secret`` holds, judged by where it is (pure).

    Raises:
        UntrustedIdentity: the Secret is not ``liqo-identity`` in the tenant namespace of a provider, or its
            labels name another provider than its namespace.
    """
    meta = secret.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    provider_id = (names.tenant_peer_id(namespace) if isinstance(namespace, str) else None) or ""
    if name != names.IDENTITY_SECRET or not _CLUSTER_ID.fullmatch(provider_id):
        raise UntrustedIdentity(
            f"identities are only read from Secret {names.IDENTITY_SECRET} in a provider's tenant namespace"
            f" ({names.TENANT_NAMESPACE_PREFIX}<cluster ID>)"
        )
    if names.labelled_peer_id(secret) != provider_id:
        raise UntrustedIdentity(f"label {names.REMOTE_CLUSTER_ID} does not name the provider of its namespace")
    return provider_id


def identity_access(secret: Mapping[str, Any]) -> tuple[str, Access]:
    """The provider an identity Secret is for, and how to reach it with that identity (pure).

    Raises:
        UntrustedIdentity: see :func:`identity_provider`; or the kubeconfig is missing, unreadable, or more
            than data (:func:`liqo.kube.kubeconfig.load_sealed`): the message names what.
    """
    provider_id = identity_provider(secret)
    encoded = (secret.get("data") or {}).get("kubeconfig")
    if not encoded:
        raise UntrustedIdentity("no kubeconfig in the Secret (yet)")
    try:
        access = load_sealed(orjson.loads(base64.b64decode(encoded, validate=True)))
    except (binascii.Error, TypeError, ValueError) as exc:  # orjson's and KubeconfigError are ValueErrors
        reason = str(exc) if isinstance(exc, KubeconfigError) else "the kubeconfig is not base64-encoded JSON"
        raise UntrustedIdentity(reason) from None
    return provider_id, access


def describe(secret: Mapping[str, Any]) -> str:
    """``namespace/name`` of a Secret for a log line, printable whatever a peer named it (pure)."""
    meta = secret.get("metadata") or {}
    return printable(f"{meta.get('namespace', '')}/{meta.get('name', '')}", limit=300)


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
        """Follow a created or renewed identity Secret; anything else is ignored with a warning."""
        try:
            provider_id, access = identity_access(secret)
        except UntrustedIdentity as exc:
            log.warning("Secret %s is not used as an identity: %s", describe(secret), exc)
            return
        version = secret["metadata"].get("resourceVersion", "")
        current = self._clients.get(provider_id)
        if current and current[0] == version:
            return
        self._clients[provider_id] = (version, KubeClient(access=access, name=f"peer {provider_id[:8]}"))
        if current:
            self._close_later(current[1])
        self.on_change(provider_id)

    def remove(self, secret: dict[str, Any]) -> None:
        """Forget the client of a deleted identity Secret (a look-alike elsewhere changes nothing)."""
        try:
            provider_id = identity_provider(secret)
        except UntrustedIdentity:
            return
        entry = self._clients.pop(provider_id, None)
        if entry:
            self._close_later(entry[1])
            self.on_change(provider_id)

    def _close_later(self, client: KubeClient) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every client."""
        for _, client in self._clients.values():
            await client.close()
        self._clients.clear()
