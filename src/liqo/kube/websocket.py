"""A WebSocket to an API server (``exec``, ``attach``, ``portforward``), in liqo's words rather than aiohttp's.

:meth:`liqo.kube.client.KubeClient.websocket` opens one. Callers read frames and write them, and never see
the HTTP library's message kinds: exec collects its channels, the virtual kubelet relays frames to a
client, and either could move to another library without the other noticing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp


class WebSocket:
    """An open WebSocket; its caller closes it."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket

    @property
    def protocol(self) -> str | None:
        """The subprotocol the server chose among those offered (None: none)."""
        return self._socket.protocol

    @property
    def close_code(self) -> int | None:
        """The code the server closed with; None while open."""
        return self._socket.close_code

    async def frames(self) -> AsyncIterator[bytes | str]:
        """Each data frame as it arrives (binary: bytes, text: str), until a close frame, an error or the end."""
        async for message in self._socket:
            if message.type == aiohttp.WSMsgType.BINARY:
                yield bytes(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                yield str(message.data)
            else:
                return

    async def send(self, data: bytes | str) -> None:
        """Send one frame: binary for bytes, text for str."""
        if isinstance(data, bytes):
            await self._socket.send_bytes(data)
        else:
            await self._socket.send_str(data)

    async def close(self, *, code: int = aiohttp.WSCloseCode.OK) -> None:
        """Close with ``code`` (a no-op once closed)."""
        await self._socket.close(code=code)
