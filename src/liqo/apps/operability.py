"""How every liqo process starts, alike: common flags, logging, TLS buffers, what a fatal error looks like.

The flags: log level and format, where metrics and health probes are served.

How the process then serves and runs is the process shell's (:mod:`liqo.kube.shell`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from liqo.api.components import METRICS_PORT
from liqo.kube.logformat import FORMATS, configure_logging
from liqo.kube.metrics import listen_address
from liqo.kube.tlsbuffers import size_tls_read_buffers

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


def main(
    argv: Sequence[str] | None,
    *,
    parse: Callable[[list[str]], argparse.Namespace],
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, None]],
    fatal: tuple[type[Exception], ...] = (),
) -> None:
    """Parse the flags, set logging up, run until done.

    An exception of ``fatal`` is what the operator must fix (invalid settings, no serving certificate): its
    message is the last line of ``kubectl logs`` (and of the pod's termination message), and the process
    exits 1 for the kubelet or the supervisor to try again.
    """
    args = parse(sys.argv[1:] if argv is None else list(argv))
    configure_logging(level=args.log_level, fmt=args.log_format)
    size_tls_read_buffers()
    try:
        asyncio.run(run(args))
    except fatal as exc:
        log.error("%s", exc)
        sys.exit(1)
