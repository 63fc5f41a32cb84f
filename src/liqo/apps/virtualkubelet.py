"""``python -m liqo.apps.virtualkubelet``: the virtual kubelet of one cluster, for all its virtual nodes.

Wiring only. The kubelet API (HTTPS) is served from the start; the virtual nodes run in the replica that
holds the ``liqo-virtual-kubelet`` Lease. Separate from the manager so that either can die (a required
fault drill) without taking the other along; docs/offloading.md says why one process serves every node.
Every replica is ready (``/readyz`` on ``--metrics-address``) once its kubelet API serves.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import socket
import ssl
import sys

from aiohttp import web

from liqo.api import names
from liqo.api.identity import read_identity
from liqo.apps import operability
from liqo.kube import kubeconfig, pki
from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.kube.leaderelection import LeaderElector
from liqo.kube.metrics import CacheCollector, registered
from liqo.kube.waiting import poll_until
from liqo.virtualkubelet.kubeletapi import kubelet_app
from liqo.virtualkubelet.kubelets import VirtualKubelets
from liqo.virtualkubelet.reflection.copies import ReflectionPolicy

log = logging.getLogger("liqo.virtualkubelet")

LEASE = "liqo-virtual-kubelet"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The virtual kubelet's flags."""
    parser = argparse.ArgumentParser(prog="liqo-virtual-kubelet", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument("--listen", default="0.0.0.0:10250", help="HOST:PORT of the kubelet API")
    parser.add_argument("--node-address", default="127.0.0.1", help="the nodes' InternalIP (where we listen)")
    parser.add_argument("--cert", help="TLS certificate of the kubelet API (default: self-signed)")
    parser.add_argument("--key", help="TLS key of the kubelet API")
    parser.add_argument("--client-ca", help="CA the API server's client certificate must chain to")
    for kind in ("configmaps", "secrets", "services", "ingresses"):
        parser.add_argument(
            f"--reflect-{kind}",
            choices=["All", "None"],
            default="All",
            help=f"copy offloaded namespaces' {kind} to providers (None also deletes earlier copies)",
        )
    parser.add_argument(
        "--ingress-class",
        action="append",
        default=[],
        type=_class_mapping,
        metavar="HOME=PROVIDER",
        help="map a home IngressClass to the providers' in Ingress copies (repeatable; unmapped ones are cleared)",
    )
    operability.add_flags(parser)
    return parser.parse_args(argv)


def _class_mapping(text: str) -> tuple[str, str]:
    home, sep, provider = text.partition("=")
    if not sep or not home or not provider:
        raise argparse.ArgumentTypeError(f"expected HOME=PROVIDER, got {text!r}")
    return home, provider


def _tls(args: argparse.Namespace) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if args.cert and args.key:
        context.load_cert_chain(args.cert, args.key)
    else:
        pair = pki.issue(pki.make_ca("liqo-kubelet-ca"), common_name="liqo-virtual-kubelet", server=True)
        kubeconfig.load_cert_chain(context, pair.cert.decode(), pair.key.decode())
    if args.client_ca:
        # Optional at the TLS level so that health probes need no certificate; the kubelet endpoints refuse
        # requests without one (kubeletapi).
        context.load_verify_locations(args.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


async def run(args: argparse.Namespace) -> None:
    """Serve the kubelet API, campaign for the lease, run the virtual nodes while leading."""
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    host, _, port = args.listen.rpartition(":")
    serving = asyncio.Event()
    # Up before the wait below, so that a probe tells "alive, not ready" from "dead" while liqo is installed.
    metrics = await operability.start_metrics(args, ready=serving.is_set)
    async with KubeClient(access=access, name="local") as client:
        local = await poll_until(
            lambda: read_identity(client), timeout=3600, interval=2, message="liqo is not installed on this cluster"
        )
        identity = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        kubelets = VirtualKubelets(
            client=client,
            home_cluster_id=local.cluster_id,
            home_name=local.cluster_name,
            home_network=local.network,
            address=args.node_address,
            port=int(port),
            holder=identity,
            events=EventRecorder(client=client, component="liqo-virtual-kubelet", host=socket.gethostname()),
            policy=ReflectionPolicy(
                configmaps=args.reflect_configmaps,
                secrets=args.reflect_secrets,
                services=args.reflect_services,
                ingresses=args.reflect_ingresses,
                ingress_classes=dict(args.ingress_class),
            ),
        )

        def locate(namespace: str, pod: str) -> tuple[KubeClient, str] | None:
            reflector = kubelets.reflector_for(namespace, pod)
            return reflector.remote_of(namespace, pod) if reflector else None

        runner = web.AppRunner(kubelet_app(locate=locate, require_client_cert=bool(args.client_ca)), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, int(port), ssl_context=_tls(args)).start()
        log.info("kubelet API on https://%s", args.listen)
        serving.set()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        elector = LeaderElector(client=client, namespace=names.LIQO_NAMESPACE, name=LEASE, identity=identity)
        campaign = asyncio.create_task(elector.run(kubelets.run))
        with registered(CacheCollector([elector.gauge, *kubelets.gauges])):
            await asyncio.wait([campaign, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            campaign.cancel()
            await asyncio.gather(campaign, return_exceptions=True)
        await runner.cleanup()
    if metrics is not None:
        await metrics.cleanup()


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    operability.setup_logging(args)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
