"""``python -m liqo.apps.gateway``: the WireGuard gateway to one peer (a pod the manager makes per peer).

Wiring only (:mod:`liqo.network.gateway_loop` holds the loop). It runs as root with ``NET_ADMIN`` alone, in a
pod network namespace of its own: what it changes is that namespace's interfaces, routes and nftables.
Which peer it serves and where its private key is come from the environment and a mounted Secret the
manager set (:mod:`liqo.network.gateway_objects`); everything else it reads from the two NetworkConfigs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from liqo.api.components import GATEWAY
from liqo.apps import operability, peerpools
from liqo.kube import kubeconfig
from liqo.kube.client import KubeClient
from liqo.kube.shell import Shell
from liqo.network import gateway_objects
from liqo.network.gateway_loop import Gateway, forwarding_enabled
from liqo.network.runner import ProcessRunner

log = logging.getLogger("liqo.gateway")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The gateway's flags."""
    parser = argparse.ArgumentParser(prog=GATEWAY, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument("--local-id", default=os.environ.get(gateway_objects.ENV_LOCAL_ID), help="this cluster's ID")
    parser.add_argument("--peer-id", default=os.environ.get(gateway_objects.ENV_PEER_ID), help="the peer's cluster ID")
    parser.add_argument(
        "--key-file",
        default=f"{gateway_objects.KEY_DIR}/{gateway_objects.KEY_FILE}",
        help="the WireGuard private key's file",
    )
    peerpools.add_flag(parser)
    operability.add_flags(parser)
    args = parser.parse_args(argv)
    if not args.local_id or not args.peer_id:
        local, peer = gateway_objects.ENV_LOCAL_ID, gateway_objects.ENV_PEER_ID
        parser.error(f"--local-id and --peer-id (or ${local}, ${peer}) are required")
    return args


async def run(args: argparse.Namespace) -> None:
    """Run the gateway until SIGTERM."""
    if not forwarding_enabled():
        # Packets would reach the gateway and die there: say so where the operator looks first.
        log.error("net.ipv4.ip_forward is off in this pod: set it in the pod's securityContext.sysctls")
        sys.exit(1)
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    async with KubeClient(access=access, name="local") as client, Shell(metrics_address=args.metrics_address) as shell:
        gateway = Gateway(
            client=client,
            runner=ProcessRunner(),
            local_id=args.local_id,
            peer_id=args.peer_id,
            key_file=args.key_file,
            pools=args.peer_pools,
        )
        shell.serving()
        await shell.run(gateway.run())


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run)


if __name__ == "__main__":
    main()
