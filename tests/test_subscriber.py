"""Subscribers: the getters, timeouts, fd readiness, overflow policies and lazy decoding."""

from __future__ import annotations

import datetime as dt
import select
import threading
import time

import pytest

import broker_spark as broker
from broker_spark.core import node_message as message_mod
from broker_spark.core.node_message import SharedMessage, node_message, thaw_copy
from broker_spark.core.queues import Source, SubscriberQueue
from broker_spark.errors import ShutdownError
from broker_spark.subscriber import parse_get_args

PEER = bytes(15) + b"\x05"


def msgs(topic: str, values) -> list[tuple]:
    return [node_message(topic, v, PEER) for v in values]


@pytest.fixture
def ep():
    with broker.Endpoint() as endpoint:
        yield endpoint


# -- argument handling ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, expected",
    [
        ((), {}, (None, None)),
        ((2,), {}, (2, None)),
        ((2.0,), {}, (None, 2.0)),
        ((dt.timedelta(milliseconds=5),), {}, (None, 0.005)),
        ((3, 0.5), {}, (3, 0.5)),
        ((None,), {}, (None, None)),
        ((), {"timeout": 1}, (None, 1.0)),
        ((), {"secs": 1.5, "num": 4}, (4, 1.5)),
    ],
)
def test_get_overloads_like_the_bindings(args, kwargs, expected):
    assert parse_get_args(args, kwargs) == expected


@pytest.mark.parametrize("args", [(1.0, 2.0), (1, 2, 3), (-1,)])
def test_bad_get_arguments(args):
    with pytest.raises((TypeError, ValueError)):
        parse_get_args(args, {})


# -- getters -----------------------------------------------------------------------------------


def test_getters_and_timeouts(ep):
    sub = ep.make_subscriber("/t")
    t0 = time.monotonic()
    assert sub.get(0.05) is None
    assert time.monotonic() - t0 >= 0.04
    assert sub.get(3, 0.02) == []
    assert sub.get(0) == []
    assert sub.poll() == []
    assert not sub.available()
    ep._core.inject(msgs("/t", range(5)))
    assert sub.get() == ("/t", 0)
    assert sub.get(1.0) == ("/t", 1)
    assert sub.get(2) == [("/t", 2), ("/t", 3)]
    assert sub.available() == 1
    t0 = time.monotonic()
    assert sub.get(3, 0.05) == [("/t", 4)]  # partial after the timeout
    assert time.monotonic() - t0 >= 0.04
    ep._core.inject(msgs("/t", [5, 6]))
    assert sub.get(secs=5.0, num=2) == [("/t", 5), ("/t", 6)]


def test_get_blocks_until_a_message_arrives_from_another_thread(ep):
    sub = ep.make_subscriber("/t")
    results = []
    waiting = threading.Event()

    def consume():
        waiting.set()
        results.append(sub.get(3))

    t = threading.Thread(target=consume)
    t.start()
    waiting.wait()
    for i in range(3):
        ep._core.inject(msgs("/t", [i]))
    t.join(5.0)
    assert results == [[("/t", 0), ("/t", 1), ("/t", 2)]]


def test_many_consumer_threads_share_one_subscriber(ep):
    sub = ep.make_subscriber("/t", qsize=50)
    n, consumers = 3000, 4
    got: list[list[int]] = [[] for _ in range(consumers)]
    lock = threading.Lock()
    total = [0]

    def consume(k: int) -> None:
        while True:
            try:
                batch = sub.get(7, 0.05)  # the last batch may be short
            except ShutdownError:
                return  # another consumer saw the last message and reset the subscriber
            got[k].extend(v for _, v in batch)
            with lock:
                total[0] += len(batch)
                if total[0] >= n:
                    sub.reset()
                    return

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(consumers)]
    for t in threads:
        t.start()
    for i in range(0, n, 100):
        ep._core.inject(msgs("/t", range(i, i + 100)))
    for t in threads:
        t.join(10.0)
        assert not t.is_alive()
    everything = sorted(v for part in got for v in part)
    assert everything == list(range(n))
    for part in got:
        assert part == sorted(part)  # each thread saw its share in order


