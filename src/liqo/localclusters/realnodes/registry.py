"""``python -m liqo.localclusters.realnodes.registry``: a read-only image registry serving the archives of a cluster.

Why a registry when every image is preloaded: Kubernetes pulls whenever a pod says ``imagePullPolicy:
Always``, which is the default for ``:latest`` and for untagged names (``kubectl create deployment x
--image=localhost/liqo/toolbox``). Without a registry those pods fail with ``ErrImagePull`` even though
the image is on the node. Every real node's containerd is told (``hosts.toml`` under ``_default``) to
ask this registry first for any registry's images; what it does not hold falls through to the real
registry (unreachable here, hence the usual error). A pull of an image the node already has costs one
manifest request: containerd finds every blob in its store.

It serves the OCI layout archives (``index.json`` + ``blobs/``) it is given — the archives the nodes
preloaded, named one by one (the cache holds others: liqo's image built from other source trees, under
the same name), and the cluster's ``load-image`` directory — straight from the tar files: a blob is a
byte range of its archive. Archives are re-indexed when one changes or a directory's list does, so an
image loaded with ``liqoctl local load-image`` is served at once. Only the read side of the distribution API
exists (``/v2/``, manifests and blobs, GET and HEAD); the underlay's host address is all it listens on.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from liqo.localclusters.realnodes.images import CONTAINERD_NAME, REF_NAME

log = logging.getLogger("liqo.localclusters.realnodes.registry")

DOCKER_HUB = "docker.io"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def normalize(name: str) -> str:
    """A full image reference the way containerd spells it (pure): ``nginx`` → ``docker.io/library/nginx:latest``."""
    reference, at, digest = name.partition("@")
    first, slash, rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = DOCKER_HUB, reference
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not at and ":" not in path.rsplit("/", 1)[-1]:
        path += ":latest"
    return f"{domain}/{path}{at}{digest}"


def requested(*, namespace: str | None, repository: str, reference: str) -> str:
    """The full reference a registry request stands for (pure).

    A mirror request carries the registry it stands in for as ``ns`` (containerd adds it); without it the
    request is for this registry itself, whose images are named ``localhost/...``.
    """
    separator = "@" if _DIGEST.match(reference) else ":"
    return normalize(f"{namespace or 'localhost'}/{repository}{separator}{reference}")


@dataclass(frozen=True)
class Blob:
    """Where a blob's bytes are: a range of an archive."""

    archive: Path
    offset: int
    size: int
    media_type: str = "application/octet-stream"


@dataclass
class Catalogue:
    """Image references and blobs of a set of archives (newer archives win a shared reference)."""

    manifests: dict[str, str] = field(default_factory=dict)
    """Full reference → the digest of what it names (a manifest or an index)."""
    blobs: dict[str, Blob] = field(default_factory=dict)


def index_archive(archive: Path, catalogue: Catalogue) -> None:
    """Add what an OCI layout archive holds to ``catalogue``; other archives are skipped (logged)."""
    try:
        with tarfile.open(archive) as tar:
            members = {member.name.removeprefix("./"): member for member in tar.getmembers() if member.isfile()}
            index_member = members.get("index.json")
            handle = tar.extractfile(index_member) if index_member else None
            if handle is None:
                log.info("%s has no index.json (not an OCI layout): not served", archive)
                return
            index = orjson.loads(handle.read())
    except (tarfile.TarError, OSError, ValueError) as exc:
        log.warning("%s is not a readable archive: %s", archive, exc)
        return
    for name, member in members.items():
        if name.startswith("blobs/sha256/"):
            digest = "sha256:" + name.removeprefix("blobs/sha256/")
            catalogue.blobs[digest] = Blob(archive, member.offset_data, member.size)
    for entry in index.get("manifests") or []:
        annotations = entry.get("annotations") or {}
        name = annotations.get(CONTAINERD_NAME) or annotations.get(REF_NAME) or ""
        digest, media_type = entry.get("digest", ""), entry.get("mediaType", "")
        if digest in catalogue.blobs:
            blob = catalogue.blobs[digest]
            catalogue.blobs[digest] = Blob(blob.archive, blob.offset, blob.size, media_type or blob.media_type)
            if name and ("/" in name or ":" in name):
                catalogue.manifests[normalize(name)] = digest


