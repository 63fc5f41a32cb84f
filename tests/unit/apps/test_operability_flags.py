"""Both components take the same operability flags: metrics address (empty: off) and log format; and the three
that name or route peers' pods (manager, gateway, node agent) take the same ``--peer-pools``."""

from __future__ import annotations

import argparse
import ipaddress
import socket
from collections.abc import Callable

import pytest

from liqo.apps import gateway, manager, networkagent, virtualkubelet
from liqo.kube.shell import Shell
from liqo.network import ipam

PARSERS = [manager.parse_args, virtualkubelet.parse_args]


@pytest.mark.parametrize("parse", PARSERS)
def test_metrics_are_served_on_8080_by_default_and_not_at_all_when_empty(
    parse: Callable[[list[str]], argparse.Namespace],
) -> None:
    assert parse([]).metrics_address == ("0.0.0.0", 8080)
    assert parse(["--metrics-address=127.0.0.1:9100"]).metrics_address == ("127.0.0.1", 9100)
    assert parse(["--metrics-address="]).metrics_address is None
    assert parse([]).log_format == "text"
    assert parse(["--log-format=json"]).log_format == "json"


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("flag", ["--metrics-address=8080", "--log-format=yaml"])
def test_a_bad_value_is_a_usage_error(
    parse: Callable[[list[str]], argparse.Namespace], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse([flag])
    assert exited.value.code == 2
    assert flag.partition("=")[0] in capsys.readouterr().err


async def test_a_port_taken_leaves_the_component_running_without_metrics(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = manager.parse_args([f"--metrics-address=127.0.0.1:{port}"])
        async with Shell(metrics_address=args.metrics_address) as shell:
            assert shell.metrics is None
    assert f"cannot listen on 127.0.0.1:{port}" in caplog.text


POOL_PARSERS = [
    manager.parse_args,
    lambda argv: gateway.parse_args(["--local-id=milan", "--peer-id=rome", *argv]),
    lambda argv: networkagent.parse_args(["--node-name=n1", *argv]),
]


@pytest.mark.parametrize("parse", POOL_PARSERS)
def test_peer_pools_default_to_the_private_ranges_and_refuse_what_is_no_ipv4_network(
    parse: Callable[[list[str]], argparse.Namespace], capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse([]).peer_pools == ipam.DEFAULT_POOLS
    assert parse(["--peer-pools=100.64.0.0/10"]).peer_pools == (ipaddress.IPv4Network("100.64.0.0/10"),)
    for bad in ("--peer-pools=10.0.0.1/8", "--peer-pools=fd00::/8"):
        with pytest.raises(SystemExit) as exited:
            parse([bad])
        assert exited.value.code == 2
        assert "--peer-pools" in capsys.readouterr().err
