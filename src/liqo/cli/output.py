"""How commands print: tables for people, ``-o json|yaml`` for scripts, errors on stderr.

Commands build plain data (dicts and lists) and hand it here; only this module knows about rich, so a
command's logic never depends on how its result is shown.

Nothing printed is read as rich markup unless a command says so with :func:`line`, whose values are shown as
they are. A peer names its cluster, writes its conditions' messages and its pods' statuses; a kubelet's
message reads "containers with unready status: [manager]": parsed as markup, ``[manager]`` would vanish and
``[/]`` would crash the command.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import orjson
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

out = Console(highlight=False, soft_wrap=True, markup=False)
if not out.is_terminal:
    # Piped or captured: never truncate table cells (rich would assume 80 columns).
    out = Console(highlight=False, soft_wrap=True, markup=False, width=1000)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


class Format(enum.StrEnum):
    """Output formats of listing commands."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OUTPUT_OPTION = typer.Option(Format.TABLE, "--output", "-o", help="Output format: table, json or yaml.")


def emit(data: Any, *, fmt: Format) -> bool:
    """Print ``data`` as JSON or YAML; False for the table format (the caller prints its table)."""
    if fmt is Format.JSON:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        return True
    if fmt is Format.YAML:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
        return True
    return False


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a borderless table in kubectl's style."""
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        grid.add_column(column.upper())
    for row in rows:
        grid.add_row(*row)
    out.print(grid)


def line(template: str, /, **values: object) -> None:
    """Print ``template`` on stdout, its rich markup styled, each ``{name}`` the value given, shown as it is.

    ``line("peered with [bold]{name}[/bold]", name=...)``: the name is escaped, whatever it holds.
    """
    out.print(Text.from_markup(template.format(**{key: escape(str(value)) for key, value in values.items()})))


def progress(message: str) -> None:
    """A progress line on stderr, so stdout stays clean for ``-o json`` and ``eval $(...)``."""
    err.print(Text.assemble(("•", "dim"), " ", message))


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print an error on stderr and exit with ``code``."""
    err.print(Text.assemble(("error:", "bold red"), " ", message))
    raise typer.Exit(code)