def test_fd_is_readable_exactly_while_messages_wait(ep):
    sub = ep.make_subscriber("/t")
    fd = sub.fd()
    assert sub.fd() == fd
    assert select.select([fd], [], [], 0)[0] == []
    ep._core.inject(msgs("/t", [1, 2]))
    assert select.select([fd], [], [], 5.0)[0] == [fd]
    assert sub.get() == ("/t", 1)
    assert select.select([fd], [], [], 0)[0] == [fd]
    assert sub.get() == ("/t", 2)
    assert select.select([fd], [], [], 0)[0] == []
    ep._core.inject(msgs("/t", [3]))
    assert select.select([fd], [], [], 5.0)[0] == [fd]
    assert sub.poll() == [("/t", 3)]
    assert select.select([fd], [], [], 0)[0] == []


def test_status_subscriber_fd(ep):
    status = ep.make_status_subscriber(True)
    fd = status.fd()
    assert select.select([fd], [], [], 0)[0] == []
    ep._core.emit_threadsafe(broker.Error(broker.EC.InvalidData, "boom"))
    assert select.select([fd], [], [], 5.0)[0] == [fd]
    err = status.get()
    assert err.code() == broker.EC.InvalidData and err.message() == "boom"
    assert "invalid_data" in repr(err)


# -- overflow policies at the queue ---------------------------------------------------------------


def test_block_policy_reports_room_and_asks_for_wake_up():
    woken = []
    q = SubscriberQueue(("/t",), 4, "block", wake_core=lambda: woken.append(1), max_bytes=0)
    assert q.room() == 4
    q.deliver(list(range(4)))
    assert q.room() == 0
    q.want_room()
    assert q.take(1, 0) == [0]
    assert woken == []  # 3 left, above the low-water mark of 2
    assert q.take(1, 0) == [1]
    assert woken == [1]
    assert q.take(10, 0) == [2, 3]
    assert q.dropped == 0


def _msg(i: int, size: int = 90) -> tuple:
    return ("/t", bytes(size), 1, 16, b"n" * 16, i)


def test_block_policy_takes_what_fits_in_its_bytes_beyond_qsize():
    """qsize is a floor; beyond it the queue takes messages while they fit in max_bytes,
    counted as payload plus ITEM_OVERHEAD each (here 90 + 160 = 250 bytes)."""
    woken = []
    q = SubscriberQueue(("/t",), 2, "block", wake_core=lambda: woken.append(1), max_bytes=1000)
    assert q.room() == 2  # nothing delivered yet: the floor only
    q.deliver([_msg(0), _msg(1)])
    assert q.bytes == 500
    assert q.room() == 2  # (1000 - 500) // 250
    q.deliver([_msg(2), _msg(3)])
    assert q.room() <= 0  # full: 4 messages past a floor of 2, 1000 bytes
    q.want_room()
    assert [m[5] for m in q.take(1, 0)] == [0]
    assert q.bytes == 750 and woken == []  # neither half the bytes nor half of qsize
    q.take(1, 0)
    assert q.bytes == 500 and woken == [1]
    assert q.room() == 2
    assert [m[5] for m in q.poll()] == [2, 3] and q.bytes == 0


def test_a_delivery_that_corrects_the_guess_wakes_the_core():
    """The first delivery calibrates the cost per message; a core that stalled on the
    floor before it goes on at once, without waiting for a reader."""
    woken = []
    q = SubscriberQueue(("/t",), 2, "block", wake_core=lambda: woken.append(1), max_bytes=10_000)
    q.want_room()  # the core ran out of the floor's room while routing
    q.deliver([_msg(0), _msg(1)])
    assert woken == [1] and not q.core_waiting
    assert q.room() == 38  # (10_000 - 500) // 250


def test_drop_oldest_keeps_the_newest():
    q = SubscriberQueue(("/t",), 3, "drop_oldest")
    assert q.room() > 1_000_000
    q.deliver([1, 2])
    q.deliver([3, 4, 5, 6])
    assert q.poll() == [4, 5, 6]
    assert q.dropped == 3


