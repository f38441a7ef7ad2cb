"""One segment of the spool: a log file of records and the sparse index beside it.

* ``<base offset, 20 digits>.log`` holds the record stream of
  :mod:`broker_spark.data.msgpack_records` (``[topic, payload, sender, received_at_ns,
  offset]`` packed back to back), offsets dense from the base.
* ``<base offset>.index`` holds big-endian ``(offset, byte position)`` pairs
  at ``base + k * interval``, so a read seeks near its start and skips the
  rest (msgpack's ``skip``, in C) instead of scanning from the top. The index
  is only a hint: whatever of it is missing, torn or inconsistent is rebuilt
  from the log, and a rebuilt index equals the one the writer wrote.

Only the active (last) segment is ever written. Recovering it after a crash
scans from its last index entry and truncates at the first incomplete or
malformed record. A segment reads through ``pread``, with a descriptor opened
for the call when it is sealed, so no file position is shared between threads
and a sealed segment's files can be deleted between calls. Callers (the
:class:`~broker_spark.spool.spool.Spool`) serialize calls with their lock.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
from typing import Any

from broker_spark.data.msgpack_records import (
    MAX_RECORD_SIZE,
    is_record,
    record_fields,
    record_unpacker,
)
from broker_spark.errors import EC, BrokerError

__all__ = [
    "DataLossError",
    "Segment",
    "SpoolCorruptError",
    "SpoolError",
    "first_offset_is",
    "fsync_dir",
    "pread_exact",
    "skip_records",
    "write_all",
]

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">QQ")
_ENTRY_SIZE = _ENTRY.size


class SpoolError(BrokerError):
    """The spool cannot do what was asked (closed, unwritable, misconfigured)."""

    code = EC.BackendFailure


class SpoolCorruptError(SpoolError):
    """A sealed segment does not hold the records its name and index promise."""

    code = EC.InvalidData


class DataLossError(SpoolError):
    """Offsets that were asked for have been dropped by retention (or removed)."""

    code = EC.StaleData

    def __init__(self, start: int, end: int, earliest: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"offsets {start} to {end - 1} are no longer in the spool (earliest held: {earliest})"
        )
        self.start = start
        self.end = end
        self.earliest = earliest


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def pread_exact(fd: int, size: int, pos: int) -> bytes:
    data = os.pread(fd, size, pos)
    while len(data) < size:
        more = os.pread(fd, size - len(data), pos + len(data))
        if not more:
            raise SpoolCorruptError(
                f"segment ends at byte {pos + len(data)}, expected {pos + size}"
            )
        data += more
    return data


def skip_records(data: bytes, count: int) -> int | None:
    """The byte position after the first ``count`` records of ``data`` (walked with
    msgpack's ``skip``, in C); None when ``data`` holds fewer."""
    unpacker = record_unpacker(data)
    try:
        for _ in range(count):
            unpacker.skip()
    except Exception:
        return None
    return unpacker.tell()


def _is_record(obj: Any, offset: int) -> bool:
    return is_record(obj) and obj[4] == offset


def first_offset_is(data: bytes, offset: int) -> bool:
    """Whether ``data`` starts with the record of ``offset``: its header walked where it lies
    (a range of large records is not copied to look at the first), else unpacked."""
    found = _first_offset(data)
    if found is not None:
        return found == offset
    try:
        return _is_record(record_unpacker(data[:MAX_RECORD_SIZE]).unpack(), offset)
    except Exception:
        return False


def _first_offset(data: bytes) -> int | None:
    """The offset field of the first record, read from msgpack headers only; None when the
    record is not the plain ``[str, bin, str, uint, uint]`` array."""
    fields = record_fields(data)
    if fields is None:
        return None
    pos, size = fields[4]
    return int.from_bytes(data[pos : pos + size], "big")


class _Scan:
    """What a walk over records found: where they end, the last one's time, index entries."""

    __slots__ = ("end", "entries", "last_ns", "pos")

    def __init__(self, end: int, pos: int, last_ns: int | None, entries: list[tuple[int, int]]):
        self.end = end
        self.pos = pos
        self.last_ns = last_ns
        self.entries = entries


class Segment:
    """A segment's files and what is known of them; ``size`` counts complete records only."""

    __slots__ = (
        "base",
        "directory",
        "end",
        "fd",
        "fsync",
        "index_fd",
        "interval",
        "last_ns",
        "offsets",
        "positions",
        "readonly",
        "since",
        "size",
    )

    def __init__(
        self, directory: str, base: int, *, interval: int, fsync: bool, readonly: bool
    ) -> None:
        self.directory = directory
        self.base = base
        self.interval = interval
        self.fsync = fsync
        self.readonly = readonly
        self.end = base  # the offset after the last record
        self.size = 0
        self.offsets: list[int] | None = None  # the index, loaded lazily when sealed
        self.positions: list[int] | None = None
        self.since = 0  # records appended since the last index entry
        self.last_ns: int | None = None  # received_at of the last record (time retention)
        self.fd = -1  # open only while active: the log, for appends and reads
        self.index_fd = -1

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, f"{self.base:020d}.log")

    @property
    def index_path(self) -> str:
        return os.path.join(self.directory, f"{self.base:020d}.index")

    # --- life cycle ------------------------------------------------------------------

    @classmethod
    def create(cls, directory: str, base: int, *, interval: int, fsync: bool) -> Segment:
        """A new, empty, active segment."""
        seg = cls(directory, base, interval=interval, fsync=fsync, readonly=False)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
        seg.fd = os.open(seg.log_path, flags, 0o644)
        seg.index_fd = os.open(seg.index_path, flags, 0o644)
        seg.offsets, seg.positions = [], []
        if fsync:
            fsync_dir(directory)
        return seg

    def stat(self) -> None:
        """Take the log's size from the disk (raises FileNotFoundError when it is gone)."""
        self.size = os.path.getsize(self.log_path)

    def recover(self) -> None:
        """Open the last segment as the active one: find its end, cut a torn tail, fix the index."""
        flags = os.O_RDONLY if self.readonly else os.O_RDWR | os.O_APPEND
        fd = os.open(self.log_path, flags)
        try:
            offsets, positions, clean = self._read_index()
            if offsets and not first_offset_is(
                os.pread(fd, min(self.size - positions[-1], 1 << 16), positions[-1]), offsets[-1]
            ):
                offsets, positions, clean = [], [], False
            start, pos = (offsets.pop(), positions.pop()) if offsets else (self.base, 0)
            scan = self._scan(fd, start, pos)
            torn = self.size - scan.pos
            if torn and not self.readonly:
                log.warning(
                    "spool segment %s: truncating a torn tail of %d bytes after offset %d",
                    self.log_path,
                    torn,
                    scan.end - 1,
                )
                os.ftruncate(fd, scan.pos)
            # a read-only view may catch the writer mid-append: it keeps to whole records
            self.size = scan.pos
            self.end = scan.end
            self.last_ns = scan.last_ns
            self.offsets = offsets + [o for o, _ in scan.entries]
            self.positions = positions + [p for _, p in scan.entries]
            self.since = self.end - self.offsets[-1] if self.offsets else 0
            if self.readonly:
                os.close(fd)
                return
            if not clean or torn or len(scan.entries) != 1:
                self._write_index_file()
            self.index_fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self.fd = fd
        except BaseException:
            os.close(fd)
            raise

    def sync(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)
            os.fsync(self.index_fd)

    def seal(self) -> None:
        """No more appends: sync (with ``fsync``) and close the descriptors."""
        if self.fsync:
            self.sync()
        self.close()

    def close(self) -> None:
        for fd in (self.fd, self.index_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.index_fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # --- the index -------------------------------------------------------------------

    def _read_index(self) -> tuple[list[int], list[int], bool]:
        """The valid prefix of the index file, and whether that was all of it."""
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return [], [], self.size == 0
        offsets: list[int] = []
        positions: list[int] = []
        whole = len(raw) - len(raw) % _ENTRY_SIZE
        sealed_end = self.end if self.end > self.base else None
        for offset, pos in _ENTRY.iter_unpack(raw[:whole]):
            if offsets:
                ok = offset > offsets[-1] and pos > positions[-1]
            else:
                ok = offset == self.base and pos == 0
            if not ok or pos >= self.size or (sealed_end is not None and offset >= sealed_end):
                return offsets, positions, False
            offsets.append(offset)
            positions.append(pos)
        return offsets, positions, whole == len(raw) and (bool(offsets) or self.size == 0)

    def _scan(self, fd: int, offset: int, pos: int) -> _Scan:
        """Walk complete, well-formed, dense records from ``(offset, pos)`` to the first bad one."""
        data = os.pread(fd, self.size - pos, pos)
        unpacker = record_unpacker(data)
        entries = []
        last_ns = None
        at = 0
        next_entry = offset
        while at < len(data):
            try:
                obj = unpacker.unpack()
            except Exception:  # torn (OutOfData) or malformed: the valid records end here
                break
            if not _is_record(obj, offset):
                break
            if offset == next_entry:
                entries.append((offset, pos + at))
                next_entry += self.interval
            last_ns = obj[3]
            offset += 1
            at = unpacker.tell()
        return _Scan(offset, pos + at, last_ns, entries)

    def _write_index_file(self) -> None:
        assert self.offsets is not None and self.positions is not None
        raw = b"".join(map(_ENTRY.pack, self.offsets, self.positions))
        tmp = self.index_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(raw)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.index_path)

    def _ensure_index(self, fd: int) -> None:
        """Load a sealed segment's index on first use; rebuild it from the log if needed."""
        if self.offsets is not None:
            return
        offsets, positions, clean = self._read_index()
        if not clean:
            scan = self._scan(fd, self.base, 0)
            if scan.end != self.end or scan.pos != self.size:
                raise SpoolCorruptError(
                    f"segment {self.log_path} holds offsets {self.base} to {scan.end - 1} in "
                    f"{scan.pos} of {self.size} bytes, expected up to {self.end - 1}"
                )
            offsets = [o for o, _ in scan.entries]
            positions = [p for _, p in scan.entries]
            self.last_ns = scan.last_ns
        self.offsets, self.positions = offsets, positions
        if not clean and not self.readonly:
            self._write_index_file()

    # --- appending and reading -------------------------------------------------------

    def append(self, data: bytes, entries: list[int], count: int, last_ns: int) -> None:
        """Write ``count`` packed records and their index entries (``offset, position, ...``)."""
        assert self.offsets is not None and self.positions is not None
        index_raw = b"".join(map(_ENTRY.pack, entries[::2], entries[1::2]))
        try:
            write_all(self.fd, data)
            write_all(self.index_fd, index_raw)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
                os.ftruncate(self.index_fd, len(self.offsets) * _ENTRY_SIZE)
            err = SpoolError(f"cannot write {self.log_path}: {exc}", EC.CannotWriteFile)
            err.errno = exc.errno  # a full disk (ENOSPC) is waited out by the pump
            raise err from None
        self.offsets += entries[::2]
        self.positions += entries[1::2]
        self.size += len(data)
        self.end += count
        self.since = self.end - self.offsets[-1]
        self.last_ns = last_ns

    def layout(self) -> tuple[int, int, int, int | None, list[int], list[int]]:
        """A sealed segment's ``(base, end, size, last_ns, index offsets, index positions)``:
        what compressing it needs (the index loaded or rebuilt first)."""
        fd, own = self._open()
        try:
            self._ensure_index(fd)
        finally:
            if own:
                os.close(fd)
        assert self.offsets is not None and self.positions is not None
        last_ns = self.last_received_ns()
        return self.base, self.end, self.size, last_ns, list(self.offsets), list(self.positions)

    def _open(self) -> tuple[int, bool]:
        """A descriptor to read the log with, and whether the caller must close it."""
        if self.fd >= 0:
            return self.fd, False
        return os.open(self.log_path, os.O_RDONLY), True

    def read(self, start: int, end: int) -> bytes:
        """The bytes of records ``start`` to ``end - 1`` (all within this segment)."""
        try:
            fd, own = self._open()
        except FileNotFoundError:
            raise DataLossError(start, end, self.end) from None
        try:
            self._ensure_index(fd)
            a = self._position(fd, start)
            data = pread_exact(fd, self._position(fd, end) - a, a)
        finally:
            if own:
                os.close(fd)
        if not first_offset_is(data, start):
            raise SpoolCorruptError(f"segment {self.log_path} has no record {start}")
        return data

    def _position(self, fd: int, offset: int) -> int:
        if offset == self.end:
            return self.size
        assert self.offsets is not None and self.positions is not None
        k = bisect.bisect_right(self.offsets, offset) - 1
        if k < 0:
            raise SpoolCorruptError(f"segment {self.log_path} has no index entry for {offset}")
        base, pos = self.offsets[k], self.positions[k]
        if base == offset:
            return pos
        limit = self.positions[k + 1] if k + 1 < len(self.positions) else self.size
        skipped = skip_records(pread_exact(fd, limit - pos, pos), offset - base)
        if skipped is None:
            raise SpoolCorruptError(
                f"segment {self.log_path}: no offset {offset} between bytes {pos} and {limit}"
            )
        return pos + skipped

    def last_received_ns(self) -> int | None:
        """When the last record arrived (read from the log once, for sealed segments)."""
        if self.last_ns is None and self.end > self.base:
            fd, own = self._open()
            try:
                self._ensure_index(fd)
                assert self.offsets is not None and self.positions is not None
                if self.last_ns is None and self.offsets:
                    self.last_ns = self._scan(fd, self.offsets[-1], self.positions[-1]).last_ns
            finally:
                if own:
                    os.close(fd)
        return self.last_ns
