"""Container images for real nodes, built on this machine: no container registry is ever reached.

Three images are preloaded into every real node: the sandbox image (``pause``, our own few lines of Go in
``pause/main.go``, since the upstream one would have to be pulled), a tool image for trying things out,
made of Debian packages by ``mmdebstrap`` (extract mode: the packages' files without their maintainer
scripts, so no dpkg or perl ends up in it), and liqo's own image when liqo runs from its source tree.
Each is written as an OCI image layout in a tar archive, the format ``ctr images import`` and every other
tool reads. An archive is named after a hash of what goes into it, so a changed package list or pause
source builds a new one and an unchanged one is reused.

liqo's image is Debian's Python 3.11 (extract mode again), our wheel and its locked dependencies in
``/opt/liqo``, byte-compiled, run as uid 65532: one image for every entry point (``python3 -m
liqo.apps.manager``, ``liqo.apps.virtualkubelet``, ``liqo.cli.main``). It also carries the network
fabric's tools, which the gateway and the node agent (our code, as uid 0 with NET_ADMIN) shell out to:
``ip``, ``nft`` and ``wg`` from Debian, with the libraries they link (extract mode follows the packages'
dependencies), and ``wireguard-go``, which is not Debian's: a static binary built from its Go module at a
pinned commit (:func:`liqo.localclusters.toolchain.ensure_wireguard_go`, cached beside the other binaries), since
bookworm's 2022 build lacks the batched I/O and offloads that multiply the fabric's throughput. Its
archive's hash covers the recipe (that pin included) and every file the wheel and the lock are made of,
so a code change rebuilds it and a change to the tests or the docs does not. The ``Containerfile`` at the
repository root makes the same image with an ordinary container build, for machines that have one; a
unit test keeps the two recipes equal. An installed liqo (a wheel, no source) cannot build it: nodes then
go without, and ``liqoctl local load-image`` loads one built elsewhere.

The archive writing is pure data (:func:`image_config`, :func:`manifest`, :func:`index`) around one I/O
function; the layer is a plain, uncompressed tar (its digest is its diff ID), which costs disk space in
the cache and saves the compression time of every build and the decompression of every import.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import liqo
from liqo.localclusters import toolchain

Progress = Callable[[str], None]

PAUSE_IMAGE = "localhost/liqo/pause:1"
TOOLBOX_IMAGE = "localhost/liqo/toolbox:latest"
TOOLBOX_PINNED = "localhost/liqo/toolbox:1"
"""The same tool image under a tag other than ``latest``: pods naming it default to ``IfNotPresent``."""
DEBIAN_SUITE = "bookworm"
TOOLBOX_PACKAGES = (
    "busybox",
    "socat",
    "iperf3",
    "iputils-ping",
    "curl",
    "iproute2",
    "nftables",
    "usr-is-merged",
)
"""``usr-is-merged`` stands in for ``usrmerge``, which would bring perl along."""
TOOLBOX_PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt",
                 "var/lib/apt/lists")  # fmt: skip
LIQO_REPOSITORY = "localhost/liqo/liqo"
LIQO_UID = 65532
LIQO_USER = f"{LIQO_UID}:{LIQO_UID}"
NETWORK_PACKAGES = ("wireguard-tools", "iproute2", "nftables")
"""The network fabric's tools from Debian: ``wg``, ``ip``, ``nft``. ``wireguard-go`` (for nodes without the
WireGuard kernel module) is built from its Go module instead: :data:`WIREGUARD_GO_PATH`."""
WIREGUARD_GO_PATH = "usr/bin/wireguard-go"
"""Where liqo's image has wireguard-go (on ``PATH``, where Debian's package puts it)."""
LIQO_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "python3-minimal", "ca-certificates",
                 *NETWORK_PACKAGES, "usr-is-merged")  # fmt: skip
NETWORK_PRUNE = (
    "usr/share/bash-completion", "lib/systemd", "usr/bin/wg-quick",
    "sbin/tc", "usr/lib/x86_64-linux-gnu/tc", "sbin/devlink", "usr/bin/rdma", "sbin/tipc", "sbin/dcb", "sbin/vdpa",
    "sbin/rtmon", "sbin/rtacct", "usr/sbin/arpd", "usr/sbin/genl", "usr/bin/nstat", "usr/bin/lnstat",
    "usr/bin/ctstat", "usr/bin/rtstat", "usr/bin/routel",
)  # fmt: skip
"""What the fabric's packages bring that no pod runs: shell completions, systemd units, ``wg-quick`` (a bash
script, and there is no bash), and every iproute2 tool but ``ip``, ``ss`` and ``bridge`` (traffic control and
its plugins, hardware and protocol tools, statistics daemons)."""
LIQO_PRUNE = (*TOOLBOX_PRUNE, "usr/lib/python3.11/test", "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/idlelib",
              "usr/lib/python3.11/tkinter", "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/pydoc_data",
              *NETWORK_PRUNE)  # fmt: skip
"""What no liqo process uses: documentation, apt's lists, the standard library's tests, GUI and pip bootstrap,
and the network packages' extras."""
LIQO_SITE = "/opt/liqo"
LIQO_ENTRYPOINT = ("/usr/bin/python3", "-m")
LIQO_CMD = ("liqo.apps.manager",)
"""The module run when a pod names none: every entry point is a module (``liqo.apps.virtualkubelet``...)."""
LIQO_ENV = (f"PYTHONPATH={LIQO_SITE}", "PYTHONDONTWRITEBYTECODE=1")
"""Everything is byte-compiled at build time, and uid 65532 could not write a cache anyway."""
UV_EXPORT = ("export", "--frozen", "--no-dev", "--no-emit-project", "--no-annotate")
"""The locked dependencies as requirements, with their hashes (which ``uv pip install`` then checks)."""
LIQO_ARCHIVES_KEPT = 3
"""Archives of liqo's image kept in the cache: one per source tree in use (worktrees), not one per edit."""
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_SOURCE = Path(__file__).with_name("pause") / "main.go"

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"


