"""How the components log: plain text for people, or one JSON object per line for log collectors.

A collector (Fluent Bit, Vector, Loki's promtail) reading text has to guess where a message ends, and a
traceback spans many lines; JSON gives it one record per line with the fields it indexes. Only the record's
time, level, logger, message and exception text go out: never its arguments or extra attributes, which may
hold objects the message itself was careful not to print (a token, a kubeconfig).

Messages name what peers named (a cluster, a namespace, a Secret), and a name is a stranger's text: in the
text format every message goes through :func:`~liqo.kube.printable.printable` (JSON escapes on its own), so
no message is ever more than one line, nor moves the reader's terminal (docs/security.md, "Logs").
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

from liqo.kube.printable import printable

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record.

    Its keys: ``time`` (RFC 3339, UTC, microseconds), ``level``, ``logger``, ``message``, and ``exception``
    (the traceback) and ``stack`` when the record carries them.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, each message one line of printable text whatever its arguments held."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line of ``record``, its message escaped (the record itself, which other handlers see, unchanged)."""
        return super().formatMessage(logging.makeLogRecord(record.__dict__ | {"message": printable(record.message)}))


def configure_logging(*, level: str, fmt: str) -> None:
    """Send the process's logs to stderr at ``level``, as ``fmt`` (one of :data:`FORMATS`) says."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler])
