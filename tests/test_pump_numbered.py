"""The pump's numbered path: an endpoint's subscription numbers what it takes as it stamps it,
and the spool appends those rows as they are (``Spool.append_numbered``).

The spool's side on real files; the pump's guarantees (order, nothing lost at a planned
stop, a full queue holding the publisher back) with real endpoints peered over loopback.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from spark_fixtures import wait_for

import broker_spark as broker
from broker_spark.config import BrokerOptions, Configuration
from broker_spark.core.queues import ITEM_OVERHEAD
from broker_spark.data.binary import decode
from broker_spark.data.msgpack_records import Record
from broker_spark.errors import EncodeError
from broker_spark.reader.connect import EndpointSettings
from broker_spark.spool.pump import SpoolPump
from broker_spark.spool.spool import Spool

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000_000_000_000


def records(n: int, at: int = 0) -> list[tuple[str, bytes, str, int]]:
    return [(f"/t/{i % 3}", b"p" * (i % 40), "peer", T0 + i) for i in range(at, at + n)]


def numbered(recs: list[tuple[str, bytes, str, int]], first: int) -> list[tuple]:
    return [(*r, first + k) for k, r in enumerate(recs)]


@pytest.mark.parametrize("interval", [1, 16, 70_000])
@pytest.mark.parametrize("n", [1, 17, 300])
def test_numbered_rows_are_stored_as_the_same_records_would_be(
    tmp_path: Path, interval: int, n: int
) -> None:
    same = [(r[0], b"e" * 20, r[2], r[3]) for r in records(n)]  # one length: the strided path
    with (
        Spool(tmp_path / "a", index_interval=interval) as a,
        Spool(tmp_path / "b", index_interval=interval) as b,
    ):
        for batch in (records(n), same, records(n, n)):
            assert b.append_numbered(numbered(batch, b.end_offset())) == a.append_batch(batch)
        assert b.read_packed(0, 3 * n) == a.read_packed(0, 3 * n)
        assert b.appended_bytes == a.appended_bytes == a.total_bytes


def test_rows_numbered_from_elsewhere_are_numbered_again(tmp_path: Path) -> None:
    """Rows numbered before a restart (or another writer's append) land at the end."""
    with Spool(tmp_path) as spool:
        spool.append_batch(records(5))
        stale = numbered(records(3, 5), 0)  # numbered as if the spool were empty
        assert spool.append_numbered(stale) == 7
        assert spool.read(5, 8) == [Record(*r, 5 + k) for k, r in enumerate(records(3, 5))]
        spool.restart_at(100)
        assert spool.append_numbered(numbered(records(2, 8), 8)) == 101
        assert [r.offset for r in spool.read(100, 102)] == [100, 101]


@pytest.mark.parametrize(
    "bad", [("/t", "not bytes", "peer", T0, 15), ("/t", b"x", "peer", T0), ("/t", b"x"), None]
)
@pytest.mark.parametrize("last", [False, True])
def test_a_bad_row_leaves_the_spool_unchanged(tmp_path: Path, bad: object, last: bool) -> None:
    """Among the rows (taken as numbered) or last (numbered again): refused, nothing written."""
    with Spool(tmp_path) as spool:
        spool.append_batch(records(5))
        rows: list = numbered(records(20, 5), 5)
        rows[-1 if last else 10] = bad
        with pytest.raises(EncodeError):
            spool.append_numbered(rows)
        assert spool.end_offset() == 5
        assert spool.append_numbered(numbered(records(1, 5), 5)) == 5


def test_appended_bytes_count_writes_and_never_fall(tmp_path: Path) -> None:
    """What the disk guard is told a pump wrote: retention lowers the total, not this."""
    with Spool(tmp_path, segment_bytes=4096, retention_bytes=4096) as spool:
        for k in range(20):
            spool.append_batch(records(50, 50 * k))
        written = spool.appended_bytes
        spool.enforce_retention(0)
        assert spool.total_bytes < written == spool.appended_bytes


# --- the pump, between real endpoints ------------------------------------------------------------

TOPIC = "zeek/pump"


def _config(**options: int) -> Configuration:
    return Configuration(BrokerOptions(disable_ssl=True, **options))


def _events(first: int, count: int, pad: str = "") -> list[tuple[str, object]]:
    """Events numbered ``first`` on, on two topics in turn, each ``(number, pad)``."""
    return [
        (TOPIC + ("/a" if i % 2 else "/b"), (broker.Count(i), pad))
        for i in range(first, first + count)
    ]


def _payloads(spool: Spool) -> list[int]:
    """What the spool holds, as the publisher's numbers, checking the offsets are dense."""
    got = spool.read(0, spool.end_offset())
    assert [r.offset for r in got] == list(range(len(got)))
    return [decode(r.payload)[0] for r in got]


def _peered(publisher: broker.Endpoint, reader: broker.Endpoint) -> int:
    port = publisher.listen("127.0.0.1", 0)
    assert reader.peer("127.0.0.1", port)
    wait_for(lambda: publisher.peer_subscriptions(), 20, "the reader's subscription")
    return port


def test_a_planned_stop_appends_everything_queued_in_order(tmp_path: Path) -> None:
    """The pump starts with 20,000 events queued and is finished at once: every one is
    appended, in publish order, offsets dense (several takes, each numbered where the last
    one ended)."""
    n = 20_000
    settings = EndpointSettings(subscriber_queue_size=n)
    with (
        broker.Endpoint(_config()) as publisher,
        broker.Endpoint(settings.configure(_config(subscriber_queue_bytes=64 << 20))) as reader,
        Spool(tmp_path) as spool,
    ):
        sub = reader.make_raw_subscriber([TOPIC], qsize=n)
        port = _peered(publisher, reader)
        for first in range(0, n, 1000):
            publisher.publish_batch(*_events(first, 1000))
        wait_for(lambda: sub.available() == n, 30, "every event queued")
        assert reader.unpeer("127.0.0.1", port)  # the owner closes its peerings first
        pump = SpoolPump(sub, spool, batch=3000)
        pump.start()
        assert pump.finish(20)
        assert pump.appended == spool.end_offset() == n
        assert _payloads(spool) == list(range(n))


def test_a_held_pump_holds_the_publisher_back_and_loses_nothing(tmp_path: Path) -> None:
    """While the pump cannot append (its lock held), the subscription's queue fills to its
    byte bound and no further: the core stalls and the publisher blocks (40 MB of events, more
    than the buffers and sockets between hold). Let go, every event arrives, in order."""
    n, bound, pad = 40_000, 64 << 10, "x" * 1000
    lock = threading.Lock()
    with (
        broker.Endpoint(_config(publisher_buffer_size=1000)) as publisher,
        broker.Endpoint(_config(subscriber_queue_bytes=bound, peer_buffer_size=1000)) as reader,
        Spool(tmp_path) as spool,
    ):
        sub = reader.make_raw_subscriber([TOPIC], qsize=20)
        queue = sub._queue
        _peered(publisher, reader)
        pump = SpoolPump(sub, spool, lock=lock)
        done = threading.Event()

        def publish() -> None:
            for first in range(0, n, 1000):
                publisher.publish_batch(*_events(first, 1000, pad))
            done.set()

        sender = threading.Thread(target=publish, daemon=True)
        try:
            with lock:
                pump.start()
                sender.start()
                wait_for(lambda: queue.core_waiting, 20, "the reader's core to stall")
                time.sleep(0.3)  # held: nothing more comes
                queued = queue.snapshot()
                unit = queued["queued_bytes"] // max(1, queued["queued"])
                assert unit >= ITEM_OVERHEAD + len(pad)
                assert queued["queued_bytes"] <= bound + unit  # one message past, at most
                assert not done.is_set() and pump.appended == 0
            assert done.wait(30)
            assert pump.wait_appended(n, 30)
            assert pump.finish(10)
        finally:
            pump.stop()
            if sender.is_alive():
                publisher.shutdown()  # releases a publisher blocked by a failed test
            sender.join(5)
        assert _payloads(spool) == list(range(n))
