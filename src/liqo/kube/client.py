"""An API client that speaks plain dicts to one API server.

Why not a generated client: model (de)serialisation dominates CPU at reflection rates, and importing
``kubernetes_asyncio``'s client costs 1.7 s per CLI start. We do the HTTP on one aiohttp session per
cluster, decode with orjson and hand out dicts; credentials come from :mod:`liqo.kube.kubeconfig`. A
process talks to several clusters at once simply by holding several :class:`KubeClient` objects;
nothing here is global.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import aiohttp
import orjson

from liqo.kube import kubeconfig
from liqo.kube.errors import ApiError, ConflictError, GoneError, NotFoundError, UnreachableError, api_error
from liqo.kube.kubeconfig import Access, Authenticator
from liqo.kube.resources import PODS, Resource
from liqo.kube.websocket import WebSocket

FIELD_MANAGER = "liqo"
"""The one server-side-apply field manager every component of ours writes with."""

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {"merge": MERGE_PATCH, "json": JSON_PATCH, "strategic": STRATEGIC_PATCH}

Params = Mapping[str, str | int | bool | None]

REQUEST_TIMEOUT = 30.0
"""Seconds a request may take, answer included, unless its caller says otherwise (connecting: 5 s at most)."""
_MAX_THROTTLED = 10
MAX_CONNECTIONS = 256
"""Connections a client keeps open to its API server at most: liqo's only client-side bound (there is no
client QPS limit; the API server's priority and fairness throttles, answered with Retry-After)."""
"""Attempts of a request the server keeps answering with Retry-After (about 10 s in all)."""


TOO_MANY_REQUESTS = 429


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    """The delay a 429 (or a 5xx with Retry-After) asks for, capped at 2 s; None for other answers."""
    if response.status != 429 and not (response.status >= 500 and "Retry-After" in response.headers):
        return None
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.05), 2.0)
    except ValueError:
        return 1.0


