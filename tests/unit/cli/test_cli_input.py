"""Bad input to ``liqoctl local``: one clear line, exit code 1, and nothing created."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from liqo.cli.main import app


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LIQO_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["local", "up", "Rome"], "cluster name 'Rome'"),
        (["local", "up", "rome", "--pod-cidr", "10.0.0.0/33"], "--pod-cidr '10.0.0.0/33' is not a CIDR"),
        (["local", "up", "rome", "--node-memory", "lots"], "'lots' is not a Kubernetes quantity"),
        (["local", "up", "rome", "--node-labels", "novalue"], "must be key=value"),
        (["local", "up", "rome", "--service-cidr", "10.244.0.0/16"], "overlap"),
        (["local", "down", "nowhere"], "no local cluster named 'nowhere' (known: none)"),
        (["local", "env", "nowhere"], "no local cluster named 'nowhere'"),
        (["local", "stop", "nowhere", "etcd"], "no local cluster named 'nowhere'"),
    ],
)
def test_bad_input_is_one_clear_error_and_creates_nothing(home: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert not (home / "local" / "rome").exists()


def test_list_with_no_clusters(home: Path) -> None:
    result = CliRunner().invoke(app, ["local", "list", "-o", "json"])
    assert result.exit_code == 0
    assert result.output.strip() == "[]"
