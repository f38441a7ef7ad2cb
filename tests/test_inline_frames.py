"""Inline partitions compressed ahead: the same records as compressing at planning time."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from broker_spark.spool.inline_frames import CompressedFrames
from broker_spark.spool.spool import Spool

pytestmark = pytest.mark.timeout(60)


def _fill(spool: Spool, first: int, n: int) -> None:
    spool.append_batch(
        [
            (f"t/{i % 3}", b"payload %d " % i * (1 + i % 7), "peer", 1_000 + i)
            for i in range(first, first + n)
        ]
    )


def _expand(packed: bytes, size: int) -> bytes:
    return (
        pa.Codec("zstd").decompress(packed, decompressed_size=size, asbytes=True) if size else b""
    )


def _wait(cond, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def spool(tmp_path):
    with Spool(tmp_path / "spool") as sp:
        yield sp


def test_any_range_reads_the_same_records_with_frames_made_ahead(spool) -> None:
    _fill(spool, 0, 10)
    frames = CompressedFrames(spool, "zstd", -3, frame_bytes=2000, poll=0.005)
    try:
        frames.planned(10)  # the next batch starts at 10: frames are made from there
        _fill(spool, 10, 3000)
        _wait(lambda: frames._frontier == spool.end_offset())
        assert len(frames._frames) > 5  # made ahead, in several frames
        reads: list[tuple[int, int]] = []

        def read(lo: int, hi: int) -> bytes:
            reads.append((lo, hi))
            return spool.read_packed(lo, hi)

        # partitions that start and end inside frames, span many, or lie in one
        for lo, hi in [(10, 3010), (10, 1500), (1500, 3010), (777, 781), (5, 40)]:
            reads.clear()
            packed, size = frames.packed(lo, hi, read)
            assert _expand(packed, size) == spool.read_packed(lo, hi)
            assert size == len(spool.read_packed(lo, hi))
        reads.clear()
        frames.packed(10, 3010, read)
        assert reads == []  # wholly made ahead: nothing compressed at planning
    finally:
        frames.close()


def test_planning_drops_what_it_passed_and_memory_stays_bounded(spool) -> None:
    frames = CompressedFrames(spool, "zstd", -3, frame_bytes=1000, max_bytes=3000, poll=0.005)
    try:
        frames.planned(0)
        _fill(spool, 0, 5000)
        _wait(lambda: frames._held >= 3000)
        time.sleep(0.05)
        held = frames._held
        assert 3000 <= held < 3000 + 2000  # stops at the bound (one frame past at most)
        end_of_frames = frames._frontier
        assert end_of_frames < spool.end_offset()
        frames.planned(end_of_frames)  # a batch took them: dropped, and the thread goes on
        assert frames._frames == [] or frames._starts[0] >= end_of_frames
        _wait(lambda: frames._frontier > end_of_frames)
        packed, size = frames.packed(end_of_frames, spool.end_offset(), spool.read_packed)
        assert _expand(packed, size) == spool.read_packed(end_of_frames, spool.end_offset())
    finally:
        frames.close()


def test_nothing_is_made_before_the_planner_says_where_and_the_thread_ends(spool) -> None:
    _fill(spool, 0, 100)
    frames = CompressedFrames(spool, "zstd", -3, poll=0.005)
    time.sleep(0.05)
    assert frames._frames == []  # a query starting at "latest" never reads these
    frames.close()
    assert not any(t.name == "broker-spark-inline-frames" for t in threading.enumerate())
