"""The spool: dense offsets, re-reads, segments, retention, crash recovery, threads."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data.msgpack_records import Record, pack_records, unpack_records
from broker_spark.errors import BrokerError, EncodeError
from broker_spark.spool.spool import (
    DataLossError,
    OffsetRangeError,
    Spool,
    SpoolCorruptError,
    SpoolError,
    SpoolLockedError,
    read_packed_range,
)

T0 = 1_700_000_000_000_000_000  # a received_at in nanoseconds


def rec(i: int, size: int = 8) -> tuple[str, bytes, str, int]:
    """A record whose content says which offset it should land at (when appended in order)."""
    return (f"/t/{i % 3}", i.to_bytes(8, "big") + b"x" * size, "peer-a", T0 + i * 1_000_000)


def batch(lo: int, hi: int, size: int = 8) -> list[tuple[str, bytes, str, int]]:
    return [rec(i, size) for i in range(lo, hi)]


def expected(lo: int, hi: int, size: int = 8) -> list[Record]:
    return [Record(*rec(i, size), i) for i in range(lo, hi)]


def logs(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.log"))


def test_append_assigns_dense_offsets_from_zero(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        assert (spool.start_offset(), spool.end_offset()) == (0, 0)
        assert spool.append_batch([]) == -1
        assert spool.append_batch(batch(0, 3)) == 2
        assert spool.append_batch(iter(batch(3, 10))) == 9
        assert spool.end_offset() == 10
        assert spool.read(0, 10) == expected(0, 10)
        assert spool.read(4, 7) == expected(4, 7)
        assert spool.read(10, 10) == []


def test_read_packed_is_the_record_stream_format(tmp_path: Path) -> None:
    with Spool(tmp_path, index_interval=4) as spool:
        spool.append_batch(batch(0, 50))
        packed = spool.read_packed(5, 23)
        assert packed == pack_records(expected(5, 23))
        assert list(unpack_records(packed)) == expected(5, 23)
        # the segment file itself is that format too
        assert (tmp_path / "00000000000000000000.log").read_bytes() == pack_records(expected(0, 50))


def test_offsets_and_records_survive_reopen(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=500) as spool:
        spool.append_batch(batch(0, 40))
        before = spool.read_packed(0, 40)
    with Spool(tmp_path, segment_bytes=500) as spool:
        assert spool.end_offset() == 40
        assert spool.read_packed(0, 40) == before
        assert spool.append_batch(batch(40, 45)) == 44
        assert spool.read(0, 45) == expected(0, 45)


def test_same_range_reads_the_same_bytes_across_calls_and_restarts(tmp_path: Path) -> None:
    ranges = [(0, 1), (3, 77), (10, 300), (299, 300), (0, 300)]
    with Spool(tmp_path, segment_bytes=700, index_interval=8) as spool:
        spool.append_batch(batch(0, 300))
        first = [spool.read_packed(a, b) for a, b in ranges]
        assert first == [spool.read_packed(a, b) for a, b in ranges]
        spool.append_batch(batch(300, 350))  # later appends do not change earlier ranges
        assert first == [spool.read_packed(a, b) for a, b in ranges]
    with Spool(tmp_path, segment_bytes=700, index_interval=8) as spool:
        assert first == [spool.read_packed(a, b) for a, b in ranges]


def test_segments_roll_and_are_named_by_base_offset(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=400, index_interval=4) as spool:
        for lo in range(0, 100, 7):
            spool.append_batch(batch(lo, min(lo + 7, 100)))
        names = logs(tmp_path)
        assert len(names) > 3
        bases = [int(n[:-4]) for n in names]
        assert bases[0] == 0 and bases == sorted(bases)
        for name in names:
            assert len(name) == len("00000000000000000000.log")
            assert (tmp_path / name).stat().st_size <= 400
            assert (tmp_path / (name[:-4] + ".index")).exists()
        # every segment starts with the record its name says
        for base in bases:
            first = next(unpack_records((tmp_path / f"{base:020d}.log").read_bytes()))
            assert first.offset == base
        assert spool.read(0, 100) == expected(0, 100)
        for a in range(0, 100, 9):
            assert spool.read(a, min(a + 13, 100)) == expected(a, min(a + 13, 100))


def test_a_record_bigger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=100) as spool:
        spool.append_batch(batch(0, 1, size=10))
        spool.append_batch(batch(1, 2, size=500))
        spool.append_batch(batch(2, 3, size=10))
        assert logs(tmp_path) == [f"{i:020d}.log" for i in range(3)]
        assert spool.read(0, 3) == [*expected(0, 1, 10), *expected(1, 2, 500), *expected(2, 3, 10)]


def test_retention_by_size_drops_whole_old_segments_never_the_active_one(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=300, retention_bytes=700) as spool:
        spool.append_batch(batch(0, 100))
        total = spool.total_bytes
        assert total > 700
        start = spool.enforce_retention(now_ms=0)
        assert start == spool.start_offset() > 0
        assert spool.total_bytes <= 700
        assert logs(tmp_path)[0] == f"{start:020d}.log"
        assert not (tmp_path / "00000000000000000000.index").exists()
        assert spool.read(start, 100) == expected(start, 100)
        with pytest.raises(DataLossError) as info:
            spool.read(0, 100)
        assert (info.value.start, info.value.earliest) == (0, start)
        assert "no longer in the spool" in str(info.value)
    with Spool(tmp_path, segment_bytes=300, retention_bytes=1) as spool:
        assert spool.start_offset() == start  # what was dropped stays dropped
        assert spool.enforce_retention(now_ms=0) == spool.start_offset()
        assert len(logs(tmp_path)) == 1  # only the active segment is left
        assert spool.append_batch(batch(100, 101)) == 100  # offsets keep counting


def test_retention_by_time_uses_each_segments_last_record(tmp_path: Path) -> None:
    # record i is received at T0 + i ms
    t0_ms = T0 // 1_000_000
    with Spool(tmp_path, segment_bytes=300, retention_ms=1000) as spool:
        spool.append_batch(batch(0, 60))
        assert spool.enforce_retention(now_ms=t0_ms) == 0  # nothing older than a second
        assert spool.enforce_retention(now_ms=t0_ms + 1000 + 20) > 0
        start = spool.start_offset()
        assert start <= 21  # the segment holding offset 20 or later is still there
        assert spool.read(start, 60) == expected(start, 60)
    # after a reopen, the age of sealed segments is read from their records
    with Spool(tmp_path, segment_bytes=300, retention_ms=1000) as spool:
        end = spool.enforce_retention(now_ms=t0_ms + 10**9)
        assert end == spool.start_offset() == int(logs(tmp_path)[-1][:-4])


def test_a_torn_last_record_is_truncated_on_reopen(tmp_path: Path) -> None:
    with Spool(tmp_path, index_interval=4) as spool:
        spool.append_batch(batch(0, 20))
    log = tmp_path / "00000000000000000000.log"
    good = log.stat().st_size
    torn = pack_records(expected(20, 21))[:-3]
    with open(log, "ab") as f:
        f.write(torn)
    with Spool(tmp_path, readonly=True) as view:  # a reader sees whole records only
        assert view.end_offset() == 20
    assert log.stat().st_size == good + len(torn)  # and does not touch the file
    with Spool(tmp_path, index_interval=4) as spool:
        assert spool.end_offset() == 20
        assert log.stat().st_size == good
        assert spool.append_batch(batch(20, 25)) == 24
        assert spool.read(0, 25) == expected(0, 25)


def test_garbage_after_the_last_record_is_truncated(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_batch(batch(0, 5))
    log = tmp_path / "00000000000000000000.log"
    with open(log, "ab") as f:
        f.write(b"\x00" * 100)  # e.g. zeroes after a power loss without fsync
    with Spool(tmp_path) as spool:
        assert spool.end_offset() == 5
        assert spool.read(0, 5) == expected(0, 5)


def test_an_index_ahead_of_the_log_is_cut_back(tmp_path: Path) -> None:
    with Spool(tmp_path, index_interval=2) as spool:
        spool.append_batch(batch(0, 10))
    log = tmp_path / "00000000000000000000.log"
    data = log.read_bytes()
    cut = len(pack_records(expected(0, 6)))
    log.write_bytes(data[: cut + 5])  # the log lost its tail, the index still has it
    with Spool(tmp_path, index_interval=2) as spool:
        assert spool.end_offset() == 6
        assert spool.append_batch(batch(6, 12)) == 11
        assert spool.read(0, 12) == expected(0, 12)
    with Spool(tmp_path, index_interval=2) as spool:
        assert spool.read(3, 12) == expected(3, 12)


def test_missing_or_corrupt_indexes_are_rebuilt_from_the_logs(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=300, index_interval=4) as spool:
        spool.append_batch(batch(0, 80))
    indexes = sorted(tmp_path.glob("*.index"))
    original = {p.name: p.read_bytes() for p in indexes}
    assert len(indexes) > 2
    indexes[0].unlink()  # a sealed segment's index is gone
    indexes[1].write_bytes(b"\xff" * 40)  # another's is garbage
    indexes[-1].write_bytes(original[indexes[-1].name][:-5])  # the active one is torn
    with Spool(tmp_path, segment_bytes=300, index_interval=4) as spool:
        for a in range(0, 80, 11):
            assert spool.read(a, 80) == expected(a, 80)
    assert {p.name: p.read_bytes() for p in sorted(tmp_path.glob("*.index"))} == original


def test_a_read_only_view_follows_the_writer(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=300) as spool:
        spool.append_batch(batch(0, 30))
        view = Spool(tmp_path, readonly=True)
        assert view.end_offset() == 30
        spool.append_batch(batch(30, 90))
        assert view.read(0, 90) == expected(0, 90)  # it looks again for what it lacks
        assert read_packed_range(tmp_path, 40, 50) == pack_records(expected(40, 50))
        with pytest.raises(SpoolError, match="read-only"):
            view.append_batch(batch(90, 91))
        view.close()


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    with Spool(tmp_path), pytest.raises(SpoolLockedError, match="in use"):
        Spool(tmp_path)
    Spool(tmp_path).close()  # closing released the lock


def test_bad_records_leave_the_spool_unchanged(tmp_path: Path) -> None:
    with Spool(tmp_path, index_interval=2) as spool:
        spool.append_batch(batch(0, 5))
        size = spool.total_bytes
        bad: list = [*batch(5, 9), ("/t", "not bytes", "peer", T0)]
        with pytest.raises(EncodeError):
            spool.append_batch(bad)
        with pytest.raises(EncodeError):
            spool.append_batch([("/t", b"x", "peer")])  # three fields
        assert (spool.end_offset(), spool.total_bytes) == (5, size)
        assert spool.append_batch(batch(5, 6)) == 5
        assert spool.read(0, 6) == expected(0, 6)


@pytest.mark.parametrize(
    ("start", "end"), [(3, 2), (-1, 2), (0, 11), (11, 11), (True, 2), (0, 2.0)]
)
def test_bad_ranges_are_refused(tmp_path: Path, start: object, end: object) -> None:
    with Spool(tmp_path) as spool:
        spool.append_batch(batch(0, 10))
        with pytest.raises(OffsetRangeError):
            spool.read_packed(start, end)  # type: ignore[arg-type]


def test_bad_settings_and_closed_spools(tmp_path: Path) -> None:
    with pytest.raises(SpoolError, match="segment_bytes"):
        Spool(tmp_path, segment_bytes=0)
    with pytest.raises(SpoolError, match="retention_bytes"):
        Spool(tmp_path, retention_bytes=-5)
    with pytest.raises(SpoolError, match="no spool"):
        Spool(tmp_path / "missing", readonly=True)
    spool = Spool(tmp_path, fsync=True)
    spool.append_batch(batch(0, 3))  # fsync on: still works
    spool.close()
    spool.close()
    for call in (lambda: spool.read(0, 1), lambda: spool.append_batch(batch(3, 4))):
        with pytest.raises(SpoolError, match="closed"):
            call()
    assert isinstance(SpoolError("x"), BrokerError)


def test_a_sealed_segment_missing_records_is_reported_as_corrupt(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=300) as spool:
        spool.append_batch(batch(0, 60))
    first = tmp_path / "00000000000000000000.log"
    first.write_bytes(first.read_bytes()[:-10])
    (tmp_path / "00000000000000000000.index").unlink()
    with Spool(tmp_path, segment_bytes=300) as spool, pytest.raises(SpoolCorruptError):
        spool.read(0, 5)


def test_one_writer_thread_and_reader_threads_concurrently(tmp_path: Path) -> None:
    total = 20_000
    errors: list[BaseException] = []
    done = threading.Event()
    with Spool(tmp_path, segment_bytes=20_000, index_interval=16) as spool:

        def write() -> None:
            try:
                lo = 0
                rng = random.Random(1)
                while lo < total:
                    hi = min(total, lo + rng.randint(1, 300))
                    spool.append_batch(batch(lo, hi))
                    lo = hi
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                done.set()

        def read(seed: int) -> None:
            rng = random.Random(seed)
            try:
                reads = 0
                while not done.is_set() or reads < 50:
                    end = spool.end_offset()
                    if end == 0:
                        continue
                    a = rng.randrange(end)
                    b = rng.randint(a, min(end, a + 500))
                    assert spool.read(a, b) == expected(a, b)
                    reads += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write)]
        threads += [threading.Thread(target=read, args=(seed,)) for seed in (2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not errors, errors
        assert spool.end_offset() == total
        assert spool.read(0, total) == expected(0, total)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    segment_bytes=st.integers(60, 2_000),
    interval=st.integers(1, 9),
    reopen_every=st.integers(1, 5),
    data=st.data(),
)
def test_any_appends_and_reopens_read_back_like_a_list(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    segment_bytes: int,
    interval: int,
    reopen_every: int,
    data: st.DataObject,
) -> None:
    path = tmp_path_factory.mktemp("spool")
    model: list[Record] = []
    spool = Spool(path, segment_bytes=segment_bytes, index_interval=interval)
    try:
        for step, n in enumerate(sizes):
            lo = len(model)
            size = data.draw(st.integers(0, 50))
            spool.append_batch(batch(lo, lo + n, size))
            model += expected(lo, lo + n, size)
            if step % reopen_every == 0:
                spool.close()
                spool = Spool(path, segment_bytes=segment_bytes, index_interval=interval)
            assert spool.end_offset() == len(model)
            a = data.draw(st.integers(0, len(model)))
            b = data.draw(st.integers(a, len(model)))
            assert spool.read(a, b) == model[a:b]
            assert [r.offset for r in spool.read(a, b)] == list(range(a, b))
        assert spool.read(0, len(model)) == model
    finally:
        spool.close()


def test_files_in_the_directory_that_are_not_segments_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "123.log").write_text("not a segment name")
    with Spool(tmp_path) as spool:
        spool.append_batch(batch(0, 2))
    with Spool(tmp_path) as spool:
        assert spool.read(0, 2) == expected(0, 2)
    assert os.path.exists(tmp_path / "notes.txt")
