"""One table per Zeek log, exactly once, columns following Zeek (``write_zeek_tables``).

The micro-batches are what the stream gives (``format=zeek-logs`` rows with the
columns in force, converted from a real Zeek's recorded messages as executors
convert them) handed to the batch writer as ``foreachBatch`` would, and, at the
end, a real streaming query from a relay. Tables live in a database of the
test's own folder (Spark's own table format: the marker protocol; Delta and
Iceberg through their connectors are test_lake_tables.py's). Zeek's own JSON logs of the recorded runs are the
oracle, read with ``read_zeek_json`` into the same typed columns.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_fixtures import spark  # noqa: F401
from zeek_recordings import ZMQ_LOGS, recording, zmq_local_lines, zmq_messages

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.data.binary import encode
from broker_spark.data.msgpack_records import pack_records
from broker_spark.data.types import Count
from broker_spark.reader.options import ReaderOptions
from broker_spark.spark.read.deferred import DeferredRows
from broker_spark.spark.read.partitions import SpoolPartition
from broker_spark.spark.read.rows import LogRows
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import log_columns, read_zeek_json
from broker_spark.spark.zeek_tables import ZeekTables, table_input_schema
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.zeek import Batch, LogCreate, LogField, LogSchema, LogWrite, decode_values
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeromq.log_receiver import LOG_TOPIC_PREFIX

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

KEYS = ("offset", "record", "relay")
NOT_LOGGED = ("topic", "sender", "received_at", "offset", "record", "relay", "day")


@pytest.fixture
def db(spark: Any, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    """A database whose tables live in the test's folder; dropped at the end."""
    name = "zt_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        yield name
    finally:
        spark.sql(f"DROP DATABASE {name} CASCADE")


def batch_of(
    spark: Any,  # noqa: F811
    messages: list[tuple[str, bytes, str]],
    first: int = 0,
    shape: str = "messages",
) -> Any:
    """A micro-batch of the stream, as its partitions hold these messages at ``first`` on:
    two partitions, each converted as an executor converts its own (with the log schemas
    in force at its first offset, as the reader plans them). ``shape``: ``messages``, a row
    per log of a message holding its bytes; ``deferred``, a row per partition that the
    tasks consuming it read into those rows, as ``write_zeek_tables`` reads; ``runs``, a row
    per run of a message's records of one log as JSON lines; ``records``, a row a record."""
    if shape == "deferred":
        return _deferred_batch_of(spark, messages, first)
    schema = table_input_schema(runs=shape != "records", messages=shape == "messages")
    history = LogSchemaHistory()
    history.observe(first, [(t, p, s) for t, p, s in messages])
    n = len(messages)
    parts = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        converter = LogConverter(
            arrow_schema_of(schema),
            log_columns(schema, ()),
            schemas=history.snapshot(first + lo),
        )
        part = messages[lo:hi]
        rows = converter.convert(
            [t for t, _p, _s in part],
            [p for _t, p, _s in part],
            [s for _t, _p, s in part],
            [1_700_000_000_000_000_000] * len(part),
            list(range(first + lo, first + hi)),
        )
        parts.append(spark.createDataFrame(pa.Table.from_batches([rows])).coalesce(1))
    return parts[0].union(parts[1])


def _deferred_batch_of(spark: Any, messages: list[tuple[str, bytes, str]], first: int) -> Any:  # noqa: F811
    """The batch of ``batch_of`` as a stream read with ``deferredRows`` gives it: the same
    two partitions (their records inline), a row each, read by the tasks that consume it."""
    schema = table_input_schema(runs=True, messages=True)
    rows = DeferredRows(LogRows(ReaderOptions(format="zeek-logs"), arrow_schema_of(schema), schema))
    history = LogSchemaHistory()
    history.observe(first, list(messages))
    n = len(messages)
    parts = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        records = pack_records(
            (t, p, s, 1_700_000_000_000_000_000, first + lo + i)
            for i, (t, p, s) in enumerate(messages[lo:hi])
        )
        part = SpoolPartition.inline(first + lo, first + hi, records)
        part.schemas = history.snapshot(first + lo)
        [held] = rows.read(part)
        parts.append(spark.createDataFrame(pa.Table.from_batches([held])).coalesce(1))
    return parts[0].union(parts[1])


