"""A null Python streaming source of typed Zeek log rows, for ``bench/zeek_logs.py --only
tables``: the most a Python source delivers of those rows through Spark's Python data source
API on this machine (the limit the read of Zeek's logs is measured against, issue 51).

Every partition yields slices of one pre-built Arrow batch of a log's typed rows (what the
reader's converter makes of the recordings' records: the columns of ``format=zeek-logs``
with ``logs=<path>``), read once per worker from the Arrow IPC file the bench wrote
(option ``file``), so all that is measured is Spark's path from a Python reader's typed
batches to the sink. One batch of ``rows`` rows, in ``partitions`` partitions. Imported by
the workers by name (``bench/`` is on their ``PYTHONPATH``).

With option ``ipc=true`` every 10,000 rows a task yields are read afresh from the file's
bytes, an Arrow IPC stream, as a task handed typed batches by a relay would read them (the
design of docs/architecture.md, "Where Zeek's log records are decoded"): Spark's path plus
the bytes' read and parse, with no decode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from _null_source import RowsPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

_BLOCKS: dict[str, pa.RecordBatch] = {}


def _block(file: str) -> pa.RecordBatch:
    """The pre-built batch of ``file``, read once per process."""
    found = _BLOCKS.get(file)
    if found is None:
        with pa.memory_map(file) as source:
            table = pa.ipc.open_file(source).read_all()
        found = _BLOCKS[file] = table.combine_chunks().to_batches()[0]
    return found


def _from_ipc(file: str) -> pa.RecordBatch:
    """The batch of ``file`` read and parsed from its bytes again, as a fetched stream."""
    with open(file, "rb") as f:
        data = f.read()
    return pa.ipc.open_file(pa.py_buffer(data)).get_batch(0)


class TypedNullReader(DataSourceStreamReader):
    def __init__(self, file: str, rows: int, partitions: int, ipc: bool = False) -> None:
        self.file = file
        self.rows = rows
        self.parts = partitions
        self.ipc = ipc

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self) -> dict:
        return {"offset": self.rows}  # one batch of every row, as the relay read's

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        n = end["offset"] - start["offset"]
        return [RowsPartition(n // self.parts + (i < n % self.parts)) for i in range(self.parts)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        block = _block(self.file)
        step = min(10_000, block.num_rows)  # Spark's maxRecordsPerBatch
        for lo in range(0, partition.rows, step):
            if self.ipc:
                block = _from_ipc(self.file)
            yield block.slice(0, min(step, partition.rows - lo))

    def commit(self, end: dict) -> None:
        pass


class TypedNullSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-typed-null"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TypedNullReader(
            self.options["file"],
            int(self.options["rows"]),
            int(self.options.get("partitions", "2")),
            self.options.get("ipc", "false") == "true",
        )
