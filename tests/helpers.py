"""Shared test helpers: condition waits with deadlines (never bare sleeps), local cluster handles."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from liqo.kube.client import KubeClient
from liqo.local import clusters, toolchain
from liqo.local.layout import ClusterDir
from liqo.local.spec import ClusterSpec


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float, message: str, every: float = 0.1) -> None:
    """Wait until ``check()`` is true; fail with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        await asyncio.sleep(every)


def eventually_sync(check: Callable[[], bool], *, timeout: float, message: str, every: float = 0.1) -> None:
    """:func:`eventually` for synchronous checks."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        time.sleep(every)


@dataclass(frozen=True)
class LocalCluster:
    """A running local cluster, as tests see it."""

    spec: ClusterSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dir(self) -> ClusterDir:
        return ClusterDir.named(self.name)

    @property
    def kubeconfig(self) -> Path:
        return self.dir.kubeconfig

    def client(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig, name=self.name)

    def kubectl(self) -> list[str]:
        return [str(toolchain.bin_dir() / "kubectl"), f"--kubeconfig={self.kubeconfig}"]


def unique(prefix: str) -> str:
    """A name no other test (or test run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def start(spec: ClusterSpec) -> LocalCluster:
    clusters.up(spec)
    return LocalCluster(spec)


def purge(cluster: LocalCluster) -> None:
    if cluster.dir.exists():
        clusters.down(cluster.name, purge=True)
