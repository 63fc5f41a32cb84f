import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from liqo.localclusters.realnodes.images import (
    CONFIG_MEDIA_TYPE,
    CONTAINERD_NAME,
    INDEX_MEDIA_TYPE,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    PATH_ENV,
    REF_NAME,
    Descriptor,
    ImageError,
    archive_images,
    digest_of,
    image_config,
    index,
    manifest,
    write_archive,
)

CONFIG = Descriptor(CONFIG_MEDIA_TYPE, "sha256:" + "c" * 64, 10)
LAYER = Descriptor(LAYER_MEDIA_TYPE, "sha256:" + "1" * 64, 2048)
MANIFEST = Descriptor(MANIFEST_MEDIA_TYPE, "sha256:" + "m" * 64, 300)


def test_image_config_is_linux_amd64_with_the_layers_and_command() -> None:
    config = image_config(diff_ids=["sha256:a", "sha256:b"], entrypoint=["/pause"], cmd=["-v"])
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:a", "sha256:b"]}
    assert config["config"] == {"Env": [PATH_ENV], "Entrypoint": ["/pause"], "Cmd": ["-v"]}


def test_image_config_leaves_out_an_empty_entrypoint_or_command() -> None:
    assert image_config(diff_ids=[], entrypoint=[], cmd=["sh"])["config"] == {"Env": [PATH_ENV], "Cmd": ["sh"]}
    assert image_config(diff_ids=[], entrypoint=["/pause"])["config"] == {"Env": [PATH_ENV], "Entrypoint": ["/pause"]}


def test_manifest_points_at_the_config_and_layers() -> None:
    assert manifest(config=CONFIG, layers=[LAYER]) == {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": CONFIG.digest, "size": 10},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": LAYER.digest, "size": 2048}],
    }


def test_index_names_the_manifest_for_containerd_and_oci() -> None:
    names = ["localhost/liqo/toolbox:latest", "localhost:5000/liqo/toolbox:1"]
    data = index(manifest_descriptor=MANIFEST, names=names)
    assert data["schemaVersion"] == 2
    assert data["mediaType"] == INDEX_MEDIA_TYPE
    assert [entry["annotations"] for entry in data["manifests"]] == [
        {CONTAINERD_NAME: "localhost/liqo/toolbox:latest", REF_NAME: "latest"},
        {CONTAINERD_NAME: "localhost:5000/liqo/toolbox:1", REF_NAME: "1"},
    ]
    for entry in data["manifests"]:
        assert {key: entry[key] for key in ("mediaType", "digest", "size")} == MANIFEST.to_dict()


