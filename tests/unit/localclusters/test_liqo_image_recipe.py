"""liqo's own image: its name, what its cache key covers, when it is preloaded, and the Containerfile kept equal."""

import json
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from liqo.localclusters import toolchain
from liqo.localclusters.realnodes import images

REPO = Path(__file__).resolve().parents[3]


# -- the reference ------------------------------------------------------------------------------------


def test_the_reference_carries_the_package_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert images.liqo_image_ref() == f"localhost/liqo/liqo:{version}"


# -- the cache key ------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source tree shaped like ours, and a cache of its own."""
    monkeypatch.setenv("LIQO_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "project"
    files = {
        "pyproject.toml": "[project]\nname = 'liqo'\n",
        "uv.lock": "version = 1\n",
        "README.md": "# liqo\n",
        "src/liqo/__init__.py": "",
        "src/liqo/apps/manager.py": "print('manager')\n",
        "src/liqo/localclusters/realnodes/pause/main.go": "package main\n",
        "src/liqo/__pycache__/__init__.cpython-311.pyc": "bytecode",
        "tests/test_x.py": "def test_x(): pass\n",
        "docs/operations.md": "# Operations\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_archive_lives_in_the_cache_under_a_key(project: Path) -> None:
    archive = images.liqo_archive(project)
    assert archive.parent == images.images_dir()
    assert re.fullmatch(r"liqo-[0-9a-f]{12}\.tar", archive.name)
    assert images.liqo_archive(project) == archive  # nothing changed, same archive


@pytest.mark.parametrize(
    "changed",
    ["src/liqo/apps/manager.py", "src/liqo/localclusters/realnodes/pause/main.go", "pyproject.toml", "uv.lock"],
)
def test_a_change_to_what_goes_into_the_image_makes_a_new_archive(project: Path, changed: str) -> None:
    before = images.liqo_archive(project)
    (project / changed).write_text((project / changed).read_text() + "# changed\n")
    assert images.liqo_archive(project) != before


def test_a_new_source_file_makes_a_new_archive(project: Path) -> None:
    before = images.liqo_archive(project)
    (project / "src/liqo/apps/virtualkubelet.py").write_text("")
    assert images.liqo_archive(project) != before


def test_a_renamed_source_file_makes_a_new_archive(project: Path) -> None:
    before = images.liqo_archive(project)
    (project / "src/liqo/apps/manager.py").rename(project / "src/liqo/apps/other.py")
    assert images.liqo_archive(project) != before


@pytest.mark.parametrize(
    "changed",
    ["README.md", "tests/test_x.py", "docs/operations.md", "src/liqo/__pycache__/__init__.cpython-311.pyc"],
)
def test_nothing_else_makes_a_new_archive(project: Path, changed: str) -> None:
    before = images.liqo_archive(project)
    (project / changed).write_text("something else\n")
    (project / "src/liqo/apps/__pycache__").mkdir()
    (project / "src/liqo/apps/__pycache__/manager.cpython-311.pyc").write_text("new bytecode")
    assert images.liqo_archive(project) == before


def test_a_change_to_the_recipe_makes_a_new_archive(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = images.liqo_archive(project)
    monkeypatch.setattr(images, "LIQO_PACKAGES", (*images.LIQO_PACKAGES, "busybox"))
    assert images.liqo_archive(project) != before


def test_another_wireguard_go_makes_a_new_archive(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = images.liqo_archive(project)
    monkeypatch.setattr(toolchain, "WIREGUARD_GO_VERSION", "v0.0.0-20990101000000-000000000000")
    assert images.liqo_archive(project) != before


def test_the_content_key_tells_where_one_part_ends() -> None:
    assert images.content_key([("a", b"bc")]) != images.content_key([("ab", b"c")])
    assert images.content_key([("a", b"b"), ("c", b"")]) != images.content_key([("a", b"b\0c\x000\0")])


# -- preloading -----------------------------------------------------------------------------------------


@pytest.fixture
def cached(project: Path) -> list[Path]:
    """The cache already holds the sandbox and tool images, and liqo's image of ``project``."""
    archives = [images.pause_archive(), images.toolbox_archive(), images.liqo_archive(project)]
    images.images_dir().mkdir(parents=True)
    for archive in archives:
        archive.write_bytes(b"built before")
    return archives


def test_from_the_source_tree_nodes_preload_liqos_image_too(
    project: Path, cached: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "project_source", lambda: project)
    said: list[str] = []
    assert images.ensure_images(progress=said.append) == cached
    assert said == []  # all cached: nothing built, nothing to say
    assert images.ensure_liqo_image() == cached[2]


def test_from_a_wheel_nodes_go_without_liqos_image_and_a_line_says_so(
    cached: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "project_source", lambda: None)
    said: list[str] = []
    assert images.ensure_images(progress=said.append) == cached[:2]
    [line] = said
    assert "is not preloaded" in line
    assert "load-image" in line
    with pytest.raises(images.ImageError, match="needs its source tree"):
        images.ensure_liqo_image()


def test_this_checkout_is_a_source_tree() -> None:
    assert images.project_source() == REPO


def test_old_archives_of_liqos_image_are_pruned_the_others_kept(project: Path) -> None:
    directory = images.images_dir()
    directory.mkdir(parents=True)
    kept = [directory / "pause-1.tar", directory / "toolbox-1.tar"]
    liqo = [directory / f"liqo-{index}.tar" for index in range(images.LIQO_ARCHIVES_KEPT + 2)]
    for age, archive in enumerate([*kept, *liqo]):
        archive.write_bytes(b"")
        os.utime(archive, (1_000_000 + age, 1_000_000 + age))
    images._prune(prefix="liqo-", keep=images.LIQO_ARCHIVES_KEPT, built=liqo[-1])
    assert sorted(directory.iterdir()) == sorted([*kept, *liqo[-images.LIQO_ARCHIVES_KEPT :]])


# -- what the image carries ------------------------------------------------------------------------------


def test_the_image_carries_the_network_fabrics_tools() -> None:
    # wireguard-go is built from its Go module, not taken from Debian (bookworm's is the 2022 one).
    assert set(images.NETWORK_PACKAGES) == {"wireguard-tools", "iproute2", "nftables"}
    assert "wireguard-go" not in images.LIQO_PACKAGES
    assert images.WIREGUARD_GO_PATH == "usr/bin/wireguard-go"
    assert set(images.NETWORK_PACKAGES) <= set(images.LIQO_PACKAGES)
    assert set(images.NETWORK_PRUNE) <= set(images.LIQO_PRUNE)
    kept = {"bin/ip", "usr/sbin/nft", "usr/bin/wg", images.WIREGUARD_GO_PATH}
    assert not {path for path in images.LIQO_PRUNE for tool in kept if tool == path or tool.startswith(path + "/")}


def test_pruning_removes_directories_files_and_links_without_following_them(tmp_path: Path) -> None:
    rootfs, outside = tmp_path / "rootfs", tmp_path / "outside"
    (rootfs / "usr/share/doc/pkg").mkdir(parents=True)
    (rootfs / "usr/share/doc/pkg/copyright").write_text("c")
    (rootfs / "sbin").mkdir()
    (rootfs / "sbin/tc").write_text("elf")
    (rootfs / "sbin/ip").write_text("elf")
    outside.mkdir()
    (outside / "precious").write_text("p")
    (rootfs / "lib").mkdir()
    (rootfs / "lib/systemd").symlink_to(outside)  # an absolute link, as packages ship
    images.prune_rootfs(rootfs, ["usr/share/doc", "sbin/tc", "lib/systemd", "not/there"])
    assert not (rootfs / "usr/share/doc").exists()
    assert not (rootfs / "sbin/tc").exists()
    assert (rootfs / "sbin/ip").read_text() == "elf"
    assert not (rootfs / "lib/systemd").is_symlink()
    assert (outside / "precious").read_text() == "p"


def test_pruning_refuses_a_path_through_a_link_out_of_the_root(tmp_path: Path) -> None:
    rootfs, outside = tmp_path / "rootfs", tmp_path / "outside"
    rootfs.mkdir()
    outside.mkdir()
    (outside / "precious").write_text("p")
    (rootfs / "etc").symlink_to(outside)
    with pytest.raises(images.ImageError, match="not inside"):
        images.prune_rootfs(rootfs, ["etc/precious"])
    assert (outside / "precious").read_text() == "p"


# -- the image's configuration --------------------------------------------------------------------------


def test_the_image_runs_a_liqo_module_as_uid_65532_from_opt_liqo() -> None:
    config = images.image_config(
        diff_ids=["sha256:l"],
        entrypoint=images.LIQO_ENTRYPOINT,
        cmd=images.LIQO_CMD,
        env=images.LIQO_ENV,
        user=images.LIQO_USER,
    )["config"]
    assert config == {
        "Env": [images.PATH_ENV, "PYTHONPATH=/opt/liqo", "PYTHONDONTWRITEBYTECODE=1"],
        "Entrypoint": ["/usr/bin/python3", "-m"],
        "Cmd": ["liqo.apps.manager"],
        "User": "65532:65532",
    }


# -- the Containerfile says the same --------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """The Containerfile's instructions (continuation lines joined, comments dropped)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


CONTAINERFILE = instructions((REPO / "Containerfile").read_text())
FINAL_STAGE = CONTAINERFILE[max(i for i, (keyword, _) in enumerate(CONTAINERFILE) if keyword == "FROM") :]


def last(keyword: str) -> str:
    return [rest for key, rest in FINAL_STAGE if key == keyword][-1]


def commands(stage: list[tuple[str, str]]) -> list[list[str]]:
    """Each command of the stage's RUN instructions, split into words."""
    return [shlex.split(part) for key, rest in stage if key == "RUN" for part in rest.split("&&")]


def test_both_start_from_the_same_debian_and_python() -> None:
    froms = [rest for key, rest in CONTAINERFILE if key == "FROM"]
    go = ".".join(map(str, toolchain.GO_MINIMUM))
    assert froms == [
        f"python:3.11-slim-{images.DEBIAN_SUITE} AS build",
        f"golang:{go}-{images.DEBIAN_SUITE} AS wireguard-go",
        f"debian:{images.DEBIAN_SUITE}-slim",
    ]


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of the Containerfile's stage ``name`` (its FROM to the next)."""
    starts = [i for i, (keyword, rest) in enumerate(CONTAINERFILE) if keyword == "FROM"]
    [start] = [i for i in starts if CONTAINERFILE[i][1].endswith(f" AS {name}")]
    end = min([i for i in starts if i > start], default=len(CONTAINERFILE))
    return CONTAINERFILE[start:end]


def test_the_same_wireguard_go_built_the_same_way() -> None:
    [install] = [words for words in commands(stage("wireguard-go")) if "install" in words]
    environment = dict(word.split("=", 1) for word in install if "=" in word and not word.startswith("-"))
    assert environment == {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false", "GOBIN": "/out"}
    go = install[len(environment) :]
    module = f"{toolchain.WIREGUARD_GO_MODULE}@{toolchain.WIREGUARD_GO_VERSION}"
    assert go == ["go", "install", *toolchain.WIREGUARD_GO_FLAGS, module]
    command = toolchain.WIREGUARD_GO_MODULE.rsplit("/", 1)[1]
    assert ("COPY", f"--from=wireguard-go /out/{command} /{images.WIREGUARD_GO_PATH}") in FINAL_STAGE


def test_the_same_debian_packages_are_installed_and_the_same_paths_pruned() -> None:
    [install] = [words for words in commands(FINAL_STAGE) if words[:2] == ["apt-get", "install"]]
    assert [word for word in install[2:] if not word.startswith("-")] == list(images.LIQO_PACKAGES)
    [prune] = [words for words in commands(FINAL_STAGE) if words[:2] == ["rm", "-rf"]]
    assert prune[2:] == [f"/{path}" for path in images.LIQO_PRUNE]


def test_the_same_entrypoint_command_user_and_environment() -> None:
    assert json.loads(last("ENTRYPOINT")) == list(images.LIQO_ENTRYPOINT)
    assert json.loads(last("CMD")) == list(images.LIQO_CMD)
    assert last("USER") == images.LIQO_USER
    assert last("ENV").split() == list(images.LIQO_ENV)
    assert f"liqo:x:{images.LIQO_UID}:{images.LIQO_UID}:liqo:/:/usr/sbin/nologin" in last("RUN")
    assert ("COPY", f"--from=build {images.LIQO_SITE} {images.LIQO_SITE}") in FINAL_STAGE


def test_the_same_uv_steps_with_the_uv_make_installs() -> None:
    build_stage = CONTAINERFILE[: CONTAINERFILE.index(FINAL_STAGE[0])]
    steps = commands(build_stage)
    uv_version = re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert uv_version is not None
    assert ["pip", "install", "--no-cache-dir", f"uv=={uv_version[1]}"] in steps
    [export] = [words for words in steps if words[:2] == ["uv", "export"]]
    assert export == ["uv", *images.UV_EXPORT, ">", "/dist/requirements.txt"]
    [install] = [words for words in steps if words[:3] == ["uv", "pip", "install"]]
    assert install[install.index("--target") + 1] == images.LIQO_SITE
    assert ["rm", "-rf", f"{images.LIQO_SITE}/bin"] in steps
