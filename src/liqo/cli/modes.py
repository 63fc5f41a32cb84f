"""``liqoctl mode``: show this cluster's working mode; ``mode tethered --to PEER`` and ``mode autonomous`` switch it."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from liqo.api.workingmodes import Mode
from liqo.cli.errors import expected_errors
from liqo.cli.kube import Context, Kubeconfig, Timeout, client_for
from liqo.cli.output import OUTPUT_OPTION, Format, emit, fail, line, progress, table
from liqo.modes import operations
from liqo.modes.operations import ModeError

mode_app = typer.Typer(
    help="Show or switch who schedules this cluster's workloads: itself (Autonomous) or one peer (Tethered).",
    invoke_without_command=True,
)

Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the switch is done, saying each step.")]


@contextmanager
def _failures() -> Iterator[None]:
    """Expected failures of these commands: one line on stderr, exit code 1."""
    with expected_errors():
        try:
            yield
        except ModeError as exc:
            fail(str(exc))


def _print(row: dict[str, Any], *, fmt: Format) -> None:
    if emit(row, fmt=fmt):
        return
    table(
        ["mode", "peer", "phase", "switched", "reason", "message"],
        [[row["mode"], row.get("peer", "-"), row["phase"], row["switched"], row["reason"], row["message"] or "-"]],
    )


@mode_app.callback()
def show(
    ctx: typer.Context,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: Format = OUTPUT_OPTION,
) -> None:
    """The working mode asked for and where the switch is."""
    if ctx.invoked_subcommand is not None:
        return

    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as client:
            return await operations.current(client)

    with _failures():
        row = asyncio.run(run())
    _print(row, fmt=output)


def _switch(
    mode: Mode,
    *,
    to: str | None = None,
    fallback_after: float | None = None,
    wait: bool,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
    output: Format,
) -> None:
    """Ask for ``mode``, wait for it if asked, and print where the switch is."""

    async def run() -> dict[str, Any]:
        async with client_for(kubeconfig, context) as client:
            generation = await operations.switch(
                client,
                mode=mode,
                to=to,
                fallback_after=None if fallback_after is None else datetime.timedelta(seconds=fallback_after),
            )
            if not wait:
                return await operations.current(client)
            progress(f"switching to {mode.value}")
            return await operations.wait_switched(client, generation=generation, timeout=timeout, progress=progress)

    with _failures():
        row = asyncio.run(run())
    if output is Format.TABLE and wait:
        if mode is Mode.TETHERED:
            line("tethered to [bold]{peer}[/bold]", peer=row.get("peer", to))
        else:
            line("[bold]autonomous[/bold]: this cluster schedules its own workloads")
    _print(row, fmt=output)


@mode_app.command("tethered")
def tethered(
    to: Annotated[str, typer.Option("--to", help="The peer that takes control: its ForeignCluster, name or ID.")],
    fallback_after: Annotated[
        float | None,
        typer.Option(
            help="Seconds the peer may be unreachable before the tether ends by itself (at least 30; default: never)."
        ),
    ] = None,
    wait: Wait = True,
    timeout: Timeout = operations.SWITCH_TIMEOUT,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Hand this cluster's scheduling to one peer: its namespaces go there, and the peer places pods here."""
    _switch(
        Mode.TETHERED,
        to=to,
        fallback_after=fallback_after,
        wait=wait,
        timeout=timeout,
        kubeconfig=kubeconfig,
        context=context,
        output=output,
    )


@mode_app.command("autonomous")
def autonomous(
    wait: Wait = True,
    timeout: Timeout = operations.SWITCH_TIMEOUT,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: Format = OUTPUT_OPTION,
) -> None:
    """Take scheduling back: the tether's namespaces come home, their pods rescheduled here."""
    _switch(Mode.AUTONOMOUS, wait=wait, timeout=timeout, kubeconfig=kubeconfig, context=context, output=output)
