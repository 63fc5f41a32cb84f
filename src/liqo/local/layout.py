"""Where a local cluster keeps its state, and the ports it listens on.

Everything about cluster ``NAME`` lives in ``$LIQO_HOME/local/NAME`` (default ``~/.liqo``): the stored
spec and ports, the PKI, etcd's data, one log per component, and the two files through which the CLI and
the supervisor talk: ``components.json`` (what should run, written by the CLI) and ``status.json`` (what
does run, written by the supervisor). Plain files make the state inspectable with ``cat`` and survive
any process dying.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import orjson


def liqo_home() -> Path:
    """``$LIQO_HOME``, or ``~/.liqo``."""
    return Path(os.environ.get("LIQO_HOME") or Path.home() / ".liqo")


def clusters_root() -> Path:
    """The directory holding one sub-directory per local cluster."""
    return liqo_home() / "local"


@dataclass(frozen=True)
class ClusterDir:
    """The files of one local cluster."""

    root: Path

    @classmethod
    def named(cls, name: str) -> ClusterDir:
        """The directory of cluster ``name`` (which may not exist yet)."""
        return cls(clusters_root() / name)

    @property
    def name(self) -> str:
        """The cluster's name."""
        return self.root.name

    @property
    def cluster_file(self) -> Path:
        """Spec, ports and versions, written once by ``up``."""
        return self.root / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users export."""
        return self.root / "kubeconfig"

    @property
    def pki(self) -> Path:
        """Certificates, keys and the components' kubeconfigs."""
        return self.root / "pki"

    @property
    def config(self) -> Path:
        """Generated configuration files (kwok, scheduler)."""
        return self.root / "config"

    @property
    def etcd_data(self) -> Path:
        """etcd's data directory."""
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        """One log file per component."""
        return self.root / "logs"

    @property
    def components_file(self) -> Path:
        """What the supervisor should run (written by the CLI)."""
        return self.root / "components.json"

    @property
    def status_file(self) -> Path:
        """What the supervisor observes (written by the supervisor)."""
        return self.root / "status.json"

    @property
    def supervisor_log(self) -> Path:
        """The supervisor's own log."""
        return self.logs / "supervisor.log"

    def exists(self) -> bool:
        """Whether ``up`` has ever run for this cluster."""
        return self.cluster_file.is_file()


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one cluster's components."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    scheduler: int
    kwok: int
    registry: int = 0
    """The image registry of real nodes (on the underlay's host address); 0 in clusters made before it."""

    def values(self) -> list[int]:
        """Every port, in field order."""
        return [getattr(self, f.name) for f in fields(self)]

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return asdict(self)


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``127.0.0.1:port`` now.

    SO_REUSEADDR, as every server (Go's included) sets it: connections lingering in TIME_WAIT after a
    component stopped do not keep the port from being reused.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, *, reserved: Iterable[int] = ()) -> list[int]:
    """``count`` distinct free loopback ports, none of them in ``reserved`` (other clusters' ports)."""
    taken = set(reserved)
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports


def refresh_ports(current: Ports | None, *, reserved: Iterable[int] = ()) -> Ports:
    """Keep every port of ``current`` that is still free; replace the taken ones (or all, when new)."""
    names = [f.name for f in fields(Ports)]
    keep = {
        name: getattr(current, name)
        for name in names
        if current and getattr(current, name) and port_is_free(getattr(current, name))
    }
    fresh = iter(free_ports(len(names) - len(keep), reserved=[*reserved, *keep.values()]))
    return Ports(**{name: keep[name] if name in keep else next(fresh) for name in names})


def read_json(path: Path) -> Any:
    """The decoded content of a JSON file."""
    return orjson.loads(path.read_bytes())


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)
