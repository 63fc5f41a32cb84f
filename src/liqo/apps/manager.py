"""``python -m liqo.apps.manager``: the liqo manager of one cluster.

Wiring only. Every replica serves the authentication endpoint (it is stateless but for single-use nonces)
and, on a listener of its own that peers do not reach, the webhooks (pod mutator, ShadowPod validator),
each with its own caches, since the API server may call any replica; the control loops run in the replica
that holds the ``liqo-manager`` Lease. The same entry point runs as a Deployment on a real cluster
(in-cluster credentials) and as a supervised host process on a local one (``--kubeconfig``, loopback
``--auth-address``, ``--webhook-address`` and ``--metrics-address``). Every replica is ready (``/readyz``)
once both its listeners serve, leader or not: the Services send peers and the API server to any of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from ipaddress import IPv4Network

from aiohttp import web

from liqo.api import names
from liqo.api.bounds import DEFAULT_TENANT_QUOTA, DEFAULT_TWIN_QUOTA, parse_quota
from liqo.api.clusterkey import ClusterKey
from liqo.api.components import AUTH_PORT, MANAGER, WEBHOOK_PORT
from liqo.api.identity import ClusterIdentity
from liqo.api.networks import ClusterNetwork, InvalidNetwork, IPNetwork, parse_cidr
from liqo.api.peers import PeerClients
from liqo.api.resources import SHARING_POLICIES
from liqo.apps import operability, peerpools
from liqo.kube import kubeconfig
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import run_components
from liqo.kube.events import EventRecorder
from liqo.kube.informer import HandlerFuncs, Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS
from liqo.kube.shell import Leadership, Shell, reload_tls, server_tls
from liqo.kube.waiting import poll_until
from liqo.modes.controller import WorkingModes
from liqo.modes.controlling import TetheredHere
from liqo.network.configs import NetworkConfigs
from liqo.offloading import registration
from liqo.offloading.consumer_namespaces import NamespaceOffloadings
from liqo.offloading.heartbeats import Heartbeats
from liqo.offloading.pod_webhook import MAX_REVIEW, PodWebhook
from liqo.offloading.provider_namespaces import NamespaceMapController, parse_reserved
from liqo.offloading.shadowpod_webhook import ShadowPodWebhook
from liqo.offloading.shadowpods import ShadowPods
from liqo.peering.authcaches import AuthCaches
from liqo.peering.authprotocol import NonceStore
from liqo.peering.authserver import DEFAULT_BURST, DEFAULT_RATE, RateLimit, auth_app
from liqo.peering.bootstrap import InvalidSettings, ensure_identity, read_settings
from liqo.peering.caches import PeeringCaches
from liqo.peering.consumerside import ConsumerSide
from liqo.peering.discovered import DiscoveredClusters
from liqo.peering.enrolment import (
    DEFAULT_MAX_PENDING_TENANTS,
    DEFAULT_MAX_TENANTS,
    KubeEnrolments,
    TenantLimits,
    TokenCollector,
)
from liqo.peering.incoming import IncomingPeering
from liqo.peering.observations import Observations
from liqo.peering.outgoing import OutgoingPeering
from liqo.peering.provisioning import KubeProvisioner
from liqo.peering.status import ForeignClusterStatus
from liqo.replication.replicator import Replicator
from liqo.sharing.gate import PolicyGate
from liqo.sharing.offers import OfferController
from liqo.sharing.policy import PolicySelection
from liqo.sharing.virtualnodes import OfferAcceptance
from liqo.storage.provisioner import VirtualClassProvisioner

log = logging.getLogger("liqo.manager")

LEASE = MANAGER
"""Named after the manager: its Role in ``liqo`` grants get/update on this one Lease only."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The manager's flags."""
    parser = argparse.ArgumentParser(prog=MANAGER, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: in-cluster credentials)")
    parser.add_argument(
        "--auth-address", default=f"0.0.0.0:{AUTH_PORT}", help="HOST:PORT of the authentication endpoint"
    )
    parser.add_argument("--auth-cert", help="TLS certificate of the endpoint (default: self-signed)")
    parser.add_argument("--auth-key", help="TLS key of the endpoint")
    parser.add_argument(
        "--webhook-address", default=f"0.0.0.0:{WEBHOOK_PORT}", help="HOST:PORT of the webhook listener"
    )
    parser.add_argument("--webhook-cert", help="TLS certificate of the webhook listener (default: the shared pair)")
    parser.add_argument("--webhook-key", help="TLS key of the webhook listener")
    parser.add_argument(
        "--webhook-client-ca", help="CA file: the webhook listener then requires a client certificate it signed"
    )
    parser.add_argument("--identity-ttl", type=int, default=7200, help="lifetime of issued identities, seconds")
    parser.add_argument(
        "--max-tenants",
        type=_count,
        default=DEFAULT_MAX_TENANTS,
        help="consumers enrolled at once, at most: enrolments beyond are refused (403)",
    )
    parser.add_argument(
        "--max-pending-tenants",
        type=_count,
        default=DEFAULT_MAX_PENDING_TENANTS,
        help="consumers enrolled without an accepted offer, at most: enrolments beyond are refused (429)",
    )
    parser.add_argument(
        "--auth-burst",
        type=_positive_count,
        default=DEFAULT_BURST,
        help="requests to /nonce and /identity one address may make at once; beyond, 429 until it slows down",
    )
    parser.add_argument(
        "--auth-rate",
        type=_rate,
        default=DEFAULT_RATE,
        help="requests a second to /nonce and /identity one address may make, sustained",
    )
    parser.add_argument(
        "--reserved-namespaces",
        type=_reserved_namespaces,
        default=(),
        help="namespace names (or prefixes ending in *) no consumer's twin may take, besides default, kube-*, liqo*",
    )
    parser.add_argument(
        "--reserved-subnets",
        type=_reserved_subnets,
        default=(),
        help="CIDRs (comma-separated) where peers' pods may never be seen, besides our pod and service CIDRs",
    )
    peerpools.add_flag(parser)
    parser.add_argument(
        "--twin-quota",
        type=lambda text: _quota(text, flag="--twin-quota", defaults=DEFAULT_TWIN_QUOTA),
        default=dict(DEFAULT_TWIN_QUOTA),
        help="object counts each consumer's twin may hold, as JSON over the defaults, e.g. '{\"count/secrets\":5000}'",
    )
    parser.add_argument(
        "--tenant-quota",
        type=lambda text: _quota(text, flag="--tenant-quota", defaults=DEFAULT_TENANT_QUOTA),
        default=dict(DEFAULT_TENANT_QUOTA),
        help="object counts each consumer's tenant namespace may hold, as JSON over the defaults",
    )
    parser.add_argument(
        "--shutdown-delay",
        type=float,
        default=0.0,
        help="seconds to keep answering after SIGTERM, while the endpoints stop sending to this replica",
    )
    operability.add_flags(parser)
    return parser.parse_args(argv)


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return int(text)


