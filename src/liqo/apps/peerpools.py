"""``--peer-pools``: one flag, read alike by the manager, every gateway and every node agent.

The manager names peers' pods inside these pools and nowhere else (:func:`liqo.network.ipam.allocate`);
gateways and node agents refuse to route anywhere else (:func:`liqo.network.rules.route_refusal`), a second
line should the manager ever be wrong. The install gives the three the same value (``network.peerPools``),
so they agree; empty, all three fall back to the same default, the private ranges of RFC 1918.
"""

from __future__ import annotations

import argparse
from ipaddress import IPv4Network

from liqo.api.networks import InvalidNetwork
from liqo.network import ipam

FLAG = "--peer-pools"


def add_flag(parser: argparse.ArgumentParser) -> None:
    """``--peer-pools`` (``args.peer_pools``: a tuple of IPv4 networks, never empty)."""
    parser.add_argument(
        FLAG,
        type=_pools,
        default=ipam.DEFAULT_POOLS,
        help="IPv4 CIDRs (comma-separated) where peers' pods are named and routed, and nowhere else"
        f" (default: {','.join(map(str, ipam.DEFAULT_POOLS))})",
    )


def _pools(text: str) -> tuple[IPv4Network, ...]:
    try:
        return ipam.parse_pools(text, field=FLAG)
    except InvalidNetwork as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
