"""A sealed segment, compressed: what a relay keeps for a day takes a tenth of the disk.

Zeek's log batches compress about 13x with zstd when a few hundred KB of them are
compressed together, and about 3x a batch at a time (``bench/spool_durability.py``).
So a sealed segment is compressed whole, in blocks, after it is sealed: appends and
the live tail (the active segment) stay as they were, and only readers that go back
(a restart, a backfill) decompress.

``<base offset, 20 digits>.zlog`` holds a header and blocks::

    header  "BSPZ", version 1, codec (1 zstd, 2 lz4), 2 bytes zero,
            base offset, end offset, last record's received_at_ns (0: none)   (32 bytes)
    block   records, raw bytes, compressed bytes (big-endian u32 each)        (12 bytes)
            the compressed record stream of those records

Blocks hold whole records, about :data:`BLOCK_BYTES` of them raw (cut where the
segment's sparse index has entries), so a read decompresses only the blocks its
range touches. The file is self-describing (no index beside it): its block table is
read from the block headers on first use and checked against the header's offsets.
It is written to ``.zlog.tmp`` and renamed into place before the ``.log`` it
replaces is removed, so a crash leaves the ``.log``, the ``.zlog`` or both, never a
torn ``.zlog`` under its name (:class:`~broker_spark.spool.spool.Spool` resolves
the leftovers when it opens).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Callable

import pyarrow as pa

from broker_spark.spool.segment import (
    DataLossError,
    SpoolCorruptError,
    SpoolError,
    first_offset_is,
    fsync_dir,
    pread_exact,
    skip_records,
    write_all,
)

__all__ = [
    "BLOCK_BYTES",
    "CODEC_LEVELS",
    "COMPRESSIONS",
    "CompressedSegment",
    "compressed_path",
    "write_compressed",
]

#: What a spool's ``compression`` may say (``none``: sealed segments stay as written).
COMPRESSIONS = ("zstd", "lz4", "none")
#: The codec of each, as pyarrow names it, and its level (zstd 1: 13x at hundreds of MB/s).
CODEC_LEVELS: dict[str, tuple[str, int | None]] = {"zstd": ("zstd", 1), "lz4": ("lz4_frame", None)}
_CODEC_IDS = {"zstd": 1, "lz4": 2}
_CODEC_NAMES = {v: k for k, v in _CODEC_IDS.items()}
#: Raw bytes a block holds, about: past 256 KB Zeek's batches compress no better.
BLOCK_BYTES = 256 * 1024

_MAGIC = b"BSPZ"
_VERSION = 1
_HEADER = struct.Struct(">4sBBHQQQ")
_BLOCK = struct.Struct(">III")
SUFFIX = ".zlog"


def compressed_path(directory: str, base: int) -> str:
    return os.path.join(directory, f"{base:020d}{SUFFIX}")


def _codec(name: str) -> pa.Codec:
    codec, level = CODEC_LEVELS[name]
    return pa.Codec(codec, compression_level=level)


def _record_end(data: bytes, count: int, where: str) -> int:
    """The byte position after the first ``count`` records of a block's ``data``."""
    end = skip_records(data, count)
    if end is None:
        raise SpoolCorruptError(f"{where}: fewer than {count} records in a block")
    return end


def write_compressed(
    directory: str,
    source_path: str,
    layout: tuple[int, int, int, int | None, list[int], list[int]],
    compression: str,
    *,
    fsync: bool,
    stopping: Callable[[], bool],
) -> str | None:
    """Write the segment at ``source_path`` compressed to ``<base>.zlog.tmp``; its path, or
    None when ``stopping()`` turned true on the way (the partial file removed).

    ``layout`` is the sealed segment's ``(base, end, size, last_ns, offsets,
    positions)``: the index entries say where blocks may be cut. Raises
    ``FileNotFoundError`` when the segment was removed before it was opened.
    """
    base, end, size, last_ns, offsets, positions = layout
    codec = _codec(compression)
    final = compressed_path(directory, base)
    tmp = final + ".tmp"
    cuts = _block_cuts(offsets, positions, end, size)
    src = os.open(source_path, os.O_RDONLY)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except BaseException:
        os.close(src)
        raise
    done = False
    try:
        header = _HEADER.pack(_MAGIC, _VERSION, _CODEC_IDS[compression], 0, base, end, last_ns or 0)
        write_all(out, header)
        for first, count, lo, hi in cuts:
            if stopping():
                return None
            raw = pread_exact(src, hi - lo, lo)
            if not first_offset_is(raw, first):
                raise SpoolCorruptError(f"{source_path} has no record {first} at byte {lo}")
            packed = codec.compress(raw, asbytes=True)
            write_all(out, _BLOCK.pack(count, len(raw), len(packed)) + packed)
        if fsync:
            os.fsync(out)
        done = True
        return tmp
    finally:
        os.close(src)
        os.close(out)
        if not done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _block_cuts(
    offsets: list[int], positions: list[int], end: int, size: int
) -> list[tuple[int, int, int, int]]:
    """``(first offset, records, start byte, end byte)`` of each block: index intervals
    joined until a block holds :data:`BLOCK_BYTES`."""
    cuts = []
    k = 0
    n = len(offsets)
    while k < n:
        j = k + 1
        while j < n and positions[j] - positions[k] < BLOCK_BYTES:
            j += 1
        last_offset, last_pos = (offsets[j], positions[j]) if j < n else (end, size)
        cuts.append((offsets[k], last_offset - offsets[k], positions[k], last_pos))
        k = j
    return cuts


