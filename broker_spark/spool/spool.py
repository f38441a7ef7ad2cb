"""The spool: a durable, append-only log of received messages with dense offsets.

Spark's source protocol needs offsets it can checkpoint and ranges it can read
again after a restart with the same result, and Spark commits late (one
trigger behind, and never for the last batch before a stop). So every message
the driver's endpoint receives is appended here, numbered densely from 0, and
kept by size or age, never dropped on commit.

Layout (one directory, like a Kafka partition): segments named by their base
offset, each a ``.log`` of records (payloads kept as the Broker binary they
arrived in, never re-encoded) with a sparse ``.index`` (see
:mod:`broker_spark.spool.segment`); the last one is active, and a new one
starts when it would grow past ``segment_bytes``. A ``.lock`` file holds an
advisory ``flock`` that keeps a second writer out.

Crash safety: records are written with plain appends, so after a crash only the
tail of the active segment can be torn. A process that dies loses nothing it
had appended (the kernel has it); a power cut loses what the kernel had not
written yet, which ``fsync`` bounds: ``never`` leaves it to the kernel (Linux
writes dirty pages back within about 30 s), ``interval`` syncs at most
``sync_interval`` seconds after an append (default 1 s), ``always`` syncs each
append before it returns (``True`` and ``False`` mean ``always`` and
``never``). Reopening scans
the active segment from its last index entry and truncates at the first
incomplete or malformed record; sealed segments are never rewritten.

Threads: one writer (the endpoint's subscriber pump) and readers (Spark's
driver thread) share one lock. Files are read with ``pread``, sealed segments
through a descriptor opened for the call, so no file position is shared and
retention can delete a segment at any time between calls. A read-only view
(``readonly=True``) lets another process (an executor that sees the same
storage) read ranges while the writer keeps appending.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from broker_spark.data.msgpack_records import Record, unpack_records
from broker_spark.errors import EC, DecodeError, EncodeError
from broker_spark.spool.compactor import Compactor
from broker_spark.spool.compressed_segment import (
    COMPRESSIONS,
    SUFFIX,
    CompressedSegment,
    check_compression,
    compressed_path,
    write_compressed,
)
from broker_spark.spool.record_packing import chunker
from broker_spark.spool.segment import (
    DataLossError,
    Segment,
    SpoolCorruptError,
    SpoolError,
    fsync_dir,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process writer lock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "COMPRESSIONS",
    "DEFAULT_INDEX_INTERVAL",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_SYNC_INTERVAL",
    "FSYNC_POLICIES",
    "DataLossError",
    "OffsetRangeError",
    "Spool",
    "SpoolCorruptError",
    "SpoolError",
    "SpoolLockedError",
    "read_packed_range",
]

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: What ``fsync`` may say: when appended records are synced to the disk.
FSYNC_POLICIES = ("never", "interval", "always")
#: Seconds between syncs with ``fsync="interval"``, at most.
DEFAULT_SYNC_INTERVAL = 1.0
DEFAULT_INDEX_INTERVAL = 128
LOCK_NAME = ".lock"

log = logging.getLogger(__name__)

_LOG_NAME = re.compile(r"([0-9]{20})\.log\Z")
_ZLOG_NAME = re.compile(r"([0-9]{20})" + re.escape(SUFFIX) + r"(\.tmp)?\Z")


class SpoolLockedError(SpoolError):
    """Another writer holds the spool directory."""

    code = EC.CannotOpenFile


class OffsetRangeError(SpoolError, ValueError):
    """A range that is reversed, negative, or beyond the spool's end."""

    code = EC.InvalidData


class _Part:
    """What one append writes into one segment: packed records and index entries."""

    __slots__ = ("chunks", "count", "entries", "last_ns", "roll")

    def __init__(self, roll: bool) -> None:
        self.roll = roll  # start a new segment first
        self.chunks: list[bytes] = []
        self.entries: list[int] = []  # offset, position, offset, position, ...
        self.count = 0
        self.last_ns = 0


