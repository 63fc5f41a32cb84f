"""Times as the Kubernetes API writes them: RFC 3339 in UTC with a ``Z``, to the second or the microsecond.

The API has two time types: ``Time`` (whole seconds: conditions, ``creationTimestamp``, Events, our own
annotations) and ``MicroTime`` (microseconds: Lease renewals, and probe times that must order two moments
within one second). Every component writes both the same way, and reads any RFC 3339 time back as an aware
UTC datetime, so that times compare with one another and with ``datetime.now(UTC)``.

A naive datetime is refused rather than converted: ``astimezone`` would read it as this machine's local
time, a silent error of hours in an expiry.
"""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC.

    Raises:
        ValueError: ``moment`` is naive.
    """
    if moment.tzinfo is None:
        raise ValueError(f"{moment} has no time zone")
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """A ``Time``: UTC, whole seconds (``2026-11-25T21:00:00Z``); the fraction is dropped, never rounded up."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """A ``MicroTime``: UTC with microseconds (``2026-11-25T21:00:00.000000Z``)."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (``...Z`` or an offset; a fraction finer than microseconds is cut) as an aware UTC datetime.

    Raises:
        ValueError: ``text`` is no such time, or has no time zone.
    """
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(UTC)
