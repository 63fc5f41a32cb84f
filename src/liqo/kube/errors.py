"""Errors raised by the API client, one class per status a caller branches on.

Callers catch :class:`NotFoundError` or :class:`ConflictError` instead of comparing status codes, and an
unreachable server is a distinct :class:`UnreachableError` so retry loops can tell "the server said no"
from "there was nobody to ask".
"""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """Base of every error raised by :mod:`liqo.kube`."""


class UnreachableError(KubeError):
    """The API server could not be reached (connection refused, reset, timed out)."""


class ApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class NotFoundError(ApiError):
    """404: the object (or its namespace) does not exist."""


class ConflictError(ApiError):
    """409: the object exists already, or its resourceVersion is stale."""


class GoneError(ApiError):
    """410: the requested resourceVersion has been compacted away; the caller must re-list."""


class InvalidError(ApiError):
    """422: the object failed validation (schema, immutable field, admission)."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError, 422: InvalidError}


def api_error(status: int, body: dict[str, Any] | None) -> ApiError:
    """Build the most specific error for an HTTP status and its decoded ``Status`` body."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or "")
    return _BY_STATUS.get(status, ApiError)(status, reason, message, body)


def namespace_terminating(exc: BaseException) -> bool:
    """Whether ``exc`` is the API server refusing new content in a namespace being deleted (pure)."""
    if not isinstance(exc, ApiError) or exc.status != 403:
        return False
    causes = (exc.body.get("details") or {}).get("causes") or []
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)
