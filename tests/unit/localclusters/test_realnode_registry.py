"""The read-only registry of real nodes: reference normalisation, and serving archives over HTTP."""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.registry import Store, normalize, registry_app, requested


@pytest.mark.parametrize(
    ("name", "full"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("bitnami/redis", "docker.io/bitnami/redis:latest"),
        ("localhost/liqo/toolbox", "localhost/liqo/toolbox:latest"),
        ("localhost/liqo/toolbox:1", "localhost/liqo/toolbox:1"),
        ("registry.example:5000/a/b:2", "registry.example:5000/a/b:2"),
        ("quay.io/x/y", "quay.io/x/y:latest"),
        ("nginx@sha256:" + "a" * 64, "docker.io/library/nginx@sha256:" + "a" * 64),
    ],
)
def test_names_are_normalised_as_containerd_spells_them(name: str, full: str) -> None:
    assert normalize(name) == full


_COMPONENT = st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True)


@given(
    domain=st.sampled_from(["", "localhost/", "docker.io/", "quay.io/", "r.example:5000/"]),
    path=st.lists(_COMPONENT, min_size=1, max_size=3),
    tag=st.one_of(st.just(""), _COMPONENT.map(lambda t: ":" + t)),
)
def test_normalising_twice_changes_nothing(domain: str, path: list[str], tag: str) -> None:
    once = normalize(domain + "/".join(path) + tag)
    assert normalize(once) == once
    assert once.count(":") >= 1


def test_a_request_names_the_registry_it_stands_in_for() -> None:
    assert requested(namespace="docker.io", repository="library/nginx", reference="latest") == (
        "docker.io/library/nginx:latest"
    )
    assert requested(namespace=None, repository="liqo/toolbox", reference="1") == "localhost/liqo/toolbox:1"
    digest = "sha256:" + "b" * 64
    assert requested(namespace="quay.io", repository="x/y", reference=digest) == f"quay.io/x/y@{digest}"


def _archive(directory: Path, name: str, content: bytes, file: str) -> tuple[Path, bytes]:
    """An archive of one layer holding a file with ``content``; returns it and the layer's bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = directory / f"{file}.payload"
    payload.write_bytes(content)
    layer = directory / f"{file}.layer"
    with tarfile.open(layer, "w") as tar:
        tar.add(payload, arcname="data")
    out = directory / f"{file}.tar"
    images.write_archive(layer=layer, entrypoint=["/data"], names=[name], out=out)
    return out, layer.read_bytes()


Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Client]:
    client = TestClient(TestServer(registry_app(Store([tmp_path / "preloaded", tmp_path / "loaded"]))))
    await client.start_server()
    yield client
    await client.close()


async def test_an_archive_is_served_by_tag_and_by_digest(tmp_path: Path, served: Client) -> None:
    _, layer = _archive(tmp_path / "preloaded", "localhost/liqo/toolbox:1", b"one", "toolbox")
    root = await served.get("/v2/")
    assert root.status == 200
    head = await served.head("/v2/liqo/toolbox/manifests/1")
    assert head.status == 200
    digest = head.headers["Docker-Content-Digest"]
    assert head.headers["Content-Type"] == images.MANIFEST_MEDIA_TYPE
    body = await (await served.get("/v2/liqo/toolbox/manifests/1", params={"ns": "localhost"})).read()
    assert "sha256:" + hashlib.sha256(body).hexdigest() == digest
    manifest = orjson.loads(body)
    by_digest = await served.get(f"/v2/liqo/toolbox/manifests/{digest}")
    assert await by_digest.read() == body
    blob = await served.get(f"/v2/liqo/toolbox/blobs/{manifest['layers'][0]['digest']}")
    assert await blob.read() == layer


async def test_what_is_not_held_is_a_registry_404(tmp_path: Path, served: Client) -> None:
    _archive(tmp_path / "preloaded", "localhost/liqo/toolbox:1", b"one", "toolbox")
    missing = await served.get("/v2/library/nginx/manifests/latest", params={"ns": "docker.io"})
    assert missing.status == 404
    assert (await missing.json())["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    blob = await served.get("/v2/library/nginx/blobs/sha256:" + "0" * 64)
    assert blob.status == 404
    assert (await blob.json())["errors"][0]["code"] == "BLOB_UNKNOWN"


async def test_a_loaded_archive_is_served_at_once_and_the_newer_wins(tmp_path: Path, served: Client) -> None:
    old, _ = _archive(tmp_path / "preloaded", "docker.io/library/app:latest", b"old", "old")
    os.utime(old, (1, 1))
    first = await served.head("/v2/library/app/manifests/latest", params={"ns": "docker.io"})
    _archive(tmp_path / "loaded", "docker.io/library/app:latest", b"new", "new")
    second = await served.head("/v2/library/app/manifests/latest", params={"ns": "docker.io"})
    assert first.status == second.status == 200
    assert first.headers["Docker-Content-Digest"] != second.headers["Docker-Content-Digest"]


async def test_a_file_that_is_no_archive_is_skipped(tmp_path: Path, served: Client) -> None:
    (tmp_path / "loaded").mkdir(parents=True)
    (tmp_path / "loaded" / "junk.tar").write_bytes(b"not a tar")
    _archive(tmp_path / "preloaded", "localhost/liqo/pause:1", b"p", "pause")
    assert (await served.head("/v2/liqo/pause/manifests/1")).status == 200


async def test_an_archive_named_alone_is_served_and_not_its_neighbours(tmp_path: Path) -> None:
    # The cache holds liqo's image built from other source trees under the same name: only ours is served.
    ours, _ = _archive(tmp_path / "cache", "localhost/liqo/liqo:0.1.0", b"ours", "liqo-ours")
    theirs, _ = _archive(tmp_path / "cache", "localhost/liqo/liqo:0.1.0", b"theirs", "liqo-theirs")
    os.utime(ours, (1, 1))  # older: from a directory, theirs would win
    expected = images.archive_images(ours)["localhost/liqo/liqo:0.1.0"]
    client = TestClient(TestServer(registry_app(Store([ours, tmp_path / "gone.tar", tmp_path / "loaded"]))))
    await client.start_server()
    try:
        head = await client.head("/v2/liqo/liqo/manifests/0.1.0")
        assert head.status == 200
        assert (
            head.headers["Docker-Content-Digest"]
            == expected
            != images.archive_images(theirs)["localhost/liqo/liqo:0.1.0"]
        )
    finally:
        await client.close()
