"""The positions of a stream reader of one spool: offsets, batches, partitions.

The driver-side half of a reader of ``topics`` received by the reader's own process or
by a receiver process (``spoolPath``): :class:`SpoolPositions` answers Spark's offset
questions from the spool (its start and end, and where the query started) and plans
each batch's partitions. The reader (:mod:`.stream`) hands it Spark's questions; relays
have :mod:`.relay_positions` instead.

Offsets are spool offsets (``{"offset": n}``, the next record, built by
:class:`SpoolOffset` with a fixed key order). Choices where Spark leaves room:

* ``startingOffsets=latest`` (the default) starts at the spool's end when
  the query first starts, taken before its endpoint subscribes (so whatever a
  peer sends on seeing the subscription is read, however late Spark asks for
  the initial offset); ``earliest`` at the oldest record the spool holds
  (which matters with a ``spoolPath`` kept from an earlier run).
  ``initialOffset`` is remembered, because Spark asks twice.
* Data loss: offsets below the spool's start (dropped by retention) or above
  its end (a spool that did not survive a restart) fail the query with
  ``failOnDataLoss=true``; with ``false`` the reader warns and reads what is
  left, and a checkpoint beyond the spool restarts the spool there.
* ``trigger(availableNow=True)`` reads up to the spool's end at the time the
  runtime starts (or at ``prepareForTriggerAvailableNow`` if it already
  runs): what had been received, not what arrives during the run.
* ``partitionData=auto`` (the default) ships a partition's records inline
  until a task shows it runs in the driver's JVM (local mode), then offsets
  only, read from the spool by the task
  (:mod:`~broker_spark.spark.read.local_executors`).
* A batch is split into ranges of at most ``maxRecordsPerPartition``, into
  at least ``minPartitions``, and into a multiple of the cluster's
  parallelism (whole waves of tasks) when each still holds at least
  :data:`MIN_RECORDS_PER_SPLIT` records; the parallelism is the one
  ``register(spark)`` captured, else the driver's cores
  (:mod:`~broker_spark.spark.read.parallelism`).

What a reader's throughput is bound by, and the trigger to choose for it, is said in
:mod:`.stream`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from broker_spark.reader.in_process import BrokerDataLossError
from broker_spark.reader.offsets import SpoolOffset
from broker_spark.reader.options import ReaderOptions
from broker_spark.reader.remote import Runtime, reader_runtime
from broker_spark.spark.compat import ReadAllAvailable, ReadLimit, ReadMaxRows
from broker_spark.spark.read.local_executors import LocalExecutors, jvm_token
from broker_spark.spark.read.parallelism import plan_ranges
from broker_spark.spark.read.partitions import (
    INLINE_CODEC,
    INLINE_LEVEL,
    SpoolPartition,
    with_schemas,
)
from broker_spark.spool.inline_frames import CompressedFrames
from broker_spark.spool.segment import DataLossError

if TYPE_CHECKING:
    from broker_spark.spark.read.rows import Rows

__all__ = ["SpoolPositions"]

log = logging.getLogger(__name__)


class SpoolPositions:
    """The positions of a reader of one spool: the reader's own (a private spool, or
    ``receiver=false``) or a receiver process's (``spoolPath``).

    ``rows`` says what the runtime keeps (Zeek's log schemas or not; the spool's index
    interval); ``parallelism`` is the cluster's (see
    :mod:`~broker_spark.spark.read.parallelism`).
    """

    def __init__(
        self,
        options: ReaderOptions,
        rows: Rows,
        parallelism: int,
        runtime: Callable[[], Runtime] | None = None,
    ) -> None:
        self.options = options
        self.rows = rows
        self.parallelism = parallelism
        self._make_runtime = runtime
        self._runtime: Runtime | None = None
        self._initial: dict[str, int] | None = None
        self._latest_at: int | None = None  # the spool's end before the first connect
        self._available_now = False
        self._target: int | None = None
        self._next_start: int | None = None  # Spark before 4.2: where the next batch starts
        self._frames: CompressedFrames | None = None  # inline partitions compressed ahead
        self._local: LocalExecutors | None = None  # partitionData=auto: tasks in our JVM?

    @property
    def runtime(self) -> Runtime | None:
        """Who receives (None until the first of Spark's questions started it)."""
        return self._runtime

    def make_runtime(self) -> Runtime:
        """Who receives: the one the reader was given, else the receiver of a ``spoolPath``,
        or this process."""
        if self._make_runtime is not None:
            return self._make_runtime()
        return reader_runtime(
            self.options, logs=self.rows.logs, index_interval=self.rows.index_interval
        )

    # --- the driver side ------------------------------------------------------------------

    def _started(self, checkpoint: int | None = None) -> Runtime:
        """The runtime, started on first use; ``checkpoint`` is the highest offset Spark named."""
        runtime = self._runtime
        if runtime is None:
            runtime = self.make_runtime()
            try:
                runtime.open_spool()
                if checkpoint is not None:
                    runtime.reconcile(checkpoint)
                if self._latest_at is None:
                    # ``latest`` means what arrives once the query runs: fixed before the
                    # endpoint subscribes, so nothing sent on seeing the subscription
                    # can fall before the start (however late Spark asks).
                    self._latest_at = runtime.latest_start()
                if self._available_now:
                    self._target = runtime.check().end_offset()
                runtime.connect()
            except BaseException:
                runtime.close()
                raise
            self._runtime = runtime
            if self.options.partition_data == "auto":
                self._local = LocalExecutors(runtime.spool_path, jvm_token())
            if self._inline() and INLINE_CODEC == "zstd":
                assert runtime.spool is not None
                self._frames = CompressedFrames(runtime.spool, INLINE_CODEC, INLINE_LEVEL)
        runtime.check()
        return runtime

    def initial_offset(self) -> dict:
        if self._initial is None:
            spool = self._started().check()
            if self.options.starting_offsets == "earliest":
                first = spool.start_offset()
            else:
                assert self._latest_at is not None  # set by _started
                first = max(spool.start_offset(), self._latest_at)
            self._initial = SpoolOffset(first).to_dict()
            if self._next_start is None:
                self._next_start = first
        return dict(self._initial)

    def default_read_limit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepare_available_now(self) -> None:
        self._available_now = True
        if self._runtime is not None:
            self._target = self._runtime.check().end_offset()

    def latest_offset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Where the next batch ends. Spark 4.2 and later pass the batch's start and its
        limit (from :meth:`getDefaultReadLimit`); earlier Spark passes nothing, and the
        reader applies ``maxRecordsPerTrigger`` from the start it knows (see
        :meth:`_latest_without_admission`)."""
        if start is None:
            return self._latest_without_admission()
        first = SpoolOffset.from_dict(start).offset
        spool = self._started(first).check()
        if self._frames is not None:
            self._frames.planned(first)  # the next batch starts there: compress from it on
        begin, end = spool.start_offset(), spool.end_offset()
        if first < begin and first < end:
            self._lost(first, begin, begin)
            first = begin
        latest = max(end, first)
        if self._target is not None:
            latest = min(latest, max(self._target, first))
        if isinstance(limit, ReadMaxRows):
            latest = min(latest, first + max(1, limit.max_rows))
        return SpoolOffset(latest).to_dict()

    def _latest_without_admission(self) -> dict:
        """Spark 4.0 and 4.1: the next batch starts where the last one Spark planned
        ended, which the reader learns from :meth:`partitions` (every batch, and on a
        restart Spark's ``setLatestSeenOffset`` calls it with the checkpoint's last
        offset) and from the ends it returns here (Spark takes them as they are).

        Before any of those the start is unknown. That is a new query's first
        question, which these versions ask *before* :meth:`initialOffset` (asked only
        when the first batch is planned), so the initial offset is fixed now, at or
        before the end returned. It is also the one question
        ``trigger(availableNow=True)`` asks on these versions to fix its target, so
        the answer is everything held, whatever ``maxRecordsPerTrigger`` says:
        availableNow reads all that is there (in one batch, as Spark runs it), and a
        new query's first batch is not limited.
        """
        runtime = self._started()
        if self._next_start is None:
            self.initial_offset()
            first, limit = runtime.check().start_offset(), ReadAllAvailable()
        else:
            first, limit = self._next_start, self.default_read_limit()
        latest = self.latest_offset(SpoolOffset(first).to_dict(), limit)
        self._next_start = SpoolOffset.from_dict(latest).offset
        return latest

    def _planned(self, end: int) -> None:
        """Spark planned a batch ending at ``end`` (or restarted with it as its last)."""
        if self._next_start is None or self._next_start < end:
            self._next_start = end

    def report_latest(self) -> dict | None:
        if self._runtime is None or self._runtime.spool is None:
            return None
        return SpoolOffset(self._runtime.spool.end_offset()).to_dict()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo = SpoolOffset.from_dict(start).offset
        hi = SpoolOffset.from_dict(end).offset
        runtime = self._started(hi)
        self._planned(hi)
        spool = runtime.check()
        if hi <= lo:
            return []
        held_end = spool.end_offset()
        if hi > held_end:
            self._lost(max(lo, held_end), hi, spool.start_offset())
            hi = max(lo, held_end)
        inline = self._inline()
        while True:
            begin = spool.start_offset()
            if lo < begin:
                self._lost(lo, min(begin, hi), begin)
                lo = min(begin, hi)
            ranges = self.split(lo, hi)
            try:
                parts = [self._partition(runtime, a, b, inline) for a, b in ranges]
            except DataLossError:  # retention dropped a segment while we read: look again
                continue
            if self._frames is not None:
                self._frames.planned(hi)
            return parts

    def _inline(self) -> bool:
        """Whether partitions carry their records (else tasks read the spool themselves)."""
        mode = self.options.partition_data
        if mode != "auto":
            return mode == "inline"
        local = self._local
        if local is None or not local.seen():
            return True
        if self._frames is not None:  # the switch: nothing to compress ahead any more
            self._frames.close()
            self._frames = None
            log.info("tasks run in the driver's JVM: they read spool %s", local.spool_path)
        return False

    def split(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Ranges of ``[lo, hi)`` of about ``maxRecordsPerPartition`` records at most, spread
        over the cluster's cores while each holds enough; a message of Zeek's logs holds
        many records (its runtime says how many on average), an event one."""
        history = self._runtime.history if self._runtime is not None else None
        return plan_ranges(
            lo,
            hi,
            records_cap=self.options.max_records_per_partition,
            parallelism=self.parallelism,
            min_partitions=self.options.min_partitions,
            per_message=history.records_per_message() if history is not None else 1.0,
        )

    def _partition(self, runtime: Runtime, lo: int, hi: int, inline: bool) -> SpoolPartition:
        fail = self.options.fail_on_data_loss
        if not inline:
            part = SpoolPartition(lo, hi, spool_path=runtime.spool_path, fail_on_data_loss=fail)
            return with_schemas(part, runtime.history, lo)
        assert runtime.spool is not None
        if self._frames is None:
            part = SpoolPartition.inline(lo, hi, runtime.spool.read_packed(lo, hi))
        else:
            packed, size = self._frames.packed(lo, hi, runtime.spool.read_packed)
            codec = INLINE_CODEC if size else None
            part = SpoolPartition(lo, hi, packed=packed, codec=codec, size=size)
        if self._local is not None and self._local.token is not None:
            part.spool_path, part.local_token = runtime.spool_path, self._local.token
        return with_schemas(part, runtime.history, lo)

    def _lost(self, lo: int, hi: int, earliest: int) -> None:
        """Offsets ``[lo, hi)`` are gone: fail, or warn and go on (``failOnDataLoss``)."""
        if hi <= lo:
            return
        text = f"offsets {lo} to {hi - 1} are no longer in the spool (earliest held: {earliest})"
        if self.options.fail_on_data_loss:
            raise BrokerDataLossError(
                f"{text}; set failOnDataLoss=false to skip them, or keep more with "
                "spool.retentionBytes/spool.retentionMs"
            )
        log.warning("%s; failOnDataLoss=false: skipping them", text)

    def commit(self, end: dict) -> None:
        # Retention, not commits, frees the spool (commits come late, and not for the last batch).
        done = SpoolOffset.from_dict(end).offset
        self._started(done).committed(done)
        self._planned(done)

    def stop(self) -> None:
        frames, self._frames = self._frames, None
        if frames is not None:
            frames.close()
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()
