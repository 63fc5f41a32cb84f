"""``liqoctl local up``: a flag left out means "as stored", so ``up NAME`` resumes whatever NAME was made with."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from liqo.cli.main import app
from liqo.localclusters import clusters
from liqo.localclusters.clusters import ClusterInfo
from liqo.localclusters.layout import ClusterDir, write_json
from liqo.localclusters.spec import ClusterSpec, SpecRequest

STORED = ClusterSpec(name="rome", nodes=0, real_nodes=1)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LIQO_HOME", str(tmp_path))
    write_json(ClusterDir.named("rome").cluster_file, {"spec": STORED.to_dict(), "ports": {}})
    return tmp_path


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[SpecRequest]:
    """What ``clusters.up`` was asked for (it brings nothing up)."""
    requests: list[SpecRequest] = []

    def up(request: SpecRequest, **_: object) -> ClusterInfo:
        requests.append(request)
        return ClusterInfo(
            name=request.name, api_url="https://127.0.0.1:1", state="Running", kubeconfig="", nodes="0/0"
        )

    monkeypatch.setattr(clusters, "up", up)
    return requests


@pytest.mark.parametrize(
    ("args", "given"),
    [
        ([], {}),
        (["--nodes", "0", "--real-nodes", "1"], {"nodes": 0, "real_nodes": 1}),
        (["--nodes", "1"], {"nodes": 1}),  # the default's value, given: compared like any other
        (["--node-labels", "zone=north", "--cpus", ""], {"node_labels": {"zone": "north"}, "cpus": ""}),
    ],
)
def test_up_passes_exactly_the_flags_given(asked: list[SpecRequest], args: list[str], given: dict[str, object]) -> None:
    result = CliRunner().invoke(app, ["local", "up", "rome", *args])
    assert result.exit_code == 0, result.output
    assert asked == [SpecRequest("rome", given)]


def test_up_without_flags_resumes_a_cluster_made_with_other_than_the_defaults(asked: list[SpecRequest]) -> None:
    result = CliRunner().invoke(app, ["local", "up", "rome"])
    assert result.exit_code == 0, result.output
    assert asked[0].settle(clusters.stored_spec("rome")) == STORED


def test_up_with_a_flag_that_differs_from_the_stored_one_is_refused_before_anything_runs(home: Path) -> None:
    result = CliRunner().invoke(app, ["local", "up", "rome", "--nodes", "1", "--real-nodes", "0"])
    assert result.exit_code == 1
    assert "cluster 'rome' exists with other settings (nodes: 0 -> 1; real_nodes: 1 -> 0)" in " ".join(
        result.output.split()
    )
    assert sorted(p.name for p in (home / "local" / "rome").iterdir()) == ["cluster.json"]