def _query(params: Params | None) -> dict[str, str]:
    """Drop unset parameters and render booleans the way the API server expects."""
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class KubeClient:
    """One API server: requests in, decoded JSON (dicts) out.

    Use as an async context manager, or call :meth:`close`. Build one with :meth:`from_kubeconfig` or
    :meth:`from_kubeconfig_dict`.
    """

    def __init__(self, *, access: Access, name: str = "", max_connections: int = MAX_CONNECTIONS) -> None:
        self.server = access.server
        self.name = name or self.server
        self.access = access
        self._auth = Authenticator(access)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    @classmethod
    def from_kubeconfig(cls, path: str | Path, *, context: str | None = None, name: str = "") -> Self:
        """A client for the current (or given) context of a kubeconfig file."""
        return cls(access=kubeconfig.load_file(path, context=context), name=name)

    @classmethod
    def from_kubeconfig_dict(cls, config: Mapping[str, Any], *, context: str | None = None, name: str = "") -> Self:
        """A client for a kubeconfig already in memory (for instance read from a Secret)."""
        return cls(access=kubeconfig.load_dict(config, context=context), name=name)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool; later requests fail with UnreachableError instead of reopening it."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _session_for_requests(self) -> aiohttp.ClientSession:
        if self._closed:
            raise UnreachableError(f"{self.name}: this client was closed (its credentials were replaced)")
        # Created lazily so that a client can be built outside a running event loop.
        if self._session is None or self._session.closed:
            context = kubeconfig.ssl_context(self.access)
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=context if context else False)
            # Watch events can carry objects up to etcd's 1.5 MiB request limit.
            self._session = aiohttp.ClientSession(connector=connector, read_bufsize=2**21)
        return self._session

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        authorization = await self._auth.header()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None,
        body: Any,
        content_type: str | None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        if data is not None and content_type is None:
            content_type = JSON
        for attempt in range(1, _MAX_THROTTLED + 1):
            response = await self._connect(
                method, path, params=params, data=data, content_type=content_type, timeout=timeout
            )
            if response.status < 400:
                return response
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise UnreachableError(f"{self.name}: {method} {path}: {exc}") from exc
            finally:
                response.release()
            delay = _retry_after(response)
            if delay is not None and attempt < _MAX_THROTTLED:
                # The server asked us to come back (429 while a new CRD's storage initialises, or
                # priority-and-fairness throttling), as client-go's transport does.
                await asyncio.sleep(delay)
                continue
            if response.status == 401:
                self._auth.invalidate()
            raise api_error(response.status, _decode_status(raw))
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt returns or raises

    async def _connect(
        self,
        method: str,
        path: str,
        *,
        params: Params | None,
        data: bytes | None,
        content_type: str | None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send the request, once more if a pooled connection turns out to be dead."""
        for attempt in (1, 2):
            try:
                return await self._session_for_requests().request(
                    method,
                    self.server + path,
                    params=_query(params),
                    data=data,
                    headers=await self._headers(content_type),
                    timeout=timeout,
                )
            except aiohttp.ServerDisconnectedError as exc:
                # A pooled keep-alive connection the server had already closed: the request never reached
                # it, so one retry on a fresh connection is safe — except for a create, which might have.
                if attempt == 2 or method == "POST":
                    raise UnreachableError(f"{self.name}: {method} {path}: server disconnected") from exc
            except (aiohttp.ClientConnectionError, TimeoutError, OSError) as exc:
                raise UnreachableError(f"{self.name}: {method} {path}: {exc or type(exc).__name__}") from exc
        raise AssertionError("unreachable")  # pragma: no cover - the second attempt returns or raises

    async def request_bytes(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> bytes:
        """Send one request and return the raw response body (for logs and other non-JSON answers).

        ``timeout``: seconds for the whole request, answer included.
        """
        limits = aiohttp.ClientTimeout(total=timeout, sock_connect=min(5.0, timeout))
        response = await self._send(method, path, params=params, body=body, content_type=content_type, timeout=limits)
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UnreachableError(f"{self.name}: {method} {path}: {exc}") from exc
        finally:
            response.release()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        """Send one request and return its decoded JSON body (``None`` when empty)."""
        raw = await self.request_bytes(
            method, path, params=params, body=body, content_type=content_type, timeout=timeout
        )
        return orjson.loads(raw) if raw else None

    # -- verbs ---------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Read one object."""
        result: dict[str, Any] = await self.request("GET", resource.path(namespace=namespace, name=name))
        return result

    async def get_or_none(
        self, resource: Resource, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """Read one object; None if there is none."""
        try:
            return await self.get(resource, name, namespace=namespace)
        except NotFoundError:
            return None

    async def serves(self, resource: Resource) -> bool:
        """Whether the API server serves ``resource`` (discovery of its group version)."""
        prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        try:
            listed = await self.request("GET", prefix)
        except NotFoundError:
            return False
        return any(r.get("name") == resource.plural for r in (listed or {}).get("resources") or [])

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """One page of a collection, as the ``...List`` object the server returns."""
        params: dict[str, str | int | None] = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version,
        }
        result: dict[str, Any] = await self.request("GET", resource.path(namespace=namespace), params=params)
        return result

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object of a collection, paginated, with the list's resourceVersion.

        If a continue token expires mid-way (410), the list starts over: a consistent snapshot matters
        more to callers (informers) than the pages already read. ``transform`` (an informer's projection)
        is applied to each page as it arrives, so that only one page is ever held whole.
        """
        while True:
            items: builtins.list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = await self.list(
                        resource,
                        namespace=namespace,
                        label_selector=label_selector,
                        field_selector=field_selector,
                        limit=page_size,
                        continue_token=token,
                    )
                    page_items = page.get("items") or []
                    items.extend(page_items if transform is None else map(transform, page_items))
                    token = (page.get("metadata") or {}).get("continue") or None
                    if not token:
                        return items, str(page["metadata"]["resourceVersion"])
            except GoneError:
                continue

    async def create(
        self, resource: Resource, obj: dict[str, Any], *, namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create an object; its namespace comes from ``namespace`` or its own metadata.

        ``dry_run`` runs validation and admission (quota included) without persisting anything.
        """
        ns = _namespace_of(resource, obj, namespace)
        params: Params | None = {"dryRun": "All"} if dry_run else None
        result: dict[str, Any] = await self.request("POST", resource.path(namespace=ns), params=params, body=obj)
        return result

    async def replace(
        self, resource: Resource, obj: dict[str, Any], *, subresource: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Replace (PUT) an object; a stale ``metadata.resourceVersion`` raises ConflictError.

        ``dry_run`` runs validation and admission without persisting anything.
        """
        ns = _namespace_of(resource, obj, None)
        path = resource.path(namespace=ns, name=obj["metadata"]["name"], subresource=subresource)
        params: Params | None = {"dryRun": "All"} if dry_run else None
        result: dict[str, Any] = await self.request("PUT", path, params=params, body=obj)
        return result

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch an object (merge, JSON or strategic-merge patch); ``dry_run`` as for :meth:`create`."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        params: Params | None = {"dryRun": "All"} if dry_run else None
        result: dict[str, Any] = await self.request(
            "PATCH", path, params=params, body=patch, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )
        return result

    async def apply(
        self,
        resource: Resource,
        obj: dict[str, Any],
        *,
        field_manager: str = FIELD_MANAGER,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` (which must carry apiVersion, kind and metadata.name).

        ``force`` takes ownership of conflicting fields: our controllers are the source of truth for the
        objects they forge, as Liqo's reflection is. ``dry_run`` has the server validate and admit the
        object without persisting it.
        """
        ns = _namespace_of(resource, obj, None)
        path = resource.path(namespace=ns, name=obj["metadata"]["name"], subresource=subresource)
        params: Params = {"fieldManager": field_manager, "force": force, "dryRun": "All" if dry_run else None}
        result: dict[str, Any] = await self.request("PATCH", path, params=params, body=obj, content_type=APPLY_PATCH)
        return result

    async def apply_status(
        self,
        resource: Resource,
        *,
        name: str,
        namespace: str | None = None,
        status: dict[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply ``status`` alone (the ``status`` subresource) of object ``name``.

        Under the same field manager as every other write, so each controller owning a status writes it
        whole: what it leaves out is removed. ``resource_version`` makes the write conditional (a
        ConflictError if the object moved since): for a status decided from the object as the cache saw
        it, where someone else may have written since (a human's verdict) and a forced apply would undo it.
        """
        body = status_body(resource, name=name, namespace=namespace, status=status, resource_version=resource_version)
        return await self.apply(resource, body, subresource="status")

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        uid: str | None = None,
        missing_ok: bool = False,
    ) -> dict[str, Any] | None:
        """Delete an object; ``uid`` makes it a precondition so a newer namesake is never deleted.

        ``missing_ok``: an object already gone is what the caller wanted (None, no error).
        """
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            result: dict[str, Any] = await self.request(
                "DELETE", resource.path(namespace=namespace, name=name), body=body
            )
        except NotFoundError:
            if missing_ok:
                return None
            raise
        return result

    async def evict(self, name: str, *, namespace: str, uid: str | None = None) -> bool:
        """Evict pod ``name`` through the Eviction API: its PodDisruptionBudgets decide, as for ``kubectl drain``.

        True once it is evicted, or gone, or replaced by a namesake since (``uid``); False while a budget says
        not now (429, once the retries every throttled request gets are spent: about 10 s).
        """
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            await self.request("POST", PODS.path(namespace=namespace, name=name, subresource="eviction"), body=body)
        except (NotFoundError, ConflictError):
            return True
        except ApiError as exc:
            if exc.status == TOO_MANY_REQUESTS:
                return False
            raise
        return True

    async def stream(self, path: str, *, params: Params | None = None) -> AsyncIterator[bytes]:
        """GET ``path`` and yield the body as it arrives (``pods/log?follow=true``); no total deadline."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        response = await self._send("GET", path, params=params, body=None, content_type=None, timeout=timeout)
        try:
            async for chunk in response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UnreachableError(f"{self.name}: GET {path}: {exc}") from exc
        finally:
            response.release()

    async def websocket(
        self, path: str, *, query: Sequence[tuple[str, str]], protocols: tuple[str, ...] = ()
    ) -> WebSocket:
        """Open a WebSocket to ``path`` (``pods/exec``, ``attach``, ``portforward``); the caller closes it.

        ``protocols`` are offered in that order. ``query`` is a list of pairs because exec repeats ``command``
        once per argument.

        Raises:
            ApiError: the server refused the upgrade (its status, e.g. 403 or 404).
            UnreachableError: the server could not be reached.
        """
        # No Accept: a real kubelet's and kwok's streaming routes answer 406 to application/json.
        headers = {key: value for key, value in (await self._headers(None)).items() if key != "Accept"}
        try:
            socket = await self._session_for_requests().ws_connect(
                self.server + path, params=list(query), headers=headers, protocols=protocols, max_msg_size=0
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                self._auth.invalidate()
            raise api_error(exc.status, await self._refusal(path, query=query, status=exc.status)) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise UnreachableError(f"{self.name}: websocket {path}: {exc}") from exc
        return WebSocket(socket)

    async def _refusal(self, path: str, *, query: Sequence[tuple[str, str]], status: int) -> dict[str, Any]:
        """Why the server refused a WebSocket to ``path`` with ``status``: aiohttp keeps no body of a refusal.

        Asked again as a plain GET, which never opens a stream: the API server refuses it the same way when
        the refusal came before any upgrade (authorization, a missing pod, a bad container), and with 400
        "Upgrade request required" otherwise, in which case only the status is known.
        """
        bare = {"message": f"the WebSocket upgrade was refused with HTTP {status}"}
        try:
            async with self._session_for_requests().get(
                self.server + path,
                params=list(query),
                headers=await self._headers(None),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT, sock_connect=5),
            ) as response:
                found = _decode_status(await response.read()) if response.status == status else None
        except (aiohttp.ClientError, TimeoutError, OSError):
            return bare
        if not found or "Upgrade request required" in str(found.get("message")):
            return bare  # refused behind the upgrade (by the kubelet), which a plain GET never reaches
        return found

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events (``{"type": ..., "object": ...}``) from ``resource_version``.

        The stream ends when the server closes it (after ``timeout_seconds``). An ``ERROR`` event is
        raised as the matching :class:`~liqo.kube.errors.ApiError` (410 → GoneError), never yielded.
        """
        params: dict[str, str | int | bool | None] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": bookmarks,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        path = resource.path(namespace=namespace)
        # No total deadline: the server ends the stream; a silent connection is cut after a grace period.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=timeout_seconds + 30)
        response = await self._send("GET", path, params=params, body=None, content_type=None, timeout=timeout)
        try:
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    raise UnreachableError(f"{self.name}: watch {path}: {exc or type(exc).__name__}") from exc
                if not line:
                    return
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as exc:  # the connection dropped in the middle of an event
                    raise UnreachableError(f"{self.name}: watch {path}: truncated event") from exc
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise api_error(int(status.get("code") or 500), status)
                yield event
        finally:
            response.release()


def _namespace_of(resource: Resource, obj: Mapping[str, Any], namespace: str | None) -> str | None:
    if not resource.namespaced:
        return None
    ns = namespace or (obj.get("metadata") or {}).get("namespace")
    if not ns:
        raise ValueError(f"{resource.kind} {obj.get('metadata', {}).get('name')!r} needs a namespace")
    return str(ns)


def _decode_status(raw: bytes) -> dict[str, Any] | None:
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"message": raw.decode("utf-8", "replace")[:500]}
    return decoded if isinstance(decoded, dict) else None


def status_body(
    resource: Resource, *, name: str, namespace: str | None, status: dict[str, Any], resource_version: str | None
) -> dict[str, Any]:
    """The body of a status apply: the object's identity and ``status``, nothing else (pure)."""
    metadata = (
        {"name": name}
        | ({"namespace": namespace} if namespace else {})
        | ({"resourceVersion": resource_version} if resource_version else {})
    )
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata, "status": status}
