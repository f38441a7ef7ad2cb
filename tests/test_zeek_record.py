"""Zeek's binary record serialization: the recordings of a real Zeek, round trips, bad bytes."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zeek_recordings import LOG_RECORDINGS, recording
from zeek_strategies import records, same_record, schema_and_records, schemas

from broker_spark.data.types import Count, Enum, Port
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.zeek import (
    LogField,
    TypeTag,
    ZeekInterval,
    ZeekSet,
    ZeekTime,
    decode_values,
    encode_record,
    render_line,
)
from broker_spark.zeek.logs import _field_from_data
from broker_spark.zeek.record import record_tags

pytestmark = pytest.mark.timeout(120)


def _fields(content: tuple) -> list[LogField]:
    return [_field_from_data(f) for f in content[3]]


@pytest.mark.parametrize("name", LOG_RECORDINGS)
def test_every_recorded_write_decodes_renders_as_zeek_did_and_encodes_back(name: str) -> None:
    rec = recording(name)
    assert rec.writes, "the recording holds log writes"
    total = 0
    for path, serials in rec.writes.items():
        fields = _fields(rec.creates[path])
        names = [f.name for f in fields]
        lines = [render_line(decode_values(s, names), names) for s in serials]
        # byte for byte what Zeek wrote, in order (a weaker test would compare parsed JSON)
        assert lines == rec.local_lines(path), path
        for serial in serials:
            assert encode_record(decode_values(serial), fields) == serial
        total += len(serials)
    assert total == sum(1 for _ in rec.writes.values() for _ in _)


def test_decoded_types_follow_the_data_model() -> None:
    rec = recording("zeek-logs-http-methods")
    names = [f.name for f in _fields(rec.creates["conn"])]
    row = dict(zip(names, decode_values(rec.writes["conn"][0]), strict=True))
    assert isinstance(row["ts"], ZeekTime) and row["ts"].seconds == 1354328870.172701
    # the instant to the nanosecond: that double is 1354328870.172700881958...
    assert row["ts"].year == 2012 and (row["ts"].microsecond, row["ts"].nanosecond) == (172700, 882)
    assert isinstance(row["duration"], ZeekInterval)
    assert row["duration"].seconds == 4.062392234802246  # more digits than nanoseconds hold
    assert row["id.orig_h"] == ipaddress.IPv4Address("128.2.6.136")
    assert row["id.resp_p"] == Port(80, Port.TCP)
    assert row["proto"] == Enum("tcp")
    assert type(row["orig_bytes"]) is Count and row["orig_bytes"] == 41
    assert row["local_orig"] is False
    assert row["tunnel_parents"] is None  # unset optional field
    http = recording("zeek-logs-http-methods")
    hnames = [f.name for f in _fields(http.creates["http"])]
    hrow = dict(zip(hnames, decode_values(http.writes["http"][0]), strict=True))
    assert isinstance(hrow["tags"], ZeekSet) and hrow["tags"] == frozenset()
    assert hrow["resp_fuids"] == ("FNHaqE4UoY2x5hHRul",)


@given(schema_and_records())
def test_records_round_trip_with_types_and_bytes(case) -> None:
    schema, rows = case
    for row in rows:
        data = encode_record(row, schema.fields)
        back = decode_values(data)
        assert same_record(back, row), (row, back)
        assert encode_record(back, schema.fields) == data
        assert record_tags(data) == schema.tags()


@given(schemas(), st.data())
def test_a_mapping_encodes_by_column_name(schema, data) -> None:
    row = data.draw(records(schema))
    by_name = {f.name: v for f, v in zip(schema.fields, row, strict=True)}
    if len(by_name) == len(row):
        assert encode_record(by_name, schema.fields) == encode_record(row, schema.fields)


def test_ipv4_subnet_prefix_travels_plus_96_and_ipv6_in_byte_order() -> None:
    net = ipaddress.ip_network("10.0.0.0/8")
    data = encode_record([net], [LogField.of("n", "subnet")])
    assert data[13] == 8 + 96 and data[14] == 4
    assert decode_values(data) == [net]
    addr = ipaddress.IPv6Address(bytes(range(1, 17)))
    data = encode_record([addr], [LogField.of("a", "addr")])
    assert data[13:] == b"\x06" + bytes(range(1, 17))
    bad = bytearray(encode_record([net], [LogField.of("n", "subnet")]))
    bad[13] = 8  # an IPv4 prefix written without Zeek's +96
    with pytest.raises(DecodeError, match=r"field 0 \(n\) at byte 13"):
        decode_values(bytes(bad), ["n"])


def _header(tag: int, present: int = 1) -> bytes:
    return struct.pack(">iiB", tag, 0, present)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (struct.pack(">i", 2**31 - 1), "field count"),
        (struct.pack(">i", -1), "field count"),
        (
            struct.pack(">i", 1) + _header(19) + struct.pack(">q", 2**60),
            "vector of 1152921504606846976",
        ),
        (struct.pack(">i", 1) + _header(19) + struct.pack(">q", -5), "vector of -5"),
        (struct.pack(">i", 1) + _header(7) + struct.pack(">I", 2**32 - 1), "text of 4294967295"),
        (struct.pack(">i", 1) + _header(11) + b"\x05" + bytes(16), "family 5"),
        (struct.pack(">i", 1) + _header(10) + struct.pack(">Qi", 70000, 1), "port number 70000"),
        (struct.pack(">i", 1) + _header(10) + struct.pack(">Qi", 80, 9), "protocol 9"),
        (struct.pack(">i", 1) + _header(15), "type 15 cannot appear"),
        (struct.pack(">i", 1) + _header(3, 7) + bytes(8), "present flag 7"),
        (struct.pack(">i", 1) + _header(3) + bytes(4), "truncated count"),
        (struct.pack(">i", 1) + _header(3) + bytes(9), "1 bytes left"),
        (
            struct.pack(">i", 1) + _header(19) + struct.pack(">q", 1) + _header(19) + bytes(8),
            "inside",
        ),
    ],
)
def test_bad_records_raise_decode_error_naming_field_and_offset(
    payload: bytes, message: str
) -> None:
    # a claimed count is checked against the bytes left before anything is sized by it
    # (2**60 elements would not fit in memory; the timeout guards that)
    with pytest.raises(DecodeError, match=message) as info:
        decode_values(payload, ["col"])
    assert "at byte" in str(info.value)
    semantic = ("cannot appear", "port", "protocol", "family", "present flag")
    if not any(word in message for word in semantic):
        assert record_tags(payload) is None  # the structure itself is broken


@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_decode_error_only(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_values(data)
    record_tags(data)


@given(st.data())
def test_mutated_recorded_records_decode_or_raise_decode_error_only(data) -> None:
    rec = recording(data.draw(st.sampled_from(LOG_RECORDINGS)))
    path = data.draw(st.sampled_from(sorted(rec.writes)))
    serial = bytearray(data.draw(st.sampled_from(rec.writes[path])))
    kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    at = data.draw(st.integers(0, len(serial) - 1))
    if kind == "flip":
        serial[at] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        del serial[at:]
    else:
        serial[at:at] = data.draw(st.binary(min_size=1, max_size=9))
    try:
        values = decode_values(bytes(serial))
    except DecodeError as exc:
        assert "log record:" in str(exc)
    else:
        json.loads(render_line(values, [f"f{i}" for i in range(len(values))]))


def test_encoding_checks_values_against_their_columns() -> None:
    fields = [LogField.of("n", "count"), LogField.of("p", "port", optional=True)]
    assert decode_values(encode_record([Count(3), None], fields)) == [Count(3), None]
    with pytest.raises(EncodeError, match=r"field 0 \(n\): count -1 is out of range"):
        encode_record([-1, None], fields)
    with pytest.raises(EncodeError, match=r"field 1 \(p\): port needs a Port"):
        encode_record([1, "80/tcp"], fields)
    with pytest.raises(EncodeError, match="2 values for 1 columns"):
        encode_record([1, 2], fields[:1])
    with pytest.raises(EncodeError, match="needs its column type"):
        encode_record([None], [None])


def test_plain_python_values_encode_with_their_column_types() -> None:
    fields = [
        LogField.of("t", "time"),
        LogField.of("i", "interval"),
        LogField.of("s", "set[string]"),
        LogField.of("v", "vector of count"),
        LogField.of("e", "enum"),
        LogField.of("a", "addr"),
    ]
    values = decode_values(
        encode_record([1.5, 0.25, {"b", "a"}, [1, 2], "tcp", "10.0.0.1"], fields)
    )
    assert values[0].seconds == 1.5 and values[1].seconds == 0.25
    assert list(values[2]) == ["a", "b"]  # a plain set is written in sorted order
    assert values[3] == (Count(1), Count(2)) and values[4] == Enum("tcp")
    assert values[5] == ipaddress.IPv4Address("10.0.0.1")
    assert [t for t in record_tags(encode_record([None] * 6, fields))] == [
        TypeTag.TIME,
        TypeTag.INTERVAL,
        TypeTag.TABLE,
        TypeTag.VECTOR,
        TypeTag.ENUM,
        TypeTag.ADDR,
    ]
