"""``spark.readStream.format("broker").option("format", "zeek-logs")``: Zeek's logs as a stream.

The reader is the message reader (:class:`~broker_spark.spark.stream_reader.BrokerStreamReader`:
spool, offsets, partitions) with three differences:

* its pump shows every message to a :class:`~broker_spark.spool.schema_history.LogSchemaHistory`,
  which keeps the LogCreates;
* each partition carries the log schemas in force at its first offset;
* executors turn records into rows with a :class:`~broker_spark.spark.zeek_logs.LogConverter`.

Offsets stay message offsets: a Batch of 400 records is one offset, so
``maxRecordsPerTrigger`` counts messages and every row of a Batch has that
Batch's ``offset``; partitions are planned by log records (estimated from
the Batches seen), so ``maxRecordsPerPartition`` bounds rows, as for events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from broker_spark.spark.options import ReaderOptions
from broker_spark.spark.parallelism import MIN_RECORDS_PER_SPLIT, split_batch
from broker_spark.spark.partitions import SpoolPartition, read_partition
from broker_spark.spark.relay_reader import RelayStreamReader
from broker_spark.spark.runtimes import Runtime, reader_runtime
from broker_spark.spark.stream_reader import BrokerStreamReader
from broker_spark.spark.zeek_logs import LogConverter
from broker_spark.spark.zeek_schema import LogColumns, generic_log_schema, zeek_log_schema
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.zeek.log_schema import LogSchema, standard_schema

__all__ = ["SPOOL_INDEX_INTERVAL", "ZeekLogStreamReader", "known_log_schema", "offered_schema"]

#: Messages between the spool's index entries. A Batch of 400 records is 150 KB or so, and
#: reading a range starts at the index entry before it, skipping records up to its start:
#: every 128 messages (the default, sized for events) that is megabytes read for nothing.
SPOOL_INDEX_INTERVAL = 8


def known_log_schema(options: ReaderOptions, *, learn: bool = False) -> LogSchema | None:
    """The columns of the one log a reader reads (None when it reads several or none is
    known): learned (``learn``: from a peered Zeek or an earlier run's spool), else Zeek's
    standard ones."""
    if len(options.logs) != 1:
        return None
    path = options.logs[0]
    if learn:
        from broker_spark.spark.zeek_schema_probe import learn_log_schema

        learned = learn_log_schema(options, path)
        if learned is not None:
            return learned
    elif options.spool.path:
        learned = LogSchemaHistory(options.spool.path, readonly=True).latest(path)
        if learned is not None:
            return learned
    return standard_schema(path, options.zeek_version)


def offered_schema(options: ReaderOptions) -> StructType:
    """What ``load()`` offers without a user schema: a log's typed columns, or ``_path, log``
    (and, read from relays, ``relay``)."""
    known = known_log_schema(options, learn=True)
    relay = bool(options.relays)
    if known is None:
        return generic_log_schema(relay)
    return zeek_log_schema(known, options.columns, relay=relay)


class ZeekLogStreamReader(BrokerStreamReader):
    """Zeek's log records as rows of ``schema`` (typed columns, or ``_path``/``log``)."""

    def __init__(
        self,
        options: ReaderOptions,
        schema: pa.Schema,
        spark_schema: StructType,
        parallelism: int | None = None,
    ) -> None:
        self.known = known_log_schema(options)
        known_names = self.known.names if self.known is not None else ()
        self.columns = LogColumns.of(spark_schema, known_names)
        self._history: LogSchemaHistory | None = None
        super().__init__(options, schema, parallelism)

    def make_converter(self, schemas: Any = ()) -> LogConverter:
        return LogConverter(
            self.arrow_schema,
            self.columns,
            self.options.mode,
            self.options.logs or None,
            self.known,
            schemas or (),
            zeek_version=self.options.zeek_version,
        )

    def make_runtime(self) -> Runtime:
        runtime = reader_runtime(self.options, logs=True, index_interval=SPOOL_INDEX_INTERVAL)
        self._history = runtime.history
        return runtime

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_history"] = None
        return state

    def _split(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Ranges of messages holding about ``maxRecordsPerPartition`` log records at most,
        spread over the cores while each holds enough records (a Batch holds up to 400)."""
        per_message = self._history.records_per_message() if self._history is not None else 1.0
        return split_batch(
            lo,
            hi,
            max(1, int(self.options.max_records_per_partition / per_message)),
            parallelism=self._parallelism,
            least=max(1, int(MIN_RECORDS_PER_SPLIT / per_message)),
            min_partitions=self.options.min_partitions,
        )

    def _partition(self, runtime: Runtime, lo: int, hi: int, inline: bool) -> SpoolPartition:
        part = super()._partition(runtime, lo, hi, inline)
        part.schemas = self._history.snapshot(lo) if self._history is not None else []
        return part

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schemas = getattr(partition, "schemas", None) or ()
        return read_partition(partition, self.make_converter(schemas))


class ZeekLogRelayStreamReader(RelayStreamReader, ZeekLogStreamReader):
    """Zeek's log records from one or more relays: the relays' positions and schemas
    (:class:`~broker_spark.spark.relay_reader.RelayStreamReader`), Zeek's rows."""

    follows_logs = True
