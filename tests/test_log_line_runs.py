"""Runs of Zeek JSON lines (``_path``/``log`` rows with a ``records`` column), no Spark.

A row per run of a message's records of one log is what ``write_zeek_tables``
reads: the oracle is the reader's own one-row-a-record output for the same
messages, which the runs, split back into records, must give row for row (line,
position, metadata, columns in force), however the messages are interleaved
and cut into partitions.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zeek_recordings import LOG_RECORDINGS, ZMQ_LOGS, recording, zmq_messages

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.log_line_runs import join_runs, run_positions, run_starts
from broker_spark.data.binary import encode
from broker_spark.data.types import Count
from broker_spark.reader.options import BrokerOptionError
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import log_columns, zeek_log_schema
from broker_spark.spark.zeek_tables import table_input_schema
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.zeek import Batch, LogCreate, LogField, LogSchema, LogWrite
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeromq.log_receiver import LOG_TOPIC_PREFIX

pytestmark = pytest.mark.timeout(120)

NOW = 1_700_000_000_000_000_000
Message = tuple[str, bytes, str]  # topic, payload, sender


def _sources() -> dict[str, list[Message]]:
    out = {name: [(t, p, name) for t, p in recording(name).data] for name in LOG_RECORDINGS}
    out["zmq"] = [
        (LOG_TOPIC_PREFIX + read_header(f[3]).stream, f[3], "zmq-node")
        for f in zmq_messages(ZMQ_LOGS)
    ]
    return out


SOURCES = _sources()


def _rows(
    messages: list[Message], runs: bool, first: int = 0, schemas=(), as_bytes: bool = False
) -> pa.RecordBatch:
    """The reader's rows of ``messages`` (at offsets from ``first``): a row a record, runs
    of JSON lines (``runs``), or messages' bytes (``as_bytes``)."""
    schema = table_input_schema(runs=runs, messages=as_bytes)
    conv = LogConverter(arrow_schema_of(schema), log_columns(schema, ()), schemas=schemas)
    return conv.convert(
        [t for t, _p, _s in messages],
        [p for _t, p, _s in messages],
        [s for _t, _p, s in messages],
        [NOW + i for i in range(len(messages))],
        list(range(first, first + len(messages))),
    )


def _records_of(runs: pa.RecordBatch) -> list[dict]:
    """Runs split back into a row a record (the columns' JSON on a run's first record)."""
    out = []
    for row in runs.to_pylist():
        count = row.pop("records")
        lines = row["log"].split("\n") if row["log"] is not None else [None]
        assert len(lines) == count
        for i, line in enumerate(lines):
            out.append(
                {
                    **row,
                    "log": line,
                    "record": row["record"] + i,
                    "log_schema": row["log_schema"] if i == 0 else None,
                }
            )
    return out


def _same_records(messages: list[Message], first: int = 0, schemas=()) -> pa.RecordBatch:
    runs = _rows(messages, True, first, schemas)
    assert _records_of(runs) == _rows(messages, False, first, schemas).to_pylist()
    return runs


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_recording_as_runs_is_its_records_row_for_row(name) -> None:
    messages = SOURCES[name]
    runs = _same_records(messages)
    records = sum(runs.column("records").to_pylist())
    assert 0 < runs.num_rows < records  # Batches of several records: fewer rows
    # a run lies in one message and one log
    keys = list(zip(*(runs.column(c).to_pylist() for c in ("offset", "_path")), strict=True))
    assert len(keys) == len(set(keys))


@st.composite
def _interleaved(draw: st.DrawFn) -> tuple[list[Message], list[int]]:
    """The three senders' messages interleaved in any order keeping each sender's own, and
    cut into partitions anywhere."""
    queues = [list(messages) for messages in SOURCES.values()]
    order = draw(st.permutations([i for i, q in enumerate(queues) for _ in q]))
    out = [queues[i].pop(0) for i in order]
    cuts = draw(st.lists(st.integers(1, len(out) - 1), max_size=4, unique=True))
    return out, sorted(cuts)


