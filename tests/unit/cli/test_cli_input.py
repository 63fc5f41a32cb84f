"""Bad input to ``liqoctl local``: one clear line, exit code 1, and nothing created."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from liqo.apps.manager import parse_args
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


def test_install_refuses_a_bad_reserved_namespace_before_talking_to_any_cluster(tmp_path: Path) -> None:
    nowhere = tmp_path / "no.kubeconfig"  # never read: the flag is checked first
    result = CliRunner().invoke(app, ["install", "--reserved-namespaces", "ok,Bad_Name", "--kubeconfig", str(nowhere)])
    assert result.exit_code == 2  # a usage error, as every refused flag value
    output = " ".join(result.output.replace("│", " ").split())
    assert "Invalid value for --reserved-namespaces: reserved namespace 'Bad_Name' is neither" in output


def test_the_manager_refuses_a_bad_reserved_namespace_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--reserved-namespaces=cert-manager,team-*"]).reserved_namespaces == ("cert-manager", "team-*")
    assert parse_args([]).reserved_namespaces == ()
    with pytest.raises(SystemExit):
        parse_args(["--reserved-namespaces=*"])
    assert "'*' is neither a namespace name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pod-cidr", "10.244.0.1/16"], "Invalid value for --pod-cidr: '--pod-cidr': '10.244.0.1/16' is not written"),
        (["--service-cidr", "ten"], "Invalid value for --service-cidr: '--service-cidr': 'ten' is not a CIDR"),
        (["--pod-cidr", "fd00::%eth0/64"], "IPv6 zone"),
        (["--peer-pools", "10.0.0.0/8,10.1.0.1/16"], "Invalid value for --peer-pools: '--peer-pools': '10.1.0.1/16'"),
        (["--peer-pools", "fd00::/8"], "Invalid value for --peer-pools: '--peer-pools': fd00::/8 is IPv6"),
    ],
)
def test_install_refuses_a_malformed_cidr_before_talking_to_any_cluster(
    tmp_path: Path, args: list[str], message: str
) -> None:
    nowhere = tmp_path / "no.kubeconfig"
    result = CliRunner().invoke(app, ["install", *args, "--kubeconfig", str(nowhere)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())


def test_kubeconfig_and_context_may_come_before_the_command(tmp_path: Path) -> None:
    before, after = tmp_path / "before.kubeconfig", tmp_path / "after.kubeconfig"
    result = CliRunner().invoke(app, ["--kubeconfig", str(before), "offload", "namespace", "demo"])
    assert result.exit_code == 1
    assert f"no kubeconfig at {before}" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["--kubeconfig", str(before), "info", "--kubeconfig", str(after)])
    assert f"no kubeconfig at {after}" in " ".join(result.output.split())  # the command's own wins


def _kubeconfig(path: Path, *, context: str) -> Path:
    path.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        f"users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: {context}, context: {{cluster: c, user: u}}}}]\n"
    )
    return path


def test_the_global_options_never_name_the_remote_cluster(tmp_path: Path) -> None:
    local = _kubeconfig(tmp_path / "local", context="home")
    remote = _kubeconfig(tmp_path / "remote", context="away")
    args = ["--kubeconfig", str(local), "--context", "home", "peer", "--remote-kubeconfig", str(remote)]
    result = CliRunner().invoke(app, [*args, "--timeout", "1"])
    output = " ".join(result.output.split())
    assert result.exit_code == 1
    assert "home" not in output  # the remote's own current context was used: the error is about reaching it
    assert "127.0.0.1:9" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "peer-command", "--valid-for", "31d"], "31d is longer than 30 days"),
        (["generate", "peer-command", "--valid-for", "soon"], "'soon' is not a duration such as 30m, 24h or 7d"),
        (["token", "revoke"], "name the tokens to revoke, or --all"),
        (["token", "revoke", "0123456789abcdef", "--all"], "name the tokens to revoke, or --all"),
        (["install", "--max-pending-tenants", "-1"], "Invalid value for '--max-pending-tenants'"),
    ],
)
def test_token_and_cap_flags_are_refused_before_talking_to_any_cluster(
    tmp_path: Path, args: list[str], message: str
) -> None:
    nowhere = tmp_path / "no.kubeconfig"  # never read: the flags are checked first
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(nowhere)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())


def test_the_manager_takes_caps_of_zero_or_more() -> None:
    assert (parse_args([]).max_tenants, parse_args([]).max_pending_tenants) == (100, 10)
    assert parse_args(["--max-tenants=0", "--max-pending-tenants=3"]).max_tenants == 0
    for bad in ("-1", "x", "²"):
        with pytest.raises(SystemExit):
            parse_args([f"--max-pending-tenants={bad}"])


def test_mode_tethered_names_its_peer_and_the_cluster_it_talks_to(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["mode", "tethered"])
    assert missing.exit_code == 2
    assert "--to" in missing.output
    nowhere = tmp_path / "no.kubeconfig"
    result = CliRunner().invoke(app, ["mode", "tethered", "--to", "corp", "--kubeconfig", str(nowhere)])
    assert result.exit_code == 1
    assert f"no kubeconfig at {nowhere}" in " ".join(result.output.split())