def broker_messages(name: str) -> list[tuple[str, bytes, str]]:
    return [(t, p, f"zeek-{name}") for t, p in recording(name).data]


def zmq_log_messages() -> list[tuple[str, bytes, str]]:
    out = []
    for frames in zmq_messages(ZMQ_LOGS):
        out.append((LOG_TOPIC_PREFIX + read_header(frames[3]).stream, frames[3], "zmq-node"))
    return out


def logged(spark: Any, table: str) -> list[tuple]:  # noqa: F811
    df = spark.table(table)
    return sorted(map(tuple, df.select(*[c for c in df.columns if c not in NOT_LOGGED]).collect()))


def zeeks_own(spark: Any, lines: list[str], path: str, tmp: Path) -> list[tuple]:  # noqa: F811
    file = tmp / f"{path}-{uuid.uuid4().hex[:6]}.log"
    file.write_text("\n".join(lines) + "\n")
    return sorted(map(tuple, read_zeek_json(spark, str(file), path).drop("_path").collect()))


def writer(db: str, tmp: Path, **kw: Any) -> ZeekTables:
    return ZeekTables(
        checkpoint=str(tmp / "checkpoint"),
        table=f"{db}.{{path}}",
        quarantine=f"{db}.zeek_quarantine",
        **kw,
    )


@pytest.mark.slow  # every log of three recordings against Zeek's own: 25 s (make test-slow)
def test_every_recorded_log_becomes_its_table_as_zeek_wrote_it(spark, db, tmp_path, caplog) -> None:  # noqa: F811
    """Both Broker recordings and the ZeroMQ one: each log's table holds exactly the records
    of Zeek's own JSON log, typed, once, with a position no other record shares. Every
    log is parsed and written by the tasks (Arrow), none left to Spark's writer."""
    caplog.set_level(logging.INFO, logger="broker_spark.spark.tables.log_tables")
    sources = {
        "b1": (broker_messages("zeek-logs-http-methods"), recording("zeek-logs-http-methods")),
        "b2": (broker_messages("zeek-logs-dns-edns-ecs"), recording("zeek-logs-dns-edns-ecs")),
        "z": (zmq_log_messages(), None),
    }
    for key, (messages, rec) in sources.items():
        tables = ZeekTables(
            checkpoint=str(tmp_path / key), table=f"{db}.{key}_{{path}}", quarantine=None
        )
        tables(batch_of(spark, messages, shape="deferred"), 0)  # as write_zeek_tables reads
        paths = rec.writes if rec is not None else ("conn", "http", "files")
        for path in paths:
            table = f"{db}.{key}_{path}"
            lines = rec.local_lines(path) if rec is not None else zmq_local_lines(ZMQ_LOGS, path)
            assert logged(spark, table) == zeeks_own(spark, lines, path, tmp_path), path
            positions = spark.table(table).select(*KEYS).collect()
            assert len(positions) == len(set(positions)) == len(lines)
            days = {r["day"] for r in spark.table(table).select("day").distinct().collect()}
            assert days and None not in days
            assert spark.sql(f"SHOW PARTITIONS {table}").count() == len(days)  # by day
    assert "written by Spark" not in caplog.text


@pytest.mark.slow  # long (5 s and more): make test-slow, and every PySpark (versions)
@pytest.mark.versions
def test_a_batch_is_written_once_however_often_it_runs(spark, db, tmp_path) -> None:  # noqa: F811
    messages = broker_messages("zeek-logs-http-methods")
    tables = writer(db, tmp_path)
    tables(batch_of(spark, messages[:20]), 0)
    first = {p: spark.table(f"{db}.{p}").count() for p in ("conn", "http")}
    tables(batch_of(spark, messages[:20]), 0)  # Spark runs the batch again after a failure
    assert {p: spark.table(f"{db}.{p}").count() for p in first} == first
    tables(batch_of(spark, messages[20:], first=20), 1)
    rec = recording("zeek-logs-http-methods")
    assert spark.table(f"{db}.http").count() == len(rec.local_lines("http"))
    state = tmp_path / "checkpoint" / "_zeek_tables"
    markers = {
        p.parent.name: sorted(m.name for m in p.parent.glob("batch-*"))
        for p in state.glob("*/batch-*")
    }
    # only a table's newest batch can run again: older markers are gone
    assert markers and all(len(names) == 1 for names in markers.values()), markers
    assert sum(names == ["batch-1.done"] for names in markers.values()) >= 2  # conn, http
    assert not list(state.glob("*/staging/*"))


