"""``liqoctl peer``, ``unpeer``, ``generate peer-command``, ``token``, ``get kubeconfig``, ``info``, ``status``."""

from __future__ import annotations

import asyncio
import datetime
import re
import sys
from typing import Annotated, Any

import typer
import yaml

from liqo.api.crds.schema import DNS_SUBDOMAIN_PATTERN
from liqo.api.foreignclusters import ConditionType
from liqo.cli.errors import expected_errors
from liqo.cli.kube import Context, Kubeconfig, Timeout, client_for
from liqo.cli.output import OUTPUT_OPTION, Format, emit, line, out, progress, table
from liqo.discovery import dnszone
from liqo.discovery.announcements import Announcement, Unusable, check_auth_url
from liqo.peering import discovered, enrolment, operations, tokens
from liqo.peering.operations import PeerCommand

peer_app = typer.Typer(help="Peer with a provider cluster.", invoke_without_command=True, no_args_is_help=False)
generate_app = typer.Typer(help="Generate commands and configuration for peers.", no_args_is_help=True)
get_app = typer.Typer(help="Get liqo objects.", no_args_is_help=True)
token_app = typer.Typer(help="List and revoke this cluster's enrolment tokens.", no_args_is_help=True)

OfferMode = Annotated[str, typer.Option(help="How offers are accepted: Auto, Manual or PriceLimit.")]


def _offer_policy(mode: str) -> dict[str, Any] | None:
    if mode not in ("Auto", "Manual", "PriceLimit"):
        raise typer.BadParameter(f"--offer-policy must be Auto, Manual or PriceLimit, not {mode!r}")
    return None if mode == "Auto" else {"mode": mode}


@peer_app.callback()
def peer(
    ctx: typer.Context,
    remote_kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig of the provider cluster.")] = None,
    remote_context: Annotated[str | None, typer.Option(help="context in the provider's kubeconfig.")] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    bidirectional: Annotated[bool, typer.Option(help="Also let the provider consume from this cluster.")] = False,
    offer_policy: OfferMode = "Auto",
    timeout: Timeout = operations.PEER_TIMEOUT,
) -> None:
    """Peer this cluster (consumer) with the provider of --remote-kubeconfig, and wait for an accepted offer."""
    if ctx.invoked_subcommand is not None:
        return
    if remote_kubeconfig is None:
        raise typer.BadParameter("--remote-kubeconfig is required (or use `liqoctl peer out-of-band`)")

    async def run() -> list[dict[str, Any]]:
        policy = _offer_policy(offer_policy)
        async with (
            client_for(kubeconfig, context) as local,
            client_for(remote_kubeconfig, remote_context, name="remote", remote=True) as remote,
        ):
            offers = [await operations.peer(local, remote, offer_policy=policy, timeout=timeout, progress=progress)]
            if bidirectional:
                offers.append(
                    await operations.peer(remote, local, offer_policy=policy, timeout=timeout, progress=progress)
                )
            return offers

    with expected_errors():
        offers = asyncio.run(run())
    for offer in offers:
        spec = offer["spec"]
        resources = ", ".join(f"{k}={v}" for k, v in spec["resources"].items())
        line(
            "peered with [bold]{name}[/bold]: accepted offer {offer}", name=spec["providerClusterName"], offer=resources
        )


@peer_app.command("out-of-band")
def peer_out_of_band(
    name: Annotated[str, typer.Argument(help="A name for the provider.")],
    auth_url: Annotated[str, typer.Option(help="The provider's authentication URL.")],
    cluster_id: Annotated[str, typer.Option(help="The provider's cluster ID.")],
    key_fingerprint: Annotated[
        str, typer.Option(help="The provider's key fingerprint (sha256:...): only that provider is trusted.")
    ],
    auth_token: Annotated[
        str, typer.Option(help="The enrolment token (from `liqoctl generate peer-command`; it enrols once).")
    ],
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    offer_policy: OfferMode = "Auto",
    timeout: Timeout = operations.PEER_TIMEOUT,
) -> None:
    """Peer with a provider known only by the command it generated (no access to its kubeconfig)."""

    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as local:
            command = PeerCommand(
                name=name, auth_url=auth_url, cluster_id=cluster_id, key_fingerprint=key_fingerprint, token=auth_token
            )
            asked = datetime.datetime.now(datetime.UTC)
            await operations.peer_out_of_band(local, command, offer_policy=_offer_policy(offer_policy))
            return await operations.wait_established(local, cluster_id, timeout=timeout, progress=progress, since=asked)

    with expected_errors():
        offer = asyncio.run(run())
    line("peered with [bold]{name}[/bold]: accepted offer {offer}", name=name, offer=offer["spec"]["resources"])


