import itertools
import socket
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from liqo.localclusters.layout import (
    ClusterDir,
    Ports,
    choose_ports,
    kernel_ports,
    port_is_free,
    read_json,
    records,
    refresh_ports,
    remove_cluster,
    reserved_ports,
    write_json,
)

PURPOSES = ("a", "b", "c", "d", "e")


@given(
    wanted=st.dictionaries(st.sampled_from(PURPOSES), st.integers(0, 40)),
    reserved=st.sets(st.integers(1, 40)),
    refused=st.sets(st.integers(1, 40)),
)
def test_chosen_ports_are_distinct_never_reserved_and_kept_when_they_may_be(
    wanted: dict[str, int], reserved: set[int], refused: set[int]
) -> None:
    chosen = choose_ports(
        wanted, reserved=reserved, keep=lambda port: port not in refused, candidates=itertools.count(1)
    )
    assert list(chosen) == list(wanted)
    assert len(set(chosen.values())) == len(chosen)
    assert not set(chosen.values()) & reserved
    first_wanting: dict[int, str] = {}
    for name, port in wanted.items():
        if port and port not in reserved and port not in refused:
            first_wanting.setdefault(port, name)
    assert all(chosen[name] == port for port, name in first_wanting.items())


def test_refresh_ports_keeps_free_ports_and_replaces_taken_ones() -> None:
    current = Ports(*itertools.islice(kernel_ports(), 6))  # a cluster made before the registry: port 0, i.e. none
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", current.kwok))
        busy.listen()
        refreshed = refresh_ports(current, reserved=[current.etcd_peer])
    assert refreshed.apiserver == current.apiserver
    assert refreshed.kwok != current.kwok
    assert refreshed.etcd_peer != current.etcd_peer  # another cluster recorded it meanwhile
    assert current.registry == 0
    assert refreshed.registry != 0
    assert len(set(refreshed.values())) == 7
    assert all(port_is_free(p) for p in refreshed.values())


def test_reserved_ports_are_every_recorded_port_but_the_group_being_chosen() -> None:
    recorded = {
        "rome": {"ports": {"apiserver": 1, "etcd": 2}, "liqoPorts": {"auth": 3}},
        "milan": {"ports": {"apiserver": 4, "registry": 0}},
    }
    assert reserved_ports(recorded, name="rome", group="ports") == {3, 4}
    assert reserved_ports(recorded, name="rome", group="liqoPorts") == {1, 2, 4}
    assert reserved_ports(recorded, name="naples", group="ports") == {1, 2, 3, 4}


def test_records_leave_out_hidden_entries_and_directories_without_a_record(tmp_path: Path) -> None:
    write_json(ClusterDir(tmp_path / "rome").cluster_file, {"spec": {"name": "rome"}})
    (tmp_path / "half").mkdir()  # an `up` that has not recorded anything yet
    (tmp_path / ".allocation.lock").touch()
    write_json(ClusterDir(tmp_path / ".removing-milan-0a1b2c3d").cluster_file, {"spec": {"name": "milan"}})
    assert records(tmp_path) == {"rome": {"spec": {"name": "rome"}}}
    assert records(tmp_path / "nowhere") == {}


def test_a_removed_cluster_leaves_nothing_and_its_name_free(tmp_path: Path) -> None:
    rome = ClusterDir(tmp_path / "rome")
    write_json(rome.cluster_file, {"spec": {"name": "rome"}})
    (rome.logs).mkdir()
    (rome.logs / "etcd.log").write_text("...")
    remove_cluster(rome)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".allocation.lock"]


def test_json_files_are_written_atomically(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    write_json(path, {"b": 1, "a": [1, 2]})
    assert read_json(path) == {"a": [1, 2], "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]
