"""What both components offer an operator, the same way: log level and format, metrics and health probes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from liqo.api.components import METRICS_PORT
from liqo.kube.logformat import FORMATS, configure_logging
from liqo.kube.metrics import listen_address, serve_metrics

log = logging.getLogger(__name__)

DEFAULT_METRICS_ADDRESS = f"0.0.0.0:{METRICS_PORT}"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--log-level``, ``--log-format`` and ``--metrics-address``."""
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=FORMATS, default="text", help="json: one JSON object per line")
    parser.add_argument(
        "--metrics-address",
        type=_metrics_address,
        default=DEFAULT_METRICS_ADDRESS,
        help="HOST:PORT of /metrics, /healthz and /readyz, plain HTTP (empty: not served)",
    )


def _metrics_address(text: str) -> tuple[str, int] | None:
    try:
        return listen_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def setup_logging(args: argparse.Namespace) -> None:
    """Logging as the flags say."""
    configure_logging(level=args.log_level, fmt=args.log_format)


async def start_metrics(args: argparse.Namespace, *, ready: Callable[[], bool]) -> web.AppRunner | None:
    """The metrics and probes listener, unless ``--metrics-address`` is empty; the caller cleans it up.

    A port that cannot be bound is logged, not fatal: the listener is auxiliary, and the components of local
    clusters installed before it existed all take the default port once restarted with this code, where a
    crash would take authentication, the webhooks or the virtual nodes down with it.
    """
    if args.metrics_address is None:
        return None
    try:
        return await serve_metrics(args.metrics_address, ready=ready)
    except OSError as exc:
        host, port = args.metrics_address
        log.error("metrics and probes not served: cannot listen on %s:%d: %s", host, port, exc)
        return None


async def until_signalled(*loops: Coroutine[Any, Any, None]) -> None:
    """Run ``loops`` until SIGTERM or SIGINT, or until one of them ends by itself (re-raising its failure).

    For the fabric's single-purpose processes (a gateway, a node agent): a loop that ends on its own is a
    crash, and the kubelet restarts the pod from nothing.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(each) for each in loops]
    await asyncio.wait([*tasks, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