def test_digest_of() -> None:
    assert digest_of(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()


# -- write_archive and archive_images ----------------------------------------------------------------------


def small_layer(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in (("pause", b"\x7fELF not really"), ("etc/hostname", b"node\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def read_blob(tar: tarfile.TarFile, digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    handle = tar.extractfile(f"blobs/{algorithm}/{hexdigest}")
    assert handle is not None
    data = handle.read()
    assert digest_of(data) == digest
    return data


def test_write_archive_builds_a_consistent_oci_layout(tmp_path: Path) -> None:
    layer = small_layer(tmp_path / "layer.tar")
    out = tmp_path / "image.tar"
    names = ["localhost/liqo/toolbox:latest", "localhost/liqo/toolbox:1"]
    write_archive(layer=layer, entrypoint=[], cmd=["sh"], names=names, out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.tar", "layer.tar"]  # no partial file left

    with tarfile.open(out) as tar:
        layout = tar.extractfile("oci-layout")
        assert layout is not None
        assert orjson.loads(layout.read()) == {"imageLayoutVersion": "1.0.0"}
        index_file = tar.extractfile("index.json")
        assert index_file is not None
        image_index: dict[str, Any] = orjson.loads(index_file.read())
        assert [entry["annotations"][CONTAINERD_NAME] for entry in image_index["manifests"]] == names
        assert len({entry["digest"] for entry in image_index["manifests"]}) == 1

        manifest_entry = image_index["manifests"][0]
        manifest_bytes = read_blob(tar, manifest_entry["digest"])
        assert len(manifest_bytes) == manifest_entry["size"]
        image_manifest = orjson.loads(manifest_bytes)
        assert image_manifest["mediaType"] == manifest_entry["mediaType"] == MANIFEST_MEDIA_TYPE

        config_bytes = read_blob(tar, image_manifest["config"]["digest"])
        assert len(config_bytes) == image_manifest["config"]["size"]
        config = orjson.loads(config_bytes)
        assert config["config"]["Cmd"] == ["sh"]

        [layer_entry] = image_manifest["layers"]
        layer_bytes = read_blob(tar, layer_entry["digest"])
        assert layer_bytes == layer.read_bytes()
        assert layer_entry["size"] == len(layer_bytes)
        assert layer_entry["mediaType"] == LAYER_MEDIA_TYPE
        # Uncompressed: the layer's diff ID is its digest.
        assert config["rootfs"]["diff_ids"] == [layer_entry["digest"]]

    assert archive_images(out) == dict.fromkeys(names, manifest_entry["digest"])


def test_write_archive_replaces_an_existing_archive(tmp_path: Path) -> None:
    layer = small_layer(tmp_path / "layer.tar")
    out = tmp_path / "image.tar"
    out.write_bytes(b"stale")
    write_archive(layer=layer, entrypoint=["/pause"], names=["localhost/liqo/pause:1"], out=out)
    assert list(archive_images(out)) == ["localhost/liqo/pause:1"]


def tar_with(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_images_of_a_docker_archive_have_no_digest(tmp_path: Path) -> None:
    docker = [
        {"Config": "c.json", "RepoTags": ["docker.io/library/nginx:1.27", "nginx:latest"], "Layers": []},
        {"Config": "d.json", "RepoTags": None, "Layers": []},
        {"Config": "e.json", "RepoTags": ["busybox:1"], "Layers": []},
    ]
    archive = tar_with(tmp_path / "docker.tar", {"manifest.json": orjson.dumps(docker)})
    assert archive_images(archive) == {"docker.io/library/nginx:1.27": "", "nginx:latest": "", "busybox:1": ""}


def test_archive_images_reads_dot_slash_members_and_skips_unnamed_manifests(tmp_path: Path) -> None:
    data = {
        "manifests": [
            {"digest": "sha256:1", "annotations": {CONTAINERD_NAME: "example.com/a:1", REF_NAME: "1"}},
            {"digest": "sha256:2", "annotations": {REF_NAME: "2"}},
            {"digest": "sha256:3"},
        ]
    }
    archive = tar_with(tmp_path / "oci.tar", {"./index.json": orjson.dumps(data)})
    assert archive_images(archive) == {"example.com/a:1": "sha256:1"}


def test_archive_images_refuses_a_file_that_is_not_a_tar(tmp_path: Path) -> None:
    not_tar = tmp_path / "image.tar"
    not_tar.write_bytes(b"this is not a tar archive\n" * 40)
    with pytest.raises(ImageError, match="is not a tar archive") as raised:
        archive_images(not_tar)
    assert "\n" not in str(raised.value)  # one line, not tarfile's list of every compression it tried


def test_archive_images_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ImageError):
        archive_images(tmp_path / "missing.tar")


def test_archive_images_refuses_a_tar_with_neither_index_nor_manifest(tmp_path: Path) -> None:
    archive = tar_with(tmp_path / "other.tar", {"hello.txt": b"hi"})
    with pytest.raises(ImageError, match="neither"):
        archive_images(archive)


def test_archive_images_refuses_a_broken_index(tmp_path: Path) -> None:
    archive = tar_with(tmp_path / "broken.tar", {"index.json": b"{not json"})
    with pytest.raises(ImageError, match="not a readable image archive"):
        archive_images(archive)
