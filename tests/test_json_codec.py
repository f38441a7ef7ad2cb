"""Zeek's WebSocket JSON format: documented examples, every type, bad input, round trips."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from recorded import VECTORS

from broker_spark.data.json_codec import (
    MAX_TEXT_SIZE,
    decode_client_message,
    decode_subscriptions,
    dumps_value,
    encode_ack,
    encode_data_message,
    encode_error,
    from_json_obj,
    loads_value,
    to_json_obj,
)
from broker_spark.data.types import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    address_bytes,
    sort_key,
    type_of,
)
from broker_spark.errors import EC, DecodeError, EncodeError


def val(kind: str, data: Any) -> dict:
    return {"@data-type": kind, "data": data}


def roundtrip_json(obj: dict) -> dict:
    """Decode a value object and encode it again, as parsed JSON."""
    return json.loads(dumps_value(from_json_obj(obj)))


# --- the documented examples (Broker's web-socket page and REFERENCE.md section 2) ---

DOC_VALUES = [
    val("none", {}),
    val("boolean", True),
    val("boolean", False),
    val("count", 123),
    val("count", 1),
    val("integer", -7),
    val("real", -7.5),
    val("real", 12.48),
    val("timespan", "1500ms"),
    val("timespan", "23s"),
    val("timestamp", "2022-04-10T07:00:00.000"),
    val("timestamp", "2022-04-10T16:07:00.000"),
    val("string", "Hello World!"),
    val("enum-value", "foo"),
    val("address", "2001:db8::"),
    val("address", "192.168.99.9"),
    val("subnet", "255.255.255.0/24"),
    val("port", "8080/tcp"),
    val("port", "80/tcp"),
    val("port", "0/?"),
    val("vector", [val("count", 42), val("integer", 23)]),
    val("set", [val("string", "bar"), val("string", "foo")]),
    val("set", [val("integer", 1), val("integer", 2), val("integer", 3)]),
    val(
        "table",
        [
            {"key": val("string", "first-name"), "value": val("string", "John")},
            {"key": val("string", "last-name"), "value": val("string", "Doe")},
        ],
    ),
]

EVENT_1 = {
    "type": "data-message",
    "topic": "/foo/bar",
    "@data-type": "vector",
    "data": [
        val("count", 1),
        val("count", 1),
        val(
            "vector",
            [val("string", "event_1"), val("vector", [val("integer", 42), val("string", "test")])],
        ),
    ],
}


@pytest.mark.parametrize("obj", DOC_VALUES, ids=lambda o: f"{o['@data-type']}:{o['data']}")
def test_documented_values_decode_and_reencode_to_the_same_json(obj: dict) -> None:
    assert roundtrip_json(obj) == obj
    assert to_json_obj(from_json_obj(obj)) == obj


def test_documented_data_message_and_event_round_trip() -> None:
    for msg in (
        {"type": "data-message", "topic": "/foo", "@data-type": "count", "data": 1},
        {"type": "data-message", "topic": "/foo/bar", "@data-type": "count", "data": 1},
        EVENT_1,
    ):
        topic, value = decode_client_message(json.dumps(msg))
        assert json.loads(encode_data_message(topic, value)) == msg
    _, event = decode_client_message(json.dumps(EVENT_1))
    assert event == (Count(1), Count(1), ("event_1", (42, "test")))
    assert [type(x) for x in event[:2]] == [Count, Count]


def test_data_message_keys_come_in_brokers_order() -> None:
    text = encode_data_message("/test/topic", Count(42))
    assert text == '{"type":"data-message","topic":"/test/topic","@data-type":"count","data":42}'
    assert encode_data_message("/t", None).endswith('"@data-type":"none","data":{}}')


def test_ack_and_error_messages() -> None:
    ack = encode_ack("925c9110-5b87-57d9-9d80-b65568e87a44", "2.2.0-22")
    assert ack == (
        '{"type":"ack","endpoint":"925c9110-5b87-57d9-9d80-b65568e87a44","version":"2.2.0-22"}'
    )
    raw = bytes(range(16))
    assert json.loads(encode_ack(raw, "1"))["endpoint"] == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    err = encode_error("deserialization_failed", 'input #1 contained "bad" data')
    assert json.loads(err) == {
        "type": "error",
        "code": "deserialization_failed",
        "context": 'input #1 contained "bad" data',
    }
    assert (
        json.loads(encode_error(EC.DeserializationFailed, "x"))["code"] == "deserialization_failed"
    )


def test_subscriptions_message() -> None:
    assert decode_subscriptions('["/a", "/b"]') == ["/a", "/b"]
    assert decode_subscriptions("[]") == []
    with pytest.raises(DecodeError, match="array of strings"):
        decode_subscriptions('{"topics": []}')
    with pytest.raises(DecodeError, match=r"subscription \[1\] is not a UTF-8 string"):
        decode_subscriptions('["/a", 1]')


# --- every type, exact text ---------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind", "data"),
    [
        (None, "none", "{}"),
        (True, "boolean", "true"),
        (Count(0), "count", "0"),
        (Count(UINT64_MAX), "count", str(UINT64_MAX)),
        (INT64_MIN, "integer", str(INT64_MIN)),
        (4.2, "real", "4.200000"),
        (2.0, "real", "2.000000"),
        (-0.0, "real", "-0.000000"),
        (1 / 3, "real", "0.3333333333333333"),
        (1e-7, "real", "1e-07"),
        (math.inf, "real", '"inf"'),
        (-math.inf, "real", '"-inf"'),
        (math.nan, "real", '"nan"'),
        ('h\u00e9\n"', "string", '"h\\u00e9\\n\\""'),
        (b"\xff\x00a", "string", '"\\udcff\\u0000a"'),
        (b"plain", "string", '"plain"'),
        (Enum("Conn::LOG"), "enum-value", '"Conn::LOG"'),
        (ipaddress.ip_address("192.168.99.9"), "address", '"192.168.99.9"'),
        (ipaddress.ip_address("2001:db8::"), "address", '"2001:db8::"'),
        (ipaddress.ip_address("::ffff:10.0.0.1"), "address", '"10.0.0.1"'),
        (ipaddress.ip_address("fe80::1%eth0"), "address", '"fe80::1"'),
        (ipaddress.ip_network("192.128.4.0/24"), "subnet", '"192.128.4.0/24"'),
        (ipaddress.ip_network("::ffff:10.0.0.0/104"), "subnet", '"10.0.0.0/8"'),
        (ipaddress.ip_network("2001:db8::/32"), "subnet", '"2001:db8::/32"'),
        (Port(8080, Port.TCP), "port", '"8080/tcp"'),
        (Port(9000, Port.UDP), "port", '"9000/udp"'),
        (Port(8, Port.ICMP), "port", '"8/icmp"'),
        (Port(0, Port.Unknown), "port", '"0/?"'),
        (Timestamp.from_ns(1649574000123456789), "timestamp", '"2022-04-10T07:00:00.123"'),
        (
            dt.datetime(2014, 7, 9, 10, 16, 44, tzinfo=dt.timezone.utc),
            "timestamp",
            '"2014-07-09T10:16:44.000"',
        ),
        (Timestamp.from_ns(-1), "timestamp", '"1969-12-31T23:59:59.999"'),
        (
            dt.datetime(2022, 4, 10, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "timestamp",
            '"2022-04-10T07:00:00.000"',
        ),
        ((), "vector", "[]"),
        (
            [Count(1), "x"],
            "vector",
            '[{"@data-type":"count","data":1},{"@data-type":"string","data":"x"}]',
        ),
        (
            {3, 1, 2},
            "set",
            ",".join(f'{{"@data-type":"integer","data":{i}}}' for i in (1, 2, 3)).join("[]"),
        ),
        (
            {"b": Count(42), "a": 1},
            "table",
            '[{"key":{"@data-type":"string","data":"a"},"value":{"@data-type":"integer","data":1}},'
            '{"key":{"@data-type":"string","data":"b"},"value":{"@data-type":"count","data":42}}]',
        ),
    ],
)
def test_encoding_of_every_type(value: Any, kind: str, data: str) -> None:
    assert dumps_value(value) == f'{{"@data-type":"{kind}","data":{data}}}'
    assert to_json_obj(value) == json.loads(dumps_value(value))


def test_reals_decode_from_json_integers_and_words() -> None:
    assert from_json_obj(val("real", 3)) == 3.0
    assert type(from_json_obj(val("real", 3))) is float
    assert math.isnan(from_json_obj(val("real", "nan")))
    assert from_json_obj(val("real", "-inf")) == -math.inf
    assert from_json_obj(val("real", 1e308 * 10)) == math.inf  # json reads 1e309 as inf
    big = 1234567890123456789012345.0
    assert loads_value(dumps_value(big)) == big


def test_strings_that_are_not_utf8_survive_as_bytes() -> None:
    for raw in (b"\xff", b"a\xc3", b"\x80\x81abc\xfe"):
        assert loads_value(dumps_value(raw)) == raw
    # Escaped bytes that form valid UTF-8 read back as text.
    assert from_json_obj(val("string", "\udcc3\udca9")) == "\u00e9"
    assert from_json_obj(val("string", "\U0001f600")) == "\U0001f600"
    assert dumps_value("\U0001f600").isascii()


def test_addresses_subnets_and_sets_follow_brokers_semantics() -> None:
    assert from_json_obj(val("address", "::ffff:1.2.3.4")) == ipaddress.ip_address("1.2.3.4")
    assert from_json_obj(val("subnet", "10.1.2.3/8")) == ipaddress.ip_network("10.0.0.0/8")
    assert from_json_obj(val("subnet", "::ffff:10.0.0.0/104")) == ipaddress.ip_network("10.0.0.0/8")
    nested = from_json_obj(val("set", [val("set", [val("count", 1)]), val("table", [])]))
    assert nested == {frozenset({Count(1)}), FrozenTable()}
    keyed = from_json_obj(
        val("table", [{"key": val("vector", [val("set", [])]), "value": val("none", {})}])
    )
    assert keyed == {(frozenset(),): None}


def test_sets_and_tables_encode_in_canonical_order() -> None:
    mixed = {"b", "a", Count(2), 1, None, 2.5}
    kinds = [item["@data-type"] for item in to_json_obj(mixed)["data"]]
    assert kinds == ["none", "count", "integer", "real", "string", "string"]
    table = to_json_obj({"b": 1, "a": 2, Count(1): 3})
    assert [e["key"]["data"] for e in table["data"]] == [1, "a", "b"]


def test_wrapped_values_and_subclasses_encode() -> None:
    from broker_spark.data.value import Data

    class MyStr(str):
        pass

    class MyInt(int):
        pass

    assert dumps_value(Data([1, 2])) == dumps_value((1, 2))
    assert dumps_value(Data(None)) == dumps_value(None)
    assert dumps_value(MyStr("x")) == dumps_value("x")
    assert dumps_value(MyInt(3)) == dumps_value(3)
    assert dumps_value(bytearray(b"\xff")) == dumps_value(b"\xff")
    assert dumps_value(FrozenTable({1: 2})) == dumps_value({1: 2})


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (object(), "no Broker type"),
        (INT64_MAX + 1, "int64"),
        (dt.datetime(3000, 1, 1), "timestamp out of int64"),
        (dt.timedelta(days=300 * 365), "timespan out of int64"),
        ("lone \ud800", "surrogate"),
        (Enum("bad \udcff"), "surrogate"),
    ],
)
def test_unencodable_values_raise_encode_error(value: Any, match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        dumps_value(value)
    with pytest.raises(EncodeError):
        to_json_obj(value)


def test_encoding_depth_is_limited() -> None:
    deep: Any = ()
    for _ in range(63):  # 64 nested containers, like the binary codec allows
        deep = (deep,)
    assert loads_value(dumps_value(deep)) == deep
    with pytest.raises(EncodeError, match="deeper than 64"):
        dumps_value((deep,))
    loop: list = []
    loop.append(loop)
    with pytest.raises(EncodeError):
        dumps_value(loop)


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (val("bogus", 1), 'unknown @data-type string "bogus"'),
        ({"data": 1}, 'lacks "@data-type"'),
        ({"@data-type": "count"}, 'count value object lacks "data"'),
        ({"@data-type": ["count"], "data": 1}, "unknown @data-type array"),
        ([1], "expected a value object, got array"),
        (val("none", 0), "none needs data {}"),
        (val("boolean", 1), "boolean needs true or false, got number 1"),
        (val("count", 1.0), "count needs a JSON integer without decimal point, got number 1.0"),
        (val("count", "1"), 'count needs a JSON integer without decimal point, got string "1"'),
        (val("count", True), "got true"),
        (val("count", -1), "count out of range"),
        (val("count", UINT64_MAX + 1), "count out of range"),
        (val("integer", INT64_MAX + 1), "integer out of int64 range"),
        (val("integer", 2.5), "integer needs a JSON integer"),
        (val("real", "1.5"), "real needs a JSON number"),
        (val("real", 10**400), "real out of range"),
        (val("string", 5), "string needs a JSON string"),
        (val("string", "\ud800"), "lone surrogate"),
        (val("enum-value", None), "enum-value needs a JSON string, got null"),
        (val("address", "10.0.0.256"), "address needs IPv4 or IPv6 text"),
        (val("address", "fe80::1%eth0"), "address needs"),
        (val("address", 167772161), "address needs"),
        (val("subnet", "10.0.0.0"), "subnet needs"),
        (val("subnet", "10.0.0.0/33"), "subnet needs"),
        (val("subnet", "10.0.0.0/255.0.0.0"), "subnet needs"),
        (val("port", "65536/tcp"), "port needs"),
        (val("port", "80/sctp"), "port needs"),
        (val("port", "80"), "port needs"),
        (val("port", 80), "port needs"),
        (val("timespan", "5 s"), "timespan needs"),
        (val("timespan", "5sec"), "timespan needs"),
        (val("timespan", "1.5"), "timespan needs"),
        (val("timespan", "nans"), "timespan needs"),
        (val("timespan", "infns"), "timespan needs"),
        (val("timespan", "1e400s"), "timespan needs"),
        (val("timespan", "1.5.0s"), "timespan needs"),
        (val("timespan", "1,5s"), "timespan needs"),
        (val("timespan", 1.5), "timespan needs"),
        (val("timespan", "300000d"), "timespan needs"),
        (val("timestamp", "2022-04-10 07:00:00"), "timestamp needs ISO 8601"),
        (val("timestamp", "2022-04-10T07:00:00.1234567890"), "timestamp needs"),
        (val("timestamp", "2022-13-10T07:00:00"), "invalid date"),
        (val("timestamp", "2022-04-10T07:60:00"), "invalid date or time"),
        (val("timestamp", "3000-01-01T00:00:00"), "out of int64"),
        (val("timestamp", 1649574000), "timestamp needs"),
        (val("vector", {}), "vector needs a JSON array, got object"),
        (val("set", "abc"), "set needs a JSON array"),
        (val("table", [val("count", 1)]), 'table entry needs an object with "key" and "value"'),
    ],
)
def test_bad_values_raise_decode_error_saying_why(obj: Any, match: str) -> None:
    with pytest.raises(DecodeError, match=match.replace("[", r"\[").replace("(", r"\(")) as info:
        from_json_obj(obj)
    assert info.value.code is EC.DeserializationFailed
    assert EC.DeserializationFailed.snake_name == "deserialization_failed"


def test_errors_say_where_in_the_value() -> None:
    obj = val(
        "vector",
        [
            val("count", 1),
            val(
                "table",
                [
                    {"key": val("count", 2), "value": val("none", {})},
                    {"key": val("count", 1.5), "value": val("none", {})},
                ],
            ),
        ],
    )
    with pytest.raises(DecodeError, match=r"got number 1\.5 \(at data\[1\]\[1\]\.key\)"):
        from_json_obj(obj)
    with pytest.raises(DecodeError, match=r"at data\[0\]\[2\]\)"):
        from_json_obj(val("set", [val("vector", [val("none", {}), val("none", {}), 7])]))


def test_depth_is_limited_when_decoding() -> None:
    obj: dict = val("vector", [])
    for _ in range(64):
        obj = val("vector", [obj])
    with pytest.raises(DecodeError, match="deeper than 64"):
        from_json_obj(obj)
    with pytest.raises(DecodeError, match="malformed JSON"):
        loads_value("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("How is it going?", "malformed JSON: Expecting value at line 1 column 1"),
        ("", "malformed JSON"),
        ('{"topic": "/a", "@data-type": "count", "data": 1', "malformed JSON"),
        ('{"topic": "/a", "@data-type": "real", "data": NaN}', "NaN is not valid JSON"),
        ('{"topic": "/a", "@data-type": "real", "data": -Infinity}', "-Infinity is not valid JSON"),
        ('["/a"]', "expected a data message object, got array"),
        ('{"@data-type": "count", "data": 1}', "no topic in top-level JSON object"),
        (
            '{"topic": 5, "@data-type": "count", "data": 1}',
            "topic must be a non-empty UTF-8 string",
        ),
        ('{"topic": "", "@data-type": "count", "data": 1}', "topic must be a non-empty"),
        ('{"topic": "\\udcff", "@data-type": "count", "data": 1}', "UTF-8 string"),
        (
            '{"type": "ack", "topic": "/a", "@data-type": "count", "data": 1}',
            'expected "type": "data-message"',
        ),
        ('{"topic": "/a", "@data-type": "count", "data": 1.0}', "count needs a JSON integer"),
        (b'{"topic": "/a", "@data-type": "string", "data": "\xff"}', "input is not UTF-8"),
    ],
)
def test_bad_client_messages_raise_decode_error(text: str | bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        decode_client_message(text)
    assert info.value.code is EC.DeserializationFailed


def test_client_messages_accept_bytes_and_missing_type() -> None:
    raw = b'{"topic": "/a", "@data-type": "string", "data": "\xc3\xa9"}'
    assert decode_client_message(raw) == ("/a", "\u00e9")
    assert decode_client_message(memoryview(raw)).topic == "/a"


def test_oversized_input_is_refused_before_parsing() -> None:
    with pytest.raises(DecodeError, match="exceeds"):
        loads_value(" " * (MAX_TEXT_SIZE + 1))
    with pytest.raises(DecodeError, match="exceeds"):
        decode_client_message(b" " * (MAX_TEXT_SIZE + 1))
    with pytest.raises(DecodeError, match="expected JSON text"):
        loads_value(42)  # type: ignore[arg-type]


def test_a_zeek_event_decoded_from_json_matches_a_recorded_zeek_session() -> None:
    """JSON -> value -> Broker's binary encoding gives the bytes a real Zeek sent."""
    binary = pytest.importorskip("broker_spark.data.binary")
    args = [
        val("none", {}),
        val("boolean", True),
        val("count", 7),
        val("integer", -7),
        val("real", 1.5),
        val("string", "s"),
        val("address", "10.0.0.1"),
        val("address", "2001:db8::1"),
        val("subnet", "10.0.0.0/8"),
        val("port", "80/tcp"),
        val("timestamp", "2022-04-10T07:00:00.000"),
        val("timespan", "1500ms"),
        val("enum-value", "A::B"),
        val("set", [val("integer", 2), val("integer", 1)]),
        val("table", [{"key": val("string", "k"), "value": val("integer", 1)}]),
        val("vector", [val("integer", 1), val("string", "x")]),
    ]
    event = val(
        "vector",
        [
            val("count", 1),
            val("count", 1),
            val("vector", [val("string", "all_types"), val("vector", args)]),
        ],
    )
    payload = binary.encode(from_json_obj(event))
    recorded = (VECTORS / "broker-v1-types-and-store.c2s.bin").read_bytes()
    assert payload[:3] == bytes.fromhex("0e0302")
    assert payload in recorded


