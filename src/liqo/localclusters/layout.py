"""Where a local cluster keeps its state, and the ports it listens on.

Everything about cluster ``NAME`` lives in ``$LIQO_HOME/local/NAME`` (default ``~/.liqo``): the stored
spec and ports, the PKI, etcd's data, one log per component, and the two files through which the CLI and
the supervisor talk: ``components.json`` (what should run, written by the CLI) and ``status.json`` (what
does run, written by the supervisor). Plain files make the state inspectable with ``cat`` and survive
any process dying.

Several ``liqoctl`` processes (two terminals, two test lanes) work on the clusters' root at once, so every
file here is written whole (a temporary file renamed over it), every reader of *all* clusters tolerates
one vanishing while it reads (a cluster being purged is simply not there), and what clusters share on
this machine — loopback ports, underlay slots — is chosen and recorded in the cluster's ``cluster.json``
under one machine-wide lock (:func:`allocation_lock`): the choice is a pure function of what every
cluster recorded, so two ``up`` never pick the same, whatever their timing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
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


def kernel_ports() -> Iterator[int]:
    """Loopback ports the kernel calls free, one per bind to port 0 (endless; consumers take what they need).

    Each is free only at the moment it is drawn: nothing holds it afterwards. What keeps two clusters from
    both using one is that the choice is recorded under :func:`allocation_lock` (see :func:`choose_ports`).
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            yield int(sock.getsockname()[1])


def choose_ports(
    wanted: Mapping[str, int],
    *,
    reserved: Collection[int],
    keep: Callable[[int], bool],
    candidates: Iterable[int],
) -> dict[str, int]:
    """A distinct port for each name of ``wanted``, none of them ``reserved`` (pure but for what it is given).

    A name keeps its wanted port (non-zero) when no other name or cluster holds it and ``keep(port)`` says
    it may (``up`` asks whether the port is still free; a running component's port is kept as it is);
    the others get the first ``candidates`` that are neither reserved nor already chosen.
    """
    taken = set(reserved)
    chosen: dict[str, int] = {}
    for name, port in wanted.items():
        if port and port not in taken and keep(port):
            chosen[name] = port
            taken.add(port)
    unused = (port for port in candidates if port not in taken)

    def fresh() -> int:
        port = next(unused)
        taken.add(port)
        return port

    return {name: chosen[name] if name in chosen else fresh() for name in wanted}


def refresh_ports(current: Ports | None, *, reserved: Collection[int] = ()) -> Ports:
    """Keep every port of ``current`` still free and not ``reserved``; replace the others (or all, when new)."""
    wanted = {f.name: getattr(current, f.name) if current else 0 for f in fields(Ports)}
    return Ports(**choose_ports(wanted, reserved=reserved, keep=port_is_free, candidates=kernel_ports()))


PORT_GROUPS = ("ports", "liqoPorts")
"""The keys of ``cluster.json`` holding ports: the cluster's own components', and liqo's host processes'."""


def reserved_ports(records: Mapping[str, Mapping[str, Any]], *, name: str, group: str) -> set[int]:
    """Every port recorded by any cluster, except ``group`` of cluster ``name`` (the one being chosen again)."""
    return {
        int(port)
        for cluster, record in records.items()
        for key in PORT_GROUPS
        if (cluster, key) != (name, group)
        for port in (record.get(key) or {}).values()
        if port
    }


# -- sharing the clusters' root between processes ----------------------------------------------------------


@contextmanager
def locked(path: Path, *, make_parent: bool = True) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created if missing) until the block ends.

    A lock file can be removed while a process waits on it (``down --purge`` renames its cluster's directory
    away): the waiter then holds a lock on a file nobody else opens any more. So the lock counts only once
    the file it holds is still the one at ``path``; if not, take the new one.

    Raises:
        FileNotFoundError: ``path``'s directory does not exist (and ``make_parent`` is false).
    """
    while True:
        if make_parent:
            path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            held = os.fstat(handle.fileno())
            try:
                current = os.stat(path)
            except FileNotFoundError:
                continue
            if (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
                yield
                return


def allocation_lock(root: Path) -> AbstractContextManager[None]:
    """The machine-wide lock under which clusters choose and record what they share (ports, underlay slots).

    Held only while choosing and writing ``cluster.json``: milliseconds, never across a slow step.
    """
    return locked(root / ".allocation.lock")


def read_record(cluster: ClusterDir) -> dict[str, Any] | None:
    """The cluster's ``cluster.json``; None when there is none (never made, or purged meanwhile)."""
    try:
        record: dict[str, Any] = read_json(cluster.cluster_file)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return record


def records(root: Path) -> dict[str, dict[str, Any]]:
    """Every cluster's ``cluster.json``, by name; a cluster purged while this reads is left out, not an error."""
    try:
        entries = sorted(root.iterdir())
    except FileNotFoundError:
        return {}
    found = {}
    for entry in entries:
        if not entry.name.startswith("."):  # lock files and tombstones
            record = read_record(ClusterDir(entry))
            if record is not None:
                found[entry.name] = record
    return found


def remove_cluster(cluster: ClusterDir) -> None:
    """Delete a cluster's directory so that nobody sees it half deleted, and release what it recorded.

    Renamed away first — atomic, and under the allocation lock, so an allocation sees the cluster whole
    or not at all — then removed at leisure: the hidden tombstone is no cluster for :func:`records`, and
    the name is free again at once.
    """
    tombstone = cluster.root.with_name(f".removing-{cluster.name}-{uuid.uuid4().hex[:8]}")
    with allocation_lock(cluster.root.parent):
        os.rename(cluster.root, tombstone)
    shutil.rmtree(tombstone)


def read_json(path: Path) -> Any:
    """The decoded content of a JSON file."""
    return orjson.loads(path.read_bytes())


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)
