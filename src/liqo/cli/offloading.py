"""``liqoctl offload namespace`` and ``liqoctl unoffload namespace``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from liqo.cli.errors import expected_errors
from liqo.cli.kube import Context, Kubeconfig, Timeout, client_for
from liqo.cli.output import OUTPUT_OPTION, Format, emit, fail, line, progress, table
from liqo.offloading import operations
from liqo.offloading.operations import OffloadingError

offload_app = typer.Typer(help="Extend namespaces to providers.", no_args_is_help=True)
unoffload_app = typer.Typer(help="Stop extending namespaces to providers.", no_args_is_help=True)

Namespace = Annotated[str, typer.Argument(help="The namespace (it must exist).")]
Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until done, reporting each provider.")]


@contextmanager
def _failures() -> Iterator[None]:
    """Expected failures of these commands: one line on stderr, exit code 1."""
    with expected_errors():
        try:
            yield
        except OffloadingError as exc:
            fail(str(exc))


@offload_app.command("namespace")
def offload_namespace(
    namespace: Namespace,
    pod_offloading_strategy: Annotated[
        str | None,
        typer.Option(help="Where its pods may run: Local, Remote or LocalAndRemote (default LocalAndRemote)."),
    ] = None,
    namespace_mapping_strategy: Annotated[
        str | None,
        typer.Option(
            help="The twins' name: DefaultName (<namespace>-<cluster ID prefix>) or EnforceSameName, on the"
            " providers whose SharingPolicy allows the name (default DefaultName; it cannot change once set)."
        ),
    ] = None,
    selector: Annotated[
        list[str] | None,
        typer.Option(help="key=value a provider's virtual node must have; repeat for more (default: every provider)."),
    ] = None,
    wait: Wait = True,
    timeout: Timeout = operations.OFFLOAD_TIMEOUT,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Offload a namespace: twins on the selected providers, where its pods may then run."""

    async def run() -> dict[str, Any]:
        # Bad input is refused before any connection, so that nothing is created.
        operations.check_strategies(
            pod_offloading_strategy=pod_offloading_strategy, namespace_mapping_strategy=namespace_mapping_strategy
        )
        cluster_selector = operations.parse_selector(selector) if selector is not None else None
        async with client_for(kubeconfig, context) as local:
            applied = await operations.offload(
                local,
                namespace,
                pod_offloading_strategy=pod_offloading_strategy,
                namespace_mapping_strategy=namespace_mapping_strategy,
                cluster_selector=cluster_selector,
            )
            if not wait:
                return applied
            progress(f"offloading {namespace}")
            return await operations.wait_offloaded(local, namespace, timeout=timeout, progress=progress)

    with _failures():
        offloading = asyncio.run(run())
    summary = operations.report(offloading)
    if emit(summary, fmt=output):
        return
    if not wait:
        line("namespace [bold]{ns}[/bold] offloading requested (`kubectl get nsof -n {ns}`)", ns=namespace)
        return
    line(
        "namespace [bold]{ns}[/bold] offloaded as [bold]{remote}[/bold]",
        ns=namespace,
        remote=summary["remoteNamespace"],
    )
    table(
        ["cluster", "remote namespace", "phase", "message"],
        [[c["clusterName"], c["remoteNamespace"], c["phase"], c["message"] or "-"] for c in summary["clusters"]],
    )


@unoffload_app.command("namespace")
def unoffload_namespace(
    namespace: Namespace,
    wait: Wait = True,
    timeout: Timeout = operations.UNOFFLOAD_TIMEOUT,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Stop offloading a namespace: its twins on every provider are deleted (with whatever runs there)."""

    async def run() -> None:
        async with client_for(kubeconfig, context) as local:
            await operations.unoffload(local, namespace, wait=wait, timeout=timeout, progress=progress)

    with _failures():
        asyncio.run(run())
    line("namespace [bold]{ns}[/bold] {done}", ns=namespace, done="unoffloaded" if wait else "unoffloading requested")
