"""Backpressure: bounded buffers, blocking publishers, dropping policies, flat memory."""

from __future__ import annotations

import os
import threading
import time
from collections import deque

import pytest

import broker_spark as broker
from broker_spark.config import DEFAULT_QUEUE_BYTES
from broker_spark.core import memory_link
from broker_spark.core.queues import ITEM_OVERHEAD, Source
from broker_spark.data.binary import encode as broker_spark_encode

PAGE = os.sysconf("SC_PAGE_SIZE")
PAYLOAD = "x" * 100  # large enough that unbounded buffering of 1M messages would show


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@pytest.fixture
def pair():
    with broker.Endpoint() as a, broker.Endpoint() as b:
        yield a, b


@pytest.fixture
def strict_pair():
    """``subscriber_queue_bytes=0``: a subscriber's ``qsize`` is a hard ceiling."""
    strict = broker.BrokerOptions(subscriber_queue_bytes=0)
    with broker.Endpoint() as a, broker.Endpoint(strict) as b:
        yield a, b


def test_block_policy_stops_the_publisher_and_loses_nothing(strict_pair):
    a, b = strict_pair
    qsize, link_capacity = 5, 64
    sub = b.make_subscriber("/t", qsize=qsize)
    memory_link.connect(a, b, capacity=link_capacity)
    pub = a.make_publisher("/t")
    n = 20_000
    full = threading.Event()
    count = {"published": 0, "read": 0, "ahead": 0}

    def publish():
        for i in range(n):
            if not full.is_set() and pub.demand() == 0:
                full.set()
            pub.publish(i)
            count["published"] = i + 1
            count["ahead"] = max(count["ahead"], count["published"] - count["read"])

    t = threading.Thread(target=publish)
    t.start()
    # Nobody reads until the publisher ran out of demand: the whole pipeline is full.
    assert full.wait(10.0), "the publisher never saw zero demand"
    assert count["published"] < n
    got = []
    while len(got) < n:
        topic, value = sub.get(5.0)
        got.append(value)
        count["read"] += 1
    t.join()
    assert got == list(range(n))
    assert sub.dropped() == 0
    # What can be in flight: the publisher's queue, a batch held by each core, the
    # link, the subscriber's queue (and the one message being handed over).
    bound = pub.capacity() + 2 * 1024 + link_capacity + qsize + 2
    assert count["ahead"] <= bound


@pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest"])
def test_dropping_subscriber_never_read_does_not_stall_others(pair, policy):
    a, b = pair
    ignored = b.make_subscriber("/t", qsize=5, overflow=policy)
    reader = b.make_subscriber("/t")
    memory_link.connect(a, b)
    n = 30_000

    def publish():
        for i in range(0, n, 500):
            a.publish_batch(*[("/t", j) for j in range(i, i + 500)])

    t = threading.Thread(target=publish)
    t.start()
    got = []
    while len(got) < n:
        batch = reader.get(1000, 5.0)
        assert batch, "the reader stalled"
        got.extend(v for _, v in batch)
    t.join()
    assert got == list(range(n))
    kept = [v for _, v in ignored.poll()]
    assert len(kept) == 5
    assert ignored.dropped() == n - 5
    if policy == "drop_oldest":
        assert kept == list(range(n - 5, n))
    else:
        assert kept == list(range(5))


def test_subscriber_default_policy_comes_from_options():
    opts = broker.BrokerOptions(subscriber_overflow_policy="drop_newest", subscriber_queue_size=3)
    with broker.Endpoint(opts) as a, broker.Endpoint() as b:
        sub = a.make_subscriber("/t")
        done = a.make_subscriber("/end")
        memory_link.connect(a, b)
        b.publish_batch(*[("/t", i) for i in range(10)], ("/end", -1))
        assert done.get(5.0) == ("/end", -1)
        assert [v for _, v in sub.poll()] == [0, 1, 2]
        assert sub.dropped() == 7


