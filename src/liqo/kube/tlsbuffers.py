"""asyncio's TLS read buffer, sized for TLS records instead of 256 KiB for every connection.

Why: asyncio's ``SSLProtocol`` allocates (and zero-fills, so it is resident) a ``max_size`` bytearray of
256 KiB for every TLS connection it makes or accepts, for the connection's whole life. A process of ours
holds many: one per watch, and — worse — one per concurrent call the API server makes to a webhook or a
kubelet API, since it speaks HTTP/1.1 to them and keeps the connections alive. During a 1000-pod rollout the
consumer's manager held 308 webhook connections, 38.5 MiB of buffers (tracemalloc) — more than all its
caches. A TLS record carries at most 16 KiB of plaintext, so a larger buffer only saves read calls on bulk
transfers (a 500-object list page: a few dozen reads instead of a few).

The buffer is a class attribute of the standard library's protocol, read when a connection is made, so the
size is set once per process, before any connection (:func:`size_tls_read_buffers`, called by the
components' entry points).
"""

from __future__ import annotations

from asyncio import sslproto

TLS_READ_BUFFER = 32 * 1024
"""Bytes: two full TLS records per read."""


def size_tls_read_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Make every TLS connection opened from now on read through a buffer of ``size`` bytes."""
    sslproto.SSLProtocol.max_size = size
