"""Rows to messages and back, without a SparkSession: the encoder, the writers' delivery, stores' rows."""

from __future__ import annotations

import datetime as dt
import os
import time

import msgpack
import pyarrow as pa
import pytest
import spark_fixtures
from hypothesis import given
from hypothesis import strategies as st

import broker_spark as broker
from broker_spark import zeek
from broker_spark.columnar.record_batches import (
    RecordConversionError,
    SchemaMappingError,
    default_schema,
)
from broker_spark.data.arrow import from_arrow
from broker_spark.data.binary import encode
from broker_spark.data.json_codec import dumps_value
from broker_spark.data.msgpack_records import pack_records
from broker_spark.data.types import Timespan
from broker_spark.reader.options import (
    BrokerOptionError,
    parse_reader_options,
    parse_writer_options,
)
from broker_spark.spark.compat import ReadAllAvailable
from broker_spark.spark.java import JavaMissingError, require_java
from broker_spark.spark.read.stream import stream_reader
from broker_spark.spark.tables.stores import STORE_SCHEMA, StoreEventConverter, _column_values
from broker_spark.spark.write.row_messages import RowEncoder
from broker_spark.spark.write.writers import BadRowError, publish_batches
from broker_spark.store.commands import EntityId
from broker_spark.store.events import StoreEvent

hub = spark_fixtures.hub  # a fixture, shared by the Spark test modules

pytestmark = pytest.mark.timeout(60)

_PEER = {"peer": "127.0.0.1:9"}


def _encoder(schema: pa.Schema, **options: str) -> RowEncoder:
    return RowEncoder(schema, parse_writer_options({**_PEER, **options}))


# --- the encoder ------------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.none(), st.text(max_size=20)),
            st.one_of(st.none(), st.floats(allow_nan=False)),
            st.one_of(st.none(), st.booleans()),
        ),
        max_size=30,
    )
)
def test_vector_rows_encode_like_tuples(rows: list[tuple]) -> None:
    schema = pa.schema(
        [("n", pa.int64()), ("s", pa.string()), ("x", pa.float64()), ("b", pa.bool_())]
    )
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema
    )
    encoded = _encoder(schema, topic="t").encode(batch)
    assert encoded.bad == []
    assert encoded.messages == [("t", encode(tuple(row))) for row in rows]


_COLUMN_TYPES = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float32(), st.floats(width=32, allow_nan=False)),
    (pa.large_string(), st.text(max_size=200)),
    (pa.binary(), st.binary(max_size=140)),
    (pa.timestamp("s", tz="UTC"), st.integers(-(2**33), 2**33)),
    (pa.timestamp("ns"), st.integers(-(2**62), 2**62)),
    (pa.duration("ms"), st.integers(-(2**40), 2**40)),
    (pa.list_(pa.int64()), st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=3)),
    (pa.null(), st.none()),
]


@given(st.data())
def test_columns_encode_like_their_values(data: st.DataObject) -> None:
    """The column-at-a-time shortcut gives the bytes of ``encode(tuple(from_arrow(...)))``."""
    picked = data.draw(st.lists(st.sampled_from(_COLUMN_TYPES), min_size=1, max_size=4))
    n = data.draw(st.integers(0, 8))
    columns = [
        pa.array(data.draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n)), t)
        for t, values in picked
    ]
    names = [f"c{i}" for i in range(len(columns))]
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    encoded = _encoder(batch.schema, topic="t").encode(batch)
    values = [from_arrow(c) for c in columns]
    assert encoded.messages == [("t", encode(tuple(row))) for row in zip(*values, strict=True)]


def test_topic_column_option_and_types() -> None:
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.timezone.utc)
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["a", "b"],
            "ts": pa.array([ts, None], pa.timestamp("us", tz="UTC")),
            "xs": pa.array([[1, 2], []], pa.list_(pa.int32())),
            "m": pa.array([[("k", 1.5)], None], pa.map_(pa.string(), pa.float64())),
        }
    )
    by_column = _encoder(batch.schema).encode(batch).messages
    assert [t for t, _ in by_column] == ["a", "b"]
    assert by_column[0][1] == encode((ts, (1, 2), {"k": 1.5}))
    by_option = _encoder(batch.schema, topic="c").encode(batch).messages
    assert [t for t, _ in by_option] == ["c", "c"]  # the option wins, as in Spark's Kafka sink
    assert by_option[1][1] == encode((None, (), None))