# --- property tests -----------------------------------------------------------

_ms_timestamps = st.integers(INT64_MIN // 10**6 + 1, INT64_MAX // 10**6).map(
    lambda ms: Timestamp.from_ns(ms * 10**6)
)
_ipv6 = (
    st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address).filter(lambda a: a.ipv4_mapped is None)
)
_ipv4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)


def _not_utf8(raw: bytes) -> bytes:
    return raw + b"\xff"


def _scalars(nan: bool = True) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(0, UINT64_MAX).map(Count),
        st.integers(INT64_MIN, INT64_MAX),
        st.floats(allow_nan=nan),
        st.text(max_size=20),
        st.binary(max_size=10).map(_not_utf8),
        _ipv4,
        _ipv6,
        st.builds(
            lambda a, n: ipaddress.ip_network((a, n), strict=False), _ipv4, st.integers(0, 32)
        ),
        st.builds(
            lambda a, n: ipaddress.ip_network((a, n), strict=False), _ipv6, st.integers(0, 95)
        ),
        st.builds(Port, st.integers(0, 65535), st.integers(0, 3)),
        _ms_timestamps,
        st.integers(INT64_MIN, INT64_MAX).map(Timespan.from_ns),
        st.text(max_size=10).map(Enum),
    )


def _hashables() -> st.SearchStrategy[Any]:
    return st.recursive(
        _scalars(nan=False),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(tuple), st.frozensets(inner, max_size=3)
        ),
        max_leaves=6,
    )


