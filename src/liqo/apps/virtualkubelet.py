"""``python -m liqo.apps.virtualkubelet``: the virtual kubelet of one cluster, for all its virtual nodes.

Wiring only. The kubelet API (HTTPS) is served from the start; the virtual nodes run in the replica that
holds the ``liqo-virtual-kubelet`` Lease. Separate from the manager so that either can die (a required
fault drill) without taking the other along; docs/offloading.md says why one process serves every node.

The API server dials the kubelet API at the nodes' InternalIP and, when it runs with
``--kubelet-certificate-authority``, verifies its certificate. Local clusters hand their launcher's pair in
(``--cert/--key``, from the cluster CA). Without one, the default (``--serving-cert=csr``) asks the cluster
for a kubelet serving certificate of ``--node-address`` through a CertificateSigningRequest
(:mod:`liqo.kube.csr`), valid a day and swapped into the running listener before it expires; a
self-signed one (``--serving-cert=self-signed``) only suits API servers that do not verify kubelets.

Every replica is ready (``/readyz`` on ``--metrics-address``) once its kubelet API serves.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import ssl
from collections.abc import Coroutine
from functools import partial
from typing import Any

from liqo.api import names
from liqo.api.components import KUBELET_PORT, VIRTUAL_KUBELET
from liqo.api.identity import read_identity
from liqo.apps import operability
from liqo.kube import csr, kubeconfig, pki
from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.kube.shell import Leadership, Shell, holder_identity, server_tls
from liqo.kube.waiting import poll_until
from liqo.virtualkubelet.kubeletapi import kubelet_app
from liqo.virtualkubelet.kubelets import VirtualKubelets
from liqo.virtualkubelet.reflection.steps import ReflectionPolicy

log = logging.getLogger("liqo.virtualkubelet")

LEASE = VIRTUAL_KUBELET
SERVING_CERT_TTL = 24 * 3600
"""Lifetime asked for a serving certificate signed by the cluster: a day, renewed at about two thirds of it."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The virtual kubelet's flags."""
    parser = argparse.ArgumentParser(prog=VIRTUAL_KUBELET, description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument("--listen", default=f"0.0.0.0:{KUBELET_PORT}", help="HOST:PORT of the kubelet API")
    parser.add_argument("--node-address", default="127.0.0.1", help="the nodes' InternalIP (where we listen)")
    parser.add_argument(
        "--node-port",
        type=int,
        help="the kubelet port the nodes advertise (default: the --listen port; another when a node port fronts us)",
    )
    parser.add_argument("--cert", help="TLS certificate of the kubelet API, with --key (default: see --serving-cert)")
    parser.add_argument("--key", help="TLS key of the kubelet API")
    parser.add_argument(
        "--serving-cert",
        choices=["csr", "self-signed"],
        help="without --cert/--key: csr (the default) has the cluster sign a certificate of --node-address and"
        " renews it; self-signed suits only API servers that do not verify kubelets",
    )
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
    args = parser.parse_args(argv)
    if bool(args.cert) != bool(args.key):
        parser.error("--cert and --key go together")
    if args.cert and args.serving_cert:
        parser.error("--serving-cert chooses a certificate when no --cert/--key are given")
    args.serving_cert = "files" if args.cert else args.serving_cert or "csr"
    if args.serving_cert == "csr" and not _is_ip(args.node_address):
        parser.error(f"--serving-cert=csr certifies --node-address, which must be an IP address: {args.node_address!r}")
    return args


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _class_mapping(text: str) -> tuple[str, str]:
    home, sep, provider = text.partition("=")
    if not sep or not home or not provider:
        raise argparse.ArgumentTypeError(f"expected HOME=PROVIDER, got {text!r}")
    return home, provider


def _tls(args: argparse.Namespace) -> ssl.SSLContext:
    """The kubelet API's TLS context; with ``--serving-cert=csr`` its certificate is loaded later (:func:`run`)."""
    if args.serving_cert == "files":
        context = server_tls(cert_file=args.cert, key_file=args.key)
    elif args.serving_cert == "self-signed":
        pair = pki.issue(pki.make_ca("liqo-kubelet-ca"), common_name=VIRTUAL_KUBELET, server=True)
        context = server_tls(pem=(pair.cert.decode(), pair.key.decode()))
    else:
        context = server_tls()
    if args.client_ca:
        # Optional at the TLS level so that health probes need no certificate; the kubelet endpoints refuse
        # requests without one (kubeletapi).
        context.load_verify_locations(args.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


async def _serve_signed_by_the_cluster(
    client: KubeClient, tls: ssl.SSLContext, *, node_address: str
) -> Coroutine[Any, Any, None]:
    """Load a kubelet serving certificate of ``node_address`` signed by the cluster into ``tls``.

    Returns the loop that keeps it renewed there.
    """
    obtain = partial(
        csr.issue_kubelet_serving,
        csr.CsrIssuer(client=client),
        node_name=VIRTUAL_KUBELET,
        ip_addresses=[node_address],
        expiration_seconds=SERVING_CERT_TTL,
        generate_name=f"{VIRTUAL_KUBELET}-",
        labels={names.MANAGED_BY: names.MANAGED_BY_VALUE},
    )
    pair = await obtain()
    pair.load_into(tls)
    log.info("serving a certificate signed by the cluster for %s, valid until %s", node_address, pair.not_after)
    return csr.keep_renewed(obtain, current=pair, install=lambda new: new.load_into(tls))


async def run(args: argparse.Namespace) -> None:
    """Serve the kubelet API, campaign for the lease, run the virtual nodes while leading."""
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    port = args.listen.rpartition(":")[2]
    async with KubeClient(access=access, name="local") as client, Shell(metrics_address=args.metrics_address) as shell:
        local = await poll_until(
            lambda: read_identity(client), timeout=3600, interval=2, message="liqo is not installed on this cluster"
        )
        identity = holder_identity()
        kubelets = VirtualKubelets(
            client=client,
            home_cluster_id=local.cluster_id,
            home_name=local.cluster_name,
            home_network=local.network,
            address=args.node_address,
            port=args.node_port or int(port),
            holder=identity,
            events=EventRecorder(client=client, component=VIRTUAL_KUBELET, host=socket.gethostname()),
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

        tls = _tls(args)
        loops = []
        if args.serving_cert == "csr":
            loops.append(await _serve_signed_by_the_cluster(client, tls, node_address=args.node_address))
        await shell.listen(kubelet_app(locate=locate, require_client_cert=bool(args.client_ca)), args.listen, tls)
        log.info("kubelet API on https://%s", args.listen)
        shell.serving()
        leadership = Leadership(
            client=client, namespace=names.LIQO_NAMESPACE, lease=LEASE, leading=kubelets.run, identity=identity
        )
        await shell.run(*loops, leadership=leadership, gauges=kubelets.gauges)


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run, fatal=(csr.SigningError,))


if __name__ == "__main__":
    main()
