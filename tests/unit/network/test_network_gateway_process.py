"""How the gateway starts wireguard-go: in the foreground, with a Go memory limit inside the container's."""

from pathlib import Path

import pytest

from liqo.network.gateway_loop import GO_MEMORY_SHARE, container_memory_limit, wireguard_go_env

MIB = 1 << 20


def test_wireguard_go_gets_a_share_of_the_containers_memory_limit() -> None:
    env = wireguard_go_env({"PATH": "/usr/bin"}, memory_limit=256 * MIB)
    assert env == {
        "PATH": "/usr/bin",
        "WG_PROCESS_FOREGROUND": "1",
        "GOMEMLIMIT": str(int(256 * MIB * GO_MEMORY_SHARE)),
    }
    assert int(env["GOMEMLIMIT"]) >= 96 * MIB  # below that, its garbage collector thrashes under load


def test_an_operators_gomemlimit_is_kept() -> None:
    env = wireguard_go_env({"GOMEMLIMIT": "300MiB"}, memory_limit=256 * MIB)
    assert env["GOMEMLIMIT"] == "300MiB"


def test_no_limit_no_gomemlimit() -> None:
    assert "GOMEMLIMIT" not in wireguard_go_env({}, memory_limit=None)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"v2": "268435456\n"}, 256 * MIB),
        ({"v2": "max\n"}, None),
        ({"v1": "268435456\n"}, 256 * MIB),
        ({"v1": "9223372036854771712\n"}, None),  # cgroup v1's "unlimited"
        ({}, None),
    ],
)
def test_the_containers_limit_is_read_from_its_cgroup(
    tmp_path: Path, files: dict[str, str], expected: int | None
) -> None:
    paths = (tmp_path / "v2", tmp_path / "v1")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert container_memory_limit(paths) == expected