def test_a_batch_cut_between_two_tables_is_finished_on_its_retry(spark, db, tmp_path) -> None:  # noqa: F811
    """The driver dies after the batch's first table (a fault injected after its write):
    the retry skips that table and writes the others; every record is in once."""
    messages = broker_messages("zeek-logs-http-methods")

    def die(table: str, batch_id: int) -> None:
        raise RuntimeError(f"killed after {table}")  # the injected fault

    with pytest.raises(Exception, match="killed after"):
        writer(db, tmp_path, after_table=die)(batch_of(spark, messages), 7)
    writer(db, tmp_path)(batch_of(spark, messages), 7)  # the restarted query's retry
    rec = recording("zeek-logs-http-methods")
    for path in rec.writes:
        assert spark.table(f"{db}.{path}").count() == len(rec.local_lines(path)), path


def _conn_rows(n: int, extra: list[Any] | None = None) -> list[list[Any]]:
    base = decode_values(recording("zeek-logs-http-methods").writes["conn"][0])
    rows = []
    for i in range(n):
        values = list(base)
        values[1] = f"Cfollow{i:04d}"
        rows.append(values + (extra or []))
    return rows


def _conn_batch(schema: LogSchema, rows: list[list[Any]]) -> list[tuple[str, bytes, str]]:
    return [
        ("zeek/logs/Conn::LOG", encode(LogCreate.of(schema)), "zeek"),
        ("zeek/logs/Conn::LOG", encode(Batch(*[LogWrite.of(schema, r) for r in rows])), "zeek"),
    ]


#: (uid, site) of the rows of a conn table whose second batch brought the site's field.
FOLLOWED = [
    ("Cfollow0000", None),
    ("Cfollow0001", None),
    ("Cfollow0002", None),
    ("Cfollow0000", "dc-1"),
    ("Cfollow0001", "dc-1"),
]

#: Parquet by Arrow's tasks; ORC by Spark's writer, the path of Delta's and Iceberg's tables
#: (5 s more: make test-slow).
#: Each also from a deferred stream's partitions (what ``write_zeek_tables`` reads: the
#: tasks read the rows; Spark's writer and the quarantine take them from ``deferred_rows``).
WAYS = [
    pytest.param({}, id="tasks"),
    pytest.param({"shape": "deferred"}, id="tasks-deferred"),
    pytest.param({"table_format": "orc"}, marks=pytest.mark.slow, id="orc"),
    pytest.param(
        {"table_format": "orc", "shape": "deferred"}, marks=pytest.mark.slow, id="orc-deferred"
    ),
]


