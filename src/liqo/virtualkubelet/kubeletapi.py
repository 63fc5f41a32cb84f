"""The kubelet API of virtual nodes: what the API server calls for ``kubectl logs`` on an offloaded pod.

The API server reaches a node's kubelet at its address and ``daemonEndpoints`` port, over TLS it verifies
with ``--kubelet-certificate-authority`` and with its own client certificate, which we verify in turn
against the cluster CA: only the API server (or whoever holds a certificate of that CA) may read pods'
logs through us. A request for a home pod is answered from the provider's API server (``pods/log`` of
the remote pod, with the same options), streamed as it comes so that ``kubectl logs -f`` follows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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


def kubelet_app(*, locate: Locate, require_client_cert: bool) -> web.Application:
    """The aiohttp application serving the kubelet endpoints virtual nodes support.

    ``require_client_cert``: refuse pod endpoints to callers without a verified client certificate (the TLS
    layer verifies one when presented, and lets health probes in without).
    """

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def container_logs(request: web.Request) -> web.StreamResponse:
        if require_client_cert and not (request.transport and request.transport.get_extra_info("peercert")):
            raise web.HTTPUnauthorized(text="a client certificate of the cluster CA is required\n")
        namespace, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        found = locate(namespace, pod)
        if found is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{pod} does not run on a virtual node of this kubelet\n")
        provider, twin = found
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
            log.info("log stream of %s/%s ended: %s", namespace, pod, exc)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    return app
