"""The tables writer's fast path, without Spark: Zeek's JSON lines parsed by Arrow
(:mod:`broker_spark.columnar.log_json`) and a task's rows staged as Parquet files
(:mod:`broker_spark.spark.tables.stage`).

The oracle for the parse is the stream reader itself: the typed rows it gives for a
log (``format=zeek-logs`` with ``logs=PATH``) from the same Broker messages whose
JSON lines it gives in the generic form. ``parse_zeek_json`` promises the same
columns, so parsing the lines must give back exactly the typed rows.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zeek_recordings import LOG_RECORDINGS, ZMQ_LOGS, recording, zmq_messages

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.log_json import parse_lines
from broker_spark.data.binary import decode, encode
from broker_spark.data.types import Count, Enum, Port
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.tables import stage as zeek_tables_stage
from broker_spark.spark.tables.stage import NO_DAY, _Stager, arrow_codec, arrow_knows_time_zone
from broker_spark.spark.zeek_schema import (
    generic_log_schema,
    log_columns,
    zeek_log_schema,
)
from broker_spark.spark.zeek_tables import KEPT_METADATA, table_input_schema
from broker_spark.zeek import Batch, LogCreate, LogField, LogSchema, LogWrite
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeek.log_scan import is_log_create
from broker_spark.zeek.types import ZeekInterval, ZeekSet, ZeekTime
from broker_spark.zeromq.log_receiver import LOG_TOPIC_PREFIX

pytestmark = pytest.mark.timeout(120)

NOW = 1_700_000_000_000_000_000


def _convert(schema, messages: list[tuple[str, bytes]], known=None, paths=None) -> pa.RecordBatch:
    names = known.names if known is not None else ()
    conv = LogConverter(
        arrow_schema_of(schema), log_columns(schema, names), "PERMISSIVE", paths, known
    )
    n = len(messages)
    return conv.convert(
        [t for t, _ in messages], [p for _, p in messages], ["zeek"] * n, [NOW] * n, list(range(n))
    )


def _recorded() -> list[tuple[str, list[tuple[str, bytes]], LogSchema]]:
    """Every log of every recording: its messages and the columns its sender gave it."""
    out = []
    for name in LOG_RECORDINGS:
        data = recording(name).data
        schemas = {}
        for _topic, payload in data:
            if is_log_create(payload):
                schema = LogCreate(decode(payload)).schema()
                schemas[schema.path] = schema
        writes = recording(name).writes
        out += [(f"{name}:{p}", data, schema) for p, schema in schemas.items() if p in writes]
    zmq = [(LOG_TOPIC_PREFIX + read_header(f[3]).stream, f[3]) for f in zmq_messages(ZMQ_LOGS)]
    seen = {}
    for _topic, payload in zmq:
        header = read_header(payload)
        seen.setdefault(header.schema.path, header.schema)
    out += [(f"zmq:{path}", zmq, schema) for path, schema in seen.items()]
    return out


def _same_as_the_stream(schema: LogSchema, messages, columns: str) -> None:
    lines = _convert(generic_log_schema(), messages, paths=[schema.path]).column("log")
    typed = _convert(zeek_log_schema(schema, columns), messages, schema, [schema.path])
    names, arrays = parse_lines(lines, schema, columns)
    assert len(lines) == typed.num_rows > 0
    for name, array in zip(names, arrays, strict=True):
        expected = typed.column(name)
        assert array.type == expected.type, name
        assert array.to_pylist() == expected.to_pylist(), name


RECORDED = _recorded()


@pytest.mark.parametrize("name,messages,schema", RECORDED, ids=[r[0] for r in RECORDED])
def test_every_recorded_log_parses_to_the_streams_typed_rows(name, messages, schema) -> None:
    _same_as_the_stream(schema, messages, "nested")
    _same_as_the_stream(schema, messages, "flat")


EVERY_TYPE = LogSchema(
    "Site::LOG",
    "site",
    (
        LogField.of("ts", "time"),
        LogField.of("id.orig_h", "addr"),
        LogField.of("id.orig_p", "port"),
        LogField.of("id.inner.depth", "count", True),
        LogField.of("net", "subnet", True),
        LogField.of("proto", "enum", True),
        LogField.of("ok", "bool", True),
        LogField.of("delta", "int", True),
        LogField.of("ratio", "double", True),
        LogField.of("took", "interval", True),
        LogField.of("names", "set[string]", True),
        LogField.of("sizes", "vector of count", True),
        LogField.of("seen", "vector of time", True),
        LogField.of("text", "string", True),
    ),
)

_TIME = st.floats(-1e9, 4e9, allow_nan=False).map(ZeekTime)
_ROW = st.tuples(
    _TIME,
    st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
    st.integers(0, 65535).map(lambda p: Port(p, 1)),
    st.none() | st.integers(0, 2**63 - 1).map(Count),
    st.none() | st.just(ipaddress.ip_network("10.0.0.0/8")),
    st.none() | st.sampled_from(["tcp", "udp"]).map(Enum),
    st.none() | st.booleans(),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    st.none() | st.floats(-1e6, 1e6, allow_nan=False).map(ZeekInterval),
    st.none() | st.frozensets(st.text(max_size=8), max_size=3).map(ZeekSet),
    st.none() | st.lists(st.integers(0, 2**63 - 1).map(Count), max_size=3).map(tuple),
    st.none() | st.lists(_TIME, max_size=3).map(tuple),
    st.none() | st.text(max_size=20),
)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=30))
def test_every_type_parses_to_the_streams_typed_rows(rows) -> None:
    """Times (before 1970 too, rounded as the stream rounds them), lists of times,
    counts to 2^63, ports, nested dotted names, text with any character."""
    writes = [LogWrite.of(EVERY_TYPE, list(r)) for r in rows]
    messages = [
        ("zeek/logs/Site::LOG", encode(LogCreate.of(EVERY_TYPE))),
        ("zeek/logs/Site::LOG", encode(Batch(*writes))),
    ]
    _same_as_the_stream(EVERY_TYPE, messages, "nested")


def test_lines_arrow_does_not_take_are_refused_whole() -> None:
    schema = LogSchema("S::LOG", "s", (LogField.of("n", "count"),))
    with pytest.raises(pa.ArrowInvalid):  # a count past 2^63: Spark reads it, not Arrow
        parse_lines(pa.array(['{"n":18446744073709551615}']), schema)
    with pytest.raises(pa.ArrowInvalid):
        parse_lines(pa.array(['{"n":"many"}']), schema)
    with pytest.raises(ValueError, match="null line"):
        parse_lines(pa.array(['{"n":1}', None]), schema)
    names, [n] = parse_lines(pa.array([], pa.string()), schema)
    assert names == ["n"] and len(n) == 0


def _stream_rows(
    messages, first: int = 0, runs: bool = False, as_bytes: bool = False
) -> pa.RecordBatch:
    schema = table_input_schema(runs=runs, messages=as_bytes)
    conv = LogConverter(arrow_schema_of(schema), log_columns(schema, ()))
    n = len(messages)
    return conv.convert(
        [t for t, _ in messages],
        [p for _, p in messages],
        ["zeek"] * n,
        [NOW] * n,
        list(range(first, first + n)),
    )


def _staged(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for file in sorted(folder.rglob("*.parquet")):
        relative = file.relative_to(folder)
        out.setdefault(str(relative.parent), []).extend(pq.read_table(file).to_pylist())
    return out


def test_a_task_stages_each_log_and_day_apart_and_again_the_same(tmp_path, monkeypatch) -> None:
    """Two logs interleaved, rows over two days and one without a time, flushed in small
    files: each group's files hold exactly its rows, in folders by log, schema id and
    day; a task that runs again writes the same files, not more."""
    monkeypatch.setattr(zeek_tables_stage, "FLUSH_ROWS", 3)  # several files per group
    a = LogSchema("A::LOG", "a", (LogField.of("ts", "time", True), LogField.of("x", "count")))
    b = LogSchema("B::LOG", "b", (LogField.of("x", "string"),))
    day = 86_400.0
    messages = [("zeek/logs/A::LOG", encode(LogCreate.of(a)))]
    messages.append(("zeek/logs/B::LOG", encode(LogCreate.of(b))))
    for i in range(4):
        ts = ZeekTime(19_000 * day + i * day / 2) if i < 3 else None  # 2022-01-08 and 09
        messages.append(("zeek/logs/A::LOG", encode(Batch(LogWrite.of(a, [ts, Count(i)])))))
        messages.append(("zeek/logs/B::LOG", encode(Batch(LogWrite.of(b, [f"b{i}"])))))
    rows = _stream_rows(messages)
    runs = []
    for _ in range(2):
        stager = _Stager(str(tmp_path), 7, KEPT_METADATA, "nested", "9.1", "UTC")
        for start in range(0, rows.num_rows, 3):  # the batches a task gets
            stager.take(rows.slice(start, 3))
        report = stager.finish().to_pylist()
        runs.append((sorted(p.name for p in tmp_path.rglob("*.parquet")), _staged(tmp_path)))
    assert runs[0] == runs[1]  # the same files, the same rows
    assert {r["path"]: (r["rows"], r["error"]) for r in report} == {"a": (4, None), "b": (4, None)}
    staged = runs[0][1]
    by_day = {k.split("/")[0] + "/" + k.split("/")[-1]: v for k, v in staged.items()}
    assert sorted(by_day) == [
        "a/day=2022-01-08",
        "a/day=2022-01-09",
        f"a/day={NO_DAY}",
        "b/day=2023-11-14",
    ]
    assert [r["x"] for r in by_day["a/day=2022-01-08"]] == [0, 1]
    assert [r["x"] for r in by_day[f"a/day={NO_DAY}"]] == [3]
    assert sorted(r["x"] for r in by_day["b/day=2023-11-14"]) == ["b0", "b1", "b2", "b3"]
    positions = [(r["offset"], r["record"]) for v in staged.values() for r in v]
    assert len(positions) == len(set(positions)) == 8
    assert all(r["topic"].startswith("zeek/logs/") for v in staged.values() for r in v)
    assert not [p for p in tmp_path.rglob(".*")]  # no file left half-written


@pytest.mark.parametrize("name", [*LOG_RECORDINGS, "zmq"])
def test_runs_of_records_stage_the_same_rows_as_a_row_a_record(tmp_path, name) -> None:
    """What ``write_zeek_tables`` reads (a row per log of a message, holding its bytes,
    decoded typed by the task), and runs of a message's records as JSON lines, handed to
    the task a few rows at a time, stage the very rows a stream of a row a record does:
    each record with its own position, its log's columns and its day."""
    if name == "zmq":
        messages = [
            (LOG_TOPIC_PREFIX + read_header(f[3]).stream, f[3]) for f in zmq_messages(ZMQ_LOGS)
        ]
    else:
        messages = recording(name).data
    staged = {}
    for shape, step in (("records", 50), ("runs", 3), ("messages", 3), ("mixed", 1)):
        folder = tmp_path / shape
        stager = _Stager(str(folder), 0, KEPT_METADATA, "nested", "9.1", "UTC")
        rows = _stream_rows(messages, runs=shape != "records", as_bytes=shape == "messages")
        if shape == "mixed":  # even messages as bytes, odd ones as lines (message null)
            rows = _mixed(
                _stream_rows(messages, runs=True, as_bytes=True),
                _stream_rows(messages, runs=True),
            )
        for start in range(0, rows.num_rows, step):
            stager.take(rows.slice(start, step))
        report = stager.finish().to_pylist()
        assert all(r["error"] is None for r in report), report
        staged[shape] = (
            {(r["path"], r["schema_id"]): r["rows"] for r in report},
            {
                k: sorted(v, key=lambda r: (r["offset"], r["record"]))
                for k, v in _staged(folder).items()
            },
        )
    for shape in ("runs", "messages", "mixed"):
        assert staged[shape] == staged["records"], shape
    assert sum(staged["records"][0].values()) == sum(len(v) for v in staged["records"][1].values())
    assert sum(staged["records"][0].values()) > 100


