import socket
from pathlib import Path

from liqo.local.layout import Ports, free_ports, port_is_free, read_json, refresh_ports, write_json


def test_free_ports_are_distinct_and_avoid_reserved() -> None:
    reserved = free_ports(3)
    ports = free_ports(20, reserved=reserved)
    assert len(set(ports)) == 20
    assert not set(ports) & set(reserved)
    assert all(port_is_free(p) for p in ports)


def test_refresh_ports_keeps_free_ports_and_replaces_taken_ones() -> None:
    current = Ports(*free_ports(6))  # a cluster made before the registry: its port is 0, i.e. none yet
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", current.kwok))
        busy.listen()
        refreshed = refresh_ports(current)
    assert refreshed.apiserver == current.apiserver
    assert refreshed.kwok != current.kwok
    assert current.registry == 0
    assert refreshed.registry != 0
    assert len(set(refreshed.values())) == 7


def test_json_files_are_written_atomically(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    write_json(path, {"b": 1, "a": [1, 2]})
    assert read_json(path) == {"a": [1, 2], "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]