def test_json_data_column_and_bad_rows() -> None:
    texts = [dumps_value({"a": broker.Count(1)}), "not json", None, dumps_value(1.5)]
    batch = pa.RecordBatch.from_pydict(
        {"topic": ["t", "t", "t", None], "data": texts, "offset": [0, 1, 2, 3]}
    )
    encoded = _encoder(batch.schema).encode(batch, first_row=10)
    assert encoded.messages == [("t", encode({"a": broker.Count(1)}))]
    assert [(b.position, b.topic) for b in encoded.bad] == [(11, "t"), (12, "t"), (13, None)]
    assert "row 11" in encoded.bad[0].describe()
    assert encoded.bad[1].reason == "the data is null"
    assert encoded.bad[2].reason == "the topic is null or empty"


def test_json_data_column_takes_decimal_timespans() -> None:
    """A sloppy client's interval (zeekpy writes float nanoseconds) is rounded to whole
    nanoseconds; text that is not a number with a unit stays a bad row."""
    span = '{"@data-type": "timespan", "data": "%s"}'
    texts = [span % "1500000000.0ns", span % "2.5ns", span % "1.5.0ns", span % "ns"]
    batch = pa.RecordBatch.from_pydict({"topic": ["t"] * 4, "data": texts})
    encoded = _encoder(batch.schema).encode(batch)
    assert encoded.messages == [
        ("t", encode(Timespan(1_500_000_000))),
        ("t", encode(Timespan(2))),  # half to even
    ]
    assert [b.position for b in encoded.bad] == [2, 3]
    assert all("timespan" in b.reason for b in encoded.bad), [b.reason for b in encoded.bad]


def test_zeek_events_from_columns() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"event": ["conn", None], "uid": ["C1", "C2"], "n": pa.array([1, 2], pa.uint64())}
    )
    encoded = _encoder(batch.schema, topic="z", format="zeek").encode(batch)
    assert encoded.messages == [("z", encode(zeek.Event("conn", "C1", broker.Count(1)).as_data()))]
    assert encoded.bad[0].reason == "the event name is null"