class Store:
    """The catalogue of some archives and directories' archives, rebuilt when they change."""

    def __init__(self, sources: Iterable[Path]) -> None:
        self._sources = list(sources)
        self._seen: tuple[tuple[str, float, int], ...] = ()
        self.catalogue = Catalogue()

    def refresh(self) -> Catalogue:
        """The current catalogue (re-indexed if an archive appeared, changed or went)."""
        archives = sorted(
            (
                path
                for source in self._sources
                for path in (source.glob("*.tar") if source.is_dir() else [source])
                if path.is_file()
            ),
            key=lambda path: path.stat().st_mtime,
        )
        seen = tuple((str(path), path.stat().st_mtime, path.stat().st_size) for path in archives)
        if seen != self._seen:
            catalogue = Catalogue()
            for archive in archives:  # oldest first: a newer archive's reference replaces an older one's
                index_archive(archive, catalogue)
            self.catalogue, self._seen = catalogue, seen
        return self.catalogue


def _error(status: type[web.HTTPException], code: str, message: str) -> web.HTTPException:
    body = orjson.dumps({"errors": [{"code": code, "message": message}]}).decode()
    return status(text=body, content_type="application/json")


def registry_app(store: Store) -> web.Application:
    """The aiohttp application of the read-only registry."""

    async def root(_request: web.Request) -> web.Response:
        return web.json_response({}, headers={"Docker-Distribution-API-Version": "registry/2.0"})

    async def manifest(request: web.Request) -> web.StreamResponse:
        catalogue = await asyncio.to_thread(store.refresh)
        reference = request.match_info["reference"]
        wanted = requested(
            namespace=request.query.get("ns"), repository=request.match_info["name"], reference=reference
        )
        digest = reference if _DIGEST.match(reference) else catalogue.manifests.get(wanted)
        if digest is None or digest not in catalogue.blobs:
            raise _error(web.HTTPNotFound, "MANIFEST_UNKNOWN", f"{wanted} is not among this cluster's images")
        return await _send(request, catalogue.blobs[digest], digest)

    async def blob(request: web.Request) -> web.StreamResponse:
        catalogue = await asyncio.to_thread(store.refresh)
        digest = request.match_info["digest"]
        if digest not in catalogue.blobs:
            raise _error(web.HTTPNotFound, "BLOB_UNKNOWN", f"{digest} is not among this cluster's images")
        return await _send(request, catalogue.blobs[digest], digest)

    app = web.Application()
    app.router.add_get("/v2/", root)
    app.router.add_get(r"/v2/{name:.+}/manifests/{reference}", manifest)  # HEAD too
    app.router.add_get(r"/v2/{name:.+}/blobs/{digest}", blob)
    return app


async def _send(request: web.Request, blob: Blob, digest: str) -> web.StreamResponse:
    headers = {"Docker-Content-Digest": digest, "Content-Type": blob.media_type, "Content-Length": str(blob.size)}
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    with blob.archive.open("rb") as source:
        source.seek(blob.offset)
        left = blob.size
        while left > 0:
            chunk = await asyncio.to_thread(source.read, min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)
            await response.write(chunk)
    await response.write_eof()
    return response


def main(argv: list[str] | None = None) -> None:
    """Serve the given archives and directories' archives on the given address until killed."""
    parser = argparse.ArgumentParser(prog="python -m liqo.localclusters.realnodes.registry")
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--archives", action="append", default=[], help="an OCI layout archive, or a directory of them")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    app = registry_app(Store(Path(source) for source in args.archives))
    web.run_app(app, host=host, port=int(port), print=None, access_log=None)


if __name__ == "__main__":
    main()
