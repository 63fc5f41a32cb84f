"""The shell every liqo process runs in: its listeners and probes, its leadership, its signals, its exit.

Four processes (the manager, the virtual kubelet, a gateway, a node agent) must behave alike to an operator
and to the kubelet that restarts them: a probe tells "alive, not ready" from "dead" from the first second
(the metrics listener comes up before any wait), ``/readyz`` turns true once their own listeners serve, the
control loops run only in the replica holding the Lease, SIGTERM releases the Lease at once and, where a
Service fronts the process, keeps answering a moment longer (its endpoint is withdrawn asynchronously: a
closed port would refuse pods at admission), and a loop that ends by itself stops the process, non-zero if
it failed, so that the kubelet or the local supervisor starts a fresh one with the reason in the log.

Written once here, each entry point in :mod:`liqo.apps` only says what it serves and what it runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from liqo.kube.client import KubeClient
from liqo.kube.kubeconfig import load_cert_chain
from liqo.kube.leaderelection import STANDBY_OBSERVE_PERIOD, LeaderElector
from liqo.kube.metrics import CacheCollector, CacheGauge, registered, serve_metrics

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
"""A ReplicaSet creating hundreds of pods at once makes the API server open as many connections to a
webhook; with the default backlog (128) the rest are dropped and retried a second later."""


SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""What stops a process: the kubelet's and the local supervisor's SIGTERM, an operator's Ctrl-C."""


def server_tls(
    *, cert_file: str | None = None, key_file: str | None = None, pem: tuple[str, str] | None = None
) -> ssl.SSLContext:
    """A listener's TLS context, its pair from files or from PEM text (certificate, key); see :func:`reload_tls`.

    No session tickets: the API server opens a connection per concurrent admission call and never resumes a
    session, so the tickets TLS 1.3 would issue after every handshake are work for nothing on the hot path.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.num_tickets = 0
    if cert_file and key_file:
        context.load_cert_chain(cert_file, key_file)
    elif pem is not None:
        load_cert_chain(context, *pem)
    return context


def reload_tls(contexts: Sequence[ssl.SSLContext], pem: tuple[str, str]) -> None:
    """Serve the pair ``pem`` (certificate, key) on ``contexts`` from now on: new connections get it, none drops."""
    for context in contexts:
        load_cert_chain(context, *pem)


def holder_identity() -> str:
    """This process's name in a Lease: unique even for two replicas on one host, or a restarted one."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Leadership:
    """Run ``leading`` only while this process holds Lease ``namespace/lease``."""

    client: KubeClient
    namespace: str
    lease: str
    leading: Callable[[], Awaitable[None]]
    identity: str = field(default_factory=holder_identity)


class Shell:
    """A process's listeners (cleaned up on the way out), readiness and run; ``async with``, inside its client.

    ``metrics_address`` None: no metrics and probes listener. A port that cannot be bound is logged, not
    fatal: the listener is auxiliary, and a crash would take authentication, the webhooks or the virtual nodes
    down with it (local clusters' components installed before it existed all took the default port).
    """

    def __init__(
        self,
        *,
        metrics_address: tuple[str, int] | None,
        shutdown_delay: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._metrics_address = metrics_address
        self._shutdown_delay = shutdown_delay
        self._sleep = sleep
        self._ready = asyncio.Event()
        self._runners: list[web.AppRunner] = []
        self.metrics: web.AppRunner | None = None
        """The metrics and probes listener, if it serves."""

    async def __aenter__(self) -> Shell:
        if self._metrics_address is not None:
            try:
                self.metrics = await serve_metrics(self._metrics_address, ready=self._ready.is_set)
            except OSError as exc:
                host, port = self._metrics_address
                log.error("metrics and probes not served: cannot listen on %s:%d: %s", host, port, exc)
        return self

    async def __aexit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        if self.metrics is not None:
            await self.metrics.cleanup()

    async def listen(self, app: web.Application, address: str, tls: ssl.SSLContext) -> None:
        """Serve ``app`` over TLS on ``address`` (``HOST:PORT``) until the shell exits."""
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        host, _, port = address.rpartition(":")
        await web.TCPSite(runner, host, int(port), ssl_context=tls, backlog=LISTEN_BACKLOG).start()

    def serving(self) -> None:
        """Every listener of the process serves: ``/readyz`` turns true."""
        self._ready.set()

    async def run(
        self,
        *loops: Coroutine[Any, Any, None],
        leadership: Leadership | None = None,
        gauges: Sequence[CacheGauge] = (),
    ) -> None:
        """Run ``loops`` (and ``leadership``) until SIGTERM or SIGINT, or until one of them ends by itself.

        Then stop the others and, after a signal, keep the listeners answering ``shutdown_delay`` seconds
        more. Raises the failure of a loop that ended by itself with one.
        """
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        try:
            await self._run(loops, leadership=leadership, gauges=gauges, stop=stop)
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)

    async def _run(
        self,
        loops: Sequence[Coroutine[Any, Any, None]],
        *,
        leadership: Leadership | None,
        gauges: Sequence[CacheGauge],
        stop: asyncio.Event,
    ) -> None:
        tasks = [asyncio.create_task(each) for each in loops]
        if leadership is not None:
            elector = LeaderElector(
                client=leadership.client,
                namespace=leadership.namespace,
                name=leadership.lease,
                identity=leadership.identity,
                observe_period=STANDBY_OBSERVE_PERIOD,
            )
            tasks.append(asyncio.create_task(elector.run(leadership.leading)))
            gauges = [elector.gauge, *gauges]
        with registered(CacheCollector(list(gauges))):
            await asyncio.wait([*tasks, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                task.cancel()
            ended = await asyncio.gather(*tasks, return_exceptions=True)
        if stop.is_set() and self._shutdown_delay:
            log.info("leadership released; answering for %.0f s more", self._shutdown_delay)
            await self._sleep(self._shutdown_delay)
        for outcome in ended:
            if isinstance(outcome, Exception):
                raise outcome
