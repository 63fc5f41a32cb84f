"""The kubelet API of virtual nodes: what the API server calls for ``kubectl logs/exec/attach/port-forward``.

The API server reaches a node's kubelet at its address and ``daemonEndpoints`` port, over TLS it verifies
with ``--kubelet-certificate-authority`` and with its own client certificate, which we verify in turn
against the cluster CA: only the API server (or whoever holds a certificate of that CA) may reach pods
through us. A request for a home pod is answered from the provider's API server, with the consumer's
identity there, about the twin pod.

``containerLogs`` is the provider's ``pods/log`` with the same options, streamed as it comes so that
``kubectl logs -f`` follows.

``exec``, ``attach`` and ``portForward`` are one path: a WebSocket relay. The node declares
``ExtendWebSocketsToKubelet``, so the API server passes the client's WebSocket through to us unchanged
(pkg/registry/core/pod/rest/subresources.go in Kubernetes: ``proxied_to_kubelet``) instead of translating it
to SPDY, which we do not speak. We open a WebSocket to the provider's ``pods/exec``, ``pods/attach`` or
``pods/portforward`` with the subprotocols the client offered, answer the client with the one the provider
chose, and relay frames both ways unchanged. Each protocol is thus end to end between the client and the
provider's kubelet, and nothing of it is reimplemented here:

- exec and attach speak ``v5.channel.k8s.io`` (kubectl offers nothing else): stdin, stdout, stderr, the
  status channel (exit codes), resize, and the CLOSE signal (channel 255) that half-closes stdin, so that
  ``echo x | kubectl exec -i POD -- cat`` and ``kubectl cp`` end. A client offering only
  ``v4.channel.k8s.io`` gets v4, which has no way to close stdin but by closing the whole connection.
- port-forward from kubectl is ``SPDY/3.1+portforward.k8s.io``: SPDY frames carried in binary WebSocket
  messages, one SPDY session multiplexing a data and an error stream per local connection. The provider's
  API server accepts that same tunnel (``PortForwardWebsockets``) and hands it to its kubelet, so we carry
  bytes and never parse SPDY. Clients of the plain ``v4.channel.k8s.io`` port-forward protocol (ports in
  the query, a data and an error channel per port) are relayed the same way.

Why not answer port-forward ourselves (a SPDY/3.1 server toward kubectl, the v4 WebSocket protocol toward
the provider), as upstream Liqo's virtual kubelet library does: v4 fixes the ports when it connects and
carries one connection per port, so every local connection would cost a WebSocket to the provider; it has
no half-close, so a client's EOF could not reach the pod; and SPDY's compressed header contexts, flow
control windows and stream states would be ours to get right, for nothing the relay does not already do.

Only the query is translated (pure functions below): the kubelet's ``input``/``output``/``error``/``tty``
become the pod API's ``stdin``/``stdout``/``stderr``/``tty``, its ``port=80,443`` the pod API's repeated
``ports``.

A client that speaks plain SPDY is refused: kubectl tries WebSockets first and falls back to SPDY only when
the upgrade fails, so the fallback is answered with the failure the WebSocket attempt met (the provider's
refusal, remembered for a moment), not with a complaint about SPDY that would hide it.

Refusals of a stream are a Kubernetes ``Status`` in JSON, never plain text: kubectl decodes a refused
upgrade's body with the API machinery's universal decoder, which reads YAML too, so a sentence such as
``the provider answered: …`` parsed as a one-key mapping, became an empty Status, and kubectl printed only
``Error from server: ``. Log refusals stay plain text: the API server quotes a kubelet's log error body
verbatim. When the provider's kubelet refuses behind its API server (a container not running: the body of
that refusal never reaches us), the twin pod's container state says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import aiohttp
import orjson
from aiohttp import web

from liqo.kube import podstate
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, KubeError
from liqo.kube.objects import Obj
from liqo.kube.printable import printable
from liqo.kube.resources import PODS
from liqo.kube.websocket import WebSocket

log = logging.getLogger(__name__)

Locate = Callable[[str, str], tuple[KubeClient, str] | None]
"""Home pod (namespace, name) → the provider's client and the twin namespace, or None if not ours."""

LOG_OPTIONS = ("follow", "tailLines", "previous", "timestamps", "sinceSeconds", "sinceTime", "limitBytes")
"""The ``pods/log`` options the API server passes on to the kubelet, and we to the provider."""


def log_params(query: dict[str, str], *, container: str) -> dict[str, str]:
    """The provider's ``pods/log`` query for a kubelet ``containerLogs`` query (pure)."""
    return {"container": container} | {key: query[key] for key in LOG_OPTIONS if key in query}


STREAM_FLAGS = {"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"}
"""The kubelet's exec and attach query flags → the pod API's ``pods/exec`` and ``pods/attach`` flags."""