def broker_values() -> st.SearchStrategy[Any]:
    """Values of every Broker type (timestamps at millisecond precision)."""
    return st.recursive(
        _scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(tuple),
            st.sets(_hashables(), max_size=4),
            st.dictionaries(_hashables(), inner, max_size=4),
        ),
        max_leaves=12,
    )


def same_value(a: Any, b: Any) -> bool:
    """Equal as Broker values: same types, reals by bits (NaN equals NaN)."""
    ta, tb = type_of(a), type_of(b)
    if ta is not tb:
        return False
    if ta is DataType.Real:
        return (math.isnan(a) and math.isnan(b)) or struct.pack(">d", a) == struct.pack(">d", b)
    if ta in (DataType.Set, DataType.Table, DataType.Vector):
        if len(a) != len(b):
            return False
        if ta is DataType.Vector:
            return all(same_value(x, y) for x, y in zip(a, b, strict=True))
        if ta is DataType.Set:
            return all(
                same_value(x, y)
                for x, y in zip(sorted(a, key=sort_key), sorted(b, key=sort_key), strict=True)
            )
        ka, kb = sorted(a, key=sort_key), sorted(b, key=sort_key)
        return all(same_value(x, y) and same_value(a[x], b[y]) for x, y in zip(ka, kb, strict=True))
    if ta is DataType.Address:
        return address_bytes(a) == address_bytes(b) and a.version == b.version
    return sort_key(a) == sort_key(b)