def unpeer(
    name: Annotated[str, typer.Argument(help="The peer: ForeignCluster name, cluster name or ID.")],
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    force: Annotated[bool, typer.Option(help="After the timeout, finish the local side anyway.")] = False,
    timeout: Timeout = operations.UNPEER_TIMEOUT,
) -> None:
    """Reverse a peering on both sides: virtual node, requests and offers, identity, tenant namespaces."""

    async def run() -> None:
        async with client_for(kubeconfig, context) as local:
            await operations.unpeer(local, name, force=force, timeout=timeout, progress=progress)

    with expected_errors():
        asyncio.run(run())
    out.print(f"unpeered {name}")


def allow(
    name: Annotated[str, typer.Argument(help="The consumer: ForeignCluster name, cluster name or ID.")],
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    forget_key: Annotated[
        bool, typer.Option(help="Also forget its key (it was re-installed): it enrols again with a new token.")
    ] = False,
) -> None:
    """Let a revoked consumer peer with this cluster again."""

    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as local:
            return await operations.allow(local, name, forget_key=forget_key)

    with expected_errors():
        fc = asyncio.run(run())
    out.print(f"{fc['metadata']['name']} ({fc['spec']['clusterID']}) may peer with this cluster again")


def _validity(text: str) -> datetime.timedelta:
    try:
        return tokens.parse_validity(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@generate_app.command("peer-command")
def generate_peer_command(
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    valid_for: Annotated[str, typer.Option(help="How long its token enrols: 30m, 24h, 7d (at most 30 days).")] = "24h",
) -> None:
    """Print the `liqoctl peer out-of-band` command one consumer runs to peer with this cluster.

    Each command carries a token of its own: it enrols one cluster, once, before it expires.
    """
    validity = _validity(valid_for)

    async def run() -> PeerCommand:
        async with client_for(kubeconfig, context) as local:
            return await operations.peer_command(local, valid_for=validity)

    with expected_errors():
        command = asyncio.run(run())
    sys.stdout.write(command.render() + "\n")
    if command.enrolment is not None:
        token = command.enrolment
        expiry = token.to_report()["expiresAt"]
        progress(f"token {token.id}: enrols one cluster until {expiry}; `liqoctl token revoke {token.id}` withdraws it")


@generate_app.command("dns-records")
def generate_dns_records(
    domain: Annotated[str, typer.Option(help="The zone to publish this cluster in, e.g. corp.example.")],
    ttl: Annotated[
        int, typer.Option(help="Seconds the records live: how long peers keep the cluster once withdrawn.", min=10)
    ] = dnszone.DEFAULT_RECORD_TTL,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Print the DNS records (zone-file lines) that publish this cluster for DNS discovery in a zone."""
    if not re.fullmatch(DNS_SUBDOMAIN_PATTERN, domain.rstrip(".")):
        raise typer.BadParameter("must be a DNS domain in lowercase, e.g. corp.example", param_hint="--domain")

    async def run() -> Announcement:
        async with client_for(kubeconfig, context) as local:
            identity = await operations.installed(local, role="local")
        if not identity.key_fingerprint:
            raise operations.PeeringError("this cluster's identity has no key fingerprint yet: install liqo again")
        try:
            check_auth_url(identity.auth_url)
        except Unusable as exc:
            raise operations.PeeringError(f"peers could not use this cluster's authentication URL: {exc}") from exc
        return Announcement.of(identity)

    with expected_errors():
        announcement = asyncio.run(run())
    sys.stdout.write("\n".join(dnszone.dns_records(announcement, domain=domain, ttl=ttl)) + "\n")


@token_app.command("list")
def list_tokens(kubeconfig: Kubeconfig = None, context: Context = None, output: Format = OUTPUT_OPTION) -> None:
    """The enrolment tokens not used yet: each peer command's, until it enrols a cluster or expires."""

    async def run() -> list[dict[str, Any]]:
        async with client_for(kubeconfig, context) as local:
            return [token.to_report() for token in await enrolment.outstanding(local)]

    with expected_errors():
        found = asyncio.run(run())
    if emit(found, fmt=output):
        return
    table(["id", "expires", "created"], [[t["id"], t["expiresAt"], t["createdAt"] or "-"] for t in found])


@token_app.command("revoke")
def revoke_tokens(
    ids: Annotated[list[str] | None, typer.Argument(help="Token IDs, as `liqoctl token list` prints them.")] = None,
    all_tokens: Annotated[bool, typer.Option("--all", help="Every token not used yet.")] = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Withdraw enrolment tokens: the peer commands carrying them enrol no one; enrolled consumers go on."""
    if bool(ids) == all_tokens:
        raise typer.BadParameter("name the tokens to revoke, or --all")

    async def run() -> list[str]:
        async with client_for(kubeconfig, context) as local:
            chosen = [token.id for token in await enrolment.outstanding(local)] if all_tokens else ids or []
            return await enrolment.revoke(local, chosen)

    with expected_errors():
        revoked = asyncio.run(run())
    for token in revoked:
        out.print(f"revoked enrolment token {token}")
    if not revoked:
        out.print("no enrolment token to revoke")


@get_app.command("kubeconfig")
def get_kubeconfig(
    peer: Annotated[str, typer.Option("--peer", help="The provider: name or cluster ID.")],
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Print the identity kubeconfig this cluster holds on a provider."""

    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as local:
            return await operations.peer_kubeconfig(local, peer)

    with expected_errors():
        config = asyncio.run(run())
    sys.stdout.write(yaml.safe_dump(config, sort_keys=False))


def _report(kubeconfig: str | None, context: str | None) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as local:
            return await operations.info(local)

    with expected_errors():
        return asyncio.run(run())
    raise AssertionError("unreachable")  # pragma: no cover - expected_errors exits


def info(kubeconfig: Kubeconfig = None, context: Context = None, output: Format = OUTPUT_OPTION) -> None:
    """This cluster's identity and every peer: role, conditions, offered and accepted resources."""
    report = _report(kubeconfig, context)
    if emit(report, fmt=output):
        return
    local = report["local"]
    line(
        "[bold]{name}[/bold] ({id})  API {api}  auth {auth}  {network}  {mode}",
        name=local["clusterName"],
        id=local["clusterID"],
        api=local["apiServerURL"],
        auth=local["authURL"],
        network=_network(local["network"]),
        mode=f"Tethered to {local['tetheredTo']}" if local["tetheredTo"] else local["workingMode"],
    )
    table(
        ["peer", "role", "outgoing", "incoming", "auth", "api", "network", "accepted", "offered"],
        [
            [
                p["name"],
                f"{p['role']} (tethered here)" if p["tethered"] else p["role"],
                *(
                    p["conditions"].get(c, {}).get("status", "-")
                    for c in (
                        ConditionType.OUTGOING,
                        ConditionType.INCOMING,
                        ConditionType.AUTHENTICATION,
                        ConditionType.API_SERVER,
                    )
                ),
                # The reason says it all (DirectRouting, CIDROverlap, NetworkUnknown); `status` gives the message.
                p["conditions"].get(ConditionType.NETWORK, {}).get("reason", "-"),
                ",".join(f"{k}={v}" for k, v in p["accepted"].items()) or "-",
                ",".join(f"{k}={v}" for k, v in p["offered"].items()) or "-",
            ]
            for p in report["peers"]
        ],
    )


def _network(network: dict[str, str] | None) -> str:
    if not network:
        return "network not recorded (run liqoctl install)"
    return f"pods {network['podCIDR']}  services {network['serviceCIDR']}"


def status(kubeconfig: Kubeconfig = None, context: Context = None) -> None:
    """What is wrong, and where: every condition of every peer that is not as it should be."""
    report = _report(kubeconfig, context)
    local = report["local"]
    line("[bold]{name}[/bold]: {count} peer(s)", name=local["clusterName"], count=len(report["peers"]))
    problems = operations.problems(report)
    for problem in problems:
        line("  [yellow]![/yellow] {problem}", problem=problem)
    if not problems:
        line("  [green]✓[/green] every peering is established")


def discover(kubeconfig: Kubeconfig = None, context: Context = None, output: Format = OUTPUT_OPTION) -> None:
    """The clusters this cluster's discovery sources hear, and what each becomes (the manager's own rules)."""

    async def run() -> list[dict[str, Any]]:
        async with client_for(kubeconfig, context) as local:
            identity = await operations.installed(local, role="local")
            now = datetime.datetime.now(datetime.UTC)
            return discovered.report_rows(await discovered.current(local, own_id=identity.cluster_id, now=now), now=now)

    with expected_errors():
        rows = asyncio.run(run())
    if emit(rows, fmt=output):
        return
    if not rows:
        out.print("no cluster heard (is a DiscoverySource there? kubectl get discoverysources)")
        return
    table(
        ["source", "name", "cluster id", "endpoint", "key", "expires", "verdict", "foreign cluster"],
        [
            [
                r["source"],
                r["clusterName"],
                r["clusterID"],
                r["authURL"],
                r["keyFingerprint"][:19] + "…",
                f"{r['expiresInSeconds']}s",
                r["verdict"],
                r["foreignCluster"] or "-",
            ]
            for r in rows
        ],
    )
    for r in rows:
        out.print(f"{r['clusterName']} ({r['clusterID']}): {r['reason']}")
