"""The JSON log format: one object per line, the fields collectors index, nothing else of the record."""

from __future__ import annotations

import logging
import sys

import orjson
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.logformat import JsonFormatter


def record(message: str, *args: object, level: int = logging.INFO, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("broken")
        except ValueError:
            exc_info = sys.exc_info()
    made = logging.LogRecord("liqo.test", level, __file__, 1, message, args, exc_info)
    made.created = 1_700_000_000.25
    return made


def test_a_record_is_one_json_object_with_time_level_logger_and_message() -> None:
    line = JsonFormatter().format(record("peer %s is %s", "milan", "Established", level=logging.WARNING))
    assert orjson.loads(line) == {
        "time": "2023-11-14T22:13:20.250000+00:00",
        "level": "WARNING",
        "logger": "liqo.test",
        "message": "peer milan is Established",
    }


def test_an_exception_travels_as_its_traceback_text_on_the_same_line() -> None:
    line = JsonFormatter().format(record("reconcile failed", exc=True))
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: broken")


def test_neither_arguments_nor_extra_attributes_leave_the_process_but_through_the_message() -> None:
    made = record("identity renewed for %s", "milan")
    made.token = "s3cr3t"  # what a careless `extra=` would attach
    line = JsonFormatter().format(made)
    assert "s3cr3t" not in line
    assert set(orjson.loads(line)) == {"time", "level", "logger", "message"}


@given(st.text())
def test_any_message_is_one_line_that_reads_back_as_itself(message: str) -> None:
    line = JsonFormatter().format(record("%s", message))
    assert "\n" not in line
    assert orjson.loads(line)["message"] == message