class ImageError(RuntimeError):
    """An image could not be built or read; the message says which step and why."""


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a blob is, its digest and size."""

    media_type: str
    digest: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        """The descriptor's JSON form."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def image_config(
    *,
    diff_ids: Sequence[str],
    entrypoint: Sequence[str],
    cmd: Sequence[str] = (),
    env: Sequence[str] = (),
    user: str = "",
) -> dict[str, Any]:
    """An OCI image configuration for linux/amd64 with the given layers, command, environment and user (pure)."""
    config: dict[str, Any] = {
        "Env": [PATH_ENV, *env],
        "Entrypoint": list(entrypoint) or None,
        "Cmd": list(cmd) or None,
        "User": user or None,
    }
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": {key: value for key, value in config.items() if value is not None},
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }


def manifest(*, config: Descriptor, layers: Sequence[Descriptor]) -> dict[str, Any]:
    """An OCI image manifest (pure)."""
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config.to_dict(),
        "layers": [layer.to_dict() for layer in layers],
    }


def index(*, manifest_descriptor: Descriptor, names: Sequence[str]) -> dict[str, Any]:
    """The ``index.json`` of a layout holding one manifest under each of ``names`` (pure).

    Every name is a full reference (``localhost/liqo/toolbox:latest``): containerd's importer reads it from
    its own annotation; other tools read the tag from the OCI one.
    """
    return {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            manifest_descriptor.to_dict() | {"annotations": {CONTAINERD_NAME: name, REF_NAME: name.rpartition(":")[2]}}
            for name in names
        ],
    }


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_archive(*, layer: Path, entrypoint: Sequence[str], cmd: Sequence[str] = (), names: Sequence[str],
                  out: Path, env: Sequence[str] = (), user: str = "") -> None:  # fmt: skip
    """Write an OCI image layout archive of one uncompressed ``layer`` to ``out`` (atomically)."""
    hasher = hashlib.sha256()
    with layer.open("rb") as source:
        while chunk := source.read(1 << 20):
            hasher.update(chunk)
    layer_descriptor = Descriptor(LAYER_MEDIA_TYPE, "sha256:" + hasher.hexdigest(), layer.stat().st_size)
    config = orjson.dumps(
        image_config(diff_ids=[layer_descriptor.digest], entrypoint=entrypoint, cmd=cmd, env=env, user=user)
    )
    config_descriptor = Descriptor(CONFIG_MEDIA_TYPE, digest_of(config), len(config))
    manifest_bytes = orjson.dumps(manifest(config=config_descriptor, layers=[layer_descriptor]))
    manifest_descriptor = Descriptor(MANIFEST_MEDIA_TYPE, digest_of(manifest_bytes), len(manifest_bytes))
    small = {
        "oci-layout": orjson.dumps({"imageLayoutVersion": "1.0.0"}),
        "index.json": orjson.dumps(index(manifest_descriptor=manifest_descriptor, names=names)),
        _blob(config_descriptor): config,
        _blob(manifest_descriptor): manifest_bytes,
    }
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    with tarfile.open(partial, "w") as archive:
        for name, data in small.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        archive.add(layer, arcname=_blob(layer_descriptor), recursive=False)
    os.replace(partial, out)


