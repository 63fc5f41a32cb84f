"""The virtual node: registered from its VirtualNode, kept alive by a Lease, Ready while the provider answers.

As virtual-kubelet's node controller: the Node object is applied whenever the VirtualNode changes (labels,
capacity following the accepted offer), the Lease in ``kube-node-lease`` is renewed every
:data:`RENEW_SECONDS` (the node lifecycle controller only looks at it), and the status is written when a
condition changes or once a minute. Ready is the answer of the provider's ``/readyz``: a provider that is
down makes the node NotReady at once, rather than leaving the scheduler to bind pods to a black hole until
the lease runs out.

A Node is touched only if it is ours. A missing one is created with a plain create (a namesake appearing
meanwhile is refused, not taken over); an existing one must carry liqo's labels for this provider
(:func:`~liqo.virtualkubelet.forge.node_is_ours`), and from then on every apply names its UID, so a Node
deleted and re-created by someone else under the same name is refused by the API server rather than
overwritten (409 if it is gone, 422 on ``metadata.uid`` if another stands in its place). A Node of that
name that is not ours is left alone and reported: the VirtualNode's ``Registered`` condition turns False
and a Warning Event says so; meanwhile no pod is offloaded through it (:attr:`NodeController.owned` gates
the pod reflector), since the pods bound to that name are someone else's.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Any

from liqo.api.resources import VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, InvalidError, KubeError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.resources import LEASES, NODES
from liqo.virtualkubelet.forge import node as forge

log = logging.getLogger(__name__)

RENEW_SECONDS = 10.0
STATUS_EVERY_SECONDS = 60.0
PROBE_TIMEOUT = 5.0


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
        provider_id: str,
        home_cluster_id: str,
        address: str,
        port: int,
        holder: str,
        events: EventRecorder,
        ownership_changed: Callable[[], None],
        readiness_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._client = client
        self._virtual_node = virtual_node
        self._provider = provider
        self._provider_id = provider_id
        self._home_cluster_id = home_cluster_id
        self._address = address
        self._port = port
        self._holder = holder
        self._events = events
        self._ownership_changed = ownership_changed
        self._readiness_changed = readiness_changed
        self._changed = asyncio.Event()
        self._last_status: dict[str, Any] | None = None
        self._last_status_at = 0.0
        self._uid: str | None = None
        self.ready = False
        self.owned = False
        """Whether the Node of this name is ours (registered by us, or carrying our labels for this provider)."""

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
        # The provider first: it may take seconds, and nothing should come between our writes to the Node.
        was_ready = self.ready
        provider = self._provider()
        self.ready, message = await probe(provider)
        if self.ready != was_ready:
            self._readiness_changed()
        if self.ready and self.owned and provider is not None:
            await self._heartbeat(provider)
        if self._uid is None and not await self._claim(virtual_node):
            return
        try:
            await self._write(virtual_node, message=message, now=now)
        except (ConflictError, InvalidError) as exc:
            # 409: the Node we registered is gone; 422 on metadata.uid: a namesake stands in its place.
            if isinstance(exc, InvalidError) and not _refused_uid(exc):
                raise
            self._uid = None
            self._set_owned(False)
            self.changed()  # claim anew, now

    async def _write(self, virtual_node: dict[str, Any], *, message: str, now: float) -> None:
        """Our Node, its status and its Lease; the Node's writes name its UID, so that they never land on another."""
        manifest = forge.node_manifest(virtual_node)
        manifest["metadata"]["uid"] = self._uid
        node = await self._client.apply(NODES, manifest)
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
            patch = status | {"metadata": status["metadata"] | {"uid": self._uid}}
            await self._client.patch(
                NODES, node["metadata"]["name"], patch, subresource="status", patch_type="strategic"
            )
            self._last_status, self._last_status_at = _comparable(status), now
        lease = forge.node_lease(node, holder=self._holder, now=datetime.datetime.now(datetime.UTC))
        await self._client.apply(LEASES, lease)

    async def _claim(self, virtual_node: dict[str, Any]) -> bool:
        """Find out whether the Node of this name is ours, creating it if there is none; report the outcome."""
        name = virtual_node["metadata"]["name"]
        try:
            current = await self._client.get(NODES, name)
        except NotFoundError:
            try:
                current = await self._client.create(NODES, forge.node_claim(virtual_node))
            except ConflictError:
                return False  # someone created it meanwhile: looked at on the next sync
        ours = forge.node_is_ours(current, provider_id=self._provider_id)
        if ours:
            self._uid = current["metadata"]["uid"]
        self._set_owned(ours)
        await self._report(virtual_node, squatter=None if ours else current)
        return ours

    async def _heartbeat(self, provider: KubeClient) -> None:
        """Tell the provider we reach it: it darkens the endpoints we reflected once we stop (offloading.heartbeats)."""
        lease = forge.consumer_heartbeat(
            home_cluster_id=self._home_cluster_id, holder=self._holder, now=datetime.datetime.now(datetime.UTC)
        )
        try:
            await provider.apply(LEASES, lease)
        except KubeError as exc:
            log.warning("cannot renew our heartbeat on provider %s: %s", self._provider_id, exc)

    def _set_owned(self, owned: bool) -> None:
        if owned != self.owned:
            self.owned = owned
            self._ownership_changed()

    async def _report(self, virtual_node: dict[str, Any], *, squatter: dict[str, Any] | None) -> None:
        """Write the ``Registered`` condition when it changes, with a Warning Event when the name is taken."""
        condition = forge.registration_condition(
            virtual_node, squatter=squatter, now=datetime.datetime.now(datetime.UTC)
        )
        conditions = (virtual_node.get("status") or {}).get("conditions") or []
        if condition in conditions:
            return
        meta = virtual_node["metadata"]
        await self._client.apply_status(
            VIRTUAL_NODES, name=meta["name"], namespace=meta["namespace"], status={"conditions": [condition]}
        )
        if squatter is not None:
            log.warning("virtual node %s: %s", meta["name"], condition["message"])
            await self._events.record(
                virtual_node, type="Warning", reason=condition["reason"], message=condition["message"]
            )

    def _status_due(self, node: dict[str, Any], status: dict[str, Any], *, now: float) -> bool:
        if now - self._last_status_at >= STATUS_EVERY_SECONDS:
            return True
        return _comparable(status) != self._last_status or _comparable(node) != self._last_status


def _refused_uid(error: InvalidError) -> bool:
    """Whether the API server refused an apply for naming another object's UID (pure)."""
    causes = (error.body.get("details") or {}).get("causes") or []
    return any(cause.get("field") == "metadata.uid" for cause in causes)


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
