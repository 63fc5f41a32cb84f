"""``python -m liqo.apps.manager``: the liqo manager of one cluster.

Wiring only. Every replica serves the authentication endpoint (it is stateless but for single-use nonces)
and, on the same HTTPS port, the pod webhook (with its own NamespaceOffloading cache, since the API server
may call any replica); the control loops run in the replica that holds the ``liqo-manager`` Lease. The
same entry point runs as a Deployment on a real cluster (in-cluster credentials) and as a supervised host
process on a local one (``--kubeconfig``, loopback ``--auth-address``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from liqo.api import names
from liqo.api.identity import ClusterIdentity, read_identity
from liqo.api.peers import PeerClients
from liqo.api.resources import SHARING_POLICIES
from liqo.install.manifests import AUTH_SERVICE
from liqo.kube import kubeconfig
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs
from liqo.kube.leaderelection import LeaderElector
from liqo.kube.resources import CONFIGMAPS, SECRETS
from liqo.kube.waiting import poll_until
from liqo.offloading import registration
from liqo.offloading.namespacemaps import NamespaceMapController
from liqo.offloading.namespaces import NamespaceOffloadings
from liqo.offloading.shadowpods import ShadowPods
from liqo.offloading.webhook import PodWebhook
from liqo.peering.authprotocol import NonceStore
from liqo.peering.authserver import Issued, PeerDenied, Provisioner, auth_app
from liqo.peering.caches import PeeringCaches
from liqo.peering.incoming import IncomingPeering
from liqo.peering.observations import Observations
from liqo.peering.outgoing import OutgoingPeering
from liqo.peering.provisioning import KubeProvisioner
from liqo.peering.status import ForeignClusterStatus
from liqo.replication.replicator import Replicator
from liqo.sharing.offers import OfferController
from liqo.sharing.policy import Policy, select_policy
from liqo.sharing.virtualnodes import OfferAcceptance

log = logging.getLogger("liqo.manager")

LEASE = "liqo-manager"


class PolicyGate:
    """Refuses identities to peers a SharingPolicy denies, before anything is created for them."""

    def __init__(self, *, client: KubeClient, provisioner: Provisioner) -> None:
        self._client = client
        self._provisioner = provisioner

    async def provision(self, *, consumer_id: str, consumer_name: str, auth_url: str | None, csr_pem: str) -> Issued:
        """Provision ``consumer_id`` unless a policy denies it."""
        policies, _ = await self._client.list_all(SHARING_POLICIES)
        policy = select_policy(policies, peer_id=consumer_id, peer_name=consumer_name)
        if policy.action == "Deny":
            raise PeerDenied("this cluster's sharing policy denies peering with you")
        return await self._provisioner.provision(
            consumer_id=consumer_id, consumer_name=consumer_name, auth_url=auth_url, csr_pem=csr_pem
        )


def consumer_policy(policies: Sequence[Mapping[str, Any]], consumer_id: str) -> Policy:
    """The SharingPolicy applying to ``consumer_id`` (by cluster ID only: a name is whatever the consumer says)."""
    return select_policy(policies, peer_id=consumer_id, peer_name="")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The manager's flags."""
    parser = argparse.ArgumentParser(prog="liqo-manager", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument("--auth-address", default="0.0.0.0:8443", help="HOST:PORT of the authentication endpoint")
    parser.add_argument("--auth-cert", help="TLS certificate of the endpoint (default: self-signed)")
    parser.add_argument("--auth-key", help="TLS key of the endpoint")
    parser.add_argument("--identity-ttl", type=int, default=7200, help="lifetime of issued identities, seconds")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    """Serve authentication, campaign for the lease, run the controllers while leading."""
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    async with KubeClient(access=access, name="local") as client:
        local = await poll_until(
            lambda: read_identity(client), timeout=3600, interval=2, message="liqo is not installed on this cluster"
        )
        runner = await _serve_auth(client, local, args)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        elector = LeaderElector(
            client=client,
            namespace=names.LIQO_NAMESPACE,
            name=LEASE,
            identity=f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}",
        )
        campaign = asyncio.create_task(elector.run(lambda: _controllers(client, local)))
        await asyncio.wait([campaign, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)
        await runner.cleanup()


async def _serve_auth(client: KubeClient, local: ClusterIdentity, args: argparse.Namespace) -> web.AppRunner:
    root_ca = await client.get(CONFIGMAPS, "kube-root-ca.crt", namespace=names.LIQO_NAMESPACE)

    async def token() -> str:
        secret = await client.get(SECRETS, names.AUTH_TOKEN_SECRET, namespace=names.LIQO_NAMESPACE)
        return base64.b64decode(secret["data"]["token"]).decode()

    provisioner = KubeProvisioner(
        client=client,
        api_server_url=local.api_server_url,
        ca_pem=root_ca["data"]["ca.crt"],
        identity_ttl=args.identity_ttl,
    )
    app = auth_app(
        cluster_id=local.cluster_id,
        cluster_name=local.cluster_name,
        token_source=token,
        provisioner=PolicyGate(client=client, provisioner=provisioner),
        nonces=NonceStore(),
    )
    # The pod webhook, served by every replica on the same endpoint (docs/offloading.md, "Pod webhook").
    PodWebhook(client=client).attach(app)

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = args.auth_address.rpartition(":")
    tls, ca_pem = await _server_tls(client, args)
    site = web.TCPSite(runner, host, int(port), ssl_context=tls)
    await site.start()
    log.info("authentication endpoint and pod webhook on https://%s", args.auth_address)
    await registration.publish_ca_bundle(client, ca_pem=ca_pem)
    return runner


async def _server_tls(client: KubeClient, args: argparse.Namespace) -> tuple[ssl.SSLContext, str]:
    """The endpoint's TLS context, and the CA the API server must trust to call the pod webhook."""
    if args.auth_cert and args.auth_key:
        return _file_tls(args.auth_cert, args.auth_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # Peers authenticate us by the HMAC on our answers (docs/peering.md); the API server, calling the
    # webhook through the Service, verifies this certificate: every replica serves the same one.
    pair = await registration.shared_serving_pair(
        client,
        namespace=names.LIQO_NAMESPACE,
        dns_names=registration.service_dns_names(service=AUTH_SERVICE, namespace=names.LIQO_NAMESPACE),
        labels={names.MANAGED_BY: names.MANAGED_BY_VALUE},
    )
    kubeconfig.load_cert_chain(context, pair.cert, pair.key)
    return context, pair.ca


def _file_tls(cert: str, key: str) -> tuple[ssl.SSLContext, str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    # The chain itself as the CA: the API server accepts a certificate found among its trusted ones as is.
    return context, Path(cert).read_text()


async def _controllers(client: KubeClient, local: ClusterIdentity) -> None:
    """Every control loop of this cluster, on shared informers (run while leading)."""
    informers = SharedInformers(client)
    events = EventRecorder(client=client, component="liqo-manager", host=socket.gethostname())
    observations = Observations()
    peers = PeerClients()
    caches = PeeringCaches(informers)
    outgoing = OutgoingPeering(
        client=client, caches=caches, local=local, peers=peers, observations=observations, events=events
    )
    status = ForeignClusterStatus(client=client, caches=caches, local=local, peers=peers, observations=observations)
    incoming = IncomingPeering(client=client, informers=informers)
    replicator = Replicator(client=client, informers=informers, local_id=local.cluster_id, peers=peers)
    offers = OfferController(client=client, informers=informers, local=local)
    acceptance = OfferAcceptance(client=client, informers=informers)
    shadow_pods = ShadowPods(
        client=client, informers=informers, events=events, local_id=local.cluster_id, select=consumer_policy
    )
    namespace_maps = NamespaceMapController(client=client, informers=informers)
    offloadings = NamespaceOffloadings(client=client, informers=informers, local=local, peers=peers, events=events)
    observations.on_change = status.controller.queue.add

    def peer_changed(peer_id: str) -> None:
        replicator.peer_changed(peer_id)
        status.controller.queue.add(peer_id)
        offloadings.peer_changed(peer_id)

    peers.on_change = peer_changed

    outgoing.secrets.add_handler(
        HandlerFuncs(add=peers.update, update=lambda _old, secret: peers.update(secret), delete=peers.remove)
    )
    controllers: list[Controller[Any]] = [c.controller for c in (outgoing, status, incoming, offers, acceptance)] + [
        replicator.controller,
        namespace_maps.controller,
        *offloadings.controllers,
        *shadow_pods.controllers,
    ]
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(informers.run())
            if not await informers.wait_synced(60):
                raise RuntimeError("caches did not sync within 60 s")
            log.info("caches synced; running %d controllers", len(controllers))
            for controller in controllers:
                group.create_task(controller.run())
    finally:
        await replicator.close()
        await offloadings.close()
        await peers.close()


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
