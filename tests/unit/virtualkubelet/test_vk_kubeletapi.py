"""The kubelet API's streams: the query translations (pure), and the relay against a stand-in provider.

The stand-in is a tiny aiohttp server on loopback playing the provider's API server (its pod subresource
WebSockets, and its refusals); the virtual kubelet's application runs as it does in production, minus TLS.
What crosses the relay is checked frame by frame, which is what a KWOK provider cannot show: its exec never
closes a command's stdin (tests/integration/virtualkubelet/test_streams.py tells the story).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError
from liqo.kube.kubeconfig import Access
from liqo.kube.printable import unprintable
from liqo.virtualkubelet.kubeletapi import (
    kubelet_app,
    log_params,
    not_running,
    offered_protocols,
    relayed_close_code,
    stream_query,
)

V5 = "v5.channel.k8s.io"
TUNNEL = "SPDY/3.1+portforward.k8s.io"
CLOSE_STDIN = b"\xff\x00"  # v5: the CLOSE signal (channel 255) for stream 0, stdin


# -- pure ----------------------------------------------------------------------------------------------------


def test_log_params_pass_the_kubectl_options_on() -> None:
    query = {"follow": "true", "tailLines": "5", "previous": "true", "bogus": "x"}
    assert log_params(query, container="c") == {
        "container": "c",
        "follow": "true",
        "tailLines": "5",
        "previous": "true",
    }


def test_exec_maps_the_kubelet_flags_and_keeps_the_command_in_order() -> None:
    query = [("command", "sh"), ("command", "-c"), ("command", "echo hi"), ("input", "1"), ("output", "1")]
    query += [("error", "0"), ("tty", "true"), ("other", "x")]
    assert stream_query("exec", query, container="app") == [
        ("container", "app"),
        ("command", "sh"),
        ("command", "-c"),
        ("command", "echo hi"),
        ("stdin", "true"),
        ("stdout", "true"),
        ("tty", "true"),
    ]


def test_attach_maps_the_same_flags_and_has_no_command() -> None:
    query = [("input", "1"), ("output", "1"), ("error", "1"), ("tty", "1"), ("command", "sh")]
    assert stream_query("attach", query, container="app") == [
        ("container", "app"),
        ("stdin", "true"),
        ("stdout", "true"),
        ("stderr", "true"),
        ("tty", "true"),
    ]


@given(st.lists(st.lists(st.integers(min_value=1, max_value=65535), min_size=1, max_size=4), max_size=3))
def test_port_forward_turns_the_kubelets_port_lists_into_repeated_ports(groups: list[list[int]]) -> None:
    query = [("port", ",".join(map(str, group))) for group in groups] + [("container", "x"), ("input", "1")]
    assert stream_query("portForward", query, container="") == [("ports", str(p)) for group in groups for p in group]


def test_offered_protocols_keep_the_clients_order() -> None:
    assert offered_protocols(f"{V5}, v4.channel.k8s.io,") == (V5, "v4.channel.k8s.io")
    assert offered_protocols(TUNNEL) == (TUNNEL,)
    assert offered_protocols("") == ()


@given(st.one_of(st.none(), st.integers(min_value=-1, max_value=70000)))
def test_a_relayed_close_code_is_always_one_that_may_be_sent(received: int | None) -> None:
    code = relayed_close_code(received)
    assert 1000 <= code <= 4999
    assert code not in (1005, 1006, 1015)
    if received is not None and 1000 <= received <= 4999 and received not in (1005, 1006, 1015):
        assert code == received  # what the peer said is passed on
    else:
        assert code == 1000  # a connection that just ended (Kubernetes' way of ending a stream) ended normally


def _pod(phase: str, **statuses: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"phase": phase, "containerStatuses": [{"name": n, "state": s} for n, s in statuses.items()]}}


def test_not_running_says_why_a_container_takes_no_exec() -> None:
    pulling = {"waiting": {"reason": "ErrImagePull", "message": 'failed to pull "nginx"'}}
    assert not_running(_pod("Pending", app=pulling), "app") == (
        'container "app" is waiting to start on the provider: ErrImagePull (failed to pull "nginx")'
    )
    assert not_running(_pod("Pending", app={"waiting": {"reason": "ContainerCreating"}}), "app") == (
        'container "app" is waiting to start on the provider: ContainerCreating'
    )
    done = {"terminated": {"reason": "Completed", "exitCode": 0}}
    assert not_running(_pod("Succeeded", app=done), "app") == (
        'container "app" has terminated on the provider: Completed, exit code 0'
    )
    assert not_running(_pod("Pending"), "app") == 'container "app" has not started on the provider (the pod is Pending)'
    assert not_running(_pod("Running", app={"running": {}}), "app") is None


@given(st.text(max_size=2000))
def test_not_running_escapes_and_cuts_what_the_provider_wrote(message: str) -> None:
    said = not_running(_pod("Pending", app={"waiting": {"reason": "X", "message": message}}), "app")
    assert said is not None
    assert unprintable(said) is None
    assert len(said) <= len('container "app" is waiting to start on the provider: ') + 300


# -- the relay -----------------------------------------------------------------------------------------------

Script = Callable[[web.WebSocketResponse, web.Request], Awaitable[None]]


@dataclass
class Provider:
    """The stand-in provider API server: what it was asked, what reached it, and how it answers."""

    calls: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    received: list[bytes | str] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    close_code: int | None = None
    script: Script | None = None
    refusal: tuple[int, dict[str, Any]] | None = None
    """Refuse every request (the API server's own refusals: authorization, a missing pod)."""
    kubelet_refusal: int | None = None
    """Refuse upgrades only, with this status (a kubelet's refusal, behind the API server's proxy)."""
    pod: dict[str, Any] | None = None
    """The twin pod a GET finds (404 if None)."""

    async def get_pod(self, _request: web.Request) -> web.StreamResponse:
        if self.pod is None:
            return web.json_response({"kind": "Status", "message": 'pods "web" not found', "code": 404}, status=404)
        return web.json_response(self.pod)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.refusal is not None:
            return web.json_response(self.refusal[1], status=self.refusal[0])
        if request.headers.get("Upgrade", "").lower() != "websocket":
            required = {"kind": "Status", "message": "Upgrade request required", "code": 400}
            return web.json_response(required, status=400)
        if self.kubelet_refusal is not None:
            return web.Response(status=self.kubelet_refusal, text="406: Not Acceptable")
        self.calls.append((request.path, list(request.query.items())))
        ws = web.WebSocketResponse(protocols=(V5, "v4.channel.k8s.io", TUNNEL), max_msg_size=0)
        await ws.prepare(request)
        assert self.script is not None
        await self.script(ws, request)
        return ws

    async def record_until(self, ws: web.WebSocketResponse, last: bytes | None) -> None:
        """Keep what the relay sends until ``last`` arrives (or the relay closes)."""
        async for message in ws:
            self.received.append(message.data)
            if message.data == last:
                return
        self.close_code = ws.close_code
        self.closed.set()


@dataclass
class Relay:
    provider: Provider
    provider_url: str
    url: str
    session: aiohttp.ClientSession


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    provider = Provider()
    provider_app = web.Application()
    provider_app.router.add_route("*", "/api/v1/namespaces/{namespace}/pods/{pod}/{sub}", provider.handle)
    provider_app.router.add_get("/api/v1/namespaces/{namespace}/pods/{pod}", provider.get_pod)
    runners = [web.AppRunner(provider_app)]
    await runners[0].setup()
    provider_site = web.TCPSite(runners[0], "127.0.0.1", 0)
    await provider_site.start()
    provider_port = provider_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    provider_url = f"http://127.0.0.1:{provider_port}"
    async with KubeClient(access=Access(server=provider_url)) as client:

        def locate(namespace: str, pod: str) -> tuple[KubeClient, str] | None:
            return (client, "twin") if (namespace, pod) == ("home", "web") else None

        runners.append(web.AppRunner(kubelet_app(locate=locate, require_client_cert=False)))
        await runners[1].setup()
        site = web.TCPSite(runners[1], "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as session:
            yield Relay(provider, provider_url, f"http://127.0.0.1:{port}", session)
    for runner in reversed(runners):
        await runner.cleanup()


async def test_exec_reaches_the_provider_and_stdin_close_passes_through(relay: Relay) -> None:
    async def cat(ws: web.WebSocketResponse, request: web.Request) -> None:
        await relay.provider.record_until(ws, CLOSE_STDIN)
        stdin = b"".join(m[1:] for m in relay.provider.received if isinstance(m, bytes) and m[:1] == b"\x00")
        await ws.send_bytes(b"\x01" + stdin)  # what cat printed, once its stdin closed
        await ws.send_bytes(b'\x03{"metadata":{},"status":"Success"}')
        assert request.transport is not None
        request.transport.close()  # as Kubernetes ends a stream: no close frame

    relay.provider.script = cat
    query = "command=cat&input=1&output=1&error=0"
    url = f"{relay.url}/exec/home/web/app?{query}"
    async with asyncio.timeout(10), relay.session.ws_connect(url, protocols=(V5,)) as ws:
        assert ws.protocol == V5
        await ws.send_bytes(b"\x00hello ")
        await ws.send_bytes(b"\x00world\n")
        await ws.send_bytes(CLOSE_STDIN)
        got = [message.data async for message in ws]
        assert ws.close_code == 1000
    assert got == [b"\x01hello world\n", b'\x03{"metadata":{},"status":"Success"}']
    assert relay.provider.received == [b"\x00hello ", b"\x00world\n", CLOSE_STDIN]
    path, params = relay.provider.calls[0]
    assert path == "/api/v1/namespaces/twin/pods/web/exec"
    assert params == [("container", "app"), ("command", "cat"), ("stdin", "true"), ("stdout", "true")]


async def test_attach_goes_to_pods_attach_and_the_providers_close_code_comes_back(relay: Relay) -> None:
    async def attached(ws: web.WebSocketResponse, _request: web.Request) -> None:
        await ws.send_bytes(b"\x01a line the container printed\n")
        await ws.close(code=4001, message=b"bye")

    relay.provider.script = attached
    url = f"{relay.url}/attach/home/web/app?output=1&tty=1"
    async with asyncio.timeout(10), relay.session.ws_connect(url, protocols=(V5,)) as ws:
        got = [message.data async for message in ws]
        assert ws.close_code == 4001
    assert got == [b"\x01a line the container printed\n"]
    attach = [("container", "app"), ("stdout", "true"), ("tty", "true")]
    assert relay.provider.calls[0] == ("/api/v1/namespaces/twin/pods/web/attach", attach)


async def test_port_forward_carries_the_spdy_tunnel_both_ways_and_the_clients_close(relay: Relay) -> None:
    chunks = [bytes(range(256)) * 4, b"\x80\x03\x00\x01", b"x" * (1 << 20)]  # binary, SPDY-looking, large

    async def echo(ws: web.WebSocketResponse, _request: web.Request) -> None:
        async for message in ws:
            relay.provider.received.append(message.data)
            await ws.send_bytes(message.data[::-1])
        relay.provider.close_code = ws.close_code
        relay.provider.closed.set()

    relay.provider.script = echo
    url = f"{relay.url}/portForward/home/web?port=80,443"
    async with asyncio.timeout(10), relay.session.ws_connect(url, protocols=(TUNNEL,)) as ws:
        assert ws.protocol == TUNNEL
        for chunk in chunks:
            await ws.send_bytes(chunk)
            assert (await ws.receive_bytes()) == chunk[::-1]
        await ws.close(code=1000)
    assert relay.provider.received == chunks
    assert relay.provider.calls[0] == (
        "/api/v1/namespaces/twin/pods/web/portforward",
        [("ports", "80"), ("ports", "443")],
    )
    await asyncio.wait_for(relay.provider.closed.wait(), timeout=5)
    assert relay.provider.close_code == 1000  # kubectl's close, passed on


async def test_a_refusal_is_told_to_the_websocket_and_again_to_kubectls_spdy_fallback(relay: Relay) -> None:
    forbidden = 'pods "web" is forbidden: User "liqo.io:peer:x" cannot create resource "pods/portforward"'
    relay.provider.refusal = (403, {"kind": "Status", "reason": "Forbidden", "message": forbidden, "code": 403})
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await relay.session.ws_connect(f"{relay.url}/portForward/home/web", protocols=(TUNNEL,))
    assert refused.value.status == 400
    spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"}
    async with relay.session.post(f"{relay.url}/portForward/home/web", headers=spdy) as response:
        assert await refusal(response, 400) == f"the provider answered: {forbidden}"
    # Told once: a later SPDY request, with no WebSocket attempt before it, hears that SPDY is not spoken.
    async with relay.session.post(f"{relay.url}/portForward/home/web", headers=spdy) as response:
        assert "needs WebSockets (SPDY is not supported)" in await refusal(response, 400)


async def refusal(response: aiohttp.ClientResponse, code: int) -> str:
    """The message of a refusal, checked to be the Status kubectl decodes (text with a colon read as YAML did not)."""
    assert response.status == code
    assert response.content_type == "application/json"
    status = await response.json()
    assert (status["kind"], status["status"], status["code"]) == ("Status", "Failure", code)
    assert status["reason"] == {400: "BadRequest", 404: "NotFound", 503: "ServiceUnavailable"}[code]
    return str(status["message"])


async def test_a_container_not_running_on_the_provider_is_named_with_its_state(relay: Relay) -> None:
    # The provider's kubelet refuses behind its API server (500 "container not found"), whose body never
    # reaches the relay: the twin pod's state says why.
    relay.provider.kubelet_refusal = 500
    relay.provider.pod = _pod("Pending", app={"waiting": {"reason": "ErrImagePull", "message": "not found"}})
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await relay.session.ws_connect(f"{relay.url}/exec/home/web/app?command=true&output=1", protocols=(V5,))
    assert refused.value.status == 400
    spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": V5}
    async with relay.session.post(f"{relay.url}/exec/home/web/app?command=true", headers=spdy) as response:
        assert await refusal(response, 400) == (
            "the provider answered: the WebSocket upgrade was refused with HTTP 500;"
            ' container "app" is waiting to start on the provider: ErrImagePull (not found)'
        )
    # The pod gone too: the refusal alone.
    relay.provider.pod = None
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await relay.session.ws_connect(f"{relay.url}/attach/home/web/app?output=1", protocols=(V5,))
    async with relay.session.post(f"{relay.url}/attach/home/web/app", headers=spdy) as response:
        assert await refusal(response, 400) == "the provider answered: the WebSocket upgrade was refused with HTTP 500"


async def test_a_pod_this_kubelet_does_not_run_is_not_found_whatever_the_protocol(relay: Relay) -> None:
    for endpoint in ("exec/home/other/app", "attach/home/other/app", "portForward/home/other"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await relay.session.ws_connect(f"{relay.url}/{endpoint}", protocols=(V5,))
        assert refused.value.status == 404
        async with relay.session.post(f"{relay.url}/{endpoint}", headers={"Upgrade": "SPDY/3.1"}) as response:
            assert await refusal(response, 404) == "pod home/other does not run on a virtual node of this kubelet"
    async with relay.session.get(f"{relay.url}/containerLogs/home/other/app") as response:  # quoted verbatim
        assert response.status == 404
        assert await response.text() == "pod home/other does not run on a virtual node of this kubelet\n"
    assert not relay.provider.calls


async def test_the_client_reports_why_the_provider_refused_an_upgrade(relay: Relay) -> None:
    exec_path = "/api/v1/namespaces/twin/pods/web/exec"
    async with KubeClient(access=Access(server=relay.provider_url)) as client:
        relay.provider.refusal = (404, {"kind": "Status", "message": 'pods "web" not found', "code": 404})
        with pytest.raises(ApiError, match='pods "web" not found') as missing:
            await client.websocket(exec_path, query=[("stdin", "true")], protocols=(V5,))
        assert missing.value.status == 404
        # Refused behind the upgrade (a kubelet's answer): a plain GET cannot tell why, so the status is all.
        relay.provider.refusal = None
        for status in (406, 400):
            relay.provider.kubelet_refusal = status
            with pytest.raises(ApiError, match=f"the WebSocket upgrade was refused with HTTP {status}$"):
                await client.websocket(exec_path, query=[("stdin", "true")], protocols=(V5,))
    assert not relay.provider.calls