def _positive_count(text: str) -> int:
    if _count(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of 1 or more")
    return int(text)


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not 0 < rate < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return rate


def _reserved_namespaces(text: str) -> tuple[str, ...]:
    try:
        return parse_reserved(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quota(text: str, *, flag: str, defaults: Mapping[str, int]) -> dict[str, int]:
    try:
        return parse_quota(text, flag=flag, defaults=defaults)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reserved_subnets(text: str) -> tuple[IPNetwork, ...]:
    try:
        return tuple(parse_cidr(part.strip(), field="--reserved-subnets") for part in text.split(",") if part.strip())
    except InvalidNetwork as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def run(args: argparse.Namespace) -> None:
    """Serve authentication and the webhooks, campaign for the lease, run the controllers while leading."""
    access = kubeconfig.load_file(args.kubeconfig) if args.kubeconfig else kubeconfig.in_cluster()
    async with (
        KubeClient(access=access, name="local") as client,
        Shell(metrics_address=args.metrics_address, shutdown_delay=args.shutdown_delay) as shell,
    ):
        settings = await poll_until(
            lambda: read_settings(client),
            timeout=3600,
            interval=2,
            message=f"liqo is not installed on this cluster (no ConfigMap {names.CLUSTER_SETTINGS}): run"
            " `liqoctl install` or `helm install`",
        )
        local, key = await ensure_identity(client, settings)
        network = local.network
        assert network is not None  # the settings always record one
        own_files = args.auth_cert and args.webhook_cert
        shared = None if own_files else await registration.manager_serving_pair(client)
        # One memo of the consumers' SharingPolicies for the ShadowPod webhook and the controllers alike.
        selection = PolicySelection()
        auth_tls = _listener_tls(args.auth_cert, args.auth_key, shared)
        webhook_tls = _listener_tls(args.webhook_cert, args.webhook_key, shared)
        await _serve_auth(shell, client, local=local, network=network, key=key, args=args, tls=auth_tls)
        await _serve_webhooks(shell, client, args, webhook_tls, selection)
        loops = [_settings_changed(client, settings)]
        if shared is not None:
            # The pair is the Secret's, not ours: follow it (and publish its CA) for as long as we serve it.
            await registration.publish_ca_bundles(client, ca_pem=shared.ca)
            followed = [tls for tls, own in ((auth_tls, args.auth_cert), (webhook_tls, args.webhook_cert)) if not own]
            loops.append(
                registration.follow_manager_serving_pair(client, shared, install=partial(reload_tls, followed))
            )
        shell.serving()
        controllers = partial(
            _controllers,
            client,
            local,
            network,
            key,
            selection=selection,
            reserved_namespaces=args.reserved_namespaces,
            reserved_subnets=args.reserved_subnets,
            twin_quota=args.twin_quota,
            peer_pools=args.peer_pools,
        )
        # The controllers ending by themselves (a crash, a lost lease) raise here: the process exits non-zero
        # and the supervisor or the kubelet restarts a fresh candidate, the reason in the log.
        await shell.run(
            *loops,
            leadership=Leadership(client=client, namespace=names.LIQO_NAMESPACE, lease=LEASE, leading=controllers),
        )


async def _settings_changed(client: KubeClient, settings: dict[str, str]) -> None:
    """Return once the install's settings differ from ``settings``.

    Every component holds the identity made of them: the process stops (and its supervisor or kubelet
    starts it again) rather than mend each. A watch, not a poll: a read every few seconds was, on an idle
    cluster, one of the manager's two steady streams of requests.
    """
    changed = asyncio.Event()

    def compare(configmap: Obj) -> None:
        if settings_differ(configmap, settings):
            changed.set()

    informer = Informer(
        client=client,
        resource=CONFIGMAPS,
        namespace=names.LIQO_NAMESPACE,
        field_selector=f"metadata.name={names.CLUSTER_SETTINGS}",
        name="settings",
    )
    informer.add_handler(HandlerFuncs(add=compare, update=lambda _old, new: compare(new)))
    watching = asyncio.create_task(informer.run())
    try:
        await changed.wait()
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    log.info("the install's settings changed: restarting to apply them")


def settings_differ(configmap: Obj, settings: Mapping[str, str]) -> bool:
    """Whether the settings ConfigMap now says something else than ``settings`` (pure)."""
    return dict(configmap.get("data") or {}) != dict(settings)


async def _serve_auth(
    shell: Shell,
    client: KubeClient,
    *,
    local: ClusterIdentity,
    network: ClusterNetwork,
    key: ClusterKey,
    args: argparse.Namespace,
    tls: ssl.SSLContext,
) -> None:
    root_ca = await client.get(CONFIGMAPS, "kube-root-ca.crt", namespace=names.LIQO_NAMESPACE)
    endpoint = build_auth_endpoint(
        client,
        local=local,
        network=network,
        key=key,
        ca_pem=root_ca["data"]["ca.crt"],
        identity_ttl=args.identity_ttl,
        limits=TenantLimits(max_tenants=args.max_tenants, max_pending=args.max_pending_tenants),
        rate_limit=RateLimit(burst=args.auth_burst, per_second=args.auth_rate),
        tenant_quota=args.tenant_quota,
    )
    await shell.listen(endpoint.app, args.auth_address, tls)
    log.info("authentication endpoint on https://%s", args.auth_address)


@dataclass(frozen=True)
class AuthEndpoint:
    """The authentication endpoint's application, and the caches it answers from (they run with it)."""

    app: web.Application
    informers: SharedInformers
    caches: AuthCaches


def build_auth_endpoint(
    client: KubeClient,
    *,
    local: ClusterIdentity,
    network: ClusterNetwork,
    key: ClusterKey,
    ca_pem: str,
    identity_ttl: int,
    limits: TenantLimits,
    rate_limit: RateLimit,
    tenant_quota: Mapping[str, int] = DEFAULT_TENANT_QUOTA,
) -> AuthEndpoint:
    """The authentication endpoint as every replica serves it, with caches of its own (``client``: the manager's).

    Peering authenticates and provisions, sharing's gate refuses the peers a SharingPolicy denies; each reads
    what it knows from the endpoint's informers, which run with the application.
    """
    informers = SharedInformers(client)
    caches = AuthCaches(informers, local_id=local.cluster_id)
    policies = informers.informer(SHARING_POLICIES)
    provisioner = KubeProvisioner(
        client=client,
        records=caches,
        api_server_url=local.api_server_url,
        ca_pem=ca_pem,
        identity_ttl=identity_ttl,
        tenant_quota=tenant_quota,
    )
    app = auth_app(
        cluster_id=local.cluster_id,
        cluster_name=local.cluster_name,
        key=key,
        network=network,
        enrolments=KubeEnrolments(client=client, caches=caches, limits=limits),
        provisioner=PolicyGate(policies=policies.store.list, provisioner=provisioner),
        caches=informers,
        nonces=NonceStore(),
        limiter=rate_limit.limiter(),
    )
    return AuthEndpoint(app=app, informers=informers, caches=caches)


async def _serve_webhooks(
    shell: Shell, client: KubeClient, args: argparse.Namespace, tls: ssl.SSLContext, selection: PolicySelection
) -> None:
    """The webhooks, on their own listener: peers reach the authentication one, never this one."""
    app = web.Application(client_max_size=MAX_REVIEW)
    PodWebhook(client=client).attach(app)
    ShadowPodWebhook(client=client, select=lambda policies, peer: selection(policies, peer).pod_security).attach(app)
    if args.webhook_client_ca:
        # Only the API server (a client certificate of that CA) may call; a peer that can reach the port
        # fails the TLS handshake before any request is read.
        tls.verify_mode = ssl.CERT_REQUIRED
        tls.load_verify_locations(cafile=args.webhook_client_ca)
    await shell.listen(app, args.webhook_address, tls)
    log.info("webhooks on https://%s", args.webhook_address)


def _listener_tls(cert: str | None, key: str | None, shared: registration.ServingPair | None) -> ssl.SSLContext:
    """A listener's TLS context: its own files' pair, else the shared one."""
    if cert and key:
        return server_tls(cert_file=cert, key_file=key)
    if shared is None:
        raise ValueError("a listener without its own certificate needs the shared serving pair")
    return server_tls(pem=(shared.cert, shared.key))


async def _controllers(
    client: KubeClient,
    local: ClusterIdentity,
    network: ClusterNetwork,
    key: ClusterKey,
    *,
    selection: PolicySelection,
    reserved_namespaces: tuple[str, ...],
    reserved_subnets: tuple[IPNetwork, ...],
    twin_quota: Mapping[str, int],
    peer_pools: tuple[IPv4Network, ...],
) -> None:
    """Every control loop of this cluster, on shared informers (run while leading)."""
    informers = SharedInformers(client)
    events = EventRecorder(client=client, component=MANAGER, host=socket.gethostname())
    observations = Observations()
    peers = PeerClients()
    caches = PeeringCaches(informers)
    consumer = ConsumerSide(
        client=client,
        caches=caches,
        local=local,
        network=network,
        peers=peers,
        observations=observations,
        events=events,
    )
    outgoing = OutgoingPeering(consumer, key=key)
    status = ForeignClusterStatus(consumer)
    incoming = IncomingPeering(client=client, informers=informers)
    tokens = TokenCollector(client=client, informers=informers)
    replicator = Replicator(client=client, informers=informers, local_id=local.cluster_id, peers=peers)
    offers = OfferController(client=client, informers=informers, local=local, events=events)
    acceptance = OfferAcceptance(client=client, informers=informers)
    shadow_pods = ShadowPods(
        client=client, informers=informers, events=events, local_id=local.cluster_id, select=selection
    )
    namespace_maps = NamespaceMapController(
        client=client,
        informers=informers,
        select=selection,
        local_id=local.cluster_id,
        network=network,
        reserved=reserved_namespaces,
        twin_quota=twin_quota,
    )
    offloadings = NamespaceOffloadings(client=client, informers=informers, local=local, peers=peers, events=events)
    heartbeats = Heartbeats(client=client, informers=informers)
    discovered = DiscoveredClusters(client=client, informers=informers, own_id=local.cluster_id, events=events)
    network_configs = NetworkConfigs(
        client=client,
        informers=informers,
        local_id=local.cluster_id,
        network=network,
        reserved=reserved_subnets,
        pools=peer_pools,
        events=events,
    )
    observations.on_change = status.controller.queue.add
    observations.on_forbidden = outgoing.controller.queue.add

    def peer_changed(peer_id: str) -> None:
        replicator.peer_changed(peer_id)
        status.controller.queue.add(peer_id)
        offloadings.peer_changed(peer_id)

    peers.on_change = peer_changed

    caches.identities.add_handler(
        HandlerFuncs(add=peers.update, update=lambda _old, secret: peers.update(secret), delete=peers.remove)
    )
    components = [
        outgoing,
        status,
        incoming,
        tokens,
        replicator,
        offers,
        acceptance,
        shadow_pods,
        namespace_maps,
        offloadings,
        heartbeats,
        network_configs,
        discovered,
        WorkingModes(client=client, informers=informers, events=events),
        TetheredHere(client=client, informers=informers, local_id=local.cluster_id),
        VirtualClassProvisioner(client=client, informers=informers, events=events),
    ]
    try:
        await run_components(components, informers=informers)
    finally:
        await peers.close()


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    operability.main(argv, parse=parse_args, run=run, fatal=(InvalidSettings,))


if __name__ == "__main__":
    main()
