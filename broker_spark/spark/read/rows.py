"""How a stream reader's records become rows: the converter half of a reader.

A stream reader is a position source (:mod:`.spool_positions`, :mod:`.relay_positions`)
and one of these. Each says what the driver side must keep for it (``logs``: whether
the runtime follows Zeek's log schemas; ``index_interval``: how often the spool indexes
its records) and builds, on an executor, the converter of one partition.

* :class:`MessageRows`: each message a row (``topic``, ``data`` as Zeek JSON,
  ``sender``... ; ``format=zeek`` adds ``event`` and ``args``; a user schema maps a
  value's or an event's elements onto typed columns by position);
* :class:`LogRows`: Zeek's log records as rows (``format=zeek-logs``), with the log
  schemas in force at each partition's first offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa

from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.record_batches import RecordConverter
from broker_spark.reader.options import ReaderOptions
from broker_spark.spark.read.offered_columns import SPOOL_INDEX_INTERVAL, known_log_schema
from broker_spark.spark.read.partitions import BatchConverter, read_partition
from broker_spark.spark.zeek_schema import log_columns
from broker_spark.spool.spool import DEFAULT_INDEX_INTERVAL

__all__ = ["LogRows", "MessageRows", "Rows"]


class Rows(Protocol):
    """The converter half of a stream reader."""

    #: The runtime keeps a history of Zeek's log schemas (and partitions carry them).
    logs: bool
    #: Records between the spool's index entries.
    index_interval: int

    def converter(self, partition: Any = None) -> BatchConverter: ...

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]: ...


class MessageRows:
    """Messages as rows of ``schema``; a schema that cannot be mapped fails at once."""

    logs = False
    index_interval = DEFAULT_INDEX_INTERVAL

    def __init__(self, options: ReaderOptions, schema: pa.Schema) -> None:
        self.options = options
        self.arrow_schema = schema
        self.converter()  # a schema that cannot be mapped fails here, at query start

    def converter(self, partition: Any = None) -> RecordConverter:
        converter = RecordConverter(self.arrow_schema, self.options.format, self.options.mode)
        converter.relay = getattr(partition, "relay_id", None)
        return converter

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.converter(partition))


class LogRows:
    """Zeek's log records as rows of ``schema`` (typed columns, or ``_path``/``log``).

    Offsets stay message offsets: a Batch of 400 records is one offset, so
    ``maxRecordsPerTrigger`` counts messages and every row of a Batch has that Batch's
    ``offset``; partitions are planned by log records (estimated from the Batches seen),
    so ``maxRecordsPerPartition`` bounds rows, as for events.
    """

    logs = True
    index_interval = SPOOL_INDEX_INTERVAL

    def __init__(self, options: ReaderOptions, schema: pa.Schema, spark_schema: Any) -> None:
        self.options = options
        self.arrow_schema = schema
        self.known = known_log_schema(options)
        known_names = self.known.names if self.known is not None else ()
        self.columns = log_columns(spark_schema, known_names)
        self.converter()

    def converter(self, partition: Any = None) -> LogConverter:
        converter = LogConverter(
            self.arrow_schema,
            self.columns,
            self.options.mode,
            self.options.logs or None,
            self.known,
            getattr(partition, "schemas", None) or (),
            zeek_version=self.options.zeek_version,
        )
        converter.relay = getattr(partition, "relay_id", None)
        return converter

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """The partition's rows; a relay decodes them where it can (``relayDecode``)."""
        converter = self.converter(partition)
        return read_partition(partition, converter, relay_decodes=self.options.relay_decode)
