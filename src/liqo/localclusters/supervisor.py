"""The supervisor of one local cluster: ``python -m liqo.localclusters.supervisor CLUSTER_DIR``.

It plays the part systemd or the kubelet plays on a real node. A level-triggered loop compares what
``components.json`` asks for with what runs, and acts: start a component once the ones it comes
``after`` are healthy, restart a crashed one with exponential backoff, stop a disabled one. It probes
each component's health endpoint and writes everything it observes to ``status.json``, which is all
``liqoctl local list`` needs to show a crashed or unhealthy component.

Signals: SIGHUP re-reads ``components.json`` (the CLI sends it after ``local stop/start``); SIGTERM or
SIGINT stop every component (reverse start order, SIGTERM then SIGKILL) and exit. Components die with
the supervisor even when it is SIGKILLed (see :mod:`liqo.localclusters.processes`).

CPU pinning (``liqoctl local up --cpus``): the supervisor sets its own affinity from the cluster's stored
spec before it starts anything, and every process it starts inherits it — the control plane, KWOK, real
nodes' daemons, liqo's components — including on every restart, with no component knowing about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from liqo.kube.timefmt import format_time
from liqo.localclusters.components import Component, Probe
from liqo.localclusters.layout import ClusterDir, read_json, write_json
from liqo.localclusters.processes import ProcessRef, die_with_parent, ref_of
from liqo.localclusters.spec import ClusterSpec

log = logging.getLogger("liqo.localclusters.supervisor")

TICK = 1.0
"""How often the loop re-evaluates when everything is healthy (probes of healthy components: every 5 ticks)."""
FAST_TICK = 0.05
"""The tick while a component is starting: a dependent starts as soon as what it waits for is healthy."""
SETTLE = 30.0
"""How long after a start a not-yet-healthy component is probed every FAST_TICK (then every TICK)."""
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0
"""A component that ran this long without crashing gets its backoff reset."""
STOP_GRACE = 10.0


def _now() -> str:
    return format_time(datetime.datetime.now(datetime.UTC))


@dataclass
class _State:
    """What the supervisor knows about one component."""

    component: Component
    process: asyncio.subprocess.Process | None = None
    ref: ProcessRef | None = None
    started_at: float = 0.0
    healthy: bool = False
    last_probe: float = 0.0
    probe_error: str = ""
    restarts: int = 0
    failures: int = 0
    not_before: float = 0.0
    last_exit: dict[str, Any] | None = None
    argv: list[str] = field(default_factory=list)
    """The command line of the running process (it may lag behind the component's after a reload)."""
    stopping: bool = False
    removed: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def phase(self, *, waiting_for: list[str]) -> str:
        if not self.component.enabled:
            return "Stopped"
        if self.running:
            return "Running" if self.healthy else "Starting"
        if waiting_for:
            return "Waiting"
        return "CrashLoopBackOff" if self.last_exit else "Pending"


class Supervisor:
    """Runs the components of one cluster until told to stop."""

    def __init__(self, cluster: ClusterDir) -> None:
        self.cluster = cluster
        self.states: dict[str, _State] = {}
        self._wake = asyncio.Event()
        self._reload = True
        self._stopping = False
        self._ssl: dict[Probe, ssl.SSLContext] = {}
        self._session: aiohttp.ClientSession | None = None
        self._self_ref = ref_of(os.getpid())
        self._written: dict[str, Any] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Supervise until SIGTERM/SIGINT, then stop every component."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self._on_reload)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3))
        try:
            while not self._stopping:
                if self._reload:
                    self._reload = False
                    self._load()
                await self._reconcile()
                self._write_status()
                self._wake.clear()
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races the event.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._tick()):
                        await self._wake.wait()
        finally:
            await self._stop_all()
            self._write_status(stopped=True)
            await self._session.close()

    def _tick(self) -> float:
        """How long the loop may sleep: short while something is settling, else :data:`TICK`."""
        now = time.monotonic()
        wake = TICK
        for state in self.states.values():
            if not state.component.enabled or state.healthy:
                continue
            if state.running:
                settling = now - state.started_at < SETTLE
                wake = min(wake, FAST_TICK if settling else TICK)
            else:  # waiting for a dependency, or for the end of a backoff
                wake = min(wake, max(state.not_before - now, FAST_TICK))
        return wake

    def _on_reload(self) -> None:
        self._reload = True
        self._wake.set()

    def _on_stop(self) -> None:
        self._stopping = True
        self._wake.set()

    def _load(self) -> None:
        wanted = {item["name"]: Component.from_dict(item) for item in read_json(self.cluster.components_file)}
        for name, state in self.states.items():
            if name not in wanted:
                state.component = _disabled(state.component)
                state.removed = True
        for name, component in wanted.items():
            state = self.states.setdefault(name, _State(component))
            if component.enabled and not state.component.enabled:
                state.not_before = 0.0  # an explicit start skips any pending backoff
            state.component = component
            state.removed = False

    async def _reconcile(self) -> None:
        now = time.monotonic()
        for state in list(self.states.values()):
            component = state.component
            if state.running and (not component.enabled or state.argv != component.argv):
                await self._stop(state)  # disabled, removed, or its command line changed
            if not component.enabled:
                if state.removed:
                    del self.states[component.name]
                continue
            if state.running:
                if state.failures and now - state.started_at > STABLE_AFTER:
                    state.failures = 0
            elif not self._waiting_for(component) and now >= state.not_before:
                await self._start(state)
        # Concurrently: one hung endpoint must not delay the others' verdicts.
        await asyncio.gather(*(self._probe(s, now) for s in self.states.values() if s.running))

    def _waiting_for(self, component: Component) -> list[str]:
        return [dep for dep in component.after if not (dep in self.states and self.states[dep].healthy)]

    async def _start(self, state: _State) -> None:
        component = state.component
        self.cluster.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.cluster.logs / f"{component.name}.log"
        parent = os.getpid()
        with log_path.open("ab") as out:
            out.write(f"\n--- {_now()} liqo supervisor: starting {component.name}\n".encode())
            out.flush()
            try:
                process = await asyncio.create_subprocess_exec(
                    *component.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    preexec_fn=lambda: die_with_parent(parent),
                )
            except OSError as exc:
                self._exited(state, code=None, message=f"cannot start: {exc}")
                return
        state.process = process
        state.argv = list(component.argv)
        state.stopping = False
        state.ref = ref_of(process.pid)
        state.started_at = time.monotonic()
        state.healthy = False
        state.last_probe = 0.0
        state.exited = asyncio.Event()
        log.info("started %s (pid %d)", component.name, process.pid)
        watcher = asyncio.get_running_loop().create_task(self._watch(state, process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, state: _State, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if state.process is process:
            self._exited(state, code=code, message="")
        state.exited.set()
        self._wake.set()

    def _exited(self, state: _State, *, code: int | None, message: str) -> None:
        expected = state.stopping or self._stopping
        state.process = None
        state.ref = None
        state.healthy = False
        if expected:
            return
        state.failures += 1
        state.restarts += 1
        delay = min(BACKOFF_MAX, 2.0 ** (state.failures - 1))
        state.not_before = time.monotonic() + delay
        reason = message or (f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}")
        state.last_exit = {"at": _now(), "reason": reason, "code": code}
        log.warning("%s exited (%s); restarting in %.0fs", state.component.name, reason, delay)

    async def _probe(self, state: _State, now: float) -> None:
        probe = state.component.probe
        if probe is None:
            state.healthy = True
            return
        if state.healthy:
            interval = TICK * 5
        else:
            interval = FAST_TICK if now - state.started_at < SETTLE else TICK
        if now - state.last_probe < interval:
            return
        state.last_probe = now
        assert self._session is not None
        try:
            tls: ssl.SSLContext | bool = self._ssl_for(probe) if probe.url.startswith("https:") else False
            async with self._session.get(probe.url, ssl=tls) as response:
                body = (await response.text())[:200]
                ok = response.status == 200
                state.probe_error = "" if ok else f"HTTP {response.status}: {body.strip()}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            ok = False
            state.probe_error = str(exc) or type(exc).__name__
        if ok != state.healthy:
            log.info("%s is %s", state.component.name, "healthy" if ok else f"unhealthy: {state.probe_error}")
            self._wake.set()  # dependents may start now
        state.healthy = ok

    def _ssl_for(self, probe: Probe) -> ssl.SSLContext:
        if probe not in self._ssl:
            context = ssl.create_default_context(cafile=probe.ca)
            if probe.cert:
                context.load_cert_chain(probe.cert, probe.key)
            self._ssl[probe] = context
        return self._ssl[probe]

    async def _stop(self, state: _State) -> None:
        process = state.process
        if process is None or process.returncode is not None:
            return
        log.info("stopping %s (pid %d)", state.component.name, process.pid)
        state.stopping = True
        _signal_group(process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE):
                await state.exited.wait()
        except TimeoutError:
            log.warning("%s did not stop within %.0fs: killing it", state.component.name, STOP_GRACE)
            _signal_group(process.pid, signal.SIGKILL)
            await state.exited.wait()

    async def _stop_all(self) -> None:
        self._stopping = True
        for state in reversed(list(self.states.values())):
            await self._stop(state)

    def _write_status(self, *, stopped: bool = False) -> None:
        components = {}
        for name, state in self.states.items():
            waiting = self._waiting_for(state.component) if state.component.enabled else []
            components[name] = {
                "phase": "Stopped" if stopped else state.phase(waiting_for=waiting),
                "enabled": state.component.enabled,
                "healthy": state.healthy and not stopped,
                "process": state.ref.to_dict() if state.ref and not stopped else None,
                "restarts": state.restarts,
                "lastExit": state.last_exit,
                "probeError": state.probe_error,
                "waitingFor": waiting,
            }
        status = {
            "supervisor": None if stopped or self._self_ref is None else self._self_ref.to_dict(),
            "components": components,
        }
        if status != self._written:  # the loop ticks fast while components start: write changes only
            write_json(self.cluster.status_file, status | {"updatedAt": _now()})
            self._written = status


def _disabled(component: Component) -> Component:
    return Component(component.name, component.argv, component.probe, component.after, enabled=False)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def main(argv: list[str] | None = None) -> None:
    """Entry point: supervise the cluster whose directory is the single argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m liqo.localclusters.supervisor CLUSTER_DIR")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    cluster = ClusterDir(Path(args[0]))
    cpus = ClusterSpec.from_dict(read_json(cluster.cluster_file)["spec"]).cpu_set
    if cpus:
        os.sched_setaffinity(0, cpus)
        log.info("pinned to CPUs %s (and so is every process started here)", sorted(cpus))
    asyncio.run(Supervisor(cluster).run())


if __name__ == "__main__":
    main()
