"""What the manager reserves of its own cluster before naming a peer's pods: its nodes' and API server's addresses."""

from __future__ import annotations

import ipaddress
from typing import Any

from liqo.network.configs import cluster_addresses


def node(*addresses: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]}}


def test_node_and_api_server_addresses_are_reserved_each_as_one_host() -> None:
    nodes = [
        node(("InternalIP", "192.168.1.10"), ("Hostname", "n1"), ("ExternalIP", "203.0.113.7")),
        node(("InternalIP", "192.168.1.11"), ("InternalDNS", "n2.example"), ("InternalIP", "fd00::11")),
        node(("InternalIP", "192.168.1.10")),  # the same address twice: once
    ]
    api = [{"endpoints": [{"addresses": ["192.168.1.2"]}, {"addresses": ["192.168.1.3", 7]}]}]
    assert cluster_addresses(nodes, api) == [
        ipaddress.ip_network(cidr)
        for cidr in ("192.168.1.2/32", "192.168.1.3/32", "192.168.1.10/32", "192.168.1.11/32", "203.0.113.7/32")
    ] + [ipaddress.ip_network("fd00::11/128")]


def test_what_is_not_an_address_is_skipped_not_fatal() -> None:
    nodes = [
        {"metadata": {"name": "bare"}},
        node(("InternalIP", "not-an-address")),
        {"metadata": {"name": "odd"}, "status": {"addresses": ["10.0.0.1", {"type": "InternalIP"}]}},
    ]
    assert cluster_addresses(nodes, [{"metadata": {}}, {"endpoints": None}]) == []
