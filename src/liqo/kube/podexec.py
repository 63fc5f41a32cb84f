"""Run a command in a pod's container and collect its output and exit code (``kubectl exec``, without kubectl).

The API server relays ``pods/exec`` over a WebSocket speaking ``v4.channel.k8s.io``: every binary message
starts with its channel (1 stdout, 2 stderr, 3 the final ``Status``). The exit code is in that status
(:func:`exit_code`, pure): ``Success``, or a ``NonZeroExitCode`` failure whose ``ExitCode`` cause holds it.
liqoctl uses it to probe from inside pods (``liqoctl test network``); for an offloaded pod the request goes
through the virtual kubelet, like any ``kubectl exec``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from liqo.kube.client import KubeClient
from liqo.kube.resources import PODS

PROTOCOL = "v4.channel.k8s.io"
STDOUT, STDERR, STATUS = 1, 2, 3


@dataclass(frozen=True)
class Executed:
    """What a command printed and how it ended (None: the status said something else than an exit code)."""

    stdout: str
    stderr: str
    exit_code: int | None
    message: str = ""


def exit_code(status: Mapping[str, Any]) -> int | None:
    """The exit code a ``v4.channel.k8s.io`` status reports; None when the command did not run (pure)."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                return None
    return None


async def execute(
    client: KubeClient,
    *,
    namespace: str,
    pod: str,
    command: Sequence[str],
    container: str | None = None,
    timeout: float = 30.0,
) -> Executed:
    """Run ``command`` in ``pod`` (its first container unless ``container``) and wait for it to end.

    Raises:
        ApiError: the API server refused the exec (no such pod, no right, not running).
        TimeoutError: the command did not end within ``timeout`` seconds.
    """
    query = [("stdout", "true"), ("stderr", "true"), *(("command", part) for part in command)]
    if container:
        query.append(("container", container))
    path = PODS.path(namespace=namespace, name=pod, subresource="exec")
    socket = await client.websocket(path, query=query, protocols=(PROTOCOL,))
    out, err = bytearray(), bytearray()
    status: dict[str, Any] = {}
    try:
        async with asyncio.timeout(timeout):
            async for frame in socket.frames():
                if not isinstance(frame, bytes) or not frame:
                    continue
                channel, payload = frame[0], frame[1:]
                if channel == STDOUT:
                    out += payload
                elif channel == STDERR:
                    err += payload
                elif channel == STATUS and payload:
                    status = orjson.loads(payload)
    finally:
        await socket.close()
    return Executed(
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        exit_code=exit_code(status) if status else None,
        message=str(status.get("message", "")),
    )
