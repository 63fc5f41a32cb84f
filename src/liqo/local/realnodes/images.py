"""Container images for real nodes, built on this machine: no registry is ever reached.

Two images are preloaded into every real node: the sandbox image (``pause``, our own few lines of Go in
``pause/main.go``, since the upstream one would have to be pulled) and a tool image for trying things out,
made of Debian packages by ``mmdebstrap`` (extract mode: the packages' files without their maintainer
scripts, so no dpkg or perl ends up in it). Each is written as an OCI image layout in a tar archive, the
format ``ctr images import`` and every other tool reads. An archive is named after a hash of what goes
into it, so a changed package list or pause source builds a new one and an unchanged one is reused.

The archive writing is pure data (:func:`image_config`, :func:`manifest`, :func:`index`) around one I/O
function; the layer is a plain, uncompressed tar (its digest is its diff ID), which costs disk space in
the cache and saves the compression time of every build and the decompression of every import.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from liqo.local import toolchain

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


def ensure_images(*, progress: Progress = lambda _: None) -> list[Path]:
    """Build the archives the cache lacks; return the archives every real node preloads.

    Raises:
        ImageError: a build step failed (the message has its output's tail).
        ToolchainError: Go or mmdebstrap is missing.
    """
    images_dir().mkdir(parents=True, exist_ok=True)
    archives = [(pause_archive(), _build_pause), (toolbox_archive(), _build_toolbox)]
    with toolchain.build_lock():
        for archive, build in archives:
            if not archive.is_file():
                with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".build-") as scratch:
                    build(Path(scratch), archive, progress)
    return [archive for archive, _ in archives]


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
    mmdebstrap = toolchain.os_tool("mmdebstrap")
    rootfs = scratch / "rootfs"
    argv = [mmdebstrap, "--variant=extract", f"--include={','.join(TOOLBOX_PACKAGES)}", "--quiet", DEBIAN_SUITE]
    _run([*argv, str(rootfs)], cwd=scratch, env=dict(os.environ), step="toolbox (mmdebstrap)")
    # mmdebstrap runs no hooks in extract mode: what maintainer scripts and hooks would do happens here.
    for path in TOOLBOX_PRUNE:
        shutil.rmtree(rootfs / path, ignore_errors=True)
    applets = subprocess.run(
        [str(rootfs / "bin" / "busybox"), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        link = rootfs / applet
        if not link.is_symlink() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    for directory, mode in (("tmp", 0o1777), ("root", 0o700)):
        (rootfs / directory).mkdir(exist_ok=True)
        (rootfs / directory).chmod(mode)
    layer = scratch / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        # /dev is the runtime's to fill; device nodes in a layer would only be masked.
        tar.add(rootfs, arcname=".", filter=lambda info: None if info.name.startswith("./dev/") else info)
    write_archive(layer=layer, entrypoint=[], cmd=["sh"], names=[TOOLBOX_IMAGE, TOOLBOX_PINNED], out=out)


LIQO_UID = 65532
LIQO_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "python3-minimal", "ca-certificates", "usr-is-merged")
LIQO_SITE = "/opt/liqo"
LIQO_PRUNE = (*TOOLBOX_PRUNE, "usr/lib/python3.11/test", "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/idlelib",
              "usr/lib/python3.11/tkinter", "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/pydoc_data")  # fmt: skip


def liqo_image_name(version: str) -> str:
    """The reference of liqo's own image at ``version``."""
    return f"localhost/liqo/liqo:{version}"


def build_liqo_image(*, project: Path, version: str, out: Path, progress: Progress = lambda _: None) -> None:
    """Build liqo's image offline into ``out``.

    Debian's Python 3.11 (mmdebstrap, extract mode), our wheel and its locked dependencies (manylinux
    wheels installed into ``/opt/liqo`` by uv for the image's platform, without running the image's
    interpreter), byte-compiled, running as uid 65532: the same steps as the ``Containerfile`` at the
    repository root, which builds it anywhere with an ordinary container build.

    Raises:
        ImageError: a step failed (its output's tail in the message).
    """
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        scratch = Path(tmp)
        rootfs = scratch / "rootfs"
        progress(f"building {liqo_image_name(version)}: Debian packages ({', '.join(LIQO_PACKAGES)})")
        mmdebstrap = toolchain.os_tool("mmdebstrap")
        argv = [mmdebstrap, "--variant=extract", f"--include={','.join(LIQO_PACKAGES)}", "--quiet", DEBIAN_SUITE]
        _run([*argv, str(rootfs)], cwd=scratch, env=dict(os.environ), step="liqo (mmdebstrap)")
        for path in LIQO_PRUNE:
            shutil.rmtree(rootfs / path, ignore_errors=True)
        progress("building the wheel and installing it with its locked dependencies")
        uv = _uv()
        env = dict(os.environ)
        _run(
            [*uv, "build", "--wheel", "--out-dir", str(scratch / "dist"), "--quiet"], cwd=project, env=env, step="wheel"
        )
        requirements = scratch / "requirements.txt"
        exported = subprocess.run(
            [*uv, "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project", "--no-annotate"],
            cwd=project, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        requirements.write_text(exported)
        wheels = [str(wheel) for wheel in (scratch / "dist").glob("*.whl")]
        _run(
            [*uv, "pip", "install", "--quiet", "--target", str(rootfs / LIQO_SITE.lstrip("/")),
             "--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.11", "--no-deps",
             "-r", str(requirements), *wheels],
            cwd=scratch, env=env, step="install",
        )  # fmt: skip
        # Byte-compiled ahead (same 3.11 bytecode): a non-root process could not write the caches.
        _run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(rootfs / LIQO_SITE.lstrip("/")),
              str(rootfs / "usr/lib/python3.11")], cwd=scratch, env=env, step="compileall")  # fmt: skip
        (rootfs / "etc" / "passwd").write_text(
            f"root:x:0:0:root:/root:/bin/sh\nliqo:x:{LIQO_UID}:{LIQO_UID}:liqo:/:/usr/sbin/nologin\n"
        )
        (rootfs / "etc" / "group").write_text(f"root:x:0:\nliqo:x:{LIQO_UID}:\n")
        (rootfs / "tmp").mkdir(exist_ok=True)
        (rootfs / "tmp").chmod(0o1777)
        layer = scratch / "layer.tar"
        with tarfile.open(layer, "w") as tar:
            tar.add(rootfs, arcname=".", filter=lambda info: None if info.name.startswith("./dev/") else info)
        write_archive(
            layer=layer, entrypoint=["/usr/bin/python3", "-m"], cmd=["liqo.apps.manager"],
            names=[liqo_image_name(version)], out=out, env=[f"PYTHONPATH={LIQO_SITE}", "PYTHONDONTWRITEBYTECODE=1"],
            user=f"{LIQO_UID}:{LIQO_UID}",
        )  # fmt: skip


def _uv() -> list[str]:
    """How to run uv: the ``uv`` on PATH, else the module in the Python that ``make venv`` installed it in."""
    found = shutil.which("uv")
    if found:
        return [found]
    for python in ("python3.11", sys.executable):
        candidate = shutil.which(python) or python
        if subprocess.run([candidate, "-m", "uv", "--version"], capture_output=True, check=False).returncode == 0:
            return [candidate, "-m", "uv"]
    raise toolchain.ToolchainError("building liqo's image needs uv: run `make venv` (it installs uv)")


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], step: str) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise ImageError(f"building image step {step!r} failed (exit {result.returncode}):\n{tail}")


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
