"""The log formats: JSON, one object per line with the fields collectors index, nothing else of the record; text,
one line per message whatever a peer named."""

from __future__ import annotations

import logging
import sys
import unicodedata

import orjson
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.logformat import JsonFormatter, TextFormatter
from liqo.kube.printable import UNPRINTABLE


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


def test_a_name_with_a_newline_writes_no_line_of_its_own() -> None:
    name = "evil\n2026-01-01 00:00:00,000 INFO liqo.manager forged line\x1b[2J"
    made = record("identity issued to %s (%s)", name, "a1b2")
    line = TextFormatter().format(made)
    assert line.endswith(" INFO liqo.test identity issued to evil\\n2026-01-01 00:00:00,000 INFO liqo.manager forged"
                         " line\\x1b[2J (a1b2)")  # fmt: skip
    assert made.getMessage() == f"identity issued to {name} (a1b2)"  # other handlers see the record as it was


@given(st.text(), st.text(st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Zl", "Zp"))))
def test_any_message_is_one_printable_line_and_printable_ones_are_unchanged(message: str, plain: str) -> None:
    line = TextFormatter().format(record("%s", message))
    assert not any(unicodedata.category(char) in UNPRINTABLE for char in line)
    assert TextFormatter().format(record("%s", plain)).endswith(f" INFO liqo.test {plain}")


def test_a_traceback_still_follows_its_message() -> None:
    lines = TextFormatter().format(record("reconcile of %s failed", "a\nb", exc=True)).splitlines()
    assert lines[0].endswith("reconcile of a\\nb failed")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: broken"