def _blob(descriptor: Descriptor) -> str:
    return "blobs/sha256/" + descriptor.digest.removeprefix("sha256:")


def images_dir() -> Path:
    """Where the built image archives are cached, beside the binaries."""
    return toolchain.cache_root() / "images"


def pause_archive() -> Path:
    """The archive of the sandbox image (its name carries a hash of the pause source)."""
    key = hashlib.sha256(PAUSE_SOURCE.read_bytes() + PAUSE_IMAGE.encode()).hexdigest()[:12]
    return images_dir() / f"pause-{key}.tar"


def toolbox_archive() -> Path:
    """The archive of the tool image (its name carries a hash of the suite and package list)."""
    recipe = "\n".join([DEBIAN_SUITE, *TOOLBOX_PACKAGES, *TOOLBOX_PRUNE, TOOLBOX_IMAGE, TOOLBOX_PINNED])
    return images_dir() / f"toolbox-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}.tar"


def liqo_image_ref() -> str:
    """The reference of liqo's own image: ``localhost/liqo/liqo:<the installed package's version>``."""
    return f"{LIQO_REPOSITORY}:{importlib.metadata.version('liqo')}"


def liqo_archive(project: Path) -> Path:
    """The archive of liqo's image built from ``project`` (its name carries a hash of all that goes in).

    That is the recipe, and the files the wheel and the locked dependencies are made of: the package's
    source tree (bytecode caches left out), ``pyproject.toml`` and ``uv.lock``.
    """
    wireguard_go = f"{toolchain.WIREGUARD_GO_MODULE}@{toolchain.WIREGUARD_GO_VERSION} {WIREGUARD_GO_PATH}"
    recipe = "\n".join([DEBIAN_SUITE, *LIQO_PACKAGES, *LIQO_PRUNE, *LIQO_ENTRYPOINT, *LIQO_CMD, *LIQO_ENV, LIQO_USER,
                        *UV_EXPORT, wireguard_go, liqo_image_ref()])  # fmt: skip
    package = project / "src" / "liqo"
    sources = sorted(
        path for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )  # fmt: skip
    parts = [("recipe", recipe.encode())]
    parts += [(path.relative_to(project).as_posix(), path.read_bytes()) for path in sources]
    parts += [(name, (project / name).read_bytes()) for name in ("pyproject.toml", "uv.lock")]
    return images_dir() / f"liqo-{content_key(parts)}.tar"


