"""The kubelet API of virtual nodes: what the API server calls for ``kubectl logs`` and ``exec`` on an offloaded pod.

The API server reaches a node's kubelet at its address and ``daemonEndpoints`` port, over TLS it verifies
with ``--kubelet-certificate-authority`` and with its own client certificate, which we verify in turn
against the cluster CA: only the API server (or whoever holds a certificate of that CA) may read pods'
logs through us. A request for a home pod is answered from the provider's API server (``pods/log`` of
the remote pod, with the same options), streamed as it comes so that ``kubectl logs -f`` follows.

``exec`` arrives as a WebSocket (the node declares ``ExtendWebSocketsToKubelet``, so the API server
passes the client's WebSocket through instead of translating it to SPDY, which we do not speak). We open
a WebSocket to the provider's ``pods/exec`` with the protocols the client offered, answer the client with
the one the provider chose, and relay frames both ways unchanged: the channel protocol (stdin, stdout,
stderr, errors, resize, close) is end to end between kubectl and the provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, KubeError
from liqo.kube.resources import PODS

log = logging.getLogger(__name__)

Locate = Callable[[str, str], tuple[KubeClient, str] | None]
"""Home pod (namespace, name) → the provider's client and the twin namespace, or None if not ours."""

LOG_OPTIONS = ("follow", "tailLines", "previous", "timestamps", "sinceSeconds", "sinceTime", "limitBytes")
"""The ``pods/log`` options the API server passes on to the kubelet, and we to the provider."""


def log_params(query: dict[str, str], *, container: str) -> dict[str, str]:
    """The provider's ``pods/log`` query for a kubelet ``containerLogs`` query (pure)."""
    return {"container": container} | {key: query[key] for key in LOG_OPTIONS if key in query}


EXEC_STREAMS = {"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"}
"""The kubelet's exec query flags → the pod API's ``pods/exec`` flags."""


def exec_query(query: list[tuple[str, str]], *, container: str) -> list[tuple[str, str]]:
    """The provider's ``pods/exec`` query for a kubelet ``exec`` query (pure); ``command`` repeats in order."""
    out = [("container", container)]
    for key, value in query:
        if key == "command":
            out.append(("command", value))
        elif key in EXEC_STREAMS and value.lower() in ("1", "true"):
            out.append((EXEC_STREAMS[key], "true"))
    return out


def offered_protocols(header: str) -> tuple[str, ...]:
    """The subprotocols of a ``Sec-WebSocket-Protocol`` header, in the client's order (pure)."""
    return tuple(p.strip() for p in header.split(",") if p.strip())


async def _relay(source: aiohttp.ClientWebSocketResponse | web.WebSocketResponse, sink: Any) -> None:
    async for message in source:
        if message.type == aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type == aiohttp.WSMsgType.TEXT:
            await sink.send_str(message.data)
        else:
            break


class _Handlers:
    """The endpoints, sharing the caller check and the home pod → provider lookup."""

    def __init__(self, *, locate: Locate, require_client_cert: bool) -> None:
        self._locate = locate
        self._require_client_cert = require_client_cert

    def _target(self, request: web.Request) -> tuple[KubeClient, str, str, str]:
        """The provider, twin namespace, pod and container a pod endpoint is about (or an HTTP error)."""
        if self._require_client_cert and not (request.transport and request.transport.get_extra_info("peercert")):
            raise web.HTTPUnauthorized(text="a client certificate of the cluster CA is required\n")
        namespace, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        found = self._locate(namespace, pod)
        if found is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{pod} does not run on a virtual node of this kubelet\n")
        provider, twin = found
        return provider, twin, pod, container

    async def healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        provider, twin, pod, container = self._target(request)
        path = PODS.path(namespace=twin, name=pod, subresource="log")
        chunks = provider.stream(path, params=log_params(dict(request.query), container=container))
        try:
            first = await anext(chunks, b"")
        except ApiError as exc:
            raise web.HTTPBadRequest(text=f"the provider answered: {exc.message}\n") from exc
        except KubeError as exc:
            raise web.HTTPBadGateway(text=f"the provider is unreachable: {exc}\n") from exc
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(first)
        try:
            async for chunk in chunks:
                await response.write(chunk)
        except KubeError as exc:
            log.info("log stream of %s/%s ended: %s", twin, pod, exc)
        await response.write_eof()
        return response

    async def exec(self, request: web.Request) -> web.StreamResponse:
        provider, twin, pod, container = self._target(request)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise web.HTTPBadRequest(text="exec on a virtual node needs a WebSocket (SPDY is not supported)\n")
        path = PODS.path(namespace=twin, name=pod, subresource="exec")
        query = exec_query(list(request.query.items()), container=container)
        protocols = offered_protocols(request.headers.get("Sec-WebSocket-Protocol", ""))
        try:
            upstream = await provider.websocket(path, query=query, protocols=protocols)
        except ApiError as exc:
            raise web.HTTPBadRequest(text=f"the provider answered: {exc.message}\n") from exc
        except KubeError as exc:
            raise web.HTTPBadGateway(text=f"the provider is unreachable: {exc}\n") from exc
        downstream = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (), max_msg_size=0)
        try:
            await downstream.prepare(request)
            relays = [
                asyncio.create_task(_relay(downstream, upstream)),
                asyncio.create_task(_relay(upstream, downstream)),
            ]
            _, pending = await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            with contextlib.suppress(Exception):
                await upstream.close()
            await downstream.close()
        return downstream


def kubelet_app(*, locate: Locate, require_client_cert: bool) -> web.Application:
    """The aiohttp application serving the kubelet endpoints virtual nodes support.

    ``require_client_cert``: refuse pod endpoints to callers without a verified client certificate (the TLS
    layer verifies one when presented, and lets health probes in without).
    """
    handlers = _Handlers(locate=locate, require_client_cert=require_client_cert)
    app = web.Application()
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", handlers.container_logs)
    app.router.add_route("*", "/exec/{namespace}/{pod}/{container}", handlers.exec)
    return app