@given(broker_values())
def test_text_round_trip_is_exact(value: Any) -> None:
    text = dumps_value(value)
    assert text.isascii()
    assert same_value(loads_value(text), value)
    assert same_value(loads_value(text.encode()), value)


@given(broker_values())
def test_object_round_trip_is_exact(value: Any) -> None:
    obj = to_json_obj(value)
    json.dumps(obj, allow_nan=False)  # only JSON types inside
    assert same_value(from_json_obj(obj), value)
    assert same_value(from_json_obj(json.loads(json.dumps(obj))), value)


@given(st.text(min_size=1, max_size=30), broker_values())
def test_data_message_round_trip(topic: str, value: Any) -> None:
    decoded = decode_client_message(encode_data_message(topic, value))
    assert decoded.topic == topic
    assert same_value(decoded.value, value)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_kinds = st.sampled_from(
    ["none", "boolean", "count", "integer", "real", "string", "enum-value", "address", "subnet"]
    + ["port", "timestamp", "timespan", "vector", "set", "table", "bogus"]
)
_value_like = st.recursive(
    st.builds(val, _kinds, _json),
    lambda inner: st.builds(
        val,
        _kinds,
        st.lists(inner | st.builds(lambda k, v: {"key": k, "value": v}, inner, inner), max_size=4),
    ),
    max_leaves=15,
)