@pytest.mark.parametrize(
    ("fields", "options", "error", "message"),
    [
        ([("n", pa.int64())], {}, BrokerOptionError, "option topic: is required"),
        ([("data", pa.int64())], {"topic": "t"}, SchemaMappingError, "data must be STRING"),
        ([("n", pa.int64())], {"topic": "t", "format": "zeek"}, SchemaMappingError, "event"),
        ([("d", pa.decimal128(5, 1))], {"topic": "t"}, SchemaMappingError, "column d"),
        ([("topic", pa.string())], {}, SchemaMappingError, "nothing to publish"),
    ],
)
def test_unpublishable_schemas(fields: list, options: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        _encoder(pa.schema(fields), **options)


# --- delivery through a real peering ------------------------------------------------------------


def _writer_options(hub: broker.Endpoint, **extra: str):
    return parse_writer_options(
        {"peer": f"127.0.0.1:{hub.hub_port}", "ssl.disable": "true", **extra}
    )


def test_publish_batches_returns_after_the_peer_took_everything(hub: broker.Endpoint) -> None:
    sub = hub.make_subscriber("out/", qsize=100_000)
    n = 20_000
    batch = pa.RecordBatch.from_pydict({"n": list(range(n)), "s": ["x"] * n})
    options = _writer_options(hub, topic="out/x")
    result = publish_batches(
        iter([batch.slice(0, 5000), batch.slice(5000)]), RowEncoder(batch.schema, options), options
    )
    assert (result.published, result.bad_rows) == (n, 0)
    # Acknowledged: everything is already in the hub (no waiting for more to arrive).
    got = sub.get(n, 5.0)
    assert [v for _, v in got] == [(i, "x") for i in range(n)]


def test_bad_rows_fail_or_go_to_the_bad_records_topic(hub: broker.Endpoint) -> None:
    sub = hub.make_subscriber(["out/", "rejects"], qsize=100)
    batch = pa.RecordBatch.from_pydict({"data": [dumps_value(1), "{oops", dumps_value(2)]})
    options = _writer_options(hub, topic="out/d")
    with pytest.raises(BadRowError, match=r"row 1: .*set badRecordsTopic"):
        publish_batches(iter([batch]), RowEncoder(batch.schema, options), options)
    assert sub.get(0.2) is None  # nothing of a failing batch is published

    options = _writer_options(hub, topic="out/d", badRecordsTopic="rejects")
    result = publish_batches(iter([batch]), RowEncoder(batch.schema, options), options)
    assert (result.published, result.bad_rows) == (3, 1)
    got = sub.get(3, 5.0)
    assert ("out/d", 1) in got and ("out/d", 2) in got
    rejected = [v for t, v in got if t == "rejects"]
    assert rejected[0][:2] == ("out/d", "{oops")


def test_websocket_reader_and_writer(hub: broker.Endpoint) -> None:
    ws_port = hub.web_socket_listen("127.0.0.1", 0)
    assert ws_port
    url = f"ws://127.0.0.1:{ws_port}"
    sub = hub.make_subscriber("ws/out", qsize=100)
    batch = pa.RecordBatch.from_pydict({"topic": ["ws/out/a", "ws/out/b"], "n": [1, 2]})
    options = parse_writer_options({"websocket": url, "ssl.disable": "true"})
    publish_batches(iter([batch]), RowEncoder(batch.schema, options), options)
    assert sorted(sub.get(2, 5.0)) == [("ws/out/a", (1,)), ("ws/out/b", (2,))]

    reader = stream_reader(
        parse_reader_options({"topics": "ws/in", "websocket": url, "ssl.disable": "true"}),
        default_schema(),
    )
    try:
        start = reader.initialOffset()
        spark_fixtures.wait_for(lambda: hub.peer_subscriptions() or hub.peers(), 10)
        deadline = time.monotonic() + 10
        while reader.latestOffset(start, ReadAllAvailable()) == start:
            hub.publish("ws/in/x", broker.Count(5))  # until the bridge carries it
            assert time.monotonic() < deadline, "nothing arrived through the WebSocket bridge"
            time.sleep(0.05)
        end = reader.latestOffset(start, ReadAllAvailable())
        part = reader.partitions(start, end)[0]
        rows = next(reader.read(part)).to_pylist()
        assert rows[0]["topic"] == "ws/in/x"
        assert rows[0]["data"] == dumps_value(broker.Count(5))
    finally:
        reader.stop()


# --- stores -------------------------------------------------------------------------------------


def _packed(values: list) -> bytes:
    return pack_records(
        [
            ("<$>/local/data/store-events/s", encode(v), "", 1_000_000_000 * (i + 1), i)
            for i, v in enumerate(values)
        ]
    )


def test_store_events_become_rows() -> None:
    pub = EntityId(os.urandom(16), 1)
    events = [
        StoreEvent("insert", "s", "k", 1, None, None, pub).to_data(),
        StoreEvent("update", "s", "k", 2, 1, 2_500_000_000, pub).to_data(),
        StoreEvent("erase", "s", "k", publisher=pub).to_data(),
        StoreEvent("expire", "s", "j").to_data(),
        ("nonsense",),
    ]
    converter = StoreEventConverter(STORE_SCHEMA)
    rows = converter.convert_packed(_packed(events)).to_pylist()
    assert [(r["op"], r["key"], r["value"], r["expiry"]) for r in rows] == [
        ("insert", dumps_value("k"), dumps_value(1), None),
        ("update", dumps_value("k"), dumps_value(2), 2.5),
        ("erase", dumps_value("k"), None, None),
        ("expire", dumps_value("j"), None, None),
    ]
    assert rows[1]["ts"] == dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc)
    assert [r["offset"] for r in rows] == [0, 1, 2, 3]
    assert converter.undecodable == 1
    with pytest.raises(RecordConversionError, match="offset 4"):
        StoreEventConverter(STORE_SCHEMA, "FAILFAST").convert_packed(_packed(events))
    picked = pa.schema([("op", pa.string()), ("key", pa.string())])
    assert StoreEventConverter(picked).convert_packed(_packed(events[:1])).num_columns == 2
    with pytest.raises(SchemaMappingError, match="a store table has only"):
        StoreEventConverter(pa.schema([("other", pa.string())]))
    assert Timespan  # expiries are timespans on the wire


def test_store_write_columns() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"key": ["plain", dumps_value(broker.Count(3)), None], "value": [1, 2, 3]}
    )
    assert _column_values(batch, 0, "key", 0) == ["plain", broker.Count(3), None]
    assert _column_values(batch, 1, "value", 0) == [1, 2, 3]
    bad = pa.RecordBatch.from_pydict({"key": ["{nope"]})
    with pytest.raises(ValueError, match="row 7: key is not Zeek JSON"):
        _column_values(bad, 0, "key", 7)
    assert msgpack  # snapshots travel msgpack-packed


# --- java ---------------------------------------------------------------------------------------


def test_java_check(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert os.path.basename(require_java())  # Java 17 is installed here
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissingError, match="has no bin/java"):
        require_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="no java on PATH"):
        require_java()


def test_a_stream_commit_counts_once_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    from broker_spark.spark.write.writers import BrokerCommitMessage, BrokerStreamWriter

    schema = pa.schema([("topic", pa.string()), ("n", pa.int64())])
    writer = BrokerStreamWriter(parse_writer_options(_PEER), schema)
    messages = [BrokerCommitMessage(5, 0, 0), BrokerCommitMessage(7, 1, 1)]
    with caplog.at_level("INFO", logger="broker_spark.spark.write.writers"):
        writer.commit(messages, 3)
        writer.commit(messages, 3)  # Spark may commit a batch again after a restart
    assert [r.getMessage() for r in caplog.records] == [
        "batch 3: 12 messages published by 2 tasks, 1 bad rows"
    ]
