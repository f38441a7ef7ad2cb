"""Rows as Zeek log records: ``df.write...option("log", "Spark::LOG")``, encoder and Spark."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pyarrow as pa
import pytest
from spark_fixtures import hub, spark, wait_for  # noqa: F401

from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.data.binary import decode
from broker_spark.data.types import Count, Port
from broker_spark.reader.options import BrokerOptionError, parse_writer_options
from broker_spark.spark.write.log_rows import LOG_BATCH_SIZE, LogRowEncoder
from broker_spark.zeek import Batch, LogCreate, LogWrite, as_message, iter_log_messages

pytestmark = pytest.mark.timeout(120)

UTC = dt.timezone.utc


def _options(**extra: str):
    return parse_writer_options({"peer": "127.0.0.1:1", "log": "Spark::LOG", **extra})


def _table() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(
                [dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), None],
                pa.timestamp("us", tz="UTC"),
            ),
            "id": pa.array(
                [{"orig_h": "10.0.0.1", "resp_p": 443}, {"orig_h": "2001:db8::1", "resp_p": 53}],
                pa.struct([("orig_h", pa.string()), ("resp_p", pa.int32())]),
            ),
            "n": pa.array([3, None], pa.int64()),
            "tags": pa.array([["a", "b"], []], pa.list_(pa.string())),
            "ok": pa.array([True, False]),
        }
    )


def test_rows_become_a_log_create_and_batches_of_writes() -> None:
    options = _options(zeekTypes="id.orig_h:addr,id.resp_p:port,n:count,tags:set[string]")
    assert (options.topic, options.log_path) == ("zeek/logs/Spark::LOG", "spark")
    encoder = LogRowEncoder(_table().schema, options)
    encoded = encoder.encode(_table())
    assert not encoded.bad and [t for t, _ in encoded.messages] == ["zeek/logs/Spark::LOG"] * 2
    create = LogCreate(decode(encoded.messages[0][1]))
    assert create.valid() and create.path() == "spark" and create.stream_id() == "Spark::LOG"
    assert [str(f) for f in create.fields()] == [
        "ts: time &optional",
        "id.orig_h: addr &optional",
        "id.resp_p: port &optional",
        "n: count &optional",
        "tags: set[string] &optional",
        "ok: bool &optional",
    ]
    batch = Batch(decode(encoded.messages[1][1]))
    assert batch.valid() and batch.size() == 2
    first, second = (w.values() for w in batch)
    assert first[0].seconds == 1704164645.678901
    assert first[1:] == [
        ipaddress.IPv4Address("10.0.0.1"),
        Port(443, 0),
        Count(3),
        frozenset({"a", "b"}),
        True,
    ]
    assert (
        second[0] is None
        and second[3] is None
        and second[1] == ipaddress.IPv6Address("2001:db8::1")
    )
    assert encoder.encode(_table()).messages[0][1] != encoded.messages[0][1]  # once per task


def test_batches_hold_at_most_zeeks_batch_size_and_bad_rows_are_reported() -> None:
    rows = pa.RecordBatch.from_pydict({"host": ["10.0.0.1"] * (LOG_BATCH_SIZE + 5) + ["nope"]})
    encoder = LogRowEncoder(rows.schema, _options(zeekTypes="host:addr"))
    encoded = encoder.encode(rows, first_row=10)
    sizes = [Batch(decode(p)).size() for _, p in encoded.messages[1:]]
    assert sizes == [LOG_BATCH_SIZE, 5]
    assert [b.position for b in encoded.bad] == [10 + LOG_BATCH_SIZE + 5]
    assert "not an address" in encoded.bad[0].reason


def test_log_options_are_checked() -> None:
    with pytest.raises(BrokerOptionError, match="expected a Zeek log stream id"):
        _options(log="spark")
    with pytest.raises(BrokerOptionError, match="names no column"):
        LogRowEncoder(_table().schema, _options(zeekTypes="nosuch:count"))
    with pytest.raises(BrokerOptionError, match="not a Zeek log column type"):
        _options(zeekTypes="n:bigint")
    with pytest.raises(SchemaMappingError, match="no Zeek log type for map"):
        LogRowEncoder(pa.schema([("m", pa.map_(pa.string(), pa.int64()))]), _options())
    assert (
        parse_writer_options({"peer": "h:1", "log": "Spark::LOG", "path": "mine"}).log_path
        == "mine"
    )


@pytest.mark.spark
def test_a_spark_write_publishes_records_zeek_can_write(spark, hub) -> None:  # noqa: F811
    sub = hub.make_subscriber("zeek/logs/")
    df = spark.createDataFrame(
        [(dt.datetime(2024, 1, 2, tzinfo=UTC), "10.0.0.1", 80, 5), (None, "10.0.0.2", 53, None)],
        "ts TIMESTAMP, host STRING, port INT, n LONG",
    )
    (
        df.coalesce(1)
        .write.format("broker")
        .option("peer", f"127.0.0.1:{hub.hub_port}")
        .option("ssl.disable", "true")
        .option("log", "Spark::LOG")
        .option("zeekTypes", "host:addr,port:port,n:count")
        .mode("append")
        .save()
    )
    received = []
    wait_for(lambda: received.extend(sub.poll()) or len(received) >= 2, 30, "the log messages")
    messages = [m for _, data in received for m in iter_log_messages(as_message(data))]
    assert isinstance(messages[0], LogCreate) and messages[0].path() == "spark"
    writes = [m for m in messages if isinstance(m, LogWrite)]
    values = sorted((w.values() for w in writes), key=lambda v: str(v[1]))
    assert values[0][1:] == [ipaddress.IPv4Address("10.0.0.1"), Port(80, 0), Count(5)]
    assert values[1][0] is None and values[1][3] is None
    assert all(isinstance(v[1], ipaddress.IPv4Address) for v in values)
    assert {w.stream_id() for w in writes} == {"Spark::LOG"}