SUBRESOURCES = {"exec": "exec", "attach": "attach", "portForward": "portforward"}
"""The kubelet's streaming endpoints → the pod subresource each is relayed to."""


def stream_query(endpoint: str, query: Sequence[tuple[str, str]], *, container: str) -> list[tuple[str, str]]:
    """The provider's pod subresource query for a kubelet ``exec``, ``attach`` or ``portForward`` query (pure).

    exec and attach: the container and the stream flags (set by ``1`` or ``true``); exec also its
    ``command``, repeated in order. portForward: the kubelet's ``port`` (comma-separated, possibly repeated)
    as the pod API's repeated ``ports``; no port at all is what kubectl's SPDY tunnel sends (ports travel
    in its stream headers). Anything else is dropped.
    """
    if endpoint == "portForward":
        ports = (port.strip() for key, value in query if key == "port" for port in value.split(","))
        return [("ports", port) for port in ports if port]
    out = [("container", container)]
    for key, value in query:
        if key == "command" and endpoint == "exec":
            out.append(("command", value))
        elif key in STREAM_FLAGS and value.lower() in ("1", "true"):
            out.append((STREAM_FLAGS[key], "true"))
    return out


REFUSALS: dict[int, tuple[type[web.HTTPException], str]] = {
    400: (web.HTTPBadRequest, "BadRequest"),
    401: (web.HTTPUnauthorized, "Unauthorized"),
    404: (web.HTTPNotFound, "NotFound"),
    503: (web.HTTPServiceUnavailable, "ServiceUnavailable"),
}
"""The codes a refusal uses, with the ``Status`` reason kubectl prints as ``Error from server (…)``."""


def stream_refusal(code: int, message: str) -> web.HTTPException:
    """A refusal of a stream, its body the Kubernetes ``Status`` kubectl decodes (pure)."""
    kind, reason = REFUSALS[code]
    status = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure"}
    text = orjson.dumps(status | {"message": message, "reason": reason, "code": code}).decode()
    return kind(text=text, content_type="application/json")


def not_running(pod: Obj, container: str) -> str | None:
    """Why ``container`` of the provider's ``pod`` cannot take an exec or attach; None if it runs (pure).

    Worded like the API server's own refusal of ``kubectl logs`` for a waiting container; the provider's
    reasons and messages come escaped and cut (:mod:`liqo.kube.podstate`).
    """
    found = podstate.container_status(pod, container)
    if found is None:
        phase = printable(str((pod.get("status") or {}).get("phase", "new")), limit=podstate.MAX_TEXT)
        return f'container "{container}" has not started on the provider (the pod is {phase})'
    state = found.get("state") or {}
    if (waiting := state.get("waiting")) is not None:
        return f'container "{container}" is waiting to start on the provider: {podstate.waiting(waiting)}'
    if (terminated := state.get("terminated")) is not None:
        return f'container "{container}" has terminated on the provider: {podstate.terminated(terminated)}'
    return None


def offered_protocols(header: str) -> tuple[str, ...]:
    """The subprotocols of a ``Sec-WebSocket-Protocol`` header, in the client's order (pure)."""
    return tuple(p.strip() for p in header.split(",") if p.strip())


_UNSENDABLE_CLOSE_CODES = {1005, 1006, 1015}
"""Close codes that report a local condition (no code, connection lost, TLS) and never go on the wire."""


def relayed_close_code(received: int | None) -> int:
    """The close code to give one side when the other side's WebSocket ended with ``received`` (pure).

    A code the peer sent is passed on. Anything else is a normal closure: Kubernetes' API servers end exec
    and port-forward WebSockets by closing the connection without a close frame (aiohttp reports 1006), and
    what went wrong, if anything, is already on the protocol's own error channel.
    """
    if received is None or received in _UNSENDABLE_CLOSE_CODES or not 1000 <= received <= 4999:
        return aiohttp.WSCloseCode.OK
    return received


async def _to_provider(client: web.WebSocketResponse, provider: WebSocket) -> None:
    async for message in client:
        if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
            break
        await provider.send(message.data)


async def _to_client(provider: WebSocket, client: web.WebSocketResponse) -> None:
    async for frame in provider.frames():
        if isinstance(frame, bytes):
            await client.send_bytes(frame)
        else:
            await client.send_str(frame)


REFUSAL_MEMORY_SECONDS = 30.0
"""How long the provider's refusal of a WebSocket is repeated to the SPDY attempt kubectl makes right after."""


