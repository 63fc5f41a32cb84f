"""The build driver's error handling, with a stand-in ``go`` on PATH (the real build runs in CI's setup)."""

import base64
import hashlib
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from liqo.localclusters import toolchain

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


def test_wireguard_go_is_installed_from_its_module_and_kept(isolated: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake_go(
        isolated,
        f'echo "$@ GOBIN=$GOBIN CGO_ENABLED=$CGO_ENABLED" >> {calls}\n'
        'case "$1 $2" in\n'
        '  "env GOVERSION") echo go1.26.8 ;;\n'
        '  "install -v") printf "#!/bin/sh\\necho wireguard-go v0.0.20250522\\n" > "$GOBIN/wireguard";'
        ' chmod +x "$GOBIN/wireguard" ;;\n'
        "esac\n",
    )
    binary = toolchain.ensure_wireguard_go()
    assert binary == toolchain.wireguard_go_dir() / "wireguard-go"
    assert os.access(binary, os.X_OK)
    assert not (binary.parent / "wireguard").exists()
    [install] = [line for line in calls.read_text().splitlines() if line.startswith("install")]
    module = f"{toolchain.WIREGUARD_GO_MODULE}@{toolchain.WIREGUARD_GO_VERSION}"
    assert install.startswith(f"install -v {' '.join(toolchain.WIREGUARD_GO_FLAGS)} {module} GOBIN=")
    assert install.endswith("CGO_ENABLED=0")
    assert toolchain.WIREGUARD_GO_VERSION in str(binary)
    calls.unlink()
    assert toolchain.ensure_wireguard_go() == binary  # cached: go is not run again
    assert not calls.exists()


# -- helm, taken from a PyPI package --------------------------------------------------------------------

FAKE_HELM = b"#!/bin/sh\necho v" + toolchain.HELM_VERSION.encode() + b"\n"


def fake_jsii(path: Path, layer: dict[str, bytes]) -> Path:
    """An npm tarball like the package's, whose layer zip holds ``layer``."""
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        for name, data in layer.items():
            archive.writestr(name, data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tgz:
        for name, data in ((toolchain.HELM_LAYER, zipped.getvalue()), ("package/lib/index.js", b"//")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tgz.addfile(info, io.BytesIO(data))
    return path


def fake_wheel(directory: Path) -> Path:
    """A small wheel shaped like the pinned package (the npm tarball where the real one has it)."""
    jsii = fake_jsii(directory / "jsii.tgz", {"helm/helm": FAKE_HELM, "kubectl/kubectl": b"not wanted"})
    name, version = toolchain.HELM_PACKAGE.split("==")
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        toolchain.HELM_JSII: jsii.read_bytes(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    wheel = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist_info}/RECORD", record + f"{dist_info}/RECORD,,\n")
    return wheel


@pytest.fixture
def helm_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pinned package stands for a fake wheel of this test (uv installs it from its path, hash checked)."""
    monkeypatch.setenv("LIQO_CACHE_DIR", str(tmp_path / "cache"))
    wheel = fake_wheel(tmp_path / "wheel")
    monkeypatch.setattr(toolchain, "HELM_PACKAGE", str(wheel))
    monkeypatch.setattr(toolchain, "HELM_PACKAGE_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    return wheel


def test_extract_helm_takes_helm_alone_and_makes_it_executable(tmp_path: Path) -> None:
    jsii = fake_jsii(tmp_path / "jsii.tgz", {"helm/helm": FAKE_HELM, "kubectl/kubectl": b"not wanted"})
    (tmp_path / "out").mkdir()
    toolchain.extract_helm(jsii=jsii, out=tmp_path / "out" / "helm")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["helm"]
    assert (tmp_path / "out" / "helm").read_bytes() == FAKE_HELM
    assert os.access(tmp_path / "out" / "helm", os.X_OK)


def test_extract_helm_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIQO_CACHE_DIR", str(tmp_path / "cache"))
    jsii = fake_jsii(tmp_path / "jsii.tgz", {"kubectl/kubectl": b"no helm here"})
    with pytest.raises(toolchain.BuildError, match="helm/helm") as failure:
        toolchain.extract_helm(jsii=jsii, out=tmp_path / "helm")
    assert failure.value.log.is_file()
    assert not (tmp_path / "helm").exists()


def test_ensure_helm_installs_the_package_and_keeps_helm_beside_kubectl(helm_package: Path) -> None:
    said: list[str] = []
    path = toolchain.ensure_helm(progress=said.append)
    assert path == toolchain.helm_path() == toolchain.bin_dir() / "helm"
    assert path.read_bytes() == FAKE_HELM
    assert sorted(p.name for p in toolchain.bin_dir().iterdir()) == ["helm"]
    assert [p.name for p in toolchain.bin_dir().parent.iterdir()] == [toolchain.bin_dir().name]  # no scratch left
    assert len(said) == 1


def test_ensure_helm_is_idempotent(helm_package: Path) -> None:
    toolchain.ensure_helm()
    helm_package.unlink()  # nothing to install from any more: a second call must not try
    said: list[str] = []
    assert toolchain.ensure_helm(progress=said.append) == toolchain.helm_path()
    assert said == []


def test_ensure_helm_replaces_another_version(helm_package: Path) -> None:
    toolchain.helm_path().parent.mkdir(parents=True)
    toolchain.helm_path().write_text("#!/bin/sh\necho v3.0.0\n")
    toolchain.helm_path().chmod(0o755)
    toolchain.ensure_helm()
    assert toolchain.helm_path().read_bytes() == FAKE_HELM


def test_a_package_with_another_hash_is_refused(helm_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "HELM_PACKAGE_SHA256", "0" * 64)
    with pytest.raises(toolchain.BuildError, match="helm: install") as failure:
        toolchain.ensure_helm()
    assert "Hash mismatch" in str(failure.value)
    assert not toolchain.helm_path().exists()
    assert not [p for p in toolchain.helm_path().parent.parent.iterdir() if p.name.startswith(".partial-")]
