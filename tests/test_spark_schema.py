"""Output schemas of the stream reader and spool records -> Arrow batches."""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark import zeek
from broker_spark.columnar.binary_json import binary_to_json, event_to_json
from broker_spark.columnar.record_batches import (
    DEFAULT_SCHEMA,
    ZEEK_SCHEMA,
    RecordConversionError,
    RecordConverter,
    SchemaMappingError,
    default_schema,
    records_to_arrow,
)
from broker_spark.data.binary import decode, encode
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.msgpack_records import Record, pack_records
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp
from broker_spark.errors import DecodeError
from broker_spark.spark.read.offered_columns import DEFAULT_DDL, ZEEK_DDL, default_ddl
from tests.strategies import broker_values

T0 = 1_700_000_000_123_456_789
TS = Timestamp.from_ns(1_600_000_000_987_654_321)


def records(*values: Any, topic: str = "/zeek/x", first: int = 0) -> list[Record]:
    return [
        Record(topic, encode(v), "node-1", T0 + i * 1_000, first + i) for i, v in enumerate(values)
    ]


def event(name: str, *args: Any, **kw: Any) -> tuple:
    return zeek.Event(name, *args, **kw).as_data()


# --- schemas ----------------------------------------------------------------------------


def test_default_schema_is_what_spark_expects_for_its_ddl() -> None:
    # pyspark 4.3's to_arrow_schema for the DDL, checked in a scratch SparkSession
    assert DEFAULT_SCHEMA.equals(
        pa.schema(
            [
                pa.field("topic", pa.string(), nullable=True),
                pa.field("data", pa.string(), nullable=True),
                pa.field("sender", pa.string(), nullable=True),
                pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=True),
                pa.field("offset", pa.int64(), nullable=True),
            ]
        )
    )
    assert ZEEK_SCHEMA.names == [*DEFAULT_SCHEMA.names, "event", "args"]
    assert all(f.nullable for f in ZEEK_SCHEMA)
    assert (
        DEFAULT_DDL
        == "topic STRING, data STRING, sender STRING, received_at TIMESTAMP, offset LONG"
    )
    assert ZEEK_DDL == DEFAULT_DDL + ", event STRING, args STRING"
    assert (default_schema(), default_schema("zeek")) == (DEFAULT_SCHEMA, ZEEK_SCHEMA)
    assert (default_ddl(), default_ddl("zeek")) == (DEFAULT_DDL, ZEEK_DDL)


def test_default_rows() -> None:
    values = [
        event("ping", "hello", Count(3), TS),
        42,
        "héllo",
        None,
        (1, 2.5, ipaddress.ip_address("::1")),
    ]
    batch = records_to_arrow(records(*values, first=7))
    assert batch.schema.equals(DEFAULT_SCHEMA)
    rows = batch.to_pylist()
    assert [r["data"] for r in rows] == [dumps_value(v) for v in values]
    assert [r["offset"] for r in rows] == [7, 8, 9, 10, 11]
    assert {r["topic"] for r in rows} == {"/zeek/x"} and {r["sender"] for r in rows} == {"node-1"}
    assert batch.column("received_at").cast(pa.int64()).to_pylist()[:2] == [
        T0 // 1000,
        (T0 + 1000) // 1000,
    ]
    assert '"h\\u00e9llo"' in rows[2]["data"]


def test_zeek_rows_split_events() -> None:
    values = [
        event("ping", "hello", Count(3), TS),
        event("with_meta", 1, metadata={zeek.MetadataType.NetworkTimestamp: TS}),
        event("no_args"),
        "not an event",
        (Count(1), Count(1), ("bad", "args not a vector")),
    ]
    batch = RecordConverter(fmt="zeek").convert(records(*values))
    assert batch.schema.equals(ZEEK_SCHEMA)
    rows = batch.to_pylist()
    assert [r["event"] for r in rows] == ["ping", "with_meta", "no_args", None, None]
    assert rows[0]["args"] == "[" + ",".join(map(dumps_value, ("hello", Count(3), TS))) + "]"
    assert rows[1]["args"] == '[{"@data-type":"integer","data":1}]'
    assert rows[2]["args"] == "[]"
    assert rows[3]["args"] is None and rows[4]["args"] is None
    assert [r["data"] for r in rows] == [dumps_value(v) for v in values]


def test_undecodable_payloads_are_counted_or_fail_fast() -> None:
    good = records(1, 2)
    bad = [good[0], Record("/t", b"\x0e\x05\x02", "n", T0, 1), good[1]._replace(offset=2)]
    for fmt in ("default", "zeek"):
        conv = RecordConverter(fmt=fmt)
        rows = conv.convert(bad).to_pylist()
        assert [r["data"] is None for r in rows] == [False, True, False]
        assert conv.undecodable == 1
        with pytest.raises(RecordConversionError, match="offset 1"):
            RecordConverter(fmt=fmt, mode="FAILFAST").convert(bad)


