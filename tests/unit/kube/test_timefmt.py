import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.timefmt import as_utc, format_micro_time, format_time, parse_time

# Aware times in any whole-minute offset, far enough from the calendar's ends for any offset to convert.
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30), timezones=offsets)


def test_the_api_servers_formats() -> None:
    moment = datetime(2030, 1, 2, 4, 4, 5, 7, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(moment) == "2030-01-02T03:04:05Z"
    assert format_micro_time(moment) == "2030-01-02T03:04:05.000007Z"
    assert parse_time("2030-01-02T03:04:05Z") == moment.replace(microsecond=0)
    assert parse_time("2030-01-02T04:04:05.000007+01:00").tzinfo is UTC


def test_fractions_finer_than_microseconds_are_cut() -> None:
    assert parse_time("2030-01-02T03:04:05.123456789Z") == datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def test_naive_times_are_refused_both_ways() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        format_time(datetime(2030, 1, 2))
    with pytest.raises(ValueError, match="no time zone"):
        format_micro_time(datetime(2030, 1, 2))
    with pytest.raises(ValueError, match="no time zone"):
        parse_time("2030-01-02T03:04:05")


@pytest.mark.parametrize("text", ["tomorrow", "", "2030-13-01T00:00:00Z", "2030-01-02T03:04:05Zulu"])
def test_what_is_no_time_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        parse_time(text)


@given(moments)
def test_times_round_trip_to_the_second(moment: datetime) -> None:
    text = format_time(moment)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    assert parse_time(text) == moment.replace(microsecond=0)
    assert format_time(parse_time(text)) == text


@given(moments)
def test_micro_times_round_trip_exactly(moment: datetime) -> None:
    text = format_micro_time(moment)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text)
    assert parse_time(text) == moment
    assert format_micro_time(parse_time(text)) == text


@given(moments)
def test_to_the_second_never_later(moment: datetime) -> None:
    # Expiries written to the second move earlier, never later (an offer never outlives what was promised).
    assert timedelta(0) <= moment - parse_time(format_time(moment)) < timedelta(seconds=1)


@given(moments)
def test_as_utc_is_the_same_moment(moment: datetime) -> None:
    assert as_utc(moment) == moment
    assert as_utc(moment).utcoffset() == timedelta(0)
