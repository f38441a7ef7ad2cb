"""Deferred rows (``deferredRows``): a partition per row, read by the task that consumes it.

A real relay in this process holds a real Zeek's recorded logs; the data source is built
as Spark builds it (its options as Spark hands them, its driver side asked as Spark asks),
and partitions are read on pickled copies, as executors read them. The rows a deferred
stream's partitions read into must be the plain stream's, batch for batch.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType
from test_spark_relay import Relay
from zeek_recordings import recording

from broker_spark.reader.options import BrokerOptionError
from broker_spark.spark.read.deferred import (
    DEFERRED_COLUMN,
    DEFERRED_DDL,
    DeferredRows,
    read_deferred,
    rows_schema,
)
from broker_spark.spark.source import BrokerDataSource
from broker_spark.spark.tables.columns import table_input_schema

pytestmark = pytest.mark.timeout(90)

ROWS = table_input_schema(runs=True, messages=True)
PARTITIONS = StructType([StructField(DEFERRED_COLUMN, BinaryType(), True)])


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """A relay holding the recording of Zeek's http logs (conn, http, files...)."""
    r = Relay(tmp_path_factory.mktemp("deferred") / "relay")
    try:
        r.publish_encoded(recording("zeek-logs-http-methods").data)
        yield r
    finally:
        r.close()


def _source(relay: Relay, **extra: str) -> BrokerDataSource:
    options = {
        "relay": f"127.0.0.1:{relay.port}",
        "ssl.disable": "true",
        "format": "zeek-logs",
        "startingOffsets": "earliest",
        "maxRecordsPerPartition": "40",  # several partitions of the recording
        **extra,
    }
    return BrokerDataSource({key.lower(): value for key, value in options.items()})


def _batches(source: BrokerDataSource, schema: StructType) -> list[list[pa.RecordBatch]]:
    """Each partition's batches of the stream's first micro-batch, read on a pickled copy."""
    reader = source.streamReader(schema)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        remote = pickle.loads(pickle.dumps(reader))
        return [
            list(remote.read(pickle.loads(pickle.dumps(part))))
            for part in reader.partitions(start, end)
        ]
    finally:
        reader.stop()


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches).combine_chunks()


def test_a_deferred_stream_reads_into_the_plain_streams_rows(relay: Relay) -> None:
    """Each partition is one row; read where it is consumed, it gives the batches the
    plain stream's task gives for that partition: the same rows, in the same order."""
    deferred = _source(relay, deferredRows=ROWS.json())
    assert deferred.schema() == DEFERRED_DDL
    plain = _batches(_source(relay), ROWS)
    held = _batches(deferred, PARTITIONS)
    assert len(held) == len(plain) > 2
    records = 0
    for rows, partition in zip(plain, held, strict=True):
        assert [b.num_rows for b in partition] == [1]
        assert partition[0].schema.names == [DEFERRED_COLUMN]
        read = list(read_deferred(iter(partition)))
        assert _table(read).equals(_table(rows))
        records += sum(b.column("records").to_numpy().sum() for b in rows)
    assert records == sum(len(v) for v in recording("zeek-logs-http-methods").writes.values())


def test_one_batch_may_hold_several_partitions(relay: Relay) -> None:
    """A consumer's batch can hold several deferred rows (and a null one, which holds
    nothing): each is read, in the batch's order."""
    plain = _batches(_source(relay), ROWS)
    held = _batches(_source(relay, deferredRows=ROWS.json()), PARTITIONS)
    column = [part[0].column(0)[0].as_py() for part in held[:3]]
    together = pa.RecordBatch.from_arrays(
        [pa.array([column[0], None, column[1], column[2]], pa.binary())], names=[DEFERRED_COLUMN]
    )
    got = _table(list(read_deferred(iter([together]))))
    assert got.equals(_table([b for rows in plain[:3] for b in rows]))


def test_the_driver_side_is_the_readers_own() -> None:
    """What the positions ask of the rows (whether to follow Zeek's log schemas, the
    spool's index interval) and each partition's converter come from the real rows."""

    class Rows:  # a stand-in for the converter half, to see what is asked of it
        logs = True
        index_interval = 8

        def converter(self, partition: Any = None) -> Any:
            return ("converter", partition)

    rows = DeferredRows(Rows())  # type: ignore[arg-type]
    assert (rows.logs, rows.index_interval) == (True, 8)
    assert rows.converter("p") == ("converter", "p")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("partition BINARY", "not a schema as Spark's StructType.json() gives"),
        ('{"type": "struct"}', "not a schema"),
        ('{"type": "struct", "fields": []}', "at least one column"),
    ],
)
def test_a_bad_rows_schema_names_the_option(text: str, says: str) -> None:
    with pytest.raises(BrokerOptionError, match=f"option deferredRows=.*{re.escape(says)}"):
        rows_schema(text)


def test_a_schema_given_to_a_deferred_stream_is_refused() -> None:
    """The stream's rows are partitions: a ``.schema()`` of other columns fails at start."""
    source = BrokerDataSource(
        {
            "relay": "127.0.0.1:1",
            "ssl.disable": "true",
            "format": "zeek-logs",
            "deferredrows": ROWS.json(),
        }
    )
    wrong = StructType([StructField("topic", StringType(), True)])
    with pytest.raises(BrokerOptionError, match="option deferredRows: the stream's rows are"):
        source.streamReader(wrong)
