"""``python -m liqo.apps.discovery``: announce a cluster on a LAN and hear the others (multicast DNS).

Wiring only (:mod:`liqo.discovery.lan` holds the listener). Two modes:

- ``--source NAME``, as installed: a host-network pod on a node, announcing on the LAN what the cluster's
  identity says (if that source's spec asks it to), looking up every DNS source's zone, and writing what it
  hears into each DiscoverySource's status, the only writes it may make (:mod:`liqo.discovery.sources`);
- ``--print``: what is heard goes to stdout, one JSON object per change (the source's status as it would be
  written), and no cluster is touched: the operator's ``avahi-browse`` for liqo, and how the tests watch a LAN
  of network namespaces.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

import orjson

from liqo.api import labels
from liqo.api.components import DISCOVERY
from liqo.api.discoverysources import DEFAULT_LIMIT
from liqo.apps import operability
from liqo.discovery.announcements import Announcement, check_auth_url
from liqo.discovery.lan import TTL, LanListener
from liqo.discovery.neighbours import Neighbours
from liqo.discovery.sources import Listener
from liqo.kube import kubeconfig
from liqo.kube.client import KubeClient
from liqo.kube.shell import Shell


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The listener's flags."""
    parser = argparse.ArgumentParser(prog=DISCOVERY, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--address", required=True, type=_ipv4, help="the IPv4 address whose interface is the LAN")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--source", help="the DiscoverySource of type LAN heard on --address (every DNS source is looked up too)"
    )
    mode.add_argument("--print", action="store_true", help="print what is heard (JSON lines); write nothing")
    parser.add_argument("--kubeconfig", help="with --source: kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="with --print: neighbours held at most")
    parser.add_argument(
        "--ttl", type=int, default=TTL, help="seconds our records live: a cluster gone without a goodbye is forgotten"
    )
    announce = parser.add_argument_group("with --print, what to announce (all four, or none: listen only)")
    announce.add_argument("--cluster-id")
    announce.add_argument("--cluster-name")
    announce.add_argument("--auth-url")
    announce.add_argument("--key-fingerprint")
    announce.add_argument("--cluster-labels", default="", help="k=v,k=v (optional)")
    operability.add_flags(parser)
    args = parser.parse_args(argv)
    fields = (args.cluster_id, args.cluster_name, args.auth_url, args.key_fingerprint)
    if args.cluster_labels and not all(fields):
        parser.error("--cluster-labels goes with what is announced")
    if args.source and any(fields):
        parser.error("with --source, what is announced comes from the cluster's identity")
    if any(fields) and not all(fields):
        parser.error("--cluster-id, --cluster-name, --auth-url and --key-fingerprint go together")
    args.announcement = None
    if all(fields):
        try:
            check_auth_url(args.auth_url)
            claimed = labels.decode(args.cluster_labels)
        except ValueError as exc:  # Unusable is one
            parser.error(f"{exc}")
        args.announcement = Announcement(
            cluster_id=args.cluster_id,
            cluster_name=args.cluster_name,
            auth_url=args.auth_url,
            key_fingerprint=args.key_fingerprint,
            labels=tuple(sorted(claimed.items())),
        )
    return args


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


async def run(args: argparse.Namespace) -> None:
    """Announce and listen until SIGTERM, then say goodbye."""
    async with Shell(metrics_address=args.metrics_address) as shell:
        if args.source:
            access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
            async with KubeClient(access=access, name="local") as client:
                sources = Listener(client=client, lan_source=args.source, address=args.address, ttl=args.ttl)
                shell.serving()
                await shell.run(sources.run())
            return

        async def publish(table: Neighbours) -> None:
            sys.stdout.write(orjson.dumps(table.status()).decode() + "\n")
            sys.stdout.flush()

        listener = LanListener(
            address=args.address, announcement=args.announcement, publish=publish, limit=args.limit, ttl=args.ttl
        )
        shell.serving()
        await shell.run(listener.run())


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run)


if __name__ == "__main__":
    main()
