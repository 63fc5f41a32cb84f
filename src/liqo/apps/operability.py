"""The flags every liqo process takes alike: log level and format, where metrics and health probes are served.

How they are served is the process shell's (:mod:`liqo.kube.shell`).
"""

from __future__ import annotations

import argparse

from liqo.api.components import METRICS_PORT
from liqo.kube.logformat import FORMATS, configure_logging
from liqo.kube.metrics import listen_address

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