def content_key(parts: Iterable[tuple[str, bytes]]) -> str:
    """A short hash of named contents (pure); a name and its length are hashed too, so no two splits collide."""
    hasher = hashlib.sha256()
    for name, data in parts:
        hasher.update(f"{name}\0{len(data)}\0".encode())
        hasher.update(data)
    return hasher.hexdigest()[:12]


def project_source() -> Path | None:
    """The source tree liqo runs from (``src/liqo`` beside ``pyproject.toml`` and ``uv.lock``), if any.

    None for an installed wheel: the package then sits in a ``site-packages`` directory.
    """
    package = Path(liqo.__file__).resolve().parent
    root = package.parent.parent
    if package.parent.name == "src" and (root / "pyproject.toml").is_file() and (root / "uv.lock").is_file():
        return root
    return None


def ensure_images(*, progress: Progress = lambda _: None) -> list[Path]:
    """Build the archives the cache lacks; return the archives every real node preloads.

    liqo's own image is among them when liqo runs from its source tree; otherwise a line says it is not.

    Raises:
        ImageError: a build step failed (the message has its output's tail).
        ToolchainError: Go, mmdebstrap or uv is missing.
    """
    archives = [_ensure(pause_archive(), _build_pause, progress), _ensure(toolbox_archive(), _build_toolbox, progress)]
    project = project_source()
    if project is None:
        progress(f"{liqo_image_ref()} is not preloaded: liqo runs from a wheel, not its source tree "
                 "(`liqoctl local load-image` loads an image built with the Containerfile)")  # fmt: skip
    else:
        archives.append(_ensure_liqo(project, progress))
    return archives


def ensure_liqo_image(*, progress: Progress = lambda _: None) -> Path:
    """Build liqo's image if the cache lacks it; return its archive.

    Raises:
        ImageError: liqo runs from a wheel (no source to build from), or a build step failed.
        ToolchainError: mmdebstrap or uv is missing.
    """
    project = project_source()
    if project is None:
        raise ImageError(
            f"building liqo's image needs its source tree, and this liqo is installed from a wheel "
            f"({Path(liqo.__file__).parent}): build it from a checkout (`make image`, or the Containerfile)"
        )
    return _ensure_liqo(project, progress)


def _ensure_liqo(project: Path, progress: Progress) -> Path:
    """liqo's archive; wireguard-go is built first when it is missing (under its own hold of the build lock)."""
    archive = liqo_archive(project)
    if archive.is_file():
        return archive
    wireguard_go = toolchain.ensure_wireguard_go(progress=progress)
    return _ensure(archive, functools.partial(_build_liqo, project, wireguard_go), progress)


def _ensure(archive: Path, build: Callable[[Path, Path, Progress], None], progress: Progress) -> Path:
    """Build ``archive`` unless it exists (checked again under the build lock: another process may be at it)."""
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with toolchain.build_lock():
        if not archive.is_file():
            with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".build-") as scratch:
                build(Path(scratch), archive, progress)
    return archive