class _Handlers:
    """The endpoints, sharing the caller check and the home pod → provider lookup."""

    def __init__(self, *, locate: Locate, require_client_cert: bool) -> None:
        self._locate = locate
        self._require_client_cert = require_client_cert
        self._refusals: dict[tuple[str, str, str], tuple[float, web.HTTPException]] = {}

    def _target(self, request: web.Request) -> tuple[KubeClient, str, str, str]:
        """The provider, twin namespace, pod and container a pod endpoint is about (or an HTTP error)."""
        if self._require_client_cert and not (request.transport and request.transport.get_extra_info("peercert")):
            raise self._refusal(request, 401, "a client certificate of the cluster CA is required")
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        found = self._locate(namespace, pod)
        if found is None:
            raise self._refusal(request, 404, f"pod {namespace}/{pod} does not run on a virtual node of this kubelet")
        provider, twin = found
        return provider, twin, pod, request.match_info.get("container", "")

    @staticmethod
    def _refusal(request: web.Request, code: int, message: str) -> web.HTTPException:
        """A refusal in the form its client reads: plain text for logs, a ``Status`` for streams."""
        if request.path.startswith("/containerLogs/"):
            return REFUSALS[code][0](text=message + "\n")
        return stream_refusal(code, message)

    async def healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        provider, twin, pod, container = self._target(request)
        path = PODS.path(namespace=twin, name=pod, subresource="log")
        chunks = provider.stream(path, params=log_params(dict(request.query), container=container))
        try:
            first = await anext(chunks, b"")
        except ApiError as exc:
            raise self._refusal(request, 400, f"the provider answered: {exc.message}") from exc
        except KubeError as exc:
            raise self._refusal(request, 503, f"the provider is unreachable: {exc}") from exc
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
        return await self._stream(request, "exec")

    async def attach(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "attach")

    async def port_forward(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "portForward")

    async def _stream(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        """The client's WebSocket relayed to the provider's pod subresource for ``endpoint``."""
        provider, twin, pod, container = self._target(request)
        key = (endpoint, request.match_info["namespace"], pod)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise self._remembered(key) or stream_refusal(
                400,
                f"{endpoint} on a virtual node needs WebSockets (SPDY is not supported): kubectl uses them"
                " unless KUBECTL_REMOTE_COMMAND_WEBSOCKETS or KUBECTL_PORT_FORWARD_WEBSOCKETS is false",
            )
        path = PODS.path(namespace=twin, name=pod, subresource=SUBRESOURCES[endpoint])
        query = stream_query(endpoint, list(request.query.items()), container=container)
        protocols = offered_protocols(request.headers.get("Sec-WebSocket-Protocol", ""))
        try:
            upstream = await provider.websocket(path, query=query, protocols=protocols)
        except ApiError as exc:
            why = await _container_state(provider, twin, pod, container) if container else None
            message = f"the provider answered: {exc.message}" + (f"; {why}" if why else "")
            raise self._remember(key, stream_refusal(400, message)) from exc
        except KubeError as exc:
            raise self._remember(key, stream_refusal(503, f"the provider is unreachable: {exc}")) from exc
        downstream = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (), max_msg_size=0)
        try:
            await downstream.prepare(request)
            await _relay_both_ways(downstream, upstream)
        finally:
            with contextlib.suppress(Exception):
                await upstream.close()
            await downstream.close()
        return downstream

    def _remember(self, key: tuple[str, str, str], refusal: web.HTTPException) -> web.HTTPException:
        """Keep ``refusal`` for the SPDY attempt that follows it (kubectl's fallback), and return it."""
        now = time.monotonic()
        self._refusals = {k: v for k, v in self._refusals.items() if v[0] > now}
        self._refusals[key] = (now + REFUSAL_MEMORY_SECONDS, refusal)
        return refusal

    def _remembered(self, key: tuple[str, str, str]) -> web.HTTPException | None:
        """The refusal :meth:`_remember` kept for ``key``, once, while it is fresh."""
        kept = self._refusals.pop(key, None)
        if kept is None or kept[0] < time.monotonic():
            return None
        return type(kept[1])(text=kept[1].text, content_type=kept[1].content_type)


async def _container_state(provider: KubeClient, twin: str, pod: str, container: str) -> str | None:
    """:func:`not_running` for the twin pod, or None when the provider will not say."""
    try:
        found = await provider.get(PODS, pod, namespace=twin)
    except KubeError:
        return None
    return not_running(found, container)


async def _relay_both_ways(downstream: web.WebSocketResponse, upstream: WebSocket) -> None:
    """Relay until either side's stream ends, then close the other with the code that side gave."""
    to_provider = asyncio.create_task(_to_provider(downstream, upstream))
    to_client = asyncio.create_task(_to_client(upstream, downstream))
    done, pending = await asyncio.wait((to_provider, to_client), return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.info("stream relay ended: %s", error or type(error).__name__)
    ended, other = (downstream, upstream) if to_provider in done else (upstream, downstream)
    with contextlib.suppress(Exception):
        await other.close(code=relayed_close_code(ended.close_code))


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
    app.router.add_route("*", "/attach/{namespace}/{pod}/{container}", handlers.attach)
    app.router.add_route("*", "/portForward/{namespace}/{pod}", handlers.port_forward)
    return app
