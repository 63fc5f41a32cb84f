"""``liqoctl local build-image``: the archive and the reference on stdout, or one line saying why not."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from liqo.cli.main import app
from liqo.localclusters.realnodes import images


def test_it_prints_the_cached_archive_and_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIQO_CACHE_DIR", str(tmp_path / "cache"))
    project = Path(__file__).resolve().parents[3]
    archive = images.liqo_archive(project)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"built before")  # cached: nothing is built
    result = CliRunner().invoke(app, ["local", "build-image"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [str(archive), images.liqo_image_ref()]


def test_from_a_wheel_it_says_what_to_do_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "project_source", lambda: None)
    result = CliRunner().invoke(app, ["local", "build-image"])
    assert result.exit_code == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "needs its source tree" in line
    assert "make image" in line
