"""``liqoctl install`` / ``uninstall``."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer
import yaml

from liqo.api.names import MAX_CLUSTER_NAME
from liqo.api.networks import InvalidNetwork, IPNetwork, parse_cidr
from liqo.cli.errors import expected_errors
from liqo.cli.kube import Context, Kubeconfig, Timeout, client_for
from liqo.cli.output import line, out, progress
from liqo.install.installer import DEFAULT_TIMEOUT, InstallOptions, install, plan, uninstall
from liqo.kube.printable import describe, unprintable
from liqo.localclusters.launch import detect
from liqo.localclusters.spec import parse_labels
from liqo.network import ipam
from liqo.offloading.provider_namespaces import parse_reserved
from liqo.peering.authserver import DEFAULT_BURST, DEFAULT_RATE, RateLimit
from liqo.peering.enrolment import DEFAULT_MAX_PENDING_TENANTS, DEFAULT_MAX_TENANTS, TenantLimits


def install_command(
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    cluster_name: Annotated[str | None, typer.Option(help="Name of this cluster for its peers.")] = None,
    cluster_labels: Annotated[
        str | None, typer.Option(help="Labels of this cluster: k=v,k2=v2 (default: the recorded ones).")
    ] = None,
    api_server_url: Annotated[str | None, typer.Option(help="API server URL as peers reach it.")] = None,
    auth_url: Annotated[str | None, typer.Option(help="Authentication endpoint URL as peers reach it.")] = None,
    identity_ttl: Annotated[int, typer.Option(help="Lifetime of issued peer identities, seconds (>= 600).")] = 7200,
    max_tenants: Annotated[
        int, typer.Option(help="Consumers enrolled at most; further enrolments are refused.", min=0)
    ] = DEFAULT_MAX_TENANTS,
    max_pending_tenants: Annotated[
        int,
        typer.Option(help="Consumers enrolled without an accepted offer at most; further ones are refused.", min=0),
    ] = DEFAULT_MAX_PENDING_TENANTS,
    auth_burst: Annotated[
        int, typer.Option(help="Requests to the authentication endpoint one address may make at once.", min=1)
    ] = DEFAULT_BURST,
    auth_rate: Annotated[
        float,
        typer.Option(help="Requests a second to the authentication endpoint one address may make, sustained.", min=0),
    ] = DEFAULT_RATE,
    reserved_namespaces: Annotated[
        str,
        typer.Option(
            help="Namespaces no consumer may take for a twin, besides default, kube-* and liqo*: a,b,prefix-*."
        ),
    ] = "",
    pod_cidr: Annotated[
        str | None,
        typer.Option(
            help="This cluster's pod CIDR, told to peers (required the first time on a cluster that is not local)."
        ),
    ] = None,
    service_cidr: Annotated[
        str | None,
        typer.Option(
            help="This cluster's service CIDR, told to peers (required the first time on a cluster that is not local)."
        ),
    ] = None,
    peer_pools: Annotated[
        str,
        typer.Option(
            help="IPv4 CIDRs where peers' pods are named and routed, and nowhere else: a,b (default: the private"
            " ranges of RFC 1918)."
        ),
    ] = "",
    image: Annotated[
        str | None,
        typer.Option(help="liqo's image (default: the release's; on a local cluster, the one its real nodes hold)."),
    ] = None,
    replicas: Annotated[int, typer.Option(help="Manager replicas (every one serves the webhooks).", min=1)] = 2,
    discovery: Annotated[
        bool | None,
        typer.Option(
            "--discovery/--no-discovery",
            help="Announce this cluster on its nodes' LAN and hear the others (default: as installed; off at first).",
        ),
    ] = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    dry_run: Annotated[bool, typer.Option(help="Print what would be applied instead of applying it.")] = False,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="With --dry-run: manifests (YAML), or values (the chart's values.yaml for `helm install -f`).",
        ),
    ] = "manifests",
) -> None:
    """Install liqo: CRDs, namespace, RBAC, cluster identity, authentication endpoint and manager."""
    with expected_errors():
        if identity_ttl < 600:
            raise typer.BadParameter("--identity-ttl must be at least 600 seconds (the CSR API's minimum)")
        try:
            rate_limit = RateLimit(burst=auth_burst, per_second=auth_rate)
        except ValueError:
            raise typer.BadParameter("must be a positive number", param_hint="--auth-rate") from None
        if cluster_name is not None and (char := unprintable(cluster_name)):
            raise typer.BadParameter(f"must be printable text: it holds {describe(char)}", param_hint="--cluster-name")
        if cluster_name is not None and len(cluster_name) > MAX_CLUSTER_NAME:
            raise typer.BadParameter(f"must be at most {MAX_CLUSTER_NAME} characters", param_hint="--cluster-name")
        try:
            reserved = parse_reserved(reserved_namespaces)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--reserved-namespaces") from None
        try:
            pools = (
                tuple(str(pool) for pool in ipam.parse_pools(peer_pools, field="--peer-pools")) if peer_pools else ()
            )
        except InvalidNetwork as exc:
            raise typer.BadParameter(str(exc), param_hint="--peer-pools") from None
        if output not in ("manifests", "values"):
            raise typer.BadParameter("must be manifests or values", param_hint="--output")
        options = InstallOptions(
            cluster_name=cluster_name,
            cluster_labels=parse_labels(cluster_labels) if cluster_labels is not None else None,
            image=image,
            replicas=replicas,
            api_server_url=api_server_url,
            auth_url=auth_url,
            identity_ttl=identity_ttl,
            tenant_limits=TenantLimits(max_tenants=max_tenants, max_pending=max_pending_tenants),
            auth_rate_limit=rate_limit,
            reserved_namespaces=reserved,
            pod_cidr=_cidr("--pod-cidr", pod_cidr),
            service_cidr=_cidr("--service-cidr", service_cidr),
            peer_pools=pools,
            timeout=timeout,
            lan_discovery=discovery,
        )
        asyncio.run(_install(kubeconfig, context, options, dry_run=dry_run, output=output))


def _cidr(flag: str, value: str | None) -> IPNetwork | None:
    if value is None:
        return None
    try:
        return parse_cidr(value, field=flag)
    except InvalidNetwork as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None


async def _install(
    kubeconfig: str | None, context: str | None, options: InstallOptions, *, dry_run: bool, output: str
) -> None:
    async with client_for(kubeconfig, context) as client:
        if dry_run:
            planned = await plan(client, options, launch=detect(client.server))
            if output == "values":
                sys.stdout.write(yaml.safe_dump(planned.values.to_helm(), sort_keys=False))
            else:
                sys.stdout.write(yaml.safe_dump_all(planned.items, sort_keys=False))
            return
        identity = await install(client, options, progress=progress, launch=detect(client.server))
    line("liqo installed on [bold]{name}[/bold] (cluster ID {id})", name=identity.cluster_name, id=identity.cluster_id)


def uninstall_command(
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    purge: Annotated[
        bool,
        typer.Option(
            help="Also delete the CRDs, every liqo resource, and the namespaces (tenants, twins), virtual"
            " nodes and CSRs liqo made."
        ),
    ] = False,
) -> None:
    """Uninstall liqo (refused while peerings are active, unless --purge)."""

    async def run() -> None:
        async with client_for(kubeconfig, context) as client:
            await uninstall(client, purge=purge, progress=progress, launch=detect(client.server))

    with expected_errors():
        asyncio.run(run())
    out.print("liqo uninstalled" + (" and purged" if purge else ""))
