"""The reading side's fast paths: bulk-packed spool appends, stamped raw subscription takes,
compressed inline partitions."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_spark.columnar.record_batches import RecordConverter
from broker_spark.core.node_message import DATA
from broker_spark.core.queues import SubscriberQueue
from broker_spark.data.msgpack_records import Record, pack_records
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.spark.read.partitions import INLINE_CODEC, SpoolPartition
from broker_spark.spool.spool import Spool
from broker_spark.subscriber import RawSubscriber

T0 = 1_700_000_000_000_000_000


class _Str(str):
    pass


def records(n: int) -> list[tuple[str, bytes, str, int]]:
    return [(f"/t/{i % 3}", b"p" * (i % 40), "peer", T0 + i) for i in range(n)]


@pytest.mark.parametrize("interval", [1, 15, 16, 128, 70_000])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 300])
def test_bulk_packing_writes_the_record_stream_format(
    tmp_path: Path, interval: int, n: int
) -> None:
    with Spool(tmp_path, index_interval=interval) as spool:
        spool.append_batch(records(n))
        spool.append_batch(records(n))  # a second append starts mid-interval
        want = [Record(*r, i) for i, r in enumerate(records(n) + records(n))]
        assert spool.read_packed(0, 2 * n) == pack_records(want)
        assert spool.read(0, 2 * n) == want


def test_records_of_other_types_take_the_checked_path(tmp_path: Path) -> None:
    odd: list[Any] = [
        (_Str("/t"), b"a", "peer", T0),  # str subclass
        ("/t", bytearray(b"b"), "peer", T0),  # bytearray payload
        ("/t", b"c", "peer", T0),
    ]
    with Spool(tmp_path) as spool:
        spool.append_batch(odd)
        got = spool.read(0, 3)
    assert [(r.topic, r.payload) for r in got] == [("/t", b"a"), ("/t", b"b"), ("/t", b"c")]


@pytest.mark.parametrize(
    "bad",
    [
        ("/t", b"x", "peer", 1 << 70),  # beyond 64 bits: msgpack refuses it
        ("/t", "not bytes", "peer", T0),
        ("/t", b"x", "peer"),
        None,
    ],
)
def test_a_bad_record_leaves_the_spool_unchanged(tmp_path: Path, bad: Any) -> None:
    with Spool(tmp_path) as spool:
        spool.append_batch(records(5))
        with pytest.raises(EncodeError):
            spool.append_batch([*records(20), bad])
        assert spool.end_offset() == 5
        assert spool.append_batch(records(1)) == 5


def test_take_stamped_gives_spool_records_with_one_time() -> None:
    """A raw subscription over a real subscriber queue (the core that fills it is not
    needed: the batches are delivered as the core's loop would)."""
    a, b = uuid.uuid4().bytes, uuid.uuid4().bytes
    first = [("/x", b"1", DATA, 16, a), ("/y", b"2", DATA, 16, b)]
    second = [("/x", b"3", DATA, 16, b), ("/x", b"4", DATA, 16, a)]
    third = [("/z", b"5", DATA, 16, b"\x01\x02")]  # a sender id that is not a UUID
    queue = SubscriberQueue(("/",), qsize=100)
    sub = RawSubscriber(None, queue)  # type: ignore[arg-type]
    clock = iter([10, 20, 30]).__next__
    queue.deliver(first)
    assert sub.take_stamped(100, 0.1, clock) == [
        ("/x", b"1", str(uuid.UUID(bytes=a)), 10),
        ("/y", b"2", str(uuid.UUID(bytes=b)), 10),
    ]
    queue.deliver(second)
    assert sub.take_stamped(100, 0.1, clock) == [
        ("/x", b"3", str(uuid.UUID(bytes=b)), 20),
        ("/x", b"4", str(uuid.UUID(bytes=a)), 20),
    ]
    queue.deliver(third)
    assert sub.take_stamped(100, 0.1, clock) == [("/z", b"5", "0102", 30)]
    assert sub.take_stamped(100, 0.1, clock) == []


def test_inline_partitions_travel_compressed() -> None:
    stream = pack_records([Record(*r, i) for i, r in enumerate(records(500))])
    part = SpoolPartition.inline(0, 500, stream)
    assert part.codec == INLINE_CODEC == "zstd"
    assert part.packed is not None and len(part.packed) < len(stream) // 3
    copy = pickle.loads(pickle.dumps(part))
    assert copy.records() == stream
    assert RecordConverter().convert_packed(copy.records(), 500).num_rows == 500
    assert SpoolPartition.inline(0, 0, b"").records() == b""
    copy.packed = copy.packed[:-5]
    with pytest.raises(DecodeError):
        copy.records()
    copy.size = -1
    with pytest.raises(DecodeError):
        copy.records()
