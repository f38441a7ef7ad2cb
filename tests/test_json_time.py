"""Zeek's WebSocket JSON format: the texts of times (timespans and timestamps), as Broker
writes them and as lenient clients send them."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.data.json_codec import dumps_value, from_json_obj, loads_value, to_json_obj
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    Timespan,
    Timestamp,
    timespan_ns,
    timestamp_ns,
)


def val(kind: str, data: object) -> dict:
    return {"@data-type": kind, "data": data}


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1000, "1us"),
        (999_000, "999us"),
        (1_000_000, "1ms"),
        (1_500_000_000, "1500ms"),
        (2_000_000_000, "2s"),
        (-1_000_000, "-1ms"),
        (120_000_000_000, "120s"),  # Broker stops at seconds: no "2min"
        (86_400_000_000_000, "86400s"),
        (INT64_MIN, f"{INT64_MIN}ns"),
    ],
)
def test_timespans_use_the_coarsest_exact_unit_up_to_seconds(ns: int, text: str) -> None:
    assert to_json_obj(Timespan.from_ns(ns)) == val("timespan", text)
    assert timespan_ns(loads_value(dumps_value(Timespan.from_ns(ns)))) == ns


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("5ns", 5),
        ("+5us", 5_000),
        ("-5ms", -5_000_000),
        ("3s", 3 * 10**9),
        ("2min", 120 * 10**9),
        ("-1h", -3600 * 10**9),
        ("1d", 86400 * 10**9),
        (f"{INT64_MAX}ns", INT64_MAX),
    ],
)
def test_timespan_suffixes_decode(text: str, ns: int) -> None:
    span = from_json_obj(val("timespan", text))
    assert isinstance(span, dt.timedelta)
    assert timespan_ns(span) == ns


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1500000000.0ns", 1_500_000_000),  # zeekpy 0.3.1: f"{td.total_seconds() * 1e9}ns"
        ("-1500000000.0ns", -1_500_000_000),
        ("1.728e+16ns", 17_280_000_000_000_000),  # zeekpy for 200 days
        ("1.5s", 1_500_000_000),
        (".25ms", 250_000),
        ("5.us", 5_000),
        ("2E3ms", 2 * 10**9),
        ("1.5ns", 2),  # to the nearest nanosecond, ties to even
        ("2.5ns", 2),
        ("-1.5ns", -2),
        ("0.4999ns", 0),
        (f"{INT64_MAX}.4ns", INT64_MAX),
        ("0.000000001s", 1),
    ],
)
def test_decimal_timespans_decode_to_whole_nanoseconds(text: str, ns: int) -> None:
    """Lenient clients send decimals; Broker's integer form is still what is written."""
    span = from_json_obj(val("timespan", text))
    assert timespan_ns(span) == ns
    assert to_json_obj(span)["data"].rstrip("nsumhd").lstrip("-").isdigit()


@given(st.integers(min_value=-(10**15), max_value=10**15), st.integers(0, 999))
def test_decimal_nanoseconds_round_like_python(whole: int, thousandths: int) -> None:
    text = f"{whole}.{thousandths:03d}ns"
    expected = round(
        Fraction(whole)
        + (Fraction(thousandths, 1000) if whole >= 0 else -Fraction(thousandths, 1000))
    )
    assert timespan_ns(from_json_obj(val("timespan", text))) == expected


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("2022-04-10T07:00:00.000", 1649574000 * 10**9),
        ("2022-04-10T07:00:00", 1649574000 * 10**9),
        ("2022-04-10T07:00:00Z", 1649574000 * 10**9),
        ("2022-04-10T07:00:00.5+00:00", 1649574000 * 10**9 + 500_000_000),
        ("2022-04-10T09:00:00.123+02:00", 1649574000 * 10**9 + 123_000_000),
        ("2022-04-10T05:30:00-0130", 1649574000 * 10**9),
        ("2022-04-10T07:00:00.1", 1649574000 * 10**9 + 100_000_000),
        ("2022-04-10T07:00:00.123456", 1649574000 * 10**9 + 123_456_000),
        ("2022-04-10T07:00:00.123456789Z", 1649574000 * 10**9 + 123_456_789),
        ("1969-12-31T23:59:59.999999999", -1),
        ("2262-04-11T23:47:16.854775807", INT64_MAX),
        ("1677-09-21T00:12:43.145224192", INT64_MIN),
    ],
)
def test_timestamps_decode_to_nanoseconds_in_utc(text: str, ns: int) -> None:
    ts = from_json_obj(val("timestamp", text))
    assert timestamp_ns(ts) == ns
    assert ts.tzinfo is not None and ts.utcoffset() == dt.timedelta(0)


def test_timestamps_encode_to_the_millisecond_floored() -> None:
    ts = Timestamp.from_ns(1649574000_999_999_999)
    assert to_json_obj(ts)["data"] == "2022-04-10T07:00:00.999"
    assert timestamp_ns(loads_value(dumps_value(ts))) == 1649574000_999_000_000
    # The earliest millisecond is not representable: the next one is taken.
    assert to_json_obj(Timestamp.from_ns(INT64_MIN))["data"] == "1677-09-21T00:12:43.146"


@given(st.integers(INT64_MIN, INT64_MAX))
def test_any_timestamp_reads_back_floored_to_the_millisecond(ns: int) -> None:
    back = loads_value(dumps_value(Timestamp.from_ns(ns)))
    floor = ns - ns % 10**6
    assert timestamp_ns(back) == (floor if floor >= INT64_MIN else floor + 10**6)
