"""What both components offer an operator, the same way: log level and format, metrics and health probes."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aiohttp import web

from liqo.install.manifests import METRICS_PORT
from liqo.kube.logformat import FORMATS, configure_logging
from liqo.kube.metrics import listen_address, serve_metrics

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
    """The metrics and probes listener, unless ``--metrics-address`` is empty; the caller cleans it up."""
    if args.metrics_address is None:
        return None
    return await serve_metrics(args.metrics_address, ready=ready)
