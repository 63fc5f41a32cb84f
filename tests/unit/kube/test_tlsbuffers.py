"""A TLS connection opened after :func:`size_tls_read_buffers` holds a buffer of that size, not 256 KiB."""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto

import pytest

from liqo.kube.tlsbuffers import TLS_READ_BUFFER, size_tls_read_buffers


def test_new_tls_connections_read_through_the_smaller_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)  # restored afterwards
    size_tls_read_buffers()
    loop = asyncio.new_event_loop()
    try:
        protocol = sslproto.SSLProtocol(loop, asyncio.Protocol(), ssl.create_default_context(), loop.create_future())
        assert len(protocol.get_buffer(-1)) == TLS_READ_BUFFER
        assert TLS_READ_BUFFER >= 2 * 16 * 1024  # at least a whole TLS record per read, with room
    finally:
        loop.close()
