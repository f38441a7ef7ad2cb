"""The stream reader of ``spark.readStream.format("broker")``: topics as a streaming DataFrame.

Where each method runs decides the design (REFERENCE.md section 3). The
offset methods (``initialOffset``, ``latestOffset``, ``partitions``,
``commit``, ``prepareForTriggerAvailableNow``, ``stop``) run in one
long-lived Python process on the driver per query run; the reader keeps a
runtime there (:mod:`~broker_spark.reader.remote`: spool, endpoint,
pump), started by the first of them. ``read`` runs on executors on a pickled
copy, which never has a runtime: it only converts the partition it is given.

A reader is composed of two parts, chosen by the options: where positions come
from (:class:`~broker_spark.spark.read.spool_positions.SpoolPositions`, one spool; or
:class:`~broker_spark.spark.read.relay_positions.RelayPositions`, a position per relay)
and how records become rows (:mod:`~broker_spark.spark.read.rows`: messages, events, or
Zeek's log records). Offsets are spool offsets (``{"offset": n}``, the next record), or
one per relay. The choices where Spark leaves room (where a new query starts, data loss,
``availableNow``, shipping records or offsets, how a batch is split into partitions) are
the position sources' own: see :mod:`.spool_positions` and :mod:`.relay_positions`.

Throughput (``bench/spark_stream.py``, 2 cores shared by publisher, endpoint,
JVM and workers): the sum of the CPU every process spends per row is the
bound, and Spark's share is not per row only. In a warm JVM each micro-batch
costs about 0.13 to 0.16 s of JVM CPU whatever its size (planning, the
checkpoint's offset and commit files, scheduling), and the JVM's JIT compiler
spends more than the query itself during a session's first minute. So a
500 ms trigger on a query that keeps up costs a third of a core in the JVM
alone; a trigger of 2 s or more is the setting for throughput (at the price
of a larger delay), ``maxRecordsPerTrigger`` only for bounding batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from broker_spark.reader.options import ReaderOptions
from broker_spark.spark.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from broker_spark.spark.read.parallelism import MIN_RECORDS_PER_SPLIT, local_parallelism
from broker_spark.spark.read.relay_positions import RelayPositions
from broker_spark.spark.read.rows import LogRows, MessageRows, Rows
from broker_spark.spark.read.spool_positions import SpoolPositions

__all__ = ["MIN_RECORDS_PER_SPLIT", "StreamReader", "stream_reader"]


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads ``options.topics`` as Arrow batches: a position source and ``rows``.

    The position source (relays when ``relay`` is set, else one spool) answers Spark's
    offset questions on the driver; ``rows`` converts a partition on an executor.
    ``parallelism`` is the cluster's, where the session told it (see
    :mod:`~broker_spark.spark.read.parallelism`); None means the driver's cores.
    """

    def __init__(
        self,
        options: ReaderOptions,
        rows: Rows,
        parallelism: int | None = None,
        runtime: Callable[[], Any] | None = None,
    ) -> None:
        self.options = options
        self.rows = rows
        self.parallelism = parallelism or local_parallelism()
        self._runtime = runtime  # who receives where the options do not say (a store's clone)
        self._positions: SpoolPositions | RelayPositions | None = None

    # --- pickling: a copy gets the configuration and the rows, never the positions -------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_positions"] = None
        return state

    @property
    def positions(self) -> SpoolPositions | RelayPositions | None:
        """The position source, once one of Spark's offset questions made it (driver side)."""
        return self._positions

    @property
    def runtime(self) -> Any:
        """Who receives (a spool's runtime, or the set of relays): None until one of Spark's
        offset questions started it, and again once the reader stopped."""
        positions = self._positions
        if isinstance(positions, SpoolPositions):
            return positions.runtime
        return positions.relays if positions is not None else None

    def _driver(self) -> SpoolPositions | RelayPositions:
        if self._positions is None:
            if self.options.relays:
                self._positions = RelayPositions(self.options, self.rows, self.parallelism)
            else:
                self._positions = SpoolPositions(
                    self.options, self.rows, self.parallelism, self._runtime
                )
        return self._positions

    # --- the driver side: Spark's questions, answered by the positions --------------------

    def initialOffset(self) -> dict:
        return self._driver().initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._driver().prepare_available_now()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Where the next batch ends. Spark 4.2 and later pass the batch's start and its
        limit (from :meth:`getDefaultReadLimit`); earlier Spark passes nothing, and the
        positions apply ``maxRecordsPerTrigger`` from the start they know."""
        return self._driver().latest_offset(start, limit)

    def reportLatestOffset(self) -> dict | None:
        return self._positions.report_latest() if self._positions is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._driver().partitions(start, end)

    def commit(self, end: dict) -> None:
        # Retention, not commits, frees the spool (commits come late, and not for the last batch).
        self._driver().commit(end)

    def stop(self) -> None:
        if self._positions is not None:
            self._positions.stop()

    # --- the executor side ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.rows.read(partition)


def stream_reader(
    options: ReaderOptions,
    schema: pa.Schema,
    spark_schema: Any = None,
    parallelism: int | None = None,
) -> StreamReader:
    """The stream reader ``options`` ask for, its rows of Arrow ``schema`` (and, for Zeek's
    logs, of the Spark schema it came from): Zeek's log records with ``format=zeek-logs``,
    messages otherwise."""
    if options.format == "zeek-logs":
        return StreamReader(options, LogRows(options, schema, spark_schema), parallelism)
    return StreamReader(options, MessageRows(options, schema), parallelism)