@settings(max_examples=25, deadline=None)
@given(_interleaved())
def test_any_interleaving_and_any_cut_gives_the_same_records(case) -> None:
    """Each partition converted as an executor converts it (the schemas in force at its
    first offset): its runs are its records, whatever came before and wherever it starts."""
    messages, cuts = case
    history = LogSchemaHistory()
    history.observe(0, messages)
    for lo, hi in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        _same_records(messages[lo:hi], lo, history.snapshot(lo))


def two_logs_and_a_broken_record() -> tuple[list[Message], LogSchema]:
    """A Batch holding records of two logs (a, b, a, a) and a record of a that does not
    decode, after the two logs' LogCreates; and a's schema."""
    a = LogSchema("A::LOG", "a", (LogField.of("n", "count"),))
    b = LogSchema("B::LOG", "b", (LogField.of("n", "count"),))
    good = [LogWrite.of(a, [Count(i)]) for i in range(5)]
    broken = LogWrite("A::LOG", "Log::WRITER_ASCII", "a", good[0].serial_data()[:-3])
    batch = Batch(good[0], LogWrite.of(b, [Count(9)]), good[1], good[2], broken, good[3])
    messages = [
        ("zeek/logs/A::LOG", encode(LogCreate.of(a)), "zeek"),
        ("zeek/logs/B::LOG", encode(LogCreate.of(b)), "zeek"),
        ("zeek/logs/A::LOG", encode(batch), "zeek"),
    ]
    return messages, a


def test_a_message_of_several_logs_and_a_broken_record_make_runs_apart() -> None:
    """A Batch holding records of two logs (a, b, a, a) and a record that does not decode:
    each log's records that follow each other are a run; the broken one is a run alone
    (its line null), so the ones around it keep their own indexes."""
    messages, _a = two_logs_and_a_broken_record()
    runs = _same_records(messages)
    got = [(r["_path"], r["record"], r["records"], r["log"]) for r in runs.to_pylist()]
    assert got == [
        ("a", 0, 1, '{"n":0}'),
        ("b", 0, 1, '{"n":9}'),
        ("a", 1, 2, '{"n":1}\n{"n":2}'),
        ("a", 3, 1, None),
        ("a", 4, 1, '{"n":3}'),
    ]


def test_a_records_column_asks_for_runs_only_beside_a_log_column() -> None:
    """Beside ``log`` a ``records`` column asks for runs; among typed columns it is a
    column of the log's own (a site's log may have one), whatever its type."""
    from pyspark.sql.types import StringType, StructField, StructType

    assert log_columns(table_input_schema(runs=True), ()).roles["records"] == "records"
    assert "records" not in log_columns(table_input_schema(), ()).roles
    typed = StructType([*zeek_log_schema("dns").fields, StructField("records", StringType())])
    columns = log_columns(typed, ())
    assert "records" not in columns.roles and "records" in columns.leaves
    with pytest.raises(BrokerOptionError, match="records must be bigint"):
        log_columns(
            StructType([*table_input_schema().fields, StructField("records", StringType())])
        )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans()), min_size=0, max_size=40
    ).map(lambda rows: sorted(rows, key=lambda r: r[0]))
)
def test_runs_split_where_the_message_or_log_changes_or_a_line_is_missing(rows) -> None:
    messages = np.array([r[0] for r in rows], np.int64)
    groups = np.array([r[1] for r in rows], np.int64)
    valid = np.array([r[2] for r in rows], bool)
    lines = pa.array([f"{i}" if r[2] else None for i, r in enumerate(rows)], pa.string())
    starts = run_starts(messages, groups, valid)
    joined, counts = join_runs(lines, starts)
    assert int(counts.sum()) == len(rows) and len(joined) == len(starts)
    which, index = run_positions(counts)
    back = [
        (v.split("\n")[i] if v is not None else None)
        for v, i in zip(joined.take(pa.array(which, pa.int64())).to_pylist(), index, strict=True)
    ]
    assert back == lines.to_pylist()
    for start, count in zip(starts, counts, strict=True):  # one message, one group, all lines
        span = slice(int(start), int(start + count))
        assert len(set(messages[span])) == len(set(groups[span])) == 1
        assert valid[span].all() or count == 1
