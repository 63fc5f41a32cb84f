"""``python -m liqo.apps.discovery``: announce a cluster on a LAN and hear the others (multicast DNS).

Wiring only (:mod:`liqo.discovery.lan` holds the listener). ``--print`` writes what is heard to stdout, one
JSON object per change (the source's status as it would be written), and touches no cluster: the operator's
``avahi-browse`` for liqo, and how the tests watch a LAN of network namespaces.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

import orjson

from liqo.api.components import DISCOVERY
from liqo.apps import operability
from liqo.discovery.announcements import Announcement, Unusable, check_auth_url
from liqo.discovery.lan import TTL, LanListener
from liqo.discovery.neighbours import DEFAULT_LIMIT, Neighbours
from liqo.kube.shell import Shell


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The listener's flags."""
    parser = argparse.ArgumentParser(prog=DISCOVERY, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--address", required=True, type=_ipv4, help="the IPv4 address whose interface is the LAN")
    parser.add_argument("--print", action="store_true", help="print what is heard (JSON lines); write nothing")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="neighbours held at most")
    parser.add_argument(
        "--ttl", type=int, default=TTL, help="seconds our records live: a cluster gone without a goodbye is forgotten"
    )
    announce = parser.add_argument_group("what to announce (all four, or none: listen only)")
    announce.add_argument("--cluster-id")
    announce.add_argument("--cluster-name")
    announce.add_argument("--auth-url")
    announce.add_argument("--key-fingerprint")
    operability.add_flags(parser)
    args = parser.parse_args(argv)
    if not args.print:
        parser.error("only --print is available yet")
    fields = (args.cluster_id, args.cluster_name, args.auth_url, args.key_fingerprint)
    if any(fields) and not all(fields):
        parser.error("--cluster-id, --cluster-name, --auth-url and --key-fingerprint go together")
    args.announcement = None
    if all(fields):
        try:
            check_auth_url(args.auth_url)
        except Unusable as exc:
            parser.error(str(exc))
        args.announcement = Announcement(
            cluster_id=args.cluster_id,
            cluster_name=args.cluster_name,
            auth_url=args.auth_url,
            key_fingerprint=args.key_fingerprint,
        )
    return args


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


async def run(args: argparse.Namespace) -> None:
    """Announce and listen until SIGTERM, then say goodbye."""

    async def publish(table: Neighbours) -> None:
        sys.stdout.write(orjson.dumps(table.status()).decode() + "\n")
        sys.stdout.flush()

    listener = LanListener(
        address=args.address, announcement=args.announcement, publish=publish, limit=args.limit, ttl=args.ttl
    )
    async with Shell(metrics_address=args.metrics_address) as shell:
        shell.serving()
        await shell.run(listener.run())


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run)


if __name__ == "__main__":
    main()
