"""How Zeek's JSON writer spells values: doubles, strings, addresses, times (zeek/zeek's rules)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.zeek.text import (
    addr_text,
    format_double,
    format_time,
    iso8601,
    json_quote,
    zeek_text,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (3600.0, "3600.0"),
        (1e20, "100000000000000000000.0"),
        (1e21, "1e21"),
        (1.5e30, "1.5e30"),
        (4.062392234802246, "4.062392234802246"),
        (1354328870.172701, "1354328870.172701"),
        (1e-6, "0.000001"),
        (0.00001, "0.00001"),
        (1e-7, "1e-7"),
        (1.234e-7, "1.234e-7"),
        (5e-324, "5e-324"),
        (-2.5, "-2.5"),
        (math.nan, "null"),
        (math.inf, "null"),
        (-math.inf, "null"),
    ],
)
def test_doubles_are_laid_out_as_rapidjson_writes_them(value: float, text: str) -> None:
    assert format_double(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_reads_back_as_itself(value: float) -> None:
    text = format_double(value)
    assert float(text) == value and math.copysign(1, float(text)) == math.copysign(1, value)
    assert "+" not in text and "e-0" not in text


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"plain", "plain"),
        ("ñandú".encode(), "ñandú"),  # valid UTF-8 stays as it is
        (b"\xc3\xb1\xc0\x81", "\\xc3\\xb1\\xc0\\x81"),  # one bad sequence re-spells all of it
        (b"\x07\xd4\xb7o", "\\x07\\xd4\\xb7o"),
        (b"\b\f\n\r\t", "\b\f\n\r\t"),
        (b"\x00\x15", "\\x00\\x15"),
        (b"\xc3(", "\\xc3("),
        (b"a\x7fb", "a\\x7fb"),
        ("\u0085".encode(), "\\xc2\\x85"),  # a C1 control
        ("\ue000".encode(), "\\xee\\x80\\x80"),  # private use
    ],
)
def test_strings_follow_zeeks_escape_utf8(raw: bytes, text: str) -> None:
    assert zeek_text(raw) == text


def test_json_quoting_matches_zeeks_files() -> None:
    # Zeek's ascii-json-utf8 baseline: {"s":"\b\f\n\r\t\\x00\\x15"}
    assert json_quote(zeek_text(b"\b\f\n\r\t\x00\x15")) == r'"\b\f\n\r\t\\x00\\x15"'
    assert json_quote('a"b\\c') == r'"a\"b\\c"'
    assert json.loads(json_quote(zeek_text("ñ\x01".encode()))) == "\\xc3\\xb1\\x01"


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (bytes([10, 0, 0, 1]), "10.0.0.1"),
        (bytes(range(1, 17)), "102:304:506:708:90a:b0c:d0e:f10"),
        (bytes(16), "::"),
        (bytes(15) + b"\x01", "::1"),
        (bytes(15) + b"\x02", "::2"),
        (bytes(12) + b"\x01\x02\x03\x04", "::1.2.3.4"),
        (bytes(10) + b"\xff\xff\x01\x02\x03\x04", "::ffff:1.2.3.4"),
        (bytes(8) + b"\xff\xff\x00\x00\x01\x02\x03\x04", "::ffff:0:1.2.3.4"),
        (b"\x00\x01" + bytes(4) + b"\x00\x01" + bytes(7) + b"\x01", "1:0:0:1::1"),
        (bytes(10) + b"\x00\x01" + bytes(4), "::1:0:0"),
        (b"\x20\x01\x0d\xb8" + bytes(2) + b"\x00\x01" + bytes(8), "2001:db8:0:1::"),
    ],
)
def test_addresses_as_zeek_inet_ntop_writes_them(raw: bytes, text: str) -> None:
    assert addr_text(raw) == text


def test_time_formats() -> None:
    assert format_time(1354328870.172701) == "1354328870.172701"
    assert format_time(1215620010.54321, "iso8601") == '"2008-07-09T16:13:30.543210Z"'
    assert iso8601(-0.4) == "1969-12-31T23:59:59.600000Z"
    assert iso8601(1.9999999) == "1970-01-01T00:00:01.1000000Z"  # Zeek's seven digits, no carry
    assert format_time(-1.25, "millis") == "-1250"
    assert format_time(-1.25, "millis-unsigned") == str(2**64 - 1250)
    assert format_time(math.nan, "millis") == "null"
    with pytest.raises(ValueError, match="unknown timestamp format"):
        format_time(1.0, "nanos")