def _build_pause(scratch: Path, out: Path, progress: Progress) -> None:
    progress(f"building the sandbox image {PAUSE_IMAGE}")
    go = toolchain.check_go()
    shutil.copyfile(PAUSE_SOURCE, scratch / "main.go")
    (scratch / "go.mod").write_text("module local/pause\n\ngo 1.22\n")
    env = os.environ | {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", "pause", "."], cwd=scratch, env=env, step="pause")
    layer = scratch / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        tar.add(scratch / "pause", arcname="pause")
    write_archive(layer=layer, entrypoint=["/pause"], names=[PAUSE_IMAGE], out=out)


def _build_toolbox(scratch: Path, out: Path, progress: Progress) -> None:
    progress(f"building the tool image {TOOLBOX_IMAGE} from Debian packages ({', '.join(TOOLBOX_PACKAGES)})")
    rootfs = _debian_rootfs(scratch, packages=TOOLBOX_PACKAGES, prune=TOOLBOX_PRUNE, step="toolbox")
    applets = subprocess.run(
        [str(rootfs / "bin" / "busybox"), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        link = rootfs / applet
        if not link.is_symlink() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    _finish_rootfs(
        rootfs,
        passwd="root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        group="root:x:0:\nnogroup:x:65534:\n",
    )
    write_archive(layer=_layer(rootfs, scratch / "layer.tar"), entrypoint=[], cmd=["sh"],
                  names=[TOOLBOX_IMAGE, TOOLBOX_PINNED], out=out)  # fmt: skip


def _build_liqo(project: Path, wireguard_go: Path, scratch: Path, out: Path, progress: Progress) -> None:
    """The recipe of the ``Containerfile``, without a container engine.

    uv installs the dependencies' wheels for the image's platform and Python (manylinux, 3.11) without
    running the image's interpreter; the host's Python 3.11 byte-compiles them (3.11 bytecode is the same
    for every 3.11 release).
    """
    ref = liqo_image_ref()
    progress(f"building {ref} from Debian packages ({', '.join(LIQO_PACKAGES)}), our wheel and its locked dependencies")
    rootfs = _debian_rootfs(scratch, packages=LIQO_PACKAGES, prune=LIQO_PRUNE, step="liqo")
    uv, env = toolchain.uv_command(), dict(os.environ)
    dist = scratch / "dist"
    _run([*uv, "build", "--wheel", "--out-dir", str(dist), "--quiet"], cwd=project, env=env, step="liqo (wheel)")
    requirements = scratch / "requirements.txt"
    requirements.write_text(_run([*uv, *UV_EXPORT], cwd=project, env=env, step="liqo (export the lock)"))
    shutil.copyfile(wireguard_go, rootfs / WIREGUARD_GO_PATH)
    (rootfs / WIREGUARD_GO_PATH).chmod(0o755)
    site = rootfs / LIQO_SITE.lstrip("/")
    _run(
        [*uv, "pip", "install", "--quiet", "--target", str(site), "--python-platform", "x86_64-manylinux_2_28",
         "--python-version", "3.11", "--no-deps", "-r", str(requirements), *map(str, dist.glob("*.whl"))],
        cwd=scratch, env=env, step="liqo (install)",
    )  # fmt: skip
    # Console scripts name the build's interpreter; `python3 -m liqo.cli.main` is liqoctl in the image.
    shutil.rmtree(site / "bin", ignore_errors=True)
    # The maintainer scripts that extract mode skips would compile the standard library and gather the CA
    # bundle; a process running as uid 65532 could write neither.
    _run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site), str(rootfs / "usr/lib/python3.11")],
         cwd=scratch, env=env, step="liqo (compileall)")  # fmt: skip
    certificates = sorted((rootfs / "usr/share/ca-certificates").rglob("*.crt"))
    bundle = rootfs / "etc/ssl/certs/ca-certificates.crt"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    bundle.write_bytes(b"".join(path.read_bytes() for path in certificates))
    _finish_rootfs(
        rootfs,
        passwd=f"root:x:0:0:root:/root:/bin/sh\nliqo:x:{LIQO_UID}:{LIQO_UID}:liqo:/:/usr/sbin/nologin\n",
        group=f"root:x:0:\nliqo:x:{LIQO_UID}:\n",
    )
    write_archive(layer=_layer(rootfs, scratch / "layer.tar"), entrypoint=LIQO_ENTRYPOINT, cmd=LIQO_CMD,
                  names=[ref], out=out, env=LIQO_ENV, user=LIQO_USER)  # fmt: skip
    _prune(prefix="liqo-", keep=LIQO_ARCHIVES_KEPT, built=out)


