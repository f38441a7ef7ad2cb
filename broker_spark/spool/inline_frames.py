"""Inline partitions compressed ahead of time, off a batch's critical path.

An inline partition carries its records compressed (:mod:`partitions`). Done
while Spark plans a batch, that compression (a third of a microsecond per
Zeek conn-log row) runs while every executor waits for the batch's tasks: on
2 cores about a tenth of each batch. So the driver side compresses what
arrives while the previous batch runs, in frames of about a MiB of records, and
planning joins the frames that lie inside a partition's range, compressing
only the pieces at its ends. Zstandard frames concatenate: a stream of several
frames expands to the concatenation of their contents, so the executor reads
such a partition as before.

Bounded: at most ``max_bytes`` of frames are held (beyond that, planning
compresses as it did); frames below a planned batch's end are dropped, and the
thread stops with the reader.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable

import pyarrow as pa

from broker_spark.spool.segment import SpoolError
from broker_spark.spool.spool import Spool

__all__ = ["CompressedFrames"]

log = logging.getLogger(__name__)

#: Raw bytes of records per frame (a frame may hold fewer, at the spool's end).
FRAME_BYTES = 1 << 20

#: Compressed bytes held at most (a few seconds of conn-log rows at 300,000 a second).
MAX_BYTES = 64 << 20


class CompressedFrames:
    """Frames of ``spool``'s records from the next batch's start on, made by a thread.

    ``codec`` must be one whose frames concatenate (Zstandard's do).
    """

    def __init__(
        self,
        spool: Spool,
        codec: str,
        level: int | None,
        *,
        frame_bytes: int = FRAME_BYTES,
        max_bytes: int = MAX_BYTES,
        poll: float = 0.02,
    ) -> None:
        self._spool = spool
        self._codec = pa.Codec(codec, compression_level=level)
        self._level = level
        self._frame_bytes = frame_bytes
        self._max_bytes = max_bytes
        self._poll = poll
        self._lock = threading.Lock()
        self._starts: list[int] = []  # frames, contiguous and ascending: [start, end)
        self._ends: list[int] = []
        self._frames: list[bytes] = []
        self._sizes: list[int] = []  # raw bytes of each frame
        self._held = 0
        self._frontier: int | None = None  # where the next frame starts; None: not yet told
        self._per_record = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="broker-spark-inline-frames", daemon=True
        )
        self._thread.start()

    # --- the planner's side ------------------------------------------------------------

    def planned(self, end: int) -> None:
        """Batches up to ``end`` are planned: frames before it are not needed again."""
        with self._lock:
            cut = bisect.bisect_left(self._starts, end)  # frames that start before it
            if cut:
                self._held -= sum(len(f) for f in self._frames[:cut])
                del self._starts[:cut], self._ends[:cut], self._frames[:cut], self._sizes[:cut]
            if self._frontier is None or self._frontier < end:
                self._frontier = end

    def packed(self, lo: int, hi: int, read: Callable[[int, int], bytes]) -> tuple[bytes, int]:
        """Offsets ``[lo, hi)`` as one compressed stream and its raw size: the held frames
        inside the range, the rest read with ``read`` and compressed now."""
        with self._lock:
            i = bisect.bisect_left(self._starts, lo)
            inside: list[tuple[int, int, bytes, int]] = []
            while i < len(self._starts) and self._ends[i] <= hi:
                inside.append((self._starts[i], self._ends[i], self._frames[i], self._sizes[i]))
                i += 1
        parts: list[bytes] = []
        size = 0
        at = lo
        for start, end, frame, raw in inside:
            if start > at:
                size += self._fresh(at, start, read, parts)
            parts.append(frame)
            size += raw
            at = end
        if at < hi:
            size += self._fresh(at, hi, read, parts)
        return b"".join(parts), size

    def _fresh(self, lo: int, hi: int, read: Callable[[int, int], bytes], parts: list) -> int:
        raw = read(lo, hi)
        if raw:  # a codec of the planner's own: the thread compresses with the other
            codec = pa.Codec(self._codec.name, compression_level=self._level)
            parts.append(codec.compress(raw, asbytes=True))
        return len(raw)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(10)
        with self._lock:
            self._starts, self._ends, self._frames, self._sizes = [], [], [], []
            self._held = 0

    # --- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                while not self._stop.is_set() and self._one():
                    pass
            except SpoolError:  # closed under us, or retention raced: the planner copes
                continue
            except Exception:  # never take the reader down for an optimisation
                log.exception("compressing inline frames ahead failed; planning compresses")
                return

    def _one(self) -> bool:
        """Compress the next frame if there is one to make; whether one was made."""
        with self._lock:
            at = self._frontier
            if at is None or self._held >= self._max_bytes:
                return False
        spool = self._spool
        end = spool.end_offset()
        if at < spool.start_offset() or at >= end:
            return False
        want = 64 if self._per_record <= 0 else max(1, int(self._frame_bytes / self._per_record))
        hi = min(end, at + want)
        raw = spool.read_packed(at, hi)
        frame = self._codec.compress(raw, asbytes=True)
        with self._lock:
            if self._frontier != at:  # planning moved on meanwhile
                return True
            self._starts.append(at)
            self._ends.append(hi)
            self._frames.append(frame)
            self._sizes.append(len(raw))
            self._held += len(frame)
            self._frontier = hi
        self._per_record = len(raw) / (hi - at)  # at < hi: never empty
        return True
