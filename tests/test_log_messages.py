"""Rows of messages' bytes (``_path``/``log``/``records``/``message``), no Spark session.

What ``write_zeek_tables`` reads: a row per log of each message, holding the
message's Broker bytes. The oracle is the reader's own one-row-a-record output
for the same messages: the rows rendered back into JSON lines
(:func:`line_runs_partition`, Spark's paths) must give it record for record
(line, position, metadata, columns in force), however the messages are
interleaved and cut into partitions; decoded into typed columns (the stage's
tasks) they must give what Arrow's JSON reader gives for those lines.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from test_log_line_runs import (
    SOURCES,
    Message,
    _interleaved,
    _records_of,
    _rows,
    two_logs_and_a_broken_record,
)

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.log_json import parse_lines
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.data.binary import encode
from broker_spark.data.types import Count
from broker_spark.reader.options import BrokerOptionError
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.tables.message_decode import TypedMessages, line_runs_partition
from broker_spark.spark.zeek_schema import log_columns, zeek_log_schema
from broker_spark.spark.zeek_tables import table_input_schema
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.zeek import Batch, LogCreate, LogField, LogSchema, LogWrite

pytestmark = pytest.mark.timeout(120)

NOW = 1_700_000_000_000_000_000


def _message_rows(messages: list[Message], first: int = 0, schemas=()) -> pa.RecordBatch:
    return _rows(messages, True, first, schemas, as_bytes=True)


def _rendered(rows: pa.RecordBatch, known: dict[str, str] | None = None) -> list[dict]:
    """Message rows rendered into runs of lines, split a record a row, in position order."""
    (runs,) = list(line_runs_partition(known or {}, "9.1")(iter([rows])))
    assert "message" not in runs.schema.names
    return _by_position(_records_of(runs))


def _by_position(records: list[dict]) -> list[dict]:
    """Records in position order; each id's columns compared apart (each form names them
    on the first row of the id, and the forms order their rows differently)."""
    out = sorted(records, key=lambda r: (r["offset"], r["_path"], r["record"]))
    return [{k: v for k, v in r.items() if k != "log_schema"} for r in out]


def _texts(rows: list[dict]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in rows:
        if r["log_schema"] is not None:
            assert out.setdefault(r["log_schema_id"], r["log_schema"]) == r["log_schema"]
    return out


def _same_records(messages: list[Message], first: int = 0, schemas=()) -> pa.RecordBatch:
    rows = _message_rows(messages, first, schemas)
    expected = _rows(messages, False, first, schemas).to_pylist()
    assert _rendered(rows) == _by_position(expected)
    got = rows.to_pylist()
    assert _texts(got) == _texts(expected)  # every id named, with the same columns
    return rows


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_recording_as_messages_is_its_records_row_for_row(name) -> None:
    messages = SOURCES[name]
    rows = _same_records(messages)
    got = rows.to_pylist()
    keys = [(r["offset"], r["_path"]) for r in got]
    assert len(keys) == len(set(keys))  # a row per message and log
    assert all(r["log"] is None and r["record"] == 0 for r in got)
    assert all(r["message"] == messages[r["offset"]][1] for r in got)  # the bytes as sent
    records = sum(r["records"] for r in got)
    assert 0 < len(got) < records == _rows(messages, False).num_rows


def test_rows_of_bytes_and_rows_of_lines_together_render_as_their_records() -> None:
    """A batch holding both (as a union of partitions read either way can): the lines pass,
    the bytes are rendered, each record once, in place."""
    messages = SOURCES["zmq"] + SOURCES["zeek-logs-dns-edns-ecs"]
    as_bytes = _message_rows(messages)
    lines = _rows(messages, True)
    odd = pc.equal(pc.bit_wise_and(lines.column("offset"), 1), 1)
    lines = lines.filter(odd)
    lines = pa.RecordBatch.from_arrays(
        [*lines.columns, pa.nulls(lines.num_rows, pa.binary())], schema=as_bytes.schema
    )
    even = as_bytes.filter(pc.equal(pc.bit_wise_and(as_bytes.column("offset"), 1), 0))
    mixed = pa.Table.from_batches([lines, even]).combine_chunks().to_batches()[0]
    assert 0 < mixed.column("message").null_count < mixed.num_rows
    assert _rendered(mixed) == _by_position(_rows(messages, False).to_pylist())


@settings(max_examples=25, deadline=None)
@given(_interleaved())
def test_any_interleaving_and_any_cut_gives_the_same_records(case) -> None:
    """Each partition converted as an executor converts it (the schemas in force at its
    first offset) and rendered back with only what it holds: its records."""
    messages, cuts = case
    history = LogSchemaHistory()
    history.observe(0, messages)
    for lo, hi in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        _same_records(messages[lo:hi], lo, history.snapshot(lo))


def test_a_message_of_two_logs_is_a_row_each_and_a_broken_record_is_found_by_its_decoder():
    """The reader scans, it does not decode: a Batch of records of two logs is a row per
    log, the broken record among them counted in its log's row. Rendered back, it is a null
    line of its own (as the reader gives it); decoded typed, the log's rows are refused
    whole, naming why (the tables writer then leaves them to Spark's parse)."""
    messages, a = two_logs_and_a_broken_record()
    rows = _same_records(messages)
    assert [(r["_path"], r["records"]) for r in rows.to_pylist()] == [("a", 5), ("b", 1)]
    rendered = _rendered(rows)
    assert [r["log"] for r in rendered if r["_path"] == "a"] == [
        '{"n":0}', '{"n":1}', '{"n":2}', None, '{"n":3}'
    ]  # fmt: skip
    table = pa.Table.from_batches([rows]).filter(pa.array([True, False]))
    with pytest.raises(ValueError, match="1 records do not decode"):
        TypedMessages("a", a, "nested", "9.1").decode(table, 5)


def test_failfast_decodes_in_the_reader_and_fails_on_a_broken_record() -> None:
    """``mode=FAILFAST`` promises a failed query on a record that does not decode: the
    reader cannot know that without decoding, so it reads such a stream as lines."""
    messages, _a = two_logs_and_a_broken_record()
    schema = table_input_schema(messages=True)
    conv = LogConverter(arrow_schema_of(schema), log_columns(schema, ()), mode="FAILFAST")
    with pytest.raises(RecordConversionError, match="offset 2"):
        conv.convert(*zip(*messages[:2], strict=True), [NOW] * 2, [0, 1])
        conv.convert([messages[2][0]], [messages[2][1]], ["zeek"], [NOW], [2])


def test_one_log_under_two_schemas_in_one_message_is_read_as_lines() -> None:
    """Two of Zeek's streams writing one path, in one Batch: a row could not say which of
    its records are whose, so the partition is runs of JSON lines (``message`` null), which
    are its records all the same and pass the renderer untouched."""
    a = LogSchema("A::LOG", "x", (LogField.of("n", "count"),))
    b = LogSchema("B::LOG", "x", (LogField.of("s", "string"),))
    batch = Batch(LogWrite.of(a, [Count(1)]), LogWrite.of(b, ["two"]), LogWrite.of(a, [Count(3)]))
    messages = [
        ("zeek/logs/A::LOG", encode(LogCreate.of(a)), "zeek"),
        ("zeek/logs/B::LOG", encode(LogCreate.of(b)), "zeek"),
        ("zeek/logs/A::LOG", encode(batch), "zeek"),
    ]
    rows = _same_records(messages)
    assert rows.column("message").null_count == rows.num_rows
    assert [r["log"] for r in _rendered(rows)] == ['{"n":1}', '{"s":"two"}', '{"n":3}']


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_decoded_typed_a_log_is_what_its_json_lines_parse_to(name) -> None:
    """The stage's typed decode of each log's rows gives the columns, types and values
    Arrow's JSON reader gives for the same records' lines (times rounded the same, counts,
    ports, sets, nested names)."""
    messages = SOURCES[name]
    rows = pa.Table.from_batches([_same_records(messages)])
    records = _rows(messages, False).to_pylist()
    texts = _texts(records)
    for sid, text in texts.items():
        schema = LogSchema.from_json(json.loads(text), source="the test")
        mine = rows.filter(pc.equal(rows.column("log_schema_id"), sid))
        lines = [r["log"] for r in records if r["log_schema_id"] == sid]
        count = sum(mine.column("records").to_pylist())
        assert count == len(lines) > 0
        names, typed = TypedMessages(schema.path, schema, "nested", "9.1").decode(mine, count)
        want_names, want = parse_lines(pa.array(lines, pa.string()), schema, "nested")
        assert names == want_names
        assert pa.Table.from_arrays(typed, names).equals(pa.Table.from_arrays(want, names)), sid


def test_a_message_column_asks_for_bytes_only_beside_a_records_column() -> None:
    """Beside ``log`` and ``records`` a ``message`` column asks for a message's bytes;
    without ``records`` it is refused, naming it; among typed columns it is a column of
    the log's own (Zeek's reporter log has a ``message``)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    assert log_columns(table_input_schema(messages=True), ()).roles["message"] == "message"
    with pytest.raises(BrokerOptionError, match="message column .* needs a records column"):
        log_columns(
            StructType([*table_input_schema().fields, StructField("message", BinaryType())])
        )
    reporter = zeek_log_schema("reporter")
    columns = log_columns(reporter, ())
    assert "message" in columns.leaves and "message" not in columns.roles
