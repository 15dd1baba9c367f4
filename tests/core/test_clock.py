"""as_utc: a naive time is taken as UTC, an aware one is converted to UTC."""

from __future__ import annotations

import datetime as dt

from freshindex.core.clock import as_utc


def test_a_naive_time_is_taken_as_utc() -> None:
    # Given a naive time
    naive = dt.datetime(2026, 12, 3, 8, 0, 0)
    # When it is made aware
    t = as_utc(naive)
    # Then it keeps its wall-clock figures and gains the UTC zone
    assert t.tzinfo is dt.UTC
    assert (t.year, t.hour, t.minute) == (2026, 8, 0)


def test_an_aware_time_is_converted_to_the_same_instant_in_utc() -> None:
    # Given a time two hours east of UTC
    east = dt.datetime(2026, 12, 3, 10, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    # When it is made UTC
    t = as_utc(east)
    # Then it is the same instant, written in UTC
    assert t == east
    assert t.tzinfo is dt.UTC and t.hour == 8


def test_none_stays_none() -> None:
    assert as_utc(None) is None