class CompressedSegment:
    """A ``.zlog`` segment: read by offset range like a :class:`~.segment.Segment`, never
    written. ``size`` is its bytes on disk (what retention counts)."""

    __slots__ = (
        "_blocks",
        "_broken",
        "_cached",
        "_codec",
        "base",
        "directory",
        "end",
        "last_ns",
        "size",
    )

    def __init__(self, directory: str, base: int) -> None:
        self.directory = directory
        self.base = base
        self.end = base
        self.size = 0
        self.last_ns: int | None = None
        # first offsets, file positions, raw sizes, compressed sizes: loaded on first read
        self._blocks: tuple[list[int], list[int], list[int], list[int]] | None = None
        self._codec: pa.Codec | None = None
        self._cached: tuple[int, bytes] | None = None  # the last block decompressed
        self._broken: str | None = None  # why its header cannot be read (see broken())

    @property
    def path(self) -> str:
        return compressed_path(self.directory, self.base)

    def stat(self) -> None:
        """Read the header (raises FileNotFoundError when the file is gone)."""
        with open(self.path, "rb") as f:
            head = f.read(_HEADER.size)
            self.size = os.fstat(f.fileno()).st_size
        if len(head) < _HEADER.size:
            raise SpoolCorruptError(f"{self.path} is too short for a compressed segment")
        magic, version, codec, _zero, base, end, last_ns = _HEADER.unpack(head)
        if magic != _MAGIC or version != _VERSION or codec not in _CODEC_NAMES:
            raise SpoolCorruptError(
                f"{self.path} is not a compressed segment this version reads "
                f"(magic {magic!r}, version {version}, codec {codec})"
            )
        if base != self.base or end < base:
            raise SpoolCorruptError(f"{self.path} says it holds offsets {base} to {end - 1}")
        self.end = end
        self.last_ns = last_ns or None
        self._codec = _codec(_CODEC_NAMES[codec])

    def broken(self, why: str) -> None:
        """A file whose header cannot be read: kept in its place (its end is where the next
        file starts), its reads fail saying ``why``, and retention drops it in its turn."""
        self._broken = why
        self.size = os.path.getsize(self.path)

    def _load_blocks(self, fd: int) -> tuple[list[int], list[int], list[int], list[int]]:
        if self._blocks is not None:
            return self._blocks
        firsts: list[int] = []
        positions: list[int] = []
        raws: list[int] = []
        comps: list[int] = []
        offset, pos = self.base, _HEADER.size
        while pos < self.size:
            count, raw, comp = _BLOCK.unpack(pread_exact(fd, _BLOCK.size, pos))
            firsts.append(offset)
            positions.append(pos + _BLOCK.size)
            raws.append(raw)
            comps.append(comp)
            offset += count
            pos += _BLOCK.size + comp
        if offset != self.end or pos != self.size:
            raise SpoolCorruptError(
                f"{self.path}: its blocks hold offsets {self.base} to {offset - 1} in {pos} "
                f"bytes, its header says {self.end - 1} in {self.size}"
            )
        self._blocks = (firsts, positions, raws, comps)
        return self._blocks

    def _block(self, fd: int, k: int) -> bytes:
        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        assert self._blocks is not None and self._codec is not None
        _firsts, positions, raws, comps = self._blocks
        packed = pread_exact(fd, comps[k], positions[k])
        try:
            data = self._codec.decompress(packed, decompressed_size=raws[k], asbytes=True)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise SpoolCorruptError(f"{self.path}: block {k} does not decompress: {exc}") from None
        self._cached = (k, data)
        return data

    def read(self, start: int, end: int) -> bytes:
        """The bytes of records ``start`` to ``end - 1`` (all within this segment), as the
        ``.log`` this segment replaced held them."""
        if self._broken is not None:
            raise SpoolCorruptError(self._broken)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise DataLossError(start, end, self.end) from None
        try:
            firsts, _p, _r, _c = self._load_blocks(fd)
            k = bisect.bisect_right(firsts, start) - 1
            parts = []
            while k < len(firsts) and firsts[k] < end:
                data = self._block(fd, k)
                lo = _record_end(data, start - firsts[k], self.path) if start > firsts[k] else 0
                nxt = firsts[k + 1] if k + 1 < len(firsts) else self.end
                hi = len(data) if end >= nxt else _record_end(data, end - firsts[k], self.path)
                parts.append(data[lo:hi])
                k += 1
        finally:
            os.close(fd)
        out = b"".join(parts)
        if not first_offset_is(out, start):
            raise SpoolCorruptError(f"{self.path} has no record {start}")
        return out

    def forget(self) -> None:
        """Drop the decompressed block kept for the next read (a reader moved on)."""
        self._cached = None

    def last_received_ns(self) -> int | None:
        return self.last_ns

    def close(self) -> None:
        self.forget()  # nothing else is held open: reads open the file per call

    def delete(self) -> None:
        self.forget()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @classmethod
    def install(cls, tmp: str, directory: str, base: int, *, fsync: bool) -> CompressedSegment:
        """Rename a written ``.zlog.tmp`` into place and open it."""
        seg = cls(directory, base)
        os.replace(tmp, seg.path)
        if fsync:
            fsync_dir(directory)
        seg.stat()
        return seg


def check_compression(value: object) -> str:
    """``value`` if it names a compression, else a :class:`SpoolError` saying which do."""
    if value not in COMPRESSIONS:
        raise SpoolError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {value!r}")
    return value  # type: ignore[return-value]