def test_the_sessions_codec_as_arrow_names_it() -> None:
    assert arrow_codec("parquet", None) == arrow_codec("parquet", "SNAPPY") == "snappy"
    assert arrow_codec("parquet", "uncompressed") == "none"
    assert arrow_codec("parquet", "lz4_raw") == "lz4"
    assert arrow_codec("parquet", "zstd") == "zstd" and arrow_codec("parquet", "lzo") is None
    assert arrow_codec("orc", "snappy") is None and arrow_codec("delta", "snappy") is None


def _mixed(as_bytes: pa.RecordBatch, as_lines: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of even offsets as bytes, of odd ones as lines, in offset order."""
    even = pc.equal(pc.bit_wise_and(as_bytes.column("offset"), 1), 0)
    odd = pc.equal(pc.bit_wise_and(as_lines.column("offset"), 1), 1)
    lines = as_lines.filter(odd)
    lines = pa.RecordBatch.from_arrays(
        [*lines.columns, pa.nulls(lines.num_rows, pa.binary())], schema=as_bytes.schema
    )
    table = pa.Table.from_batches([as_bytes.filter(even), lines])
    table = table.take(pc.sort_indices(table, [("offset", "ascending")]))
    (batch,) = table.combine_chunks().to_batches()
    assert 0 < lines.num_rows < batch.num_rows and batch.column("message").null_count
    return batch


def test_a_group_without_its_columns_is_left_to_the_driver(tmp_path) -> None:
    """Rows of a schema id whose columns this partition never saw (a repartitioned batch)
    are not guessed: the report says so, and the driver writes them through Spark."""
    a = LogSchema("A::LOG", "a", (LogField.of("x", "count"),))
    messages = [
        ("zeek/logs/A::LOG", encode(LogCreate.of(a))),
        ("zeek/logs/A::LOG", encode(Batch(*[LogWrite.of(a, [Count(i)]) for i in range(3)]))),
    ]
    rows = _stream_rows(messages)
    assert rows.column("log_schema").null_count == 2  # the columns ride on the first row
    stager = _Stager(str(tmp_path), 0, KEPT_METADATA, "nested", "9.1", "UTC")
    stager.take(rows.slice(1))
    [report] = stager.finish().to_pylist()
    assert report["rows"] == 2 and "not known in this partition" in report["error"]
    assert not list(tmp_path.rglob("*.parquet"))
    known = {report["schema_id"]: json.dumps(a.to_json())}
    stager = _Stager(str(tmp_path), 0, KEPT_METADATA, "nested", "9.1", "UTC")
    stager.texts.update(known)  # what the driver learned from an earlier batch
    stager.take(rows.slice(1))
    [report] = stager.finish().to_pylist()
    assert report["error"] is None and report["files"] == 1


def test_a_ts_that_is_not_a_time_is_left_to_the_driver(tmp_path) -> None:
    """A site's log whose ``ts`` is text: its day is Spark's ``to_date`` of that text, so the
    group goes to Spark's writer instead of being given another day here."""
    odd = LogSchema("Odd::LOG", "odd", (LogField.of("ts", "string"),))
    messages = [
        ("zeek/logs/Odd::LOG", encode(LogCreate.of(odd))),
        ("zeek/logs/Odd::LOG", encode(Batch(LogWrite.of(odd, ["2024-05-01"])))),
    ]
    stager = _Stager(str(tmp_path), 0, KEPT_METADATA, "nested", "9.1", "UTC")
    stager.take(_stream_rows(messages))
    [report] = stager.finish().to_pylist()
    assert report["rows"] == 1 and "not a time" in report["error"]
    assert not list(tmp_path.rglob("*.parquet"))


def test_days_follow_the_sessions_time_zone() -> None:
    assert arrow_knows_time_zone("UTC") and arrow_knows_time_zone("America/New_York")
    assert arrow_knows_time_zone("+05:30")
    assert not arrow_knows_time_zone("Nowhere/Special") and not arrow_knows_time_zone(None)
    stager = _Stager("", 0, (), "nested", "9.1", "America/New_York")
    midnight_utc = pa.array([1_700_006_400_000_000], pa.timestamp("us", tz="UTC"))
    assert stager._days(midnight_utc).to_pylist()[0].isoformat() == "2023-11-14"


def test_typed_rows_make_the_same_columns_every_time() -> None:
    """One log's message rows made typed twice by one TypedRows (a task's second chunk, a
    group's second flush): the same columns both times, the metadata once each."""
    from broker_spark.spark.tables.typed_rows import TypedRows

    name = "zeek-logs-http-methods"
    data = recording(name).data
    schema = next(
        LogCreate(decode(p)).schema()
        for _t, p in data
        if is_log_create(p) and LogCreate(decode(p)).schema().path == "conn"
    )
    rows = pa.Table.from_batches(
        [_convert(table_input_schema(runs=True, messages=True), data, paths=["conn"])]
    )
    rows = rows.filter(pc.equal(rows.column("_path"), "conn"))
    typer = TypedRows("conn", schema, KEPT_METADATA, "nested", "9.1")
    first, second = typer.typed(rows), typer.typed(rows)
    assert first.num_rows == len(recording(name).writes["conn"]) > 0
    assert first.column_names == second.column_names
    assert first.column_names[-len(KEPT_METADATA) :] == list(KEPT_METADATA)
    assert first.equals(second)