def test_drop_newest_keeps_the_oldest():
    q = SubscriberQueue(("/t",), 3, "drop_newest")
    q.deliver([1, 2])
    q.deliver([3, 4, 5, 6])
    assert q.poll() == [1, 2, 3]
    assert q.dropped == 3
    q.deliver([7])
    assert q.poll() == [7]


def test_invalid_queue_arguments():
    with pytest.raises(ValueError):
        SubscriberQueue((), 0)
    with pytest.raises(ValueError):
        SubscriberQueue((), 5, "sometimes")


def test_closed_queue_hands_out_what_is_left_then_raises():
    q = SubscriberQueue(("/t",), 5)
    q.deliver([1, 2])
    q.close()
    assert q.take(5, None) == [1, 2]
    with pytest.raises(ShutdownError):
        q.take(1, None)
    q.deliver([3])  # ignored once closed
    assert q.available() == 0


# -- lazy decoding ------------------------------------------------------------------------------------


def test_shared_message_decodes_once(monkeypatch):
    calls = []
    real = message_mod.decode

    def counting(buf):
        calls.append(buf)
        return real(buf)

    monkeypatch.setattr(message_mod, "decode", counting)
    m = SharedMessage("/t", node_message("/t", {"a": {1}}, PEER)[1])
    v1, v2, f1, f2 = m.value(), m.value(), m.frozen_value(), m.frozen_value()
    assert len(calls) == 1
    assert v1 == v2 == {"a": {1}} and v1 is not v2 and v1["a"] is not v2["a"]
    assert f1 is f2 and hash(f1) == hash(f2)


def test_thaw_copy_shares_immutable_parts():
    inner = (1, "x")
    value = (inner, {"k": {1, 2}}, frozenset({3}))
    copy = thaw_copy(value)
    assert copy == value
    assert copy[0] is inner
    assert copy[1] is not value[1] and copy[1]["k"] is not value[1]["k"]
    assert thaw_copy(inner) is inner


def test_nothing_is_decoded_without_a_local_subscriber(monkeypatch, ep):
    calls = []
    real = message_mod.decode
    monkeypatch.setattr(message_mod, "decode", lambda buf: calls.append(buf) or real(buf))
    other = ep.make_subscriber("/other")
    ep._core.inject(msgs("/t", range(100)) + msgs("/other", [1]))
    assert other.get(5.0) == ("/other", 1)
    assert len(calls) == 1


# -- the publisher side of a source ------------------------------------------------------------


def test_source_fd_follows_demand_and_close_releases_blocked_producers():
    scheduled = []
    src = Source(scheduled.append, 2)
    fd = src.fd()
    assert select.select([fd], [], [], 0)[0] == [fd]
    src.put(("/t", b"", 1, 16, PEER))
    src.put_many([("/t", b"", 1, 16, PEER)])
    assert scheduled == [src]  # one wake-up for both, until the core takes
    assert select.select([fd], [], [], 0)[0] == []
    assert len(src.take(1)) == 1
    assert select.select([fd], [], [], 0)[0] == [fd]
    src.put(("/t", b"", 1, 16, PEER))
    blocked = threading.Event()
    errors = []

    def producer():
        blocked.set()
        try:
            src.put_many([("/t", b"", 1, 16, PEER)] * 3)
        except ShutdownError as exc:
            errors.append(exc)

    t = threading.Thread(target=producer)
    t.start()
    blocked.wait()
    src.close()
    t.join(5.0)
    assert not t.is_alive() and len(errors) == 1
    assert src.room() > 1_000_000  # a closed source swallows what a loop offers


def test_source_put_many_splits_batches_larger_than_capacity():
    src = Source(lambda s: None, 3)
    out = []
    t = threading.Thread(target=lambda: src.put_many(list(range(10))))
    t.start()
    while len(out) < 10:
        out.extend(src.take(2))  # each take makes room and wakes the producer
    t.join(5.0)
    assert out == list(range(10))
