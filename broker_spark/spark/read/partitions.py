"""What one Spark task of a stream batch reads: a range of spool offsets, and how to get them.

``read`` runs on an executor, in another process and maybe on another
machine, with a pickled copy of the reader and the partition; only the
partition carries per-batch data (REFERENCE.md section 3). Two ways:

* ``inline``: the driver reads the range from its spool while
  planning and the partition carries the packed records (about 130 bytes
  per small Zeek event), compressed (zstd's fast level; several times smaller:
  topics, senders, event names and log type tags repeat). Nothing but Spark's own task channel is
  needed, so it works when executors cannot see the driver's disk. The driver side
  compresses what arrives while the previous batch runs
  (:mod:`~broker_spark.spool.inline_frames`), so planning mostly joins frames.
* ``spool``: the partition names ``[start, end)`` of a ``spoolPath`` that
  every executor can read (a shared file system), and the task reads it
  itself through a read-only view, so planning ships only offsets.

The default, ``auto``, is inline until a task shows that it runs in the
driver's JVM (local mode), then spool (:mod:`~broker_spark.spark.read.local_executors`).

Measured with ``bench/spark_stream.py`` on 2 cores (publisher, driver and
executors on the same machine, warm JVM, 2 s trigger, pre-encoded events):
uncompressed inline records cost about 2 us of CPU per row more than the
spool (copies in the driver's Python process, the JVM and the worker), 215k
to 221k rows/s against 291k to 314k; compressed, the two are the same within
the noise (239k to 243k inline, 225k to 228k spool in one run). Zeek's conn
log (445 bytes a row) is another matter: inline costs 0.6 to 1.4 us a row
more in all, and the spool kept up with 330k rows/s where inline made 285k
to 307k (``bench/zeek_logs.py``). Hence ``auto``: the spool where the tasks
can read it, inline everywhere else; ``spool`` also saves the driver's
memory for very large batches when a shared file system is there. (Either
way, ``maxRecordsPerTrigger`` bounds what one batch holds in memory.)

Either way the bytes are the spool's record stream for exactly that range,
so a range always reads the same rows.

A third way, ``relay``: the task fetches its range from a relay itself. Reading Zeek's
logs, it sends the relay its converter, and a relay that can decodes the range into the
task's rows (Arrow IPC), so the task decodes nothing: the relay decodes next to Zeek,
in groups of thousands of records, off Spark's cores (docs/architecture.md, "Where Zeek's
log records are decoded"). Otherwise the task decodes the records the relay sends.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from broker_spark.columnar.converter_spec import (
    converter_spec,
    decodes,
    schemas_digest,
)
from broker_spark.columnar.log_converter import LogConverter
from broker_spark.errors import DecodeError
from broker_spark.reader.relay_fetch import Fetched, fetch_from_relay
from broker_spark.spark.read.local_executors import report_if_local
from broker_spark.spool.relay_client import RelayError, SpoolClientError
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.spool import Spool

__all__ = [
    "INLINE_CODEC",
    "INLINE_LEVEL",
    "BatchConverter",
    "SpoolPartition",
    "read_partition",
    "with_schemas",
]

#: The largest record stream an inline partition may expand to (a bound, not a target).
MAX_INLINE_BYTES = 1 << 31

#: Rows per Arrow batch handed to Spark (slices of the partition's batch, no copies): the
#: JVM takes a batch at a time, and smaller ones keep its heap and caches small, as
#: Spark's own ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000) does.
YIELD_ROWS = 10_000

log = logging.getLogger(__name__)


class BatchConverter(Protocol):
    """Turns a packed record stream into one Arrow batch (``RecordConverter`` and friends)."""

    misfits: int
    undecodable: int

    def convert_packed(self, packed: bytes, count: int | None = None) -> pa.RecordBatch: ...


def _inline_codec() -> tuple[str | None, int | None]:
    """Zstandard at its fast level -3 where pyarrow has it (its wheels do), else LZ4.

    Measured on a partition of Zeek conn-log records (445 bytes a row): zstd -3
    compressed 0.34 us and expanded 0.14 to 0.2 us a row to a sixth of the size,
    LZ4 0.52 and 0.25 to 0.31 us to a fifth; on small Zeek events both cost well
    under 0.1 us a row, zstd shrinking further. Uncompressed, a backlog's
    partitions filled the driver JVM's heap.
    """
    if pa.Codec.is_available("zstd"):
        return "zstd", -3
    if pa.Codec.is_available("lz4"):
        return "lz4", None
    return None, None


#: How inline records travel (codec name, compression level).
INLINE_CODEC, INLINE_LEVEL = _inline_codec()


class SpoolPartition(InputPartition):
    """Offsets ``[start, end)``; ``packed`` holds their records when shipped inline.

    ``spool_path`` is set instead when executors read the shared spool
    themselves; ``schemas`` (Zeek log readers) are the log schemas in force at
    ``start``; ``fail_on_data_loss`` says what a task does when retention
    dropped part of the range between planning and reading. ``codec`` names
    the compression of ``packed`` (None: plain) and ``size`` its plain length.
    ``local_token`` (``partitionData=auto``, inline) names the driver's JVM: a
    task in that JVM says so in the spool at ``spool_path``, which it can read.
    """

    def __init__(
        self,
        start: int,
        end: int,
        packed: bytes | None = None,
        spool_path: str | None = None,
        fail_on_data_loss: bool = True,
        codec: str | None = None,
        size: int = 0,
    ) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.packed = packed
        self.spool_path = spool_path
        self.fail_on_data_loss = fail_on_data_loss
        self.codec = codec
        self.size = size
        self.schemas: list | None = None
        self.local_token: str | None = None
        self.relay: Any = None  # (HostPort, TLSSettings): the task fetches the range there
        self.relay_id: str | None = None  # the spool id of that relay (checked by the task)
        self.relay_topics: tuple[str, ...] | None = None  # the records it fetches: theirs
        self.relay_logs: tuple[str, ...] | None = None  # and of these Zeek logs only
        #: records an inline stream holds when fewer than its offsets (a relay that limits
        #: the reader to some topics left the others out); None: one per offset
        self.count: int | None = None

    @classmethod
    def relayed(
        cls,
        start: int,
        end: int,
        relay: Any,
        ssl: Any,
        fail_on_data_loss: bool,
        relay_id: str | None = None,
        topics: tuple[str, ...] | None = None,
        logs: tuple[str, ...] | None = None,
    ) -> SpoolPartition:
        """A partition whose task fetches ``[start, end)`` from a relay (``relay`` option)
        whose spool is ``relay_id``: the records on ``topics`` (the reader's; None: all)
        of Zeek's ``logs`` (the paths a log reader keeps; None: all)."""
        part = cls(start, end, fail_on_data_loss=fail_on_data_loss)
        part.relay = (relay, ssl)
        part.relay_id = relay_id
        part.relay_topics = topics
        part.relay_logs = logs
        return part

    @classmethod
    def inline(
        cls, start: int, end: int, records: bytes, count: int | None = None
    ) -> SpoolPartition:
        """A partition carrying ``records`` (a record stream), compressed when that helps.

        Every byte of an inline partition is copied several times on its way to
        the executor (pickled by the driver's Python process, held and
        serialized by the JVM with the task, handed to the Python worker), and
        measured that costs about 2 us per row more than reading a shared spool.
        Records repeat their topic and sender, Zeek's event names and the type
        tags of log records, so a fast codec (:data:`INLINE_CODEC`) shrinks them
        several times for a fraction of that.
        """
        if INLINE_CODEC is None or not records:
            part = cls(start, end, packed=records)
        else:
            packed = pa.Codec(INLINE_CODEC, compression_level=INLINE_LEVEL).compress(
                records, asbytes=True
            )
            part = cls(start, end, packed=packed, codec=INLINE_CODEC, size=len(records))
        if count is not None and count != end - start:
            part.count = count
        return part

    def records(self) -> bytes:
        """The inline record stream, expanded."""
        assert self.packed is not None
        if self.codec is None:
            return self.packed
        if not 0 < self.size <= MAX_INLINE_BYTES:
            raise DecodeError(f"partition {self!r}: bad expanded size {self.size}")
        try:
            return pa.Codec(self.codec).decompress(
                self.packed, decompressed_size=self.size, asbytes=True
            )
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DecodeError(f"partition {self!r}: cannot expand its records: {exc}") from None

    def __repr__(self) -> str:
        if self.packed is not None:
            where = "inline"
        elif self.relay is not None:
            where = f"relay {self.relay[0]}"
        else:
            where = f"spool {self.spool_path}"
        return f"SpoolPartition({self.start}, {self.end}, {where})"


def with_schemas(part: SpoolPartition, history: Any, lo: int) -> SpoolPartition:
    """``part`` carrying the Zeek log schemas in force at offset ``lo`` (from the runtime's
    ``history``; a reader of messages has none)."""
    if history is not None:
        part.schemas = history.snapshot(lo)
    return part


def _read_shared(
    partition: SpoolPartition, converter: BatchConverter, relay_decodes: bool = False
) -> Fetched:
    """The range from the shared spool (read-only view) or the relay, or what is still held
    of it if data was lost: its records and their number, or (``relay_decodes``) the rows a
    relay decoded with ``converter`` (a reader of Zeek's logs)."""
    if partition.relay is not None:
        spec = digest = None
        if relay_decodes and decodes(converter):
            assert isinstance(converter, LogConverter)
            spec = converter_spec(converter)
            digest = schemas_digest(partition.schemas or ())

        def read(lo: int, hi: int) -> Fetched:
            return _relay_fetch(partition, lo, hi, spec, digest if lo == partition.start else None)

        return _read_range(partition, read)
    assert partition.spool_path is not None
    with Spool(partition.spool_path, readonly=True) as spool:
        return _read_range(partition, lambda lo, hi: Fetched(spool.read_packed(lo, hi), hi - lo))


def _read_range(partition: SpoolPartition, read: Any, start: int | None = None) -> Fetched:
    """``read(lo, hi)``, what was fetched, over the partition's range (from ``start`` on, when
    given); past what retention dropped when ``failOnDataLoss`` is false."""
    lo = partition.start if start is None else start
    try:
        return read(lo, partition.end)
    except DataLossError as exc:
        return read(_past_loss(partition, exc, lo), partition.end)


def _past_loss(partition: SpoolPartition, exc: DataLossError, lo: int) -> int:
    """Where a read of ``partition`` from offset ``lo`` goes on after retention dropped
    records it needed: the oldest record left (``failOnDataLoss=false``, said in the log);
    raises ``exc`` as it is otherwise."""
    if partition.fail_on_data_loss:
        raise DataLossError(exc.start, exc.end, exc.earliest, str(exc)).with_traceback(
            None
        ) from None
    lo = min(max(exc.earliest, lo), partition.end)
    log.warning("%s; failOnDataLoss=false: reading from offset %d", exc, lo)
    return lo


_heap_frozen = False


def _freeze_heap_once() -> None:
    """Take what the worker holds now (modules, caches) out of the cyclic collector's sight.

    Spark's Python worker daemon runs a full ``gc.collect()`` after every task of
    a reused worker, and a full collection walks every tracked object: with
    pyspark, pyarrow and this package loaded that is 20 to 70 ms of CPU per
    task (measured: about 0.7 us per row at 95,000 rows a task). ``gc.freeze``
    moves the objects alive now to a permanent generation that collections
    skip; they are still freed by reference counting, so only reference cycles
    among them (module-level state, which lives as long as the worker) are
    never collected. Done once per worker process, at its first partition.
    """
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


def read_partition(
    partition: Any, converter: BatchConverter, relay_decodes: bool = False
) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one partition (nothing for an empty one); ``relay_decodes``: a
    relay partition's converter (a :class:`LogConverter`) is handed to the relay, which
    sends the rows where it can."""
    _freeze_heap_once()
    if not isinstance(partition, SpoolPartition):
        raise TypeError(f"not a partition of the broker source: {partition!r}")
    if partition.packed is not None:
        packed = partition.records()
        count = partition.count if partition.count is not None else partition.end - partition.start
        if partition.local_token is not None:
            report_if_local(partition.spool_path, partition.local_token)
    else:
        fetched = _read_shared(partition, converter, relay_decodes)
        if fetched.rows is not None:
            yield from _relay_rows(partition, converter, fetched)
            return
        packed, count = fetched.records, fetched.count
    if not packed:
        return
    batch = converter.convert_packed(packed, count)
    _say_counted(partition, converter)
    yield from _in_slices(batch)


def _in_slices(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in slices of at most :data:`YIELD_ROWS` rows (no copies)."""
    if batch.num_rows <= YIELD_ROWS:
        yield batch
        return
    for lo in range(0, batch.num_rows, YIELD_ROWS):
        yield batch.slice(lo, YIELD_ROWS)


def _relay_rows(
    partition: SpoolPartition, converter: BatchConverter, fetched: Fetched
) -> Iterator[pa.RecordBatch]:
    """The rows a relay decodes, in slices of at most :data:`YIELD_ROWS`, each frame's as it
    arrives, its counts told as the task's own decoding would tell them. Should the stream
    stop midway, the task fetches the records after the last frame's and decodes them
    itself (the rows are the same either way): the connection broke, or retention dropped
    records the relay had not sent yet (a reader far behind). Where records it still needed
    are gone, the task fails as a task that fetched records would, or
    (``failOnDataLoss=false``) decodes the range's records from the oldest one left, all of
    them after the rows given."""
    done = partition.start  # the offset after the rows given
    try:
        for frame in fetched.rows or ():
            for name, n in frame.counters.items():
                if hasattr(converter, name):
                    setattr(converter, name, getattr(converter, name) + n)
            for batch in frame.batches:
                yield from _in_slices(batch)
            done = frame.next_offset
    except DataLossError as exc:
        done = _past_loss(partition, exc, done)
    except (SpoolClientError, RelayError) as exc:
        log.warning(
            "relay %s: %s, after offsets %d-%d of %d-%d; decoding the range's records here",
            partition.relay[0], exc, partition.start, done - 1, partition.start,
            partition.end - 1,
        )  # fmt: skip
    if done < partition.end:
        fetched = _read_range(partition, lambda a, b: _relay_fetch(partition, a, b), start=done)
        if fetched.records:
            yield from _in_slices(converter.convert_packed(fetched.records, fetched.count))
    _say_counted(partition, converter)


def _relay_fetch(
    partition: SpoolPartition,
    lo: int,
    hi: int,
    converter: dict[str, Any] | None = None,
    schemas: str | None = None,
) -> Fetched:
    """Offsets ``[lo, hi)`` of a relay partition's range: records (the task decodes them), or
    rows where the relay decodes them with ``converter`` from the ``schemas`` (a digest)."""
    relay, ssl = partition.relay
    return fetch_from_relay(
        relay,
        ssl,
        lo,
        hi,
        relay_id=partition.relay_id,
        topics=partition.relay_topics,
        logs=getattr(partition, "relay_logs", None),
        converter=converter,
        schemas=schemas,
    )


def _say_counted(partition: SpoolPartition, converter: BatchConverter) -> None:
    if converter.misfits or converter.undecodable:
        log.warning(
            "offsets %d-%d: %d values did not fit the schema, %d payloads did not decode (nulls)",
            partition.start,
            partition.end - 1,
            converter.misfits,
            converter.undecodable,
        )
