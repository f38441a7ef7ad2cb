"""Deferred rows: a stream whose partitions are read by the task that consumes them.

A Python data source's rows cross Spark's JVM on their way to the next Python
step: the source's worker sends them as Arrow, the JVM turns them into its own
rows, and a ``mapInArrow`` after it turns them back into Arrow for a second
worker. For :func:`~broker_spark.spark.tables.log_tables.write_zeek_tables` that
is a message's bytes carried twice through the JVM and once through an extra
Python worker per record, only for the stage job to decode them into typed
columns and write them (measured, ``bench/zeek_logs.py --only tables``: the
JVM's 2.55 µs a record against 0.9 for a plain read of the same rows).

With the reader option ``deferredRows`` (the rows' schema, as Spark's JSON), the
source gives one row per partition instead: ``partition``, the pickled pair of
the reader's converter half (:mod:`.rows`) and the partition, exactly what Spark
itself ships to the task that would read it. The consuming task then reads the
partition in its own process (:func:`read_deferred`: the same fetch, the same
converter, the same rows), and only its own output crosses the JVM. Everything
else is unchanged: offsets, planning, retention, relays and a task that runs
again all work as before, since a partition is read as often as the task that
holds it runs. :func:`deferred_rows` gives the rows as a DataFrame, for the
consumers that need them in Spark after all.

The rows hold the partition's connection settings (a relay's address and TLS
files), as Spark's task does: they are meant for :func:`read_deferred`, not
for display.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle

from broker_spark.reader.options import BrokerOptionError
from broker_spark.spark.read.rows import Rows

__all__ = [
    "DEFERRED_COLUMN",
    "DEFERRED_DDL",
    "DeferredRows",
    "deferred_rows",
    "read_deferred",
    "rows_schema",
]

#: The one column of a deferred stream: a partition, pickled with the rows that read it.
DEFERRED_COLUMN = "partition"
DEFERRED_DDL = f"{DEFERRED_COLUMN} BINARY"
_ARROW = pa.schema([pa.field(DEFERRED_COLUMN, pa.binary())])


class DeferredRows:
    """The converter half of a deferred reader: ``rows`` (the real one) serve the driver
    side as they are; a partition becomes one row that holds it."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.logs = rows.logs
        self.index_interval = rows.index_interval

    def converter(self, partition: Any = None) -> Any:
        return self.rows.converter(partition)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        # pickled as Spark pickles a task's reader (cloudpickle: any rows Spark could ship)
        held = cloudpickle.dumps((self.rows, partition), protocol=pickle.HIGHEST_PROTOCOL)
        yield pa.RecordBatch.from_arrays([pa.array([held], pa.binary())], schema=_ARROW)


def read_deferred(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the partitions ``batches`` (of a deferred stream) hold, read here: the
    batches the source's own task would have yielded, in order."""
    for batch in batches:
        for held in batch.column(DEFERRED_COLUMN).to_pylist():
            if held is None:
                continue
            rows, partition = pickle.loads(held)
            yield from rows.read(partition)


def deferred_rows(df: Any, schema: Any) -> Any:
    """The DataFrame of the rows a deferred stream's DataFrame ``df`` stands for (their
    Spark ``schema``: the ``deferredRows`` option's), read by its tasks."""
    return df.select(DEFERRED_COLUMN).mapInArrow(read_deferred, schema)


def rows_schema(text: str) -> Any:
    """The Spark schema the ``deferredRows`` option gives (Spark's JSON of a struct)."""
    from pyspark.sql.types import StructType

    try:
        found = StructType.fromJson(json.loads(text))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BrokerOptionError(
            "deferredRows", text[:80], f"not a schema as Spark's StructType.json() gives: {exc}"
        ) from None
    if not found.fields:
        raise BrokerOptionError("deferredRows", text[:80], "the rows need at least one column")
    return found
