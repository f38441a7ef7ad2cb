"""What one Spark task of a stream batch reads: a range of spool offsets, and how to get them.

``read`` runs on an executor, in another process and maybe on another
machine, with a pickled copy of the reader and the partition; only the
partition carries per-batch data (REFERENCE.md section 3). Two ways:

* ``inline`` (the default): the driver reads the range from its spool while
  planning and the partition carries the packed records (about 100 bytes
  per small Zeek event). Nothing but Spark's own task channel is needed, so
  it works when executors cannot see the driver's disk.
* ``spool``: the partition names ``[start, end)`` of a ``spoolPath`` that
  every executor can read (a shared file system), and the task reads it
  itself through a read-only view, so planning ships only offsets.

Measured with ``bench/spark_stream.py`` on 2 cores (publisher, driver and
executors on the same machine): 84k to 105k rows/s inline against 94k to
105k rows/s from the spool, the same within the run-to-run noise, because
the cost is converting payloads to rows on the executors, not moving them.
So the default is the mode that works on every cluster; ``spool`` saves
the driver's memory and the JVM's copying for very large batches when a
shared file system is there. (Either way, ``maxRecordsPerTrigger`` bounds
what one batch holds in memory.)

Either way the bytes are the spool's record stream for exactly that range,
so a range always reads the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from broker_spark.spark.segment import DataLossError
from broker_spark.spark.spool import Spool

__all__ = ["BatchConverter", "SpoolPartition", "read_partition"]

log = logging.getLogger(__name__)


class BatchConverter(Protocol):
    """Turns a packed record stream into one Arrow batch (``RecordConverter`` and friends)."""

    misfits: int
    undecodable: int

    def convert_packed(self, packed: bytes) -> pa.RecordBatch: ...


class SpoolPartition(InputPartition):
    """Offsets ``[start, end)``; ``packed`` holds their records when shipped inline.

    ``spool_path`` is set instead when executors read the shared spool
    themselves; ``fail_on_data_loss`` says what a task does when retention
    dropped part of the range between planning and reading.
    """

    def __init__(
        self,
        start: int,
        end: int,
        packed: bytes | None = None,
        spool_path: str | None = None,
        fail_on_data_loss: bool = True,
    ) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.packed = packed
        self.spool_path = spool_path
        self.fail_on_data_loss = fail_on_data_loss

    def __repr__(self) -> str:
        where = "inline" if self.packed is not None else f"spool {self.spool_path}"
        return f"SpoolPartition({self.start}, {self.end}, {where})"


def _read_shared(partition: SpoolPartition) -> bytes:
    """The range from the shared spool (read-only view); what is still held if data was lost."""
    assert partition.spool_path is not None
    with Spool(partition.spool_path, readonly=True) as spool:
        try:
            return spool.read_packed(partition.start, partition.end)
        except DataLossError as exc:
            if partition.fail_on_data_loss:
                raise DataLossError(exc.start, exc.end, exc.earliest).with_traceback(None) from None
            lo = min(max(exc.earliest, partition.start), partition.end)
            log.warning("%s; failOnDataLoss=false: reading from offset %d", exc, lo)
            return spool.read_packed(lo, partition.end)


def read_partition(partition: Any, converter: BatchConverter) -> Iterator[pa.RecordBatch]:
    """The Arrow batch of one partition (nothing for an empty one)."""
    if not isinstance(partition, SpoolPartition):
        raise TypeError(f"not a partition of the broker source: {partition!r}")
    packed = partition.packed if partition.packed is not None else _read_shared(partition)
    if not packed:
        return
    batch = converter.convert_packed(packed)
    if converter.misfits or converter.undecodable:
        log.warning(
            "offsets %d-%d: %d values did not fit the schema, %d payloads did not decode (nulls)",
            partition.start,
            partition.end - 1,
            converter.misfits,
            converter.undecodable,
        )
    yield batch