def _way(way: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A way's writer arguments, and the shape of its batches."""
    return {k: v for k, v in way.items() if k != "shape"}, way.get("shape", "messages")


@pytest.mark.parametrize("way", WAYS)
def test_columns_follow_zeek_and_a_clash_goes_to_quarantine(
    spark,  # noqa: F811
    db,
    tmp_path,
    way,
) -> None:
    from broker_spark.zeek import standard_schema

    schema = standard_schema("conn")
    way, shape = _way(way)
    tables = writer(db, tmp_path, **way)
    tables(batch_of(spark, _conn_batch(schema, _conn_rows(3)), shape=shape), 0)
    # a site's script adds a field: the table gains it from the batch that carries it
    wider = LogSchema(schema.stream, schema.path, (*schema.fields, LogField.of("site", "string")))
    tables(batch_of(spark, _conn_batch(wider, _conn_rows(2, ["dc-1"])), 2, shape), 1)
    rows = spark.table(f"{db}.conn").orderBy("offset", "record").select("uid", "site").collect()
    assert [(r.uid, r.site) for r in rows] == FOLLOWED
    # a column changes its type: those rows go to quarantine with the reason, the table stays
    clashing = LogSchema(
        schema.stream,
        schema.path,
        tuple(
            LogField.of("duration", "string") if f.name == "duration" else f for f in schema.fields
        ),
    )
    rows = _conn_rows(2)
    for r in rows:
        r[schema.names.index("duration")] = "long"
    tables(batch_of(spark, _conn_batch(clashing, rows), 4, shape), 2)
    assert spark.table(f"{db}.conn").count() == 5
    [q1, q2] = spark.table(f"{db}.zeek_quarantine").orderBy("record").collect()
    assert (q1.log, q1.offset, q1.record) == ("conn", 5, 0)
    assert "column duration is string in the log and double in the table" in q1.reason
    assert '"duration":"long"' in q1.line and q2.record == 1


def test_two_logs_of_one_table_name_are_both_written(spark, db, tmp_path) -> None:  # noqa: F811
    """Paths ``site-x`` and ``site_x`` both name table ``site_x``: one commit holds both
    (written apart, the second would find the batch's marker and be skipped)."""
    from broker_spark.zeek import standard_schema

    conn = standard_schema("conn")
    messages = []
    for path in ("site-x", "site_x"):
        schema = LogSchema(f"Site::{path.upper()}", path, conn.fields)
        messages += [
            (f"zeek/logs/{schema.stream}", payload, sender)
            for _t, payload, sender in _conn_batch(schema, _conn_rows(3))
        ]
    writer(db, tmp_path)(batch_of(spark, messages), 0)
    assert spark.table(f"{db}.site_x").count() == 6


def test_a_log_column_named_like_the_metadata_keeps_its_name(spark, db, tmp_path) -> None:  # noqa: F811
    """MQTT's publish log has a ``topic`` of its own: the table keeps it, and the Broker
    topic beside it is ``_topic`` (as in a stream of that log); likewise ``offset``."""
    base = decode_values(recording("zeek-logs-http-methods").writes["conn"][0])
    schema = LogSchema(
        "Site::LOG",
        "site",
        (LogField.of("ts", "time"), LogField.of("topic", "string"), LogField.of("offset", "count")),
    )
    rows = [[base[0], f"sensors/{i}", 7 + i] for i in range(3)]
    writer(db, tmp_path)(batch_of(spark, _conn_batch(schema, rows)), 0)
    table = spark.table(f"{db}.site")
    assert {"topic", "_topic", "offset", "_offset", "record"} <= set(table.columns)
    got = sorted((r.topic, r.offset, r._topic) for r in table.collect())
    assert got == [(f"sensors/{i}", 7 + i, "zeek/logs/Conn::LOG") for i in range(3)]


@pytest.mark.parametrize("shape", ["messages", "deferred", "runs", "records"])
def test_rows_the_tasks_refuse_are_written_by_spark(spark, db, tmp_path, caplog, shape) -> None:  # noqa: F811
    """A count past 2^63 (Zeek's counts are unsigned; Spark's longs are not): the task's
    decode (or Arrow's JSON reader) refuses the group, so Spark's own parse writes it from
    the records' JSON lines, as it always did (the value null), beside the groups the tasks
    wrote, in the one commit of the batch. Whether the stream's rows are messages' bytes
    (what ``write_zeek_tables`` reads), runs of JSON lines or a record each (a stream of the
    user's own handed to ``ZeekTables``), each record keeps its own position."""
    caplog.set_level(logging.INFO, logger="broker_spark.spark.tables.log_tables")
    big = LogSchema("Big::LOG", "big", (LogField.of("n", "count"), LogField.of("i", "int")))
    small = LogSchema("Small::LOG", "small", (LogField.of("n", "count"),))
    messages = []
    for schema, values in ((big, [[2**64 - 1, 1], [5, 2]]), (small, [[7]])):
        rows = [LogWrite.of(schema, [Count(v[0]), *v[1:]]) for v in values]
        messages += [
            (f"zeek/logs/{schema.stream}", encode(LogCreate.of(schema)), "zeek"),
            (f"zeek/logs/{schema.stream}", encode(Batch(*rows)), "zeek"),
        ]
    tables = writer(db, tmp_path)
    tables(batch_of(spark, messages, shape=shape), 0)
    tables(batch_of(spark, messages, shape=shape), 0)  # run again: nothing added
    got = {(r.n, r.i, r.offset, r.record) for r in spark.table(f"{db}.big").collect()}
    assert got == {(None, 1, 1, 0), (5, 2, 1, 1)} and spark.table(f"{db}.big").count() == 2
    assert [r.n for r in spark.table(f"{db}.small").collect()] == [7]
    assert "log big" in caplog.text and "written by Spark" in caplog.text
    assert "log small" not in caplog.text


@pytest.mark.slow  # a relay and a query: 15 s (make test-slow)
def test_write_zeek_tables_reads_a_relay_into_a_table_per_log(spark, db, tmp_path) -> None:  # noqa: F811
    """The whole helper: a relay holding a Zeek's recorded logs, one query with the default
    arguments, each log's table as Zeek wrote it, each record once, in its own position
    (the stream it reads gives a row per run of a message's records)."""
    from test_spark_relay import Relay, write_tables_once

    rec = recording("zeek-logs-dns-edns-ecs")
    relay = Relay(tmp_path / "relay")
    try:
        relay.publish_encoded(rec.data)
        write_tables_once(spark, relay, tmp_path / "checkpoint", db)
    finally:
        relay.close()
    for path in rec.writes:
        table = f"{db}.{path}"
        lines = rec.local_lines(path)
        assert logged(spark, table) == zeeks_own(spark, lines, path, tmp_path), path
        positions = spark.table(table).select(*KEYS).collect()
        assert len(positions) == len(set(positions)) == len(lines)
    assert not spark.catalog.tableExists(f"{db}.quarantine")


def _every_row(spark: Any, table: str) -> list[tuple]:  # noqa: F811
    df = spark.table(table)
    columns = [df[f"`{name}`"] for name in sorted(df.columns)]  # flat names hold dots
    return sorted(map(tuple, df.select(*columns).collect()), key=repr)


def _written_every_way(
    spark: Any,  # noqa: F811
    db: str,
    tmp: Path,
    key: str,
    messages: list,
    columns: str = "nested",
) -> list[str]:
    """``messages`` written by the Parquet path (Arrow's tasks), and into ORC and Parquet by
    Spark's writer (as Delta's and Iceberg's): the tables' prefixes."""
    ways = {"arrow": {}, "orc": {"table_format": "orc"}, "spark": {"spark_writer": True}}
    for way, kw in ways.items():
        tables = ZeekTables(
            checkpoint=str(tmp / f"{key}-{way}"),
            table=f"{db}.{key}_{way}_{{path}}",
            quarantine=None,
            columns=columns,
            **kw,
        )
        tables(batch_of(spark, messages), 0)
    return [f"{db}.{key}_{way}_" for way in ways]


@pytest.mark.slow  # every recording through ORC and Spark's Parquet writer (make test-slow)
@pytest.mark.parametrize("columns", ["nested", "flat"])
def test_spark_writers_take_the_rows_the_parquet_path_writes(spark, db, tmp_path, columns) -> None:  # noqa: F811
    """ORC and Spark's own Parquet writer (the path of Delta and Iceberg tables) are handed
    the tasks' typed columns: every column of every row equals the Parquet path's, positions
    and days included. One recording here, nested and flat; every recording in the slow
    test below."""
    rec = recording("zeek-logs-http-methods")
    arrow, *others = _written_every_way(
        spark, db, tmp_path, "h" + columns, broker_messages("zeek-logs-http-methods"), columns
    )
    for path in rec.writes:
        expected = _every_row(spark, arrow + path)
        assert len(expected) == len(rec.local_lines(path))
        for prefix in others:
            assert _every_row(spark, prefix + path) == expected, (prefix, path)


@pytest.mark.slow  # every log of three recordings, three ways: 30 s (make test-slow)
def test_spark_writers_take_every_recorded_log_as_the_parquet_path(spark, db, tmp_path) -> None:  # noqa: F811
    """Both Broker recordings and the ZeroMQ one, through ORC and Spark's writers: each log's
    table equal, column for column, to the Parquet path's, which is Zeek's own log."""
    sources = {
        "b1": (broker_messages("zeek-logs-http-methods"), recording("zeek-logs-http-methods")),
        "b2": (broker_messages("zeek-logs-dns-edns-ecs"), recording("zeek-logs-dns-edns-ecs")),
        "z": (zmq_log_messages(), None),
    }
    for key, (messages, rec) in sources.items():
        arrow, *others = _written_every_way(spark, db, tmp_path, key, messages)
        paths = rec.writes if rec is not None else ("conn", "http", "files")
        for path in paths:
            lines = rec.local_lines(path) if rec is not None else zmq_local_lines(ZMQ_LOGS, path)
            assert logged(spark, arrow + path) == zeeks_own(spark, lines, path, tmp_path), path
            expected = _every_row(spark, arrow + path)
            for prefix in others:
                assert _every_row(spark, prefix + path) == expected, (prefix, path)


@pytest.mark.parametrize(
    "table_format",
    [None, pytest.param("orc", marks=pytest.mark.slow)],  # orc: 3.5 s, make test-slow
)
def test_a_table_is_fresh_in_the_session_that_reads_it(spark, db, tmp_path, table_format) -> None:  # noqa: F811
    """A streaming query's batches run in a session of their own (a clone of the query's):
    after each commit, the reading session (here the test's, as a notebook's ``spark``)
    counts what the commit added, with no REFRESH TABLE, new columns included."""
    from broker_spark.zeek import standard_schema

    batches = spark.newSession()  # the session foreachBatch hands a batch in
    schema = standard_schema("conn")
    tables = writer(db, tmp_path, table_format=table_format)
    tables(batch_of(batches, _conn_batch(schema, _conn_rows(3))), 0)
    assert spark.table(f"{db}.conn").count() == 3
    wider = LogSchema(schema.stream, schema.path, (*schema.fields, LogField.of("site", "string")))
    tables(batch_of(batches, _conn_batch(wider, _conn_rows(2, ["dc-1"])), first=2), 1)
    assert spark.table(f"{db}.conn").count() == 5
    assert spark.table(f"{db}.conn").where("site = 'dc-1'").count() == 2


def test_parquet_tables_take_the_sessions_codec(spark, db, tmp_path) -> None:  # noqa: F811
    """The tasks write a Parquet table's files in the session's codec, as Spark would."""
    import pyarrow.parquet as pq

    from broker_spark.zeek import standard_schema

    schema = standard_schema("conn")
    session = spark.newSession()
    session.conf.set("spark.sql.parquet.compression.codec", "zstd")
    writer(db, tmp_path)(batch_of(session, _conn_batch(schema, _conn_rows(3))), 0)
    files = list((tmp_path / "warehouse" / "conn").rglob("*.parquet"))
    assert files and all(f.name.startswith("b000000000000-conn-") for f in files)
    codecs = {
        pq.ParquetFile(f).metadata.row_group(0).column(i).compression
        for f in files
        for i in range(pq.ParquetFile(f).metadata.num_columns)
    }
    assert codecs == {"ZSTD"}
    assert spark.table(f"{db}.conn").count() == 3


@pytest.mark.parametrize("way", WAYS)
def test_messages_a_relay_kept_undecodable_go_to_the_quarantine(
    spark,  # noqa: F811
    db,
    tmp_path,
    way,
) -> None:
    """A relay keeps what it cannot decode (another serializer's batch, a sender's cut
    frames); ``write_zeek_tables`` puts each such message in the quarantine, with the
    relay's reason and its place in the spool, and every log's table is as without them."""
    import json

    from broker_spark.columnar.log_converter import UNDECODABLE_PATH
    from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC, pack_undecodable

    good = zmq_log_messages()[:12]
    renamed = [b"log-write", b"newer-zeek", b"zeek-bin-serializer-v2", good[0][1]]
    kept = [
        (UNDECODABLE_TOPIC, pack_undecodable("zeromq-logs", "serializer 'v2'", renamed), "z2"),
        (UNDECODABLE_TOPIC, pack_undecodable("zeromq-logs", "3 frames", renamed[:3]), "z3"),
    ]
    mixed = [*good[:3], kept[0], *good[3:9], kept[1], *good[9:]]
    per_log = batch_of(spark, good, shape="records").groupBy("_path").count().collect()
    way, shape = _way(way)
    tables = writer(db, tmp_path, **way)
    tables(batch_of(spark, mixed, shape=shape), 0)
    tables(batch_of(spark, mixed, shape=shape), 0)  # run again: nothing added
    quarantine = spark.table(f"{db}.zeek_quarantine").orderBy("offset").collect()
    assert [(r.log, r.offset) for r in quarantine] == [
        (UNDECODABLE_PATH, 3),
        (UNDECODABLE_PATH, 10),
    ]
    assert [r.reason for r in quarantine] == [
        "kept undecodable by the relay: serializer 'v2'",
        "kept undecodable by the relay: 3 frames",
    ]
    assert json.loads(quarantine[1].line)["sender"] == "z3"
    assert {r._path: r["count"] for r in per_log} == {
        r._path: spark.table(f"{db}.{r._path}").count() for r in per_log
    }
