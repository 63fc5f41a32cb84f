"""A LAN of network namespaces on one bridge, and liqo's discovery listener run in them (``--print``).

What the tests start is theirs alone: a bridge and namespaces with random names, addresses in a /24 of
198.18.0.0/15 (the range set aside for benchmarks, never routed) chosen at random, every process stopped
by pid and every link and namespace deleted at the end.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from liqo.api import labels
from liqo.discovery.announcements import Announcement


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@dataclass
class Host:
    """One namespace on the LAN."""

    namespace: str
    address: str


@dataclass
class Lan:
    """The bridge and its hosts."""

    bridge: str
    subnet: str
    hosts: list[Host] = field(default_factory=list)

    def add_host(self) -> Host:
        """A new namespace linked to the bridge, with the next address."""
        index = len(self.hosts) + 1
        host = Host(namespace=f"{self.bridge}-{index}", address=f"{self.subnet}.{index}")
        outside = f"{self.bridge}v{index}"
        _ip("netns", "add", host.namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        self.hosts.append(host)
        return host


@contextmanager
def lan() -> Iterator[Lan]:
    """A bridge of its own, deleted with every namespace added to it."""
    tag = secrets.token_hex(3)
    made = Lan(bridge=f"ld{tag}", subnet=f"198.{18 + secrets.randbelow(2)}.{secrets.randbelow(256)}")
    _ip("link", "add", made.bridge, "type", "bridge")
    _ip("link", "set", made.bridge, "up")
    try:
        yield made
    finally:
        for host in made.hosts:
            subprocess.run(["ip", "netns", "del", host.namespace], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", made.bridge], check=False, capture_output=True)


class Listener:
    """``python -m liqo.apps.discovery --print`` in one host: the tables it printed, as they come."""

    def __init__(self, host: Host, *, announcement: Announcement | None, ttl: int = 60, limit: int = 64) -> None:
        argv = [
            "ip", "netns", "exec", host.namespace, sys.executable, "-m", "liqo.apps.discovery",
            f"--address={host.address}", "--print", "--metrics-address=", f"--ttl={ttl}", f"--limit={limit}",
        ]  # fmt: skip
        if announcement is not None:
            argv += [
                f"--cluster-id={announcement.cluster_id}",
                f"--cluster-name={announcement.cluster_name}",
                f"--auth-url={announcement.auth_url}",
                f"--key-fingerprint={announcement.key_fingerprint}",
                f"--cluster-labels={labels.encode(dict(announcement.labels))}",
            ]
        self.host = host
        # Its log goes to a file: a pipe no one reads fills and stops the listener at its next log line.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, text=True)
        self.last: dict[str, Any] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def wait_up(self) -> None:
        """Until the listener printed its first table: it listens (a loaded machine may take seconds to start
        a Python process; what the tests time is discovery, from there)."""
        self.wait_for(lambda _: True, timeout=60, what="the listener up")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def wait_for(self, check: Any, *, timeout: float, what: str) -> dict[str, Any]:
        """The first table printed (or already printed) for which ``check(table)`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.last is not None and check(self.last):
                return self.last
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise AssertionError(
                    f"{self.host.namespace}: {what} not seen in {timeout:.0f}s; last: {self.last}\n"
                    f"its log ends:\n{self.log_tail()}"
                )
            try:
                self.last = json.loads(self._lines.get(timeout=min(left, 0.5)))
            except queue.Empty:
                continue

    def log_tail(self, size: int = 4000) -> str:
        """The end of what the listener logged."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-size:]

    @property
    def table(self) -> dict[str, Any]:
        """The last table printed."""
        assert self.last is not None, f"{self.host.namespace}: nothing printed yet"
        return self.last

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the listener by pid (SIGTERM: it says goodbye) and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@contextmanager
def listeners() -> Iterator[list[Listener]]:
    """A list the test fills; every listener in it stopped at the end."""
    started: list[Listener] = []
    try:
        yield started
    finally:
        for each in started:
            each.stop(signal.SIGKILL)
