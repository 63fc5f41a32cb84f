"""The virtual node: registered from its VirtualNode, kept alive by a Lease, Ready while the provider answers.

As virtual-kubelet's node controller: the Node object is applied whenever the VirtualNode changes (labels,
capacity following the accepted offer), the Lease in ``kube-node-lease`` is renewed every
:data:`RENEW_SECONDS` (the node lifecycle controller only looks at it), and the status is written when a
condition changes or once a minute. Ready is the answer of the provider's ``/readyz``: a provider that is
down makes the node NotReady at once, rather than leaving the scheduler to bind pods to a black hole until
the lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from liqo.kube.client import KubeClient
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.resources import LEASES, NODES
from liqo.virtualkubelet import forge

log = logging.getLogger(__name__)

RENEW_SECONDS = 10.0
STATUS_EVERY_SECONDS = 60.0
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=5)


async def probe(provider: KubeClient | None) -> tuple[bool, str]:
    """Whether the provider's API server is ready, and a message saying so (or why not)."""
    if provider is None:
        return False, "no identity on the provider yet"
    try:
        answer = await provider.request_bytes("GET", "/readyz", timeout=PROBE_TIMEOUT)
    except KubeError as exc:
        return False, f"the provider's API server does not answer: {exc}"
    return True, f"the provider's API server is ready ({answer.decode(errors='replace').strip() or 'ok'})"


class NodeController:
    """Keeps one virtual Node registered, leased and reporting the provider's health."""

    def __init__(
        self,
        *,
        client: KubeClient,
        virtual_node: Callable[[], dict[str, Any] | None],
        provider: Callable[[], KubeClient | None],
        address: str,
        port: int,
        holder: str,
    ) -> None:
        self._client = client
        self._virtual_node = virtual_node
        self._provider = provider
        self._address = address
        self._port = port
        self._holder = holder
        self._changed = asyncio.Event()
        self._last_status: dict[str, Any] | None = None
        self._last_status_at = 0.0
        self.ready = False

    def changed(self) -> None:
        """The VirtualNode or the provider's identity changed: sync now rather than at the next tick."""
        self._changed.set()

    async def run(self) -> None:
        """Sync every :data:`RENEW_SECONDS` (or on change) until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            try:
                await self.sync(now=loop.time())
            except KubeError as exc:
                log.warning("virtual node sync failed: %s", exc)
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel racing a change (then the
            # node could never be stopped).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RENEW_SECONDS):
                    await self._changed.wait()

    async def sync(self, *, now: float) -> None:
        """Apply the Node, its status (when it changed or is due) and renew its Lease."""
        virtual_node = self._virtual_node()
        if virtual_node is None:
            return
        node = await self._client.apply(NODES, forge.node_manifest(virtual_node))
        self.ready, message = await probe(self._provider())
        status = forge.node_status(
            virtual_node,
            ready=self.ready,
            message=message,
            address=self._address,
            port=self._port,
            now=datetime.datetime.now(datetime.UTC),
            previous=node,
        )
        if self._status_due(node, status, now=now):
            await self._client.patch(
                NODES, node["metadata"]["name"], status, subresource="status", patch_type="strategic"
            )
            self._last_status, self._last_status_at = _comparable(status), now
        lease = forge.node_lease(node, holder=self._holder, now=datetime.datetime.now(datetime.UTC))
        await self._client.apply(LEASES, lease)

    def _status_due(self, node: dict[str, Any], status: dict[str, Any], *, now: float) -> bool:
        if now - self._last_status_at >= STATUS_EVERY_SECONDS:
            return True
        return _comparable(status) != self._last_status or _comparable(node) != self._last_status

    async def delete(self, name: str) -> None:
        """Remove the Node (its Lease goes with it: the Node owns it)."""
        with contextlib.suppress(NotFoundError):
            await self._client.delete(NODES, name)


def _comparable(node: dict[str, Any]) -> dict[str, Any]:
    """A node status without its heartbeat times, to tell a real change from a tick (pure)."""
    status = dict(node.get("status") or {})
    status["conditions"] = sorted(
        (
            {k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ),
        key=lambda c: str(c.get("type")),
    )
    kept = ("capacity", "allocatable", "conditions", "addresses", "daemonEndpoints", "declaredFeatures")
    return {k: status.get(k) for k in kept}