class Spool:
    """A durable append-only log of ``(topic, payload, sender, received_at_ns)`` records.

    Offsets are dense from 0 and survive reopening. ``segment_bytes`` bounds a
    segment (only a single record larger than that makes a larger segment).
    ``retention_bytes``/``retention_ms`` say what :meth:`enforce_retention` drops:
    whole sealed segments, oldest first, while the spool is over the size or the
    segment's last record is older than the limit. ``fsync`` (``never``,
    ``interval`` or ``always``; see the module doc) says when appends reach the
    disk; with any but ``never`` directory changes are synced too. ``readonly`` opens a view for another
    process: no lock, no writes, no repairs.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        fsync: bool | str = False,
        *,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        readonly: bool = False,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        compression: str = "none",
    ) -> None:
        for name, value in (
            ("segment_bytes", segment_bytes),
            ("retention_bytes", retention_bytes),
            ("retention_ms", retention_ms),
            ("index_interval", index_interval),
        ):
            if value is None and name.startswith("retention"):
                continue
            if type(value) is not int or value < 1:
                raise SpoolError(f"{name} must be a positive integer, got {value!r}")
        policy = {True: "always", False: "never"}.get(fsync, fsync)  # type: ignore[call-overload]
        if policy not in FSYNC_POLICIES:
            raise SpoolError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        self.path = os.fspath(path)
        #: how sealed segments are compressed (``zstd``, ``lz4``), or ``none``
        self.compression = check_compression(compression)
        self.segment_bytes = segment_bytes
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        self.fsync_policy: str = policy
        #: whether segment seals, index rewrites and directory changes are synced
        self.fsync = policy != "never"
        self.sync_interval = sync_interval
        self._synced_at = time.monotonic()
        self._unsynced = False
        self.index_interval = index_interval
        self.readonly = readonly
        self._lock = threading.Lock()
        self._segments: list[Segment | CompressedSegment] = []
        self._bases: list[int] = []
        self._end = 0
        self._total = 0
        #: bytes of records appended since this spool was opened (never falls: what a writer
        #: added, beside the total that retention lowers)
        self._appended = 0
        self._lock_fd = -1
        self._closed = False
        self._last_read: Segment | CompressedSegment | None = None
        self._compactor: Compactor | None = None
        self._compacting = threading.Lock()
        if not readonly and self.compression != "none":
            self._compactor = Compactor(self.compact_next, f"broker-spark-spool-compress {path}")
        if not readonly:
            os.makedirs(self.path, exist_ok=True)
            self._take_lock()
        try:
            self._load()
        except BaseException:
            self._release()
            raise

    # --- opening ---------------------------------------------------------------------

    def _take_lock(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        fd = os.open(os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise SpoolLockedError(f"spool {self.path} is in use by another writer") from None
        self._lock_fd = fd

    def _segment(self, base: int) -> Segment:
        return Segment(
            self.path,
            base,
            interval=self.index_interval,
            fsync=self.fsync,
            readonly=self.readonly,
        )

    def _load(self) -> None:
        """List the segments, sealed ones as written or compressed; recover the last one,
        the active one. The writer removes what a compression cut short left: a
        ``.zlog.tmp``, or the ``.log`` of a segment whose ``.zlog`` is in place."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            if self.readonly:
                raise SpoolError(f"no spool at {self.path}") from None
            raise
        plain = {int(m.group(1)) for m in map(_LOG_NAME.match, names) if m}
        packed = set()
        for name, m in zip(names, map(_ZLOG_NAME.match, names), strict=True):
            if m and m.group(2) and not self.readonly:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.path, name))
            elif m and not m.group(2):
                packed.add(int(m.group(1)))
        segments: list[Segment | CompressedSegment] = []
        for base in sorted(plain | packed):
            seg: Segment | CompressedSegment = (
                CompressedSegment(self.path, base) if base in packed else self._segment(base)
            )
            try:
                seg.stat()
            except FileNotFoundError:  # a read-only view racing the writer's retention
                if base in packed:  # ... or its compression, which renamed it
                    continue
                seg = CompressedSegment(self.path, base)
                try:
                    seg.stat()
                except FileNotFoundError:
                    continue
            except SpoolCorruptError as exc:  # a damaged .zlog header: the rest still serves
                if base == max(plain | packed):
                    raise  # where the spool ends is unknown
                log.warning("spool %s: %s; its offsets cannot be read", self.path, exc)
                assert isinstance(seg, CompressedSegment)
                seg.broken(str(exc))
            if base in packed and base in plain and not self.readonly:
                self._segment(base).delete()
            segments.append(seg)
        for seg, nxt in zip(segments, segments[1:], strict=False):
            seg.end = nxt.base
        if segments and isinstance(segments[-1], CompressedSegment):
            if not self.readonly:  # the active segment went missing: start one at the end
                segments.append(self._new_segment(segments[-1].end))
        elif segments:
            segments[-1].recover()
        elif not self.readonly:
            segments.append(self._new_segment(0))
        self._segments = segments
        self._bases = [s.base for s in segments]
        self._end = segments[-1].end if segments else 0
        self._total = sum(s.size for s in segments)
        self._wake_compactor()

    def _wake_compactor(self) -> None:
        if self._compactor is not None and any(
            type(s) is Segment and s.size for s in self._segments[:-1]
        ):
            self._compactor.wake()

    def compact_next(self) -> bool:
        """Compress the oldest sealed segment still as written; whether there was one (the
        compactor thread's step; the appending thread never waits for it).

        The segment is read and compressed without the lock (a sealed segment does not
        change), then swapped in under it: renamed into place, the ``.log`` removed.
        One compression at a time.
        """
        with self._compacting:
            return self._compact_next()

    def _compact_next(self) -> bool:
        with self._lock:
            if self._closed or self.compression == "none":
                return False
            seg = next((s for s in self._segments[:-1] if type(s) is Segment and s.size), None)
            if seg is None:
                return False
            layout = seg.layout()
        compactor = self._compactor
        try:
            tmp = write_compressed(
                self.path,
                seg.log_path,
                layout,
                self.compression,
                fsync=self.fsync,
                stopping=lambda: compactor is not None and compactor.stopping,
            )
        except FileNotFoundError:
            return True  # dropped by retention meanwhile
        if tmp is None:
            return False
        with self._lock:
            if self._closed or not any(s is seg for s in self._segments):
                os.unlink(tmp)
                return not self._closed
            packed = CompressedSegment.install(tmp, self.path, seg.base, fsync=self.fsync)
            seg.delete()
            if self.fsync:
                fsync_dir(self.path)
            i = next(k for k, s in enumerate(self._segments) if s is seg)
            self._segments[i] = packed
            self._total += packed.size - seg.size
        return True

    def _new_segment(self, base: int) -> Segment:
        return Segment.create(self.path, base, interval=self.index_interval, fsync=self.fsync)

    # --- writing ---------------------------------------------------------------------

    def append_batch(self, records: Iterable[Sequence[Any]]) -> int:
        """Append ``(topic, payload, sender, received_at_ns)`` records; return the last offset.

        The batch is packed (and validated) before anything is written, so a bad
        record raises :class:`EncodeError` and leaves the spool unchanged. An
        empty batch returns ``end_offset() - 1``.
        """
        batch = records if isinstance(records, (list, tuple)) else list(records)
        with self._lock:
            return self._append(batch, False)

    def append_numbered(self, rows: list[tuple[Any, ...]]) -> int:
        """Append ``(topic, payload, sender, received_at_ns, offset)`` rows numbered one apart
        from :meth:`end_offset` on; return the last offset.

        For a pump, which numbers what it takes as it stamps it: one tuple a
        record instead of a record and then a row. Rows whose offsets do not
        start at the end or end where their count says (the spool was
        restarted, or another writer appended, since they were numbered) are
        numbered again here; rows in between are the caller's word. As
        :meth:`append_batch`, a bad record leaves the spool unchanged.
        """
        with self._lock:
            end = self._end
            try:
                numbered = rows[0][4] == end and rows[-1][4] == end + len(rows) - 1
            except (IndexError, TypeError):
                numbered = False
            if numbered:
                return self._append(rows, True)
            try:
                batch = [(topic, payload, sender, at) for topic, payload, sender, at, _ in rows]
            except (TypeError, ValueError):
                raise EncodeError(
                    "rows are (topic, payload, sender, received_at_ns, offset) tuples"
                ) from None
            return self._append(batch, False)

    def _append(self, batch: Sequence[Sequence[Any]], numbered: bool) -> int:
        """Append ``batch`` (rows from the end on when ``numbered``), with the lock held."""
        self._check_writable()
        if batch:
            for part in self._plan(batch, numbered):
                self._commit(part)
            self._unsynced = True
            if self.fsync_policy == "always":
                self._sync()
            elif self.fsync_policy == "interval":
                self._sync_if_due()
        return self._end - 1

    def _sync(self) -> None:
        self._segments[-1].sync()
        self._synced_at = time.monotonic()
        self._unsynced = False

    def _sync_if_due(self) -> None:
        if self._unsynced and time.monotonic() - self._synced_at >= self.sync_interval:
            self._sync()

    def sync_if_due(self) -> None:
        """With ``fsync="interval"``: sync what was appended if the interval has passed (the
        pump calls it when it is idle, so the last appends do not wait for the next)."""
        with self._lock:
            if self.fsync_policy == "interval" and not self._closed and not self.readonly:
                self._sync_if_due()

    def sync(self) -> None:
        """Sync what was appended to the disk now, whatever the policy (a planned stop)."""
        with self._lock:
            if not self._closed and not self.readonly and self._segments:
                self._sync()
                fsync_dir(self.path)

    def _plan(self, batch: Sequence[Sequence[Any]], numbered: bool = False) -> list[_Part]:
        """Pack the batch in index-aligned chunks and decide where segments roll.

        Nothing is written here, so a record that cannot be packed leaves the
        spool as it was. Index entries fall on ``base + k * index_interval``
        of each segment, which is also where a rebuild from the log puts them.
        """
        active = self._segments[-1]
        size, since, nxt = active.size, active.since, self._end
        step, limit = self.index_interval, self.segment_bytes
        chunk = chunker(batch, nxt, numbered)
        plan: list[_Part] = []
        part = _Part(roll=False)
        i, n = 0, len(batch)
        while i < n:
            due = since >= step or size == 0
            take = min(n - i, step if due else step - since)
            data = chunk(i, take)
            while size + len(data) > limit and take > 1:  # near the end of a segment: fewer
                take = max(1, min(take - 1, take * (limit - size) // len(data)))
                data = chunk(i, take)
            if size > 0 and size + len(data) > limit:
                if part.count:
                    plan.append(part)
                part = _Part(roll=True)
                size = since = 0
                due = True
            if due:
                part.entries += (nxt, size)
                since = 0
            part.chunks.append(data)
            part.count += take
            part.last_ns = batch[i + take - 1][3]
            size += len(data)
            since += take
            nxt += take
            i += take
        plan.append(part)
        return plan

    def _commit(self, part: _Part) -> None:
        if part.roll:
            self._segments[-1].seal()
            seg = self._new_segment(self._end)
            self._segments.append(seg)
            self._bases.append(seg.base)
            if self._compactor is not None:
                self._compactor.wake()
        seg = self._segments[-1]
        size = seg.size
        seg.append(b"".join(part.chunks), part.entries, part.count, part.last_ns)
        self._total += seg.size - size
        self._appended += seg.size - size
        self._end = seg.end

    def restart_at(self, offset: int) -> None:
        """Drop every record held and continue at ``offset``: for a spool whose offsets are
        decided elsewhere (a checkpoint beyond its end, a relay's offsets in a replica)."""
        if type(offset) is not int or offset < 0:
            raise OffsetRangeError(f"cannot restart at offset {offset!r}")
        with self._lock:
            self._check_writable()
            for seg in self._segments:
                seg.delete()
            seg = self._new_segment(offset)
            self._segments, self._bases = [seg], [offset]
            self._end, self._total = offset, 0
            if self.fsync:
                fsync_dir(self.path)

    # --- retention -------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Drop whole sealed segments beyond the size or age limits; return the new start offset.

        Oldest first, and only while the oldest is over a limit: the spool is
        over ``retention_bytes`` in total, or the segment's last record was
        received more than ``retention_ms`` before ``now_ms``. The active
        segment is never dropped.
        """
        with self._lock:
            self._check_writable()
            dropped = False
            while len(self._segments) > 1:
                seg = self._segments[0]
                over_size = self.retention_bytes is not None and self._total > self.retention_bytes
                if not over_size and not self._too_old(seg, now_ms):
                    break
                self._segments.pop(0)
                self._bases.pop(0)
                self._total -= seg.size
                seg.delete()
                dropped = True
            if dropped and self.fsync:
                fsync_dir(self.path)
            return self._segments[0].base

    def _too_old(self, seg: Segment | CompressedSegment, now_ms: int) -> bool:
        if self.retention_ms is None:
            return False
        last_ns = seg.last_received_ns()
        return last_ns is None or last_ns // 1_000_000 < now_ms - self.retention_ms

    # --- reading ---------------------------------------------------------------------

    def start_offset(self) -> int:
        """The earliest offset still held (equal to :meth:`end_offset` when empty)."""
        with self._lock:
            return self._segments[0].base if self._segments else self._end

    def end_offset(self) -> int:
        """The next offset to be written: one past the last record."""
        with self._lock:
            return self._end

    @property
    def total_bytes(self) -> int:
        """Bytes of complete records held in all segments."""
        with self._lock:
            return self._total

    @property
    def appended_bytes(self) -> int:
        """Bytes of records appended since the spool was opened (what a pump wrote: its disk
        guard counts them without summing the payloads)."""
        with self._lock:
            return self._appended

    def read_packed(self, start: int, end: int) -> bytes:
        """The raw record stream of offsets ``start`` to ``end - 1`` (see :mod:`records`).

        The same range always gives the same bytes. Raises :class:`DataLossError`
        when part of the range was dropped and :class:`OffsetRangeError` when the
        range is reversed or reaches past :meth:`end_offset`.
        """
        with self._lock:
            if self._closed:
                raise SpoolError(f"spool {self.path} is closed")
            if self.readonly and isinstance(end, int) and end > self._end:
                self._reload()
            self._check_range(start, end)
            if start == end:
                return b""
            parts = []
            i = bisect.bisect_right(self._bases, start) - 1
            offset = start
            while offset < end:
                upto = min(self._segments[i].end, end)
                parts.append(self._read_segment(i, offset, upto))
                offset = upto
                i += 1
        return b"".join(parts)

    def _read_segment(self, i: int, start: int, end: int) -> bytes:
        """One segment's part of a read. A read-only view finds a segment the writer
        compressed since the view listed it under its new name."""
        seg = self._segments[i]
        if self._last_read is not seg:  # a compressed segment keeps one block for the next
            if isinstance(self._last_read, CompressedSegment):
                self._last_read.forget()
            self._last_read = seg
        try:
            return seg.read(start, end)
        except DataLossError:
            if not (
                self.readonly
                and isinstance(seg, Segment)
                and os.path.exists(compressed_path(self.path, seg.base))
            ):
                raise
        packed = CompressedSegment(self.path, seg.base)
        packed.stat()
        packed.end = seg.end
        self._segments[i] = self._last_read = packed
        return packed.read(start, end)

    def read(self, start: int, end: int) -> list[Record]:
        """The records of offsets ``start`` to ``end - 1``, each with its offset."""
        packed = self.read_packed(start, end)
        try:
            records = list(unpack_records(packed))
        except DecodeError as exc:
            raise SpoolCorruptError(f"spool {self.path}, offsets {start}-{end}: {exc}") from None
        if len(records) != end - start or (
            records and (records[0].offset != start or records[-1].offset != end - 1)
        ):
            raise SpoolCorruptError(
                f"spool {self.path}: range {start}-{end} does not hold dense records"
            )
        return records

    def iter_records(self, start: int, end: int, chunk: int = 65536) -> Iterator[Record]:
        """Like :meth:`read`, a chunk of records at a time, for ranges too big to hold at once."""
        for lo in range(start, end, chunk):
            yield from self.read(lo, min(lo + chunk, end))

    def _check_range(self, start: int, end: int) -> None:
        if type(start) is not int or type(end) is not int:
            raise OffsetRangeError(f"offsets must be integers, got {start!r} and {end!r}")
        if start < 0 or end < start:
            raise OffsetRangeError(f"bad offset range {start} to {end}")
        if end > self._end:
            raise OffsetRangeError(f"range {start} to {end} reaches past the end {self._end}")
        earliest = self._segments[0].base if self._segments else self._end
        if start < earliest and start != end:
            raise DataLossError(start, end, earliest)

    def _reload(self) -> None:
        """Read-only views: look at the directory again (the writer moved on)."""
        self._load()

    def refresh(self) -> None:
        """A read-only view: catch up with what the writer appended or dropped since."""
        with self._lock:
            if self._closed:
                raise SpoolError(f"spool {self.path} is closed")
            if self.readonly:
                self._reload()

    # --- lifecycle -------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._closed:
            raise SpoolError(f"spool {self.path} is closed")
        if self.readonly:
            raise SpoolError(f"spool {self.path} was opened read-only")

    def _release(self) -> None:
        for seg in self._segments:
            seg.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = -1

    def close(self) -> None:
        """Flush (with ``fsync``, sync) and close; later calls raise :class:`SpoolError`.
        A compression under way stops after its block (the segment stays as written)."""
        if self._compactor is not None:
            self._compactor.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.fsync and self._segments and self._unsynced:
                self._segments[-1].sync()
            self._release()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Spool({self.path!r}, offsets {self._bases[:1] or [self._end]}..{self._end})"


def read_packed_range(path: str | os.PathLike[str], start: int, end: int) -> bytes:
    """Read one range from a spool directory another process writes (an executor's view)."""
    with Spool(path, readonly=True) as spool:
        return spool.read_packed(start, end)
