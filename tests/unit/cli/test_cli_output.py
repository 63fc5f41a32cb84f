"""What liqoctl prints shows a value as it is: text a peer or a kubelet wrote is never read as rich markup."""

from __future__ import annotations

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from liqo.cli import output
from liqo.kube.printable import unprintable

UNREADY = "containers with unready status: [manager] [/] [bold]x[/bold]"


@pytest.fixture
def consoles(monkeypatch: pytest.MonkeyPatch) -> tuple[Console, Console]:
    out = Console(record=True, width=1000, markup=False, force_terminal=False)
    err = Console(record=True, width=1000, markup=False, force_terminal=False)
    monkeypatch.setattr(output, "out", out)
    monkeypatch.setattr(output, "err", err)
    return out, err


def test_progress_errors_and_table_cells_show_brackets_as_they_are(consoles: tuple[Console, Console]) -> None:
    out, err = consoles
    output.progress(UNREADY)
    with pytest.raises(typer.Exit):
        output.fail(UNREADY)
    output.table(["peer", "message"], [["[evil]", UNREADY]])
    assert err.export_text() == f"• {UNREADY}\nerror: {UNREADY}\n"
    printed = out.export_text()
    assert "[evil]" in printed
    assert UNREADY in printed


@given(st.text(max_size=200).filter(lambda text: unprintable(text) is None))
def test_line_styles_its_template_and_shows_every_value_as_it_is(value: str) -> None:
    console = Console(record=True, width=10_000, markup=False, force_terminal=False)
    saved, output.out = output.out, console
    try:
        output.line("peered with [bold]{name}[/bold]", name=value)
    finally:
        output.out = saved
    assert console.export_text() == f"peered with {value}\n"
