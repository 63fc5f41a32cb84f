"""The build driver's error handling, with a stand-in ``go`` on PATH (the real build runs in CI's setup)."""

import stat
from pathlib import Path

import pytest

from liqo.local import toolchain

GO_MOD = """module k8s.io/kubernetes

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20250820121507-0af2bda4dd1d
)

require k8s.io/cri-streaming v0.0.0 // indirect
"""


def test_staging_modules_are_those_required_at_v0_0_0() -> None:
    assert toolchain.staging_modules(GO_MOD) == ["k8s.io/api", "k8s.io/client-go", "k8s.io/cri-streaming"]


def fake_go(bin_dir: Path, script: str) -> None:
    go = bin_dir / "go"
    go.write_text("#!/bin/sh\n" + script)
    go.chmod(go.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LIQO_CACHE_DIR", str(tmp_path / "cache"))
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_missing_go_names_what_to_install(isolated: Path) -> None:
    with pytest.raises(toolchain.ToolchainError, match=r"Install Go 1\.26 or newer"):
        toolchain.ensure_binaries()


def test_old_go_is_refused(isolated: Path) -> None:
    fake_go(isolated, 'echo "go1.22.5"\n')
    with pytest.raises(toolchain.ToolchainError, match=r"found go1\.22\.5"):
        toolchain.ensure_binaries()


def test_failed_step_is_named_and_leaves_nothing_half_built(isolated: Path, tmp_path: Path) -> None:
    # A go that "compiles" a partial binary, then fails.
    fake_go(
        isolated,
        'case "$1 $2" in\n'
        '  "env GOVERSION") echo go1.26.8 ;;\n'
        '  "mod init") touch go.mod ;;\n'
        '  "mod download") echo "{\\"GoMod\\": \\"/dev/null\\", \\"Dir\\": \\"/nonexistent\\"}" ;;\n'
        '  "mod edit") ;;\n'
        '  "get -tool") ;;\n'
        '  *) for a in "$@"; do case "$a" in */) touch "$a/kube-apiserver" ;; esac; done;'
        ' echo "compile error: boom" >&2; exit 2 ;;\n'
        "esac\n",
    )
    with pytest.raises(toolchain.BuildError) as failure:
        toolchain.ensure_binaries()
    assert failure.value.step.startswith("kubernetes: compile")
    assert "compile error: boom" in str(failure.value)
    target = toolchain.bin_dir()
    assert not (target / "kube-apiserver").exists()
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".partial-")]
