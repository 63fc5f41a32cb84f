"""The connection check: probe datagrams, the verdict over time, and when it is written (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liqo.api.networkconfigs import ConnectionState
from liqo.network import tunnelcheck


def test_a_probe_is_echoed_and_the_echo_gives_the_round_trip() -> None:
    sent = tunnelcheck.probe(7, 100.0)
    echo = tunnelcheck.answer(sent)
    assert echo is not None
    assert tunnelcheck.round_trip(echo, now=100.25) == 0.25
    assert tunnelcheck.answer(echo) is None  # an echo is never echoed: no ping-pong between two gateways
    assert tunnelcheck.round_trip(sent, now=101.0) is None


@given(st.binary(max_size=64))
def test_arbitrary_datagrams_are_neither_echoed_nor_counted(data: bytes) -> None:
    if data[:4] not in (b"lqpr", b"lqec"):
        assert tunnelcheck.answer(data) is None
        assert tunnelcheck.round_trip(data, now=0.0) is None


def test_connecting_then_connected_then_lost_then_never() -> None:
    judge = tunnelcheck.judge
    assert judge(now=10, started=0, last_answer=None, peer="p").state == ConnectionState.CONNECTING
    assert judge(now=10, started=0, last_answer=9.5, peer="p").state == ConnectionState.CONNECTED
    lost = judge(now=20, started=0, last_answer=9.5, peer="p")
    assert (lost.state, lost.reason) == (ConnectionState.ERROR, "ProbesLost")
    assert "for 10 s" in lost.message
    never = judge(now=tunnelcheck.CONNECT_TIMEOUT + 1, started=0, last_answer=None, peer="p")
    assert (never.state, never.reason) == (ConnectionState.ERROR, "NeverAnswered")


def test_a_healthy_tunnel_writes_once_a_minute_and_a_change_at_once() -> None:
    connected = tunnelcheck.Verdict(ConnectionState.CONNECTED, "ProbesAnswered", "ok")
    written = {"state": ConnectionState.CONNECTED, "reason": "ProbesAnswered"}
    assert tunnelcheck.worth_writing(written=None, verdict=connected, now=0, written_at=0)
    assert not tunnelcheck.worth_writing(written=written, verdict=connected, now=30, written_at=0)
    assert tunnelcheck.worth_writing(written=written, verdict=connected, now=tunnelcheck.LATENCY_REFRESH, written_at=0)
    lost = tunnelcheck.Verdict(ConnectionState.ERROR, "ProbesLost", "silent")
    assert tunnelcheck.worth_writing(written=written, verdict=lost, now=1, written_at=0)


def test_latency_is_shown_in_milliseconds() -> None:
    assert tunnelcheck.format_latency(0.00084) == "0.84ms"
