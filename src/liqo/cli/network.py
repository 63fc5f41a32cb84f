"""``liqoctl test network``: probe pod-to-pod traffic with every provider, both ways (liqo.network.testrun)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from liqo.api.identity import read_identity
from liqo.cli.errors import expected_errors
from liqo.cli.kube import Context, Kubeconfig, client_for
from liqo.cli.output import OUTPUT_OPTION, Format, emit, fail, out, progress, table
from liqo.localclusters.realnodes.images import TOOLBOX_PINNED
from liqo.network import testrun
from liqo.offloading import operations as offloading
from liqo.offloading.operations import OffloadingError

test_app = typer.Typer(help="Check that liqo works, with real traffic.", no_args_is_help=True)


@test_app.command("network")
def network_check(
    image: Annotated[
        str, typer.Option(help="The probe pods' image: it must have sh, socat and ping.")
    ] = TOOLBOX_PINNED,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the probe pods to run.")] = 120.0,
    keep: Annotated[bool, typer.Option("--keep/--no-keep", help="Keep the probe namespace (to look around).")] = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Run pods here and on every provider and send ICMP, TCP and UDP between them, both ways.

    Exits 1 if any exchange fails, naming the hop to look at (tunnel, gateway, route or NAT).
    """

    async def run() -> list[dict[str, Any]]:
        async with client_for(kubeconfig, context) as client:
            identity = await read_identity(client)
            if identity is None or identity.network is None:
                raise testrun.NetworkCheckError("liqo is not installed on this cluster")
            namespace = testrun.new_namespace()
            await testrun.create_namespace(client, namespace)
            try:
                await offloading.offload(client, namespace, pod_offloading_strategy="LocalAndRemote")
                await offloading.wait_offloaded(client, namespace, timeout=timeout, progress=progress)
                results = await testrun.run_check(
                    client,
                    namespace=namespace,
                    local_id=identity.cluster_id,
                    home=identity.network,
                    image=image,
                    timeout=timeout,
                    progress=progress,
                )
            finally:
                if keep:
                    progress(f"kept namespace {namespace}")
                else:
                    await testrun.delete_namespace(client, namespace)
            return testrun.as_json(results)

    with expected_errors():
        try:
            results = asyncio.run(run())
        except (testrun.NetworkCheckError, OffloadingError) as exc:
            fail(str(exc))
    failed = [r for r in results if not r["ok"]]
    if not emit({"passed": not failed, "results": results}, fmt=output):
        table(
            ["from", "to", "protocol", "address", "result", "detail"],
            [
                [r["source"], r["target"], r["protocol"], r["address"], "ok" if r["ok"] else "FAILED", r["detail"]]
                for r in results
            ],
        )
        for result in failed:
            out.print(f"{result['source']} → {result['address']} ({result['protocol']}): {result['hop']}")
        out.print(f"{len(results) - len(failed)}/{len(results)} exchanges passed")
    if failed:
        raise typer.Exit(1)