@pytest.mark.parametrize("policy", ["block", "drop_oldest"])
def test_memory_stays_flat_with_a_slow_reader(pair, policy):
    """One million messages through a subscriber that reads slower than they are published."""
    a, b = pair
    sub = b.make_subscriber("/t", qsize=50, overflow=policy)
    end = b.make_subscriber("/end")
    memory_link.connect(a, b)
    n, chunk = 1_000_000 if policy == "block" else 300_000, 1000
    batch = [("/t", PAYLOAD)] * chunk
    base = rss_bytes()
    peak = [base]

    def publish():
        for _ in range(n // chunk):
            a.publish_batch(*batch)
        a.publish("/end", 0)

    t = threading.Thread(target=publish)
    t.start()
    received = 0
    if policy == "block":
        while received < n:
            got = sub.get(25, 5.0)  # small reads: the publisher is much faster
            assert got, "the flow stalled"
            received += len(got)
            if received % 50_000 < 25:
                peak[0] = max(peak[0], rss_bytes())
    else:
        while not end.available():
            got = sub.get(10, 0.5)
            received += len(got)
            if received % 10_000 < 10:
                peak[0] = max(peak[0], rss_bytes())
        assert end.get() == ("/end", 0)
        received += len(sub.poll())
        assert received + sub.dropped() == n
    t.join()
    peak[0] = max(peak[0], rss_bytes())
    growth = peak[0] - base
    # Unbounded buffering would hold ~1M x ~250 bytes; the bounded pipeline a few MB.
    assert growth < 40 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB"


def _fill(a: broker.Endpoint, payload: object, stop: threading.Event) -> threading.Thread:
    """Publish ``payload`` on /t until ``stop``; a full pipeline blocks the publisher."""
    pub = a.make_publisher("/t")

    def run():
        while not stop.is_set():
            try:
                pub.publish_batch(*[payload] * 100)
            except broker.BrokerError:  # released by shutdown
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _settled(queue, timeout: float = 10.0) -> int:
    """How many messages ``queue`` holds once full: its bytes reached, its core stalled."""
    deadline = time.monotonic() + timeout
    while not (queue.bytes >= DEFAULT_QUEUE_BYTES and queue.core_waiting):
        assert time.monotonic() < deadline, f"the queue stopped at {queue.bytes} bytes"
        time.sleep(0.01)
    return len(queue.items)


@pytest.mark.parametrize("payload_bytes", [10, 1000, 64_000])
def test_a_subscriber_nobody_reads_pins_its_byte_bound_not_more(pair, payload_bytes):
    """With the defaults (qsize 20, 4 MiB), a queue takes messages beyond qsize while
    they fit in its bytes, then holds the sender back; memory stays bounded."""
    a, b = pair
    sub = b.make_subscriber("/t")
    memory_link.connect(a, b)
    payload = "x" * payload_bytes
    stop = threading.Event()
    t = _fill(a, payload, stop)
    queue = sub._queue
    try:
        held = _settled(queue)
        unit = len(broker_spark_encode(payload)) + ITEM_OVERHEAD
        assert held >= 20  # qsize is a floor
        assert queue.bytes <= DEFAULT_QUEUE_BYTES + unit  # one message past, at most
        assert held == queue.bytes // unit
        # Reading drains it, and the flow resumes (nothing lost, in order).
        got = sub.get(held + 500, 10.0)
        assert len(got) == held + 500
    finally:
        stop.set()
        a.shutdown()
        t.join(5)


def test_qsize_stays_a_ceiling_for_the_dropping_policies(pair):
    a, b = pair
    sub = b.make_subscriber("/t", qsize=20, overflow="drop_newest")
    end = b.make_subscriber("/end")
    memory_link.connect(a, b)
    a.publish_batch(*[("/t", i) for i in range(1000)], ("/end", 0))
    assert end.get(5.0) == ("/end", 0)
    assert len(sub.poll()) == 20 and sub.dropped() == 980


class _TakenWhileChecked(deque):
    """Fault injected, and said so: the first time the producer finds the source full, the
    core takes everything before the producer goes on (the interleaving a thread switch can
    make between the check and the producer's flag), on a thread of its own."""

    def __init__(self, source: Source, *items: object) -> None:
        super().__init__(items)
        self.source = source
        self.injected = False

    def __len__(self) -> int:
        n = super().__len__()
        if not self.injected and n >= self.source.capacity:
            self.injected = True
            core = threading.Thread(target=self.source.take, args=(64,), daemon=True)
            core.start()
            core.join(0.2)  # it may block on the lock the producer holds: then it notifies later
        return n


@pytest.mark.parametrize("watched", [False, True], ids=["put", "put_many with fd()"])
def test_a_core_that_takes_between_the_check_and_the_flag_still_wakes_the_producer(
    watched: bool,
) -> None:
    source = Source(capacity=2, schedule=lambda src: None)
    if watched:
        source.fd()  # a publisher's demand descriptor: the locked path checks for room itself
        source.items = _TakenWhileChecked(source, ("a",), ("b",))
        producer = threading.Thread(target=source.put_many, args=([("c",)],), daemon=True)
    else:  # the check in the wait itself (put and put_many call it when full)
        source.items = _TakenWhileChecked(source, ("a",), ("b",))
        producer = threading.Thread(target=source._wait_room, daemon=True)
    producer.start()
    producer.join(5.0)
    assert not producer.is_alive(), "the producer waits for room that is there"
    assert source.items.injected and len(source.items) <= 1
    source.release()
