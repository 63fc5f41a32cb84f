"""The connection check: probes through the tunnel to the other gateway, and what they say (state: pure).

WireGuard's own handshake time says that keys were exchanged, not that packets pass: a firewall may let the
handshake through and drop the rest, or a gateway may have lost its rules. So each gateway sends a small
UDP probe every :data:`INTERVAL` to the other's tunnel address and echoes the other's; a probe carries its
sequence number and send time, so the answer gives the round trip without a table of what was sent.

The state is a pure function of the clock and the latest answer (:func:`judge`): ``Connecting`` until the
first answer (at most :data:`CONNECT_TIMEOUT`, then ``Error``), ``Connected`` while answers keep coming,
``Error`` once none came for :data:`LOST_AFTER`. What gets written to the NetworkConfig is decided by
:func:`worth_writing`: a change of state at once, the latency at most every :data:`LATENCY_REFRESH`, so a
healthy tunnel costs one write a minute, not one per probe.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from liqo.api.networkconfigs import ConnectionReason as Why
from liqo.api.networkconfigs import ConnectionState as State

PORT = 51821
"""The probes' UDP port, on each gateway's tunnel address."""
INTERVAL = 1.0
CONNECT_TIMEOUT = 30.0
LOST_AFTER = 5.0
LATENCY_REFRESH = 60.0
_PROBE = struct.Struct("!4sQd")
_MAGIC = b"lqpr"
_ECHO = b"lqec"


@dataclass(frozen=True)
class Verdict:
    """The tunnel's state as the probes say, with the reason and message for the status."""

    state: State
    reason: str
    message: str


def judge(*, now: float, started: float, last_answer: float | None, peer: str) -> Verdict:
    """The state of the tunnel at ``now`` (monotonic seconds), from when probing started and the latest answer."""
    if last_answer is None:
        if now - started < CONNECT_TIMEOUT:
            return Verdict(State.CONNECTING, Why.WAITING_FOR_ANSWER, f"probing {peer} through the tunnel")
        return Verdict(
            State.ERROR,
            Why.NEVER_ANSWERED,
            f"{peer} has not answered a probe through the tunnel in {CONNECT_TIMEOUT:.0f} s",
        )
    silent = now - last_answer
    if silent < LOST_AFTER:
        return Verdict(State.CONNECTED, Why.PROBES_ANSWERED, f"{peer} answers probes through the tunnel")
    return Verdict(
        State.ERROR,
        Why.PROBES_LOST,
        f"{peer} has not answered a probe through the tunnel for {silent:.0f} s",
    )


def format_latency(seconds: float) -> str:
    """A round trip as the status shows it (``0.84ms``)."""
    return f"{seconds * 1000:.2f}ms"


def worth_writing(*, written: Mapping[str, Any] | None, verdict: Verdict, now: float, written_at: float) -> bool:
    """Whether the status should be written now: a new state or reason at once, else a stale latency."""
    if written is None or written.get("state") != verdict.state or written.get("reason") != verdict.reason:
        return True
    return verdict.state == State.CONNECTED and now - written_at >= LATENCY_REFRESH


def probe(seq: int, sent: float) -> bytes:
    """A probe datagram."""
    return _PROBE.pack(_MAGIC, seq, sent)


def answer(datagram: bytes) -> bytes | None:
    """The echo of a probe; None for anything that is not one (never echo arbitrary input)."""
    if len(datagram) != _PROBE.size or datagram[:4] != _MAGIC:
        return None
    return _ECHO + datagram[4:]


def round_trip(datagram: bytes, *, now: float) -> float | None:
    """The round trip an echo reports; None for anything that is not one of our echoes."""
    if len(datagram) != _PROBE.size or datagram[:4] != _ECHO:
        return None
    _magic, _seq, sent = _PROBE.unpack(datagram)
    rtt = now - sent
    return rtt if 0 <= rtt < 60 else None


class Prober(asyncio.DatagramProtocol):
    """Echoes the other gateway's probes and records the answers to ours (on one UDP socket)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.transport: asyncio.DatagramTransport | None = None
        self.last_answer: float | None = None
        self.latency: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the socket to answer and probe through."""
        # A datagram endpoint's transport is one, though the selector loop's class does not say so (3.11).
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        """Echo a probe; record the round trip of an echo; ignore anything else."""
        if self.transport is None:
            return
        echo = answer(data)
        if echo is not None:
            self.transport.sendto(echo, addr)
            return
        rtt = round_trip(data, now=self._clock())
        if rtt is not None:
            self.last_answer = self._clock()
            self.latency = rtt

    def send(self, seq: int, address: str) -> None:
        """Send probe ``seq`` to ``address``."""
        if self.transport is not None:
            self.transport.sendto(probe(seq, self._clock()), (address, PORT))
