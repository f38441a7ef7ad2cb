"""A null Python streaming source for ``bench/spark_stream.py``: the most a pure-Python source
delivers through Spark's Python data source API on this machine.

Its offsets only count; every partition yields one pre-built Arrow batch of the ``broker``
reader's default schema (``topic``, ``data``, ``sender``, ``received_at``, ``offset``), made
once per worker, so all that is measured is Spark's path from a Python reader's batches to
the sink. Imported by the workers by name (``bench/`` is on their ``PYTHONPATH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from spark_stream import TOPIC, _event

from broker_spark.columnar.binary_json import binary_to_json
from broker_spark.columnar.record_batches import DEFAULT_SCHEMA
from broker_spark.data.binary import encode
from broker_spark.spark.read.offered_columns import DEFAULT_DDL

_BATCHES: dict[tuple[str, int], pa.RecordBatch] = {}

#: A sender as long as an endpoint's id: what the read's rows hold.
BENCH_SENDER = "b893effd-37bd-49ba-a3db-85dc2acf1c20"
#: A tiny event's Zeek JSON (what ``rows=small`` repeats).
SMALL_TEXT = '{"@data-type":"vector","data":[{"@data-type":"count","data":1}]}'


def bench_event_json(i: int) -> str:
    """The Zeek JSON of the bench publisher's event number ``i``: the ``data`` its read gives."""
    return binary_to_json(encode(_event(i)))


def _batch(shape: str, rows: int) -> pa.RecordBatch:
    """``rows`` rows of ``shape``, made once per process: ``small``, a tiny event, or
    ``bench``, the rows the bench's read gives (its publisher's events, numbered as a
    run's millionth onwards, so their counts have as many digits)."""
    found = _BATCHES.get((shape, rows))
    if found is None:
        if shape == "bench":
            topic, sender = TOPIC + "conn", BENCH_SENDER  # the publisher's topic
            texts = [bench_event_json(1_000_000 + i) for i in range(rows)]
        else:
            topic, sender, texts = "zeek/events/ping", "zeek", [SMALL_TEXT] * rows
        found = _BATCHES[shape, rows] = pa.RecordBatch.from_arrays(
            [
                pa.array([topic] * rows),
                pa.array(texts),
                pa.array([sender] * rows),
                pa.array([1_700_000_000_000_000] * rows, pa.timestamp("us", tz="UTC")),
                pa.array(range(rows), pa.int64()),
            ],
            schema=DEFAULT_SCHEMA,
        )
    return found


class RowsPartition(InputPartition):
    """A partition of ``rows`` rows (the null sources of the benches)."""

    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


class NullReader(DataSourceStreamReader):
    def __init__(self, rows_per_batch: int, shape: str) -> None:
        self.rows_per_batch = rows_per_batch
        self.shape = shape
        self.end = 0

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self) -> dict:
        self.end += self.rows_per_batch
        return {"offset": self.end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        n = end["offset"] - start["offset"]
        return [RowsPartition(n // 2), RowsPartition(n - n // 2)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        rows = partition.rows
        step = 10_000  # Spark's maxRecordsPerBatch: the batches Arrow hands on
        block = _batch(self.shape, step)
        for lo in range(0, rows, step):
            yield block if rows - lo >= step else block.slice(0, rows - lo)

    def commit(self, end: dict) -> None:
        pass


class NullSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-null"

    def schema(self) -> str:
        return DEFAULT_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        shape = self.options.get("rows", "small")
        if shape not in ("small", "bench"):
            raise ValueError(f"rows must be small or bench, not {shape!r}")
        return NullReader(int(self.options.get("rowsPerBatch", "1000000")), shape)