# --- the fast Zeek JSON path equals the reference ---------------------------------------


@settings(max_examples=150, deadline=None)
@given(value=broker_values())
def test_binary_to_json_equals_decode_then_dumps(value: Any) -> None:
    payload = encode(value)
    assert binary_to_json(payload) == dumps_value(decode(payload))


@settings(max_examples=150, deadline=None)
@given(
    name=st.text(max_size=12),
    args=st.lists(broker_values(max_depth=2, max_size=3), max_size=4),
    stamp=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
)
def test_event_to_json_equals_the_reference(name: str, args: list, stamp: int | None) -> None:
    metadata = None if stamp is None else {Count(1): Timestamp.from_ns(stamp), Count(200): "x"}
    value = event(name, *args, metadata=metadata)
    payload = encode(value)
    decoded = decode(payload)
    data, got_name, got_args = event_to_json(payload)
    assert data == dumps_value(decoded) == binary_to_json(payload)
    assert got_name == zeek.event_name_and_args(decoded)[0]  # type: ignore[index]
    assert got_args == "[" + ",".join(dumps_value(a) for a in decoded[2][1]) + "]"


@pytest.mark.parametrize(
    "value",
    [
        event("e", Enum("Conn::LOG"), Port(53, Port.UDP), Timespan.from_ns(1500)),
        event("e", {1, 2}, {"k": (1, 2)}, ipaddress.ip_network("10.0.0.0/8")),
        event("e", b"\xff\xfe", float("nan"), -0.0, True, False, None),
        (Count(1), Count(1), ("bad", (1,)), "extra"),  # four fields: the reference path
        (Count(1), Count(1), ("e", (1,), ((Count(1), "not a time"),))),  # bad metadata
        Timestamp.from_ns(-(2**63)),
        Timestamp.from_ns(2**63 - 1),
        tuple(range(300)),
        "x" * 200,
    ],
)
def test_unusual_values_take_the_same_path(value: Any) -> None:
    payload = encode(value)
    decoded = decode(payload)
    ev = zeek.event_name_and_args(decoded)
    assert binary_to_json(payload) == dumps_value(decoded)
    expected_args = None if ev is None else "[" + ",".join(map(dumps_value, ev[1])) + "]"
    assert event_to_json(payload) == (dumps_value(decoded), ev and ev[0], expected_args)


def test_malformed_payloads_raise_decode_errors() -> None:
    good = encode(event("ping", "hello", Count(1)))
    for payload in (b"", b"\x63", good[:-1], good + b"\x00", b"\x01\x07", b"\x0e\x80"):
        with pytest.raises(DecodeError):
            binary_to_json(payload)
        with pytest.raises(DecodeError):
            event_to_json(payload)


# --- user schemas -----------------------------------------------------------------------

TYPED = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("Topic", pa.string()),
        pa.field("name", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("when", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.string())),
    ]
)


def test_typed_schema_maps_event_args_by_position() -> None:
    values = [
        event("e", "a", Count(1), TS, ("x", "y")),
        event("e", "b", -2, TS, ()),
        event("e", "c", "not a number", TS, ("z",)),  # one misfit element
        event("e", "d"),  # too few arguments: the whole row's values are null
        "not an event",  # not a vector either
        ("v", 5, TS, ("w",)),  # a plain vector (a record) maps too
    ]
    conv = RecordConverter(TYPED, fmt="zeek")
    batch = conv.convert(records(*values, first=100))
    assert batch.schema.equals(TYPED)
    rows = batch.to_pylist()
    when = dt.datetime(2020, 9, 13, 12, 26, 40, 987654, tzinfo=dt.timezone.utc)
    assert rows[0] == {
        "offset": 100,
        "Topic": "/zeek/x",
        "name": "a",
        "count": 1,
        "when": when,
        "tags": ["x", "y"],
    }
    assert rows[1]["count"] == -2 and rows[1]["tags"] == []
    assert rows[2]["name"] == "c" and rows[2]["count"] is None and rows[2]["tags"] == ["z"]
    for row in rows[3:5]:
        assert (row["name"], row["count"], row["when"], row["tags"]) == (None, None, None, None)
        assert row["offset"] is not None
    assert rows[5]["name"] == "v" and rows[5]["count"] == 5
    assert conv.misfits == 3
    assert conv.undecodable == 0


def test_typed_schema_default_format_maps_the_value_itself() -> None:
    schema = pa.schema([("a", pa.string()), ("b", pa.float64())])
    conv = RecordConverter(schema)
    rows = conv.convert(records(("x", 1.5), event("e", "y", 2.0))).to_pylist()
    assert rows[0] == {"a": "x", "b": 1.5}
    assert rows[1] == {"a": None, "b": None}  # an event is a vector of 3, not of 2
    assert conv.misfits == 1