@given(_json | _value_like)
def test_random_json_objects_only_ever_raise_decode_error(obj: Any) -> None:
    try:
        from_json_obj(obj)
    except DecodeError as exc:
        assert str(exc)


@given(_value_like, st.text(max_size=10))
def test_random_messages_only_ever_raise_decode_error(obj: Any, topic: str) -> None:
    text = json.dumps({"type": "data-message", "topic": topic, **obj})
    for candidate in (text, text[: len(text) // 2], text.encode()):
        try:
            decode_client_message(candidate)
        except DecodeError as exc:
            assert str(exc)


@given(st.text() | st.binary())
def test_random_text_only_ever_raises_decode_error(text: str | bytes) -> None:
    for decode in (decode_client_message, loads_value, decode_subscriptions):
        with contextlib.suppress(DecodeError):
            decode(text)


@given(broker_values(), st.data())
def test_mutated_valid_messages_only_ever_raise_decode_error(
    value: Any, data: st.DataObject
) -> None:
    text = encode_data_message("/t", value)
    pos = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.sampled_from('{}[]",:0-9.e/aZTn\\ '))
    cut = data.draw(st.booleans())
    mutated = text[:pos] + char + ("" if cut else text[pos + 1 :])
    with contextlib.suppress(DecodeError):
        decode_client_message(mutated)


def test_the_facade_re_exports_the_split_modules() -> None:
    from broker_spark.data import json_codec, json_decode, json_encode

    assert json_codec.dumps_value is json_encode.dumps_value
    assert json_codec.encode_data_message is json_encode.encode_data_message
    assert json_codec.loads_value is json_decode.loads_value
    assert json_codec.decode_client_message is json_decode.decode_client_message
    assert json_codec.MAX_TEXT_SIZE == json_decode.MAX_TEXT_SIZE
