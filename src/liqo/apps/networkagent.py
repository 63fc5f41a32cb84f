"""``python -m liqo.apps.networkagent``: the node agent of the network fabric (one per node, a DaemonSet).

Wiring only (:mod:`liqo.network.agent` holds the loop). It runs in the node's network namespace, as root
with ``NET_ADMIN`` alone, and reads nothing but the gateway pods of the ``liqo`` namespace.
"""

from __future__ import annotations

import argparse
import logging
import os

from liqo.api.components import NETWORK_AGENT
from liqo.apps import operability, peerpools
from liqo.kube import kubeconfig
from liqo.kube.client import KubeClient
from liqo.kube.shell import Shell
from liqo.network.agent import NodeAgent
from liqo.network.runner import ProcessRunner

log = logging.getLogger("liqo.networkagent")
ENV_NODE_NAME = "NODE_NAME"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The agent's flags."""
    parser = argparse.ArgumentParser(prog=NETWORK_AGENT, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument(
        "--node-name", default=os.environ.get(ENV_NODE_NAME), help=f"this node (default: ${ENV_NODE_NAME})"
    )
    peerpools.add_flag(parser)
    operability.add_flags(parser)
    args = parser.parse_args(argv)
    if not args.node_name:
        parser.error(f"--node-name (or ${ENV_NODE_NAME}) is required")
    return args


async def run(args: argparse.Namespace) -> None:
    """Run the agent until SIGTERM. Routes and rules stay: a restarted agent finds them right, not missing."""
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    async with KubeClient(access=access, name="local") as client, Shell(metrics_address=args.metrics_address) as shell:
        agent = NodeAgent(client=client, runner=ProcessRunner(), node_name=args.node_name, pools=args.peer_pools)
        shell.serving()
        await shell.run(agent.pods.run(), agent.controller.run())


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run)


if __name__ == "__main__":
    main()
