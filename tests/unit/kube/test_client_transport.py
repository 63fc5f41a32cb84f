"""The client's transport rules, against a tiny HTTP server on loopback (no Kubernetes needed)."""

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError, UnreachableError
from liqo.kube.kubeconfig import Access
from liqo.kube.resources import CONFIGMAPS


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[str]]]:
    calls: list[str] = []
    throttled = {"left": 2}

    async def handler(request: web.Request) -> web.Response:
        calls.append(request.path)
        if request.path.endswith("/busy") and throttled["left"]:
            throttled["left"] -= 1
            busy = {"reason": "TooManyRequests", "message": "wait"}
            return web.json_response(busy, status=429, headers={"Retry-After": "0"})
        if request.path.endswith("/missing"):
            return web.json_response({"reason": "NotFound", "message": 'configmaps "missing" not found'}, status=404)
        return web.json_response({"metadata": {"name": request.path.rsplit("/", 1)[1]}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", calls
    await runner.cleanup()


async def test_throttled_requests_are_retried_as_the_server_asks(server: tuple[str, list[str]]) -> None:
    url, calls = server
    async with KubeClient(access=Access(server=url)) as client:
        found = await client.get(CONFIGMAPS, "busy", namespace="ns")
    assert found["metadata"]["name"] == "busy"
    assert calls.count("/api/v1/namespaces/ns/configmaps/busy") == 3


async def test_errors_keep_their_status_and_message(server: tuple[str, list[str]]) -> None:
    url, _ = server
    async with KubeClient(access=Access(server=url)) as client:
        with pytest.raises(NotFoundError, match='configmaps "missing" not found'):
            await client.get(CONFIGMAPS, "missing", namespace="ns")


async def test_a_closed_client_does_not_reopen(server: tuple[str, list[str]]) -> None:
    url, calls = server
    client = KubeClient(access=Access(server=url))
    await client.get(CONFIGMAPS, "a", namespace="ns")
    await client.close()
    with pytest.raises(UnreachableError, match="closed"):
        await client.get(CONFIGMAPS, "b", namespace="ns")
    assert len(calls) == 1


async def test_an_unreachable_server_is_a_distinct_error() -> None:
    async with KubeClient(access=Access(server="http://127.0.0.1:9")) as client:
        with pytest.raises(UnreachableError):
            await client.get(CONFIGMAPS, "a", namespace="ns")