def test_typed_schema_with_data_event_and_args_columns() -> None:
    schema = pa.schema(
        [("data", pa.string()), ("event", pa.string()), ("args", pa.string()), ("n", pa.int32())]
    )
    value = event("e", 7)
    rows = RecordConverter(schema, fmt="zeek").convert(records(value)).to_pylist()
    assert rows == [
        {
            "data": dumps_value(value),
            "event": "e",
            "args": '[{"@data-type":"integer","data":7}]',
            "n": 7,
        }
    ]


def test_failfast_names_the_offset_and_column() -> None:
    conv = RecordConverter(TYPED, fmt="zeek", mode="FAILFAST")
    good = event("e", "a", Count(1), TS, ())
    assert conv.convert(records(good)).num_rows == 1
    with pytest.raises(RecordConversionError, match=r"offset 11.*count"):
        conv.convert(records(good, event("e", "a", "x", TS, ()), first=10))
    with pytest.raises(RecordConversionError, match="offset 21.*vector of 1"):
        conv.convert(records(good, event("e", "a"), first=20))


def test_received_at_may_be_a_timestamp_without_zone() -> None:
    schema = pa.schema([("received_at", pa.timestamp("us")), ("x", pa.int64())])
    batch = RecordConverter(schema).convert(records((5,)))
    assert batch.column(0).to_pylist() == [dt.datetime(2023, 11, 14, 22, 13, 20, 123456)]


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (pa.schema([("topic", pa.int64())]), "topic must be STRING"),
        (pa.schema([("offset", pa.int32())]), "offset must be LONG"),
        (pa.schema([("received_at", pa.string())]), "received_at must be TIMESTAMP"),
        (pa.schema([("received_at", pa.timestamp("us", tz="Europe/Paris"))]), "TIMESTAMP"),
        (pa.schema([("x", pa.decimal128(10, 2))]), "column x"),
        (pa.schema([("topic", pa.string()), ("TOPIC", pa.string())]), "twice"),
    ],
)
def test_schemas_that_cannot_be_mapped_fail_at_once(schema: pa.Schema, text: str) -> None:
    with pytest.raises(SchemaMappingError, match=text):
        RecordConverter(schema)


def test_bad_format_or_mode() -> None:
    with pytest.raises(SchemaMappingError):
        RecordConverter(fmt="csv")
    with pytest.raises(SchemaMappingError):
        RecordConverter(mode="DROPMALFORMED")


# --- batches from packed records --------------------------------------------------------


def test_packed_and_record_conversions_agree() -> None:
    recs = records(event("a", 1), "two", event("c", TS), None)
    for schema, fmt in (
        (None, "default"),
        (None, "zeek"),
        (pa.schema([("x", pa.int64())]), "zeek"),
    ):
        conv = RecordConverter(schema, fmt)
        assert conv.convert_packed(pack_records(recs)).equals(conv.convert(recs))


def test_empty_input_gives_an_empty_batch_of_the_schema() -> None:
    for schema in (DEFAULT_SCHEMA, TYPED):
        conv = RecordConverter(schema, "zeek")
        for batch in (conv.convert([]), conv.convert_packed(b"")):
            assert batch.num_rows == 0 and batch.schema.equals(schema)


def test_malformed_packed_records_raise_decode_errors() -> None:
    good = pack_records(records(1, 2))
    conv = RecordConverter()
    for packed in (
        good[:-1],
        b"\x93\x01\x02\x03",
        b"\xc1",
        pack_records(records(1))[:-2] + b"\x92\x01\x02",
    ):
        with pytest.raises(DecodeError):
            conv.convert_packed(packed)
    with pytest.raises(RecordConversionError):
        conv.convert([("too", "short")])


def test_nulls_in_json_columns_are_real_nulls() -> None:
    recs = [*records(1), Record("/t", b"\xff", "n", T0, 1), *records(3, first=2)]
    batch = RecordConverter(fmt="zeek").convert(recs)
    data = batch.column("data")
    assert data.null_count == 1 and data.to_pylist()[1] is None
    assert data.to_pylist()[2] == dumps_value(3)
    batch.validate(full=True)


def test_undecodable_and_none_values_in_typed_schemas() -> None:
    schema = pa.schema([("a", pa.int64())])
    recs = [*records(None), Record("/t", b"\xff", "n", T0, 1)]
    conv = RecordConverter(schema)
    assert conv.convert(recs).to_pylist() == [{"a": None}, {"a": None}]
    assert (conv.misfits, conv.undecodable) == (1, 1)  # none is not a vector; \xff is no value
    with pytest.raises(RecordConversionError, match="offset 1"):
        RecordConverter(schema, mode="FAILFAST").convert(recs[1:])
