"""Zeek log records into Spark's rows, on the executor side, without a SparkSession.

The converter gets spool records (topic, payload, sender, received_at, offset)
as a partition holds them; these tests feed it the recorded messages of a
real Zeek, and messages built to change a log's columns, leave out a
LogCreate, overflow a count or break a record.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pytest
from zeek_recordings import recording

from broker_spark.columnar.log_converter import LogConverter, schema_id
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.data.binary import decode, encode
from broker_spark.data.types import Count
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import (
    generic_log_schema,
    log_columns,
    zeek_log_schema,
)
from broker_spark.spool.schema_history import LogSchemaHistory, describe_change
from broker_spark.zeek import Batch, LogCreate, LogField, LogSchema, LogWrite, standard_schema

pytestmark = pytest.mark.timeout(60)

CONN = standard_schema("conn")


def _converter(schema, known=None, paths=None, mode="PERMISSIVE", schemas=()) -> LogConverter:
    names = known.names if known is not None else ()
    return LogConverter(
        arrow_schema_of(schema), log_columns(schema, names), mode, paths, known, schemas
    )


def _records(messages: list[tuple[str, bytes]], sender: str = "zeek-1") -> tuple:
    n = len(messages)
    return (
        [t for t, _ in messages],
        [p for _, p in messages],
        [sender] * n,
        [1_700_000_000_000_000_000 + i for i in range(n)],
        list(range(100, 100 + n)),
    )


def test_recorded_logs_become_typed_rows_with_their_metadata() -> None:
    rec = recording("zeek-logs-http-methods")
    schema = zeek_log_schema("http")
    conv = _converter(schema, standard_schema("http"), ["http"])
    batch = conv.convert(*_records(rec.data))
    assert batch.num_rows == len(rec.writes["http"]) == 49
    row = batch.slice(0, 1).to_pylist()[0]
    assert row["id"] == {
        "orig_h": "128.2.6.136",
        "orig_p": 46562,
        "resp_h": "173.194.75.103",
        "resp_p": 80,
    }
    assert row["method"] == "OPTIONS" and row["status_code"] == 405 and row["tags"] == []
    assert row["resp_fuids"] == ["FNHaqE4UoY2x5hHRul"]
    assert (row["_path"], row["topic"], row["sender"]) == ("http", "zeek/logs/HTTP::LOG", "zeek-1")
    assert row["ts"].isoformat() == "2012-12-01T02:27:50.191989+00:00"
    # every row of a Batch carries that Batch's offset; offsets only grow
    offsets = batch.column("offset").to_pylist()
    assert offsets == sorted(offsets) and len(set(offsets)) < len(offsets)
    assert (conv.misfits, conv.undecodable, conv.unnamed) == (0, 0, 0)


def test_several_logs_become_zeeks_own_json_lines_in_arrival_order() -> None:
    rec = recording("zeek-logs-dns-edns-ecs")
    conv = _converter(generic_log_schema())
    batch = conv.convert(*_records(rec.data))
    by_path: dict[str, list[str]] = {}
    for row in batch.to_pylist():
        by_path.setdefault(row["_path"], []).append(row["log"])
    assert by_path == {p: rec.local_lines(p) for p in rec.writes}


def test_flat_columns_keep_zeeks_dotted_names() -> None:
    rec = recording("zeek-logs-http-methods")
    schema = zeek_log_schema("conn", "flat")
    assert "id.orig_h" in schema.fieldNames()
    batch = _converter(schema, CONN, ["conn"]).convert(*_records(rec.data))
    assert batch.column("id.orig_h").to_pylist()[0] == "128.2.6.136"


def _conn_messages(
    schema: LogSchema, rows: list[list], create: bool = True
) -> list[tuple[str, bytes]]:
    out = []
    if create:
        out.append(("zeek/logs/Conn::LOG", encode(LogCreate.of(schema))))
    writes = [LogWrite.of(schema, r) for r in rows]
    out.append(("zeek/logs/Conn::LOG", encode(Batch(*writes))))
    return out


def _conn_row(uid: str, **extra) -> list:
    rec = recording("zeek-logs-http-methods")
    from broker_spark.zeek import decode_values

    values = decode_values(rec.writes["conn"][0])
    values[1] = uid
    return values + list(extra.values())


def test_a_log_create_that_changes_columns_keeps_the_querys_rows_whole() -> None:
    wider = LogSchema(
        CONN.stream,
        CONN.path,
        tuple(f for f in CONN.fields if f.name != "history") + (LogField.of("site", "string"),),
    )
    old = _conn_messages(CONN, [_conn_row("C-old")])
    new_row = [
        v for f, v in zip(CONN.fields, _conn_row("C-new"), strict=True) if f.name != "history"
    ]
    new = _conn_messages(wider, [new_row + ["lab"]])
    conv = _converter(zeek_log_schema("conn"), CONN, ["conn"])
    rows = conv.convert(*_records(old + new)).to_pylist()
    assert [r["uid"] for r in rows] == ["C-old", "C-new"]
    assert rows[0]["history"] == "ShADadFf" and rows[1]["history"] is None  # dropped: null
    assert "site" not in rows[1]  # a new column is not read by a running query
    assert rows[1]["id"]["orig_h"] == "128.2.6.136"  # the rest keeps its values


def test_records_without_their_log_create_still_decode_by_the_known_layout() -> None:
    messages = _conn_messages(CONN, [_conn_row("C-1"), _conn_row("C-2")], create=False)
    conv = _converter(zeek_log_schema("conn"), CONN, ["conn"])
    rows = conv.convert(*_records(messages)).to_pylist()
    assert [r["uid"] for r in rows] == ["C-1", "C-2"]
    assert conv.unnamed == 2  # counted: the names came from the known schema, not a LogCreate
    other = LogSchema("Conn::LOG", "conn", (LogField.of("x", "count"),))
    odd = _conn_messages(other, [[Count(5)]], create=False)
    conv = _converter(generic_log_schema())
    rows = conv.convert(*_records(odd)).to_pylist()
    assert rows[0]["log"] == '{"_1":5}'  # no names known for that layout: positions


def test_schemas_from_before_the_partition_name_its_records() -> None:
    custom = LogSchema(
        "Site::LOG", "site", (LogField.of("who", "string"), LogField.of("n", "count"))
    )
    messages = _conn_messages(custom, [["alice", Count(3)]], create=False)
    messages = [("zeek/logs/Site::LOG", p) for _, p in messages]
    key = ("zeek-1", "Site::LOG", "site")
    conv = _converter(generic_log_schema(), schemas=[(key, custom)])
    assert conv.convert(*_records(messages)).column("log").to_pylist() == ['{"who":"alice","n":3}']


def test_counts_beyond_long_are_null_or_fail_the_query() -> None:
    schema = LogSchema("Big::LOG", "big", (LogField.of("n", "count"),))
    messages = [
        ("zeek/logs/Big::LOG", p)
        for _, p in _conn_messages(schema, [[Count(2**64 - 1)], [Count(7)]])
    ]
    spark_schema = zeek_log_schema(schema)
    conv = _converter(spark_schema, schema, ["big"])
    assert conv.convert(*_records(messages)).column("n").to_pylist() == [None, 7]
    assert conv.misfits == 1
    strict = _converter(spark_schema, schema, ["big"], mode="FAILFAST")
    with pytest.raises(RecordConversionError, match="column n"):
        strict.convert(*_records(messages))


def test_broken_records_are_counted_or_fail_naming_the_offset() -> None:
    schema = LogSchema("Big::LOG", "big", (LogField.of("n", "count"),))
    good = LogWrite.of(schema, [Count(1)])
    broken = LogWrite("Big::LOG", "Log::WRITER_ASCII", "big", good.serial_data()[:-3])
    messages = [
        ("zeek/logs/Big::LOG", encode(LogCreate.of(schema))),
        ("zeek/logs/Big::LOG", encode(Batch(good, broken))),
    ]
    conv = _converter(generic_log_schema())
    assert conv.convert(*_records(messages)).column("log").to_pylist() == ['{"n":1}', None]
    assert conv.undecodable == 1
    with pytest.raises(RecordConversionError, match="record at offset 101"):
        _converter(generic_log_schema(), mode="FAILFAST").convert(*_records(messages))
    garbage = [("zeek/logs/Big::LOG", b"\x0e\x03\x02")]
    conv = _converter(generic_log_schema())
    assert conv.convert(*_records(garbage)).num_rows == 0 and conv.undecodable == 1


def test_other_messages_and_other_logs_are_skipped() -> None:
    rec = recording("zeek-logs-dns-edns-ecs")
    event = ("zeek/logs/x", encode((Count(1), Count(1), ("ev", ()))))
    conv = _converter(generic_log_schema(), paths=["dns"])
    batch = conv.convert(*_records(rec.data + [event]))
    assert set(batch.column("_path").to_pylist()) == {"dns"} and conv.others == 1


def test_a_user_schema_takes_the_columns_it_names_in_the_types_it_asks(tmp_path) -> None:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    rec = recording("zeek-logs-http-methods")
    mine = StructType(
        [
            StructField("uid", StringType()),
            StructField("id.resp_p", LongType()),  # a port as LONG, not INT
            StructField("orig_bytes", StringType()),  # a count as text
            StructField("nope", IntegerType()),  # no such column: null
            StructField("offset", LongType()),
        ]
    )
    batch = _converter(mine, CONN, ["conn"]).convert(*_records(rec.data))
    row = batch.slice(0, 1).to_pylist()[0]
    assert row == {
        "uid": "CJsxOi1VpqaEY0wtrk",
        "id.resp_p": 80,
        "orig_bytes": "41",
        "nope": None,
        "offset": row["offset"],
    }
    assert batch.schema.field("id.resp_p").type == pa.int64()


def test_the_history_keeps_schemas_by_offset_and_warns_of_changes(tmp_path, caplog) -> None:
    history = LogSchemaHistory(str(tmp_path))
    wider = LogSchema(CONN.stream, CONN.path, CONN.fields + (LogField.of("site", "string"),))
    items = [("zeek/logs/Conn::LOG", encode(LogCreate.of(CONN)), "zeek-1", 0)]
    history.observe(10, items)
    history.observe(20, items)  # Zeek resends it on a new peering: nothing new
    with caplog.at_level(logging.WARNING):
        history.observe(30, [("zeek/logs/Conn::LOG", encode(LogCreate.of(wider)), "zeek-1", 0)])
    assert "changed the columns of log conn: added site" in caplog.text
    assert history.snapshot(10) == [] and history.snapshot(11)[0][1] == CONN
    assert history.snapshot(31)[0][1] == wider
    again = LogSchemaHistory(str(tmp_path), readonly=True)  # a restarted query reads the file
    assert again.snapshot(31) == history.snapshot(31) and again.latest("conn") == wider
    assert describe_change(wider, CONN) == "removed site"


def test_a_record_stream_is_read_in_place_as_unpacked() -> None:
    from broker_spark.columnar.log_converter import record_spans
    from broker_spark.data.msgpack_records import pack_records

    rec = recording("zeek-logs-dns-edns-ecs")
    columns = _records(rec.data)
    packed = pack_records(zip(*columns, strict=True))
    assert record_spans(packed, len(rec.data)) is not None
    assert record_spans(packed, len(rec.data) + 1) is None  # a count that does not match
    assert record_spans(packed[:-1], None) is None  # a truncated stream
    in_place = _converter(generic_log_schema()).convert_packed(packed, len(rec.data))
    unpacked = _converter(generic_log_schema()).convert(*columns)
    assert in_place.equals(unpacked) and in_place.num_rows == 148


def test_a_schemas_id_is_its_own_whatever_was_seen_before() -> None:
    """Two schemas that are equal as types but differ in their JSON (an enum's name, which
    a LogCreate does not carry) have different ids, in whichever order they come: a batch
    read twice (the tables writer's second look at it) gives its rows the same ids."""
    http = standard_schema("http")
    sent = LogCreate(decode(encode(LogCreate.of(http)))).schema()
    assert sent == http and json.dumps(sent.to_json()) != json.dumps(http.to_json())
    first = (schema_id(http), schema_id(sent))
    assert first[0] != first[1]
    assert (schema_id(http), schema_id(sent)) == first
    assert schema_id(sent) == first[1] and schema_id(http) == first[0]