def _debian_rootfs(scratch: Path, *, packages: Sequence[str], prune: Sequence[str], step: str) -> Path:
    """Debian packages extracted into ``scratch/rootfs`` (no maintainer scripts), less what ``prune`` names."""
    rootfs = scratch / "rootfs"
    argv = [toolchain.os_tool("mmdebstrap"), "--variant=extract", f"--include={','.join(packages)}", "--quiet"]
    _run([*argv, DEBIAN_SUITE, str(rootfs)], cwd=scratch, env=dict(os.environ), step=f"{step} (mmdebstrap)")
    prune_rootfs(rootfs, prune)
    return rootfs


def prune_rootfs(rootfs: Path, paths: Iterable[str]) -> None:
    """Delete ``paths`` (relative; directories, files or symlinks; missing ones skipped) from ``rootfs``, as ``rm -rf``.

    A symlink is deleted, never followed: an extracted package's links may be absolute and point at the host.
    """
    for path in paths:
        target = rootfs / path
        if not target.parent.resolve().is_relative_to(rootfs.resolve()):
            raise ImageError(f"{path!r} is not inside the image's root (a symlink on its way?)")
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


def _finish_rootfs(rootfs: Path, *, passwd: str, group: str) -> None:
    """What maintainer scripts and hooks would have done: the accounts, ``/tmp`` and ``/root``."""
    (rootfs / "etc" / "passwd").write_text(passwd)
    (rootfs / "etc" / "group").write_text(group)
    for directory, mode in (("tmp", 0o1777), ("root", 0o700)):
        (rootfs / directory).mkdir(exist_ok=True)
        (rootfs / directory).chmod(mode)


def _layer(rootfs: Path, layer: Path) -> Path:
    """``rootfs`` as an uncompressed layer, every file owned by root whoever built it."""

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        # /dev is the runtime's to fill; device nodes in a layer would only be masked.
        if info.name.startswith("./dev/"):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(layer, "w") as tar:
        tar.add(rootfs, arcname=".", filter=owned_by_root)
    return layer


def _prune(*, prefix: str, keep: int, built: Path) -> None:
    """Delete all but the ``keep`` newest archives named ``prefix*`` (each code change makes one)."""
    archives = sorted(images_dir().glob(f"{prefix}*.tar"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in archives[keep:]:
        if stale != built:
            stale.unlink(missing_ok=True)


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], step: str) -> str:
    """Run a build step; its standard output.

    Raises:
        ImageError: it failed (its output's tail in the message).
    """
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise ImageError(f"building image step {step!r} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def archive_images(archive: Path) -> dict[str, str]:
    """The images an OCI or docker archive declares: each name and the digest of its manifest.

    An OCI layout names them in ``index.json`` (annotations), with their digests; a ``docker save`` archive
    in ``manifest.json`` (tags), whose digests the importer computes: "" stands for those.

    Raises:
        ImageError: ``archive`` is not a tar holding either.
    """
    try:
        with tarfile.open(archive) as tar:
            members = {member.name.removeprefix("./"): member for member in tar.getmembers()}
            if "index.json" in members:
                data = orjson.loads(_read_member(tar, members["index.json"]))
                return {
                    str(entry["annotations"][CONTAINERD_NAME]): str(entry.get("digest") or "")
                    for entry in data.get("manifests") or []
                    if (entry.get("annotations") or {}).get(CONTAINERD_NAME)
                }
            if "manifest.json" in members:
                data = orjson.loads(_read_member(tar, members["manifest.json"]))
                return {str(tag): "" for entry in data for tag in entry.get("RepoTags") or []}
    except tarfile.ReadError as exc:  # its message lists every compression tried, one per line
        raise ImageError(f"{archive} is not a tar archive (an OCI layout or `docker save` archive is)") from exc
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise ImageError(f"{archive} is not a readable image archive: {exc}") from exc
    raise ImageError(f"{archive} is neither an OCI layout archive (index.json) nor a docker one (manifest.json)")


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    if handle is None:
        raise ImageError(f"{member.name} in the archive is not a file")
    return handle.read()
