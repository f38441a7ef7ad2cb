"""Tests for the reliable ordered channel (producer, consumer) and the simulated link."""

from __future__ import annotations

from typing import Any

import pytest
from channel_streams import reconstruct

from broker_spark.errors import EC, ProtocolError
from broker_spark.protocol.channel import (
    Consumer,
    ConsumerAdded,
    ConsumerLost,
    CumulativeAck,
    Delivered,
    Event,
    Gap,
    Handshake,
    HandshakeCompleted,
    Heartbeat,
    Nack,
    Producer,
    ProducerLost,
    Resynced,
    RetransmitFailed,
    Synced,
)
from tests.simlink import SimLink


def paired(**producer_options: Any) -> tuple[Producer[str], Consumer[str]]:
    """A producer and one consumer "c" after a lossless handshake."""
    producer: Producer[str] = Producer(**producer_options)
    consumer: Consumer[str] = Consumer("p")
    consumer.start()
    for msg in consumer.outgoing():
        producer.receive("c", msg)
    for _, msg in producer.outgoing():
        consumer.receive(msg)
    assert isinstance(consumer.deliverable()[0], Synced)
    consumer.tick()
    for msg in consumer.outgoing():
        producer.receive("c", msg)
    producer.events()
    return producer, consumer


def to_consumer(producer: Producer[str], consumer: Consumer[str]) -> list[Any]:
    msgs = [m for _, m in producer.outgoing()]
    for msg in msgs:
        consumer.receive(msg)
    return msgs


# -- handshake and basic flow ----------------------------------------------------------


def test_nack_zero_from_unknown_consumer_adds_it_and_sends_handshake() -> None:
    producer: Producer[str] = Producer()
    consumer: Consumer[str] = Consumer("p")
    consumer.start()
    assert consumer.outgoing() == [Nack((0,))]
    producer.produce("before")  # nobody listens yet: not buffered, not sent
    assert producer.buffered == 0 and producer.outgoing() == []
    producer.receive("c", Nack((0,)))
    assert producer.events() == [ConsumerAdded("c", 2, False)]
    assert producer.outgoing() == [("c", Handshake(2, 5, None))]
    consumer.receive(Handshake(2, 5, None))
    assert consumer.deliverable() == [Synced(2, None, False)]
    consumer.tick()  # the first ack leaves promptly after the sync was handed out
    assert consumer.outgoing() == [CumulativeAck(1)]
    producer.receive("c", CumulativeAck(1))
    assert producer.events() == [HandshakeCompleted("c")]


def test_consumer_repeats_nack_zero_until_the_handshake_arrives() -> None:
    consumer: Consumer[str] = Consumer("p", nack_timeout=2)
    consumer.start()
    consumer.start()  # idempotent
    assert consumer.outgoing() == [Nack((0,))]
    sent = []
    for now in range(1, 7):
        consumer.tick()
        sent += [(now, m) for m in consumer.outgoing()]
    assert sent == [(n, Nack((0,))) for n in (2, 4, 6)]
    consumer.receive(Handshake(1, 5))
    consumer.deliverable()
    for _ in range(20):
        consumer.tick()
    assert Nack((0,)) not in consumer.outgoing()


def test_events_delivered_in_order_despite_reordering_and_duplicates() -> None:
    producer, consumer = paired()
    for i in range(1, 6):
        producer.produce(f"e{i}")
    events = [m for _, m in producer.outgoing()]
    for msg in [events[4], events[2], events[2], events[0], events[1], events[0], events[3]]:
        consumer.receive(msg)
    assert consumer.deliverable() == [Delivered(i, f"e{i}") for i in range(1, 6)]
    assert consumer.duplicates == 2
    assert consumer.missing() == () and consumer.buffered == 0


def test_producer_with_pending_handshake_resends_it_instead_of_heartbeat() -> None:
    producer: Producer[str] = Producer(snapshot=lambda: "state-at-1")
    producer.add("c")
    assert not producer.add("c")
    (hs,) = [m for _, m in producer.outgoing()]  # lost on the way
    producer.produce("x")
    producer.outgoing()
    for _ in range(5):
        producer.tick()
    assert producer.outgoing() == [("c", hs)]  # same position, same snapshot
    producer.receive("c", Nack((0,)))
    assert producer.outgoing() == [("c", hs)]
    assert hs == Handshake(1, 5, "state-at-1")


# -- timing: heartbeats, acks, nacks, timeouts -------------------------------------------


def test_heartbeats_every_interval_carry_the_latest_seq() -> None:
    producer, _ = paired(heartbeat_interval=5)
    beats = []
    for now in range(1, 16):
        if now == 7:
            producer.produce("x")
            producer.outgoing()
        producer.tick()
        beats += [(now, m) for _, m in producer.outgoing()]
    assert beats == [(5, Heartbeat(0)), (10, Heartbeat(1)), (15, Heartbeat(1))]


def test_consumer_acks_periodically_even_when_idle() -> None:
    consumer: Consumer[str] = Consumer("p")
    consumer.receive(Handshake(1, 3))
    consumer.deliverable()
    acks = []
    for now in range(1, 12):
        consumer.tick()
        acks += [(now, m) for m in consumer.outgoing()]
    assert acks == [
        (1, CumulativeAck(0)),
        (4, CumulativeAck(0)),
        (7, CumulativeAck(0)),
        (10, CumulativeAck(0)),
    ]
    fixed: Consumer[str] = Consumer("p", ack_interval=2)
    fixed.receive(Handshake(1, 3))
    fixed.deliverable()
    ticks = []
    for now in range(1, 8):
        fixed.tick()
        ticks += [now for _ in fixed.outgoing()]
    assert ticks == [1, 3, 5, 7]


def test_acks_cover_only_what_was_handed_out() -> None:
    producer, consumer = paired()
    producer.produce("a")
    to_consumer(producer, consumer)
    for _ in range(5):
        consumer.tick()
    assert consumer.outgoing() == [CumulativeAck(0)]
    assert not consumer.idle()
    consumer.deliverable()
    for _ in range(5):
        consumer.tick()
    assert consumer.outgoing() == [CumulativeAck(1)]
    assert consumer.idle()


def test_tail_loss_is_found_through_the_heartbeat_and_nacked_after_two_ticks() -> None:
    producer, consumer = paired()
    producer.produce("one")
    to_consumer(producer, consumer)
    producer.produce("two")
    producer.outgoing()  # lost
    for _ in range(5):
        producer.tick()
    to_consumer(producer, consumer)  # Heartbeat(2)
    assert consumer.missing() == (2,)
    consumer.tick()
    assert consumer.outgoing() == []
    consumer.tick()
    assert consumer.outgoing() == [Nack((2,))]
    producer.receive("c", Nack((2,)))
    assert producer.outgoing() == [("c", Event(2, "two"))]
    assert producer.retransmits == 1


def test_nack_repeats_while_stalled_and_stops_on_progress() -> None:
    _, consumer = paired()
    consumer.receive(Event(1, "a"))
    consumer.receive(Event(3, "c"))
    consumer.receive(Event(5, "e"))
    assert consumer.missing() == (2, 4)
    nacks = []
    for now in range(1, 6):
        consumer.tick()
        nacks += [(now, m) for m in consumer.outgoing() if isinstance(m, Nack)]
    assert nacks == [(2, Nack((2, 4))), (4, Nack((2, 4)))]
    consumer.receive(Event(2, "b"))  # progress resets the timer
    consumer.tick()
    assert [m for m in consumer.outgoing() if isinstance(m, Nack)] == []
    consumer.tick()
    assert [m for m in consumer.outgoing() if isinstance(m, Nack)] == [Nack((4,))]
    consumer.receive(Event(4, "d"))
    assert [d.seq for d in consumer.deliverable()] == [1, 2, 3, 4, 5]


def test_producer_drops_silent_consumer_after_connection_timeout() -> None:
    producer, _ = paired(connection_timeout=100)
    producer.add("quiet")
    producer.outgoing()
    producer.events()
    for now in range(1, 301):
        if now % 50 == 0:
            producer.receive("c", CumulativeAck(0))  # "c" stays alive
        producer.tick()
        lost = producer.events()
        if now < 100:
            assert lost == []
        elif now == 100:
            assert lost == [ConsumerLost("quiet", EC.ConnectionTimeout)]
    assert producer.consumers == ("c",)
    producer.receive("quiet", CumulativeAck(0))  # ignored: no longer ours
    assert producer.consumers == ("c",)


def test_consumer_detects_silent_producer_and_closes() -> None:
    consumer: Consumer[str] = Consumer("p", connection_timeout=10)
    consumer.receive(Handshake(1, 5))
    for _ in range(9):
        consumer.tick()
    consumer.receive(Heartbeat(0))  # keeps it alive
    for _ in range(9):
        consumer.tick()
    assert not consumer.closed and consumer.events() == []
    consumer.outgoing()
    consumer.tick()
    assert consumer.closed
    assert consumer.events() == [ProducerLost("p", EC.ConnectionTimeout)]
    consumer.receive(Event(1, "late"))
    consumer.tick()
    assert [d for d in consumer.deliverable() if isinstance(d, Delivered)] == []
    assert consumer.outgoing() == [] and not consumer.idle()


def test_uninitialized_consumer_also_times_out() -> None:
    consumer: Consumer[str] = Consumer("p", connection_timeout=5)
    consumer.start()
    for _ in range(5):
        consumer.tick()
    assert consumer.events() == [ProducerLost("p", EC.ConnectionTimeout)]


# -- idle semantics ----------------------------------------------------------------------------


def test_producer_idle_means_every_consumer_synced_and_acked_everything() -> None:
    producer: Producer[str] = Producer()
    assert producer.idle()
    producer.add("c")
    assert not producer.idle()  # handshake not answered yet
    producer.receive("c", CumulativeAck(0))
    assert producer.idle()
    producer.produce("x")
    producer.produce("y")
    assert not producer.idle()
    producer.receive("c", CumulativeAck(1))
    assert not producer.idle() and producer.buffered == 1
    producer.receive("c", CumulativeAck(2))
    assert producer.idle() and producer.buffered == 0
    producer.receive("c", CumulativeAck(1))  # stale ack: no regression
    assert producer.acked("c") == 2 and producer.idle()


def test_consumer_idle_needs_no_gap_nothing_pending_and_ack_sent() -> None:
    consumer: Consumer[str] = Consumer("p")
    assert not consumer.idle()
    consumer.receive(Handshake(1, 5))
    assert not consumer.idle()  # Synced not handed out yet
    consumer.deliverable()
    consumer.tick()
    assert consumer.idle()
    consumer.receive(Heartbeat(1))  # event 1 exists but never arrived
    assert not consumer.idle()
    consumer.receive(Event(1, "x"))
    consumer.deliverable()
    assert not consumer.idle()  # not acknowledged yet
    for _ in range(5):
        consumer.tick()
    assert consumer.outgoing()[-1] == CumulativeAck(1)
    assert consumer.idle()


# -- retransmit_failed -------------------------------------------------------------------------


def test_capacity_overflow_turns_nacks_into_retransmit_failed_and_gaps() -> None:
    producer, consumer = paired(buffer_capacity=2)
    for i in range(1, 6):
        producer.produce(i)
    events = [m for _, m in producer.outgoing()]
    assert producer.buffered == 2
    consumer.receive(events[-1])  # only event 5 arrives
    consumer.tick()
    consumer.tick()
    (nack,) = [m for m in consumer.outgoing() if isinstance(m, Nack)]
    assert nack == Nack((1, 2, 3, 4))
    producer.receive("c", nack)
    replies = to_consumer(producer, consumer)
    assert replies == [RetransmitFailed(1), RetransmitFailed(2), RetransmitFailed(3), Event(4, 4)]
    assert producer.retransmit_failures == 3
    assert consumer.deliverable() == [Gap(1), Gap(2), Gap(3), Delivered(4, 4), Delivered(5, 5)]


def test_events_acked_by_all_consumers_are_pruned() -> None:
    producer: Producer[str] = Producer()
    for handle in ("a", "b"):
        producer.add(handle)
        producer.receive(handle, CumulativeAck(0))
    for i in range(3):
        producer.produce(i)
    producer.receive("a", CumulativeAck(3))
    assert producer.buffered == 3  # "b" still needs them
    producer.receive("b", CumulativeAck(2))
    assert producer.buffered == 1
    producer.outgoing()
    producer.receive("b", Nack((2, 3, 3)))  # 2 is gone, 3 is still there for "b"
    assert producer.outgoing() == [("b", RetransmitFailed(2)), ("b", Event(3, 2))]
    producer.receive("b", Nack((0,)))  # one ack ago: a stale copy of its first request
    assert producer.outgoing() == [] and producer.stale_handshake_requests == 1
    producer.remove("b")
    assert producer.buffered == 0


def test_real_event_wins_over_an_earlier_retransmit_failed() -> None:
    _, consumer = paired()
    consumer.receive(RetransmitFailed(2))
    consumer.receive(Event(2, "b"))
    consumer.receive(RetransmitFailed(2))
    consumer.receive(Event(1, "a"))
    assert consumer.deliverable() == [Delivered(1, "a"), Delivered(2, "b")]


# -- re-handshake ------------------------------------------------------------------------------


def test_nack_zero_after_completion_resyncs_with_a_fresh_snapshot() -> None:
    produced: list[int] = []
    producer: Producer[str] = Producer(snapshot=lambda: tuple(produced))
    consumer: Consumer[str] = Consumer("p")
    consumer.start()
    producer.receive("c", consumer.outgoing()[0])
    to_consumer(producer, consumer)
    first_items = consumer.deliverable()
    consumer.tick()
    producer.receive("c", consumer.outgoing()[0])
    for i in range(1, 5):
        produced.append(i)
        producer.produce(i)
    events = [m for _, m in producer.outgoing()]
    consumer.receive(events[0])
    consumer.receive(events[3])  # 2 and 3 lost; 4 buffered
    producer.receive("c", Nack((0,)))  # right after an ack: a stale copy, ignored
    assert producer.outgoing() == [] and producer.stale_handshake_requests == 1
    for _ in range(10):  # no ack for two heartbeat intervals: it really lost its state
        producer.tick()
    producer.outgoing()
    producer.receive("c", Nack((0,)))
    assert producer.events() == [
        ConsumerAdded("c", 1, False),
        HandshakeCompleted("c"),
        ConsumerAdded("c", 5, True),
    ]
    assert producer.outgoing() == [("c", Handshake(5, 5, (1, 2, 3, 4)))]
    assert producer.buffered == 0  # its path restarts after everything produced
    consumer.receive(Handshake(5, 5, (1, 2, 3, 4)))
    assert consumer.events() == [Resynced("p", 2, 5)]
    assert consumer.missing() == () and consumer.buffered == 0
    items = first_items + consumer.deliverable()
    assert items == [Synced(1, (), False), Delivered(1, 1), Synced(5, (1, 2, 3, 4), True)]
    assert reconstruct(items) == [1, 2, 3, 4]


def test_late_duplicate_handshake_is_ignored() -> None:
    producer, consumer = paired()
    producer.produce("a")
    to_consumer(producer, consumer)
    consumer.receive(Handshake(1, 5))
    consumer.receive(Handshake(2, 5))  # nothing lacking at 2: nothing to resync
    assert consumer.stale_handshakes == 2
    assert consumer.deliverable() == [Delivered(1, "a")]
    assert consumer.events() == []


# -- bounds and bad input ------------------------------------------------------------------------


def test_window_bounds_the_out_of_order_buffer() -> None:
    consumer: Consumer[str] = Consumer("p", window=4)
    consumer.receive(Handshake(1, 5))
    for seq in (3, 4, 5, 9, 1000):
        consumer.receive(Event(seq, seq))
    assert consumer.buffered == 2 and consumer.dropped_ahead == 3
    assert consumer.missing() == (1, 2)  # capped at the window
    consumer.receive(Event(1, 1))
    consumer.receive(Event(2, 2))
    assert consumer.missing() == (5, 6, 7, 8)


def test_producer_rejects_impossible_input() -> None:
    producer, _ = paired(max_nack=3)
    producer.produce("x")
    with pytest.raises(ProtocolError):
        producer.receive("c", Handshake(1, 5))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="beyond"):
        producer.receive("c", CumulativeAck(2))
    with pytest.raises(ProtocolError):
        producer.receive("c", Nack((7,)))
    with pytest.raises(ProtocolError, match="more than 3"):
        producer.receive("c", Nack((1, 1, 1, 1)))
    with pytest.raises(ProtocolError):
        producer.receive("c", CumulativeAck(-1))


def test_consumer_rejects_impossible_input() -> None:
    consumer: Consumer[str] = Consumer("p")
    with pytest.raises(ProtocolError):
        consumer.receive(CumulativeAck(1))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        consumer.receive(Handshake(0, 5))
    with pytest.raises(ProtocolError):
        consumer.receive(Handshake(1, 70000))
    consumer.receive(Handshake(1, 5))
    with pytest.raises(ProtocolError):
        consumer.receive(Event(0, "x"))
    with pytest.raises(ProtocolError):
        consumer.receive(RetransmitFailed(-3))


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        Producer(heartbeat_interval=0)
    with pytest.raises(ValueError):
        Producer(heartbeat_interval=70000)
    with pytest.raises(ValueError):
        Consumer("p", window=0)


# -- simulated lossy link ------------------------------------------------------------------------


def lossy_link(seed: int, n_consumers: int, **options: Any) -> SimLink[str]:
    producer: Producer[str] = Producer(
        buffer_capacity=options.pop("buffer_capacity", 4096),
        snapshot=options.pop("snapshot", None),
    )
    consumers = {f"c{i}": Consumer("p") for i in range(n_consumers)}
    link = SimLink(producer, consumers, seed=seed, **options)
    for consumer in consumers.values():
        consumer.start()
    return link


def all_synced(link: SimLink[str]) -> bool:
    producer = link.producer
    return set(producer.consumers) == set(link.consumers) and producer.idle()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_large_buffer_delivers_exactly_the_produced_sequence(seed: int) -> None:
    link = lossy_link(seed, 3, loss=0.33, duplication=0.15, reorder=0.3)
    assert link.run_until(lambda: all_synced(link), 500)
    for i in range(300):
        link.producer.produce(i)
        if i % 3 == 0:
            link.step()
    assert link.run_until(link.idle, 2000)
    for handle, items in link.deliveries.items():
        assert items == [Synced(1, None, False)] + [Delivered(i + 1, i) for i in range(300)], handle
        assert link.consumer_events[handle] == []
    assert link.stats.lost > 0 and link.stats.duplicated > 0 and link.stats.delayed > 0
    assert link.producer.retransmits > 0
    assert link.producer.buffered == 0


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_tiny_buffer_under_heavy_loss_reports_gaps_exactly(seed: int) -> None:
    link = lossy_link(seed, 3, loss=0.45, duplication=0.1, reorder=0.3, buffer_capacity=2)
    assert link.run_until(lambda: all_synced(link), 500)
    for i in range(200):
        link.producer.produce(i)
        link.step()
    assert link.run_until(link.idle, 3000)
    total_gaps = 0
    for items in link.deliveries.values():
        assert items[0] == Synced(1, None, False)
        body = items[1:]
        assert [x.seq for x in body] == list(range(1, 201))  # every seq accounted for once
        delivered = [x.content for x in body if isinstance(x, Delivered)]
        assert all(x.content == x.seq - 1 for x in body if isinstance(x, Delivered))
        assert delivered == sorted(set(delivered))  # increasing subsequence of what was produced
        total_gaps += sum(isinstance(x, Gap) for x in body)
    assert total_gaps > 0
    assert link.producer.retransmit_failures >= total_gaps // 3


def test_consumers_joining_mid_stream_rebuild_the_producer_state() -> None:
    produced: list[int] = []
    link = lossy_link(
        7, 0, loss=0.3, duplication=0.1, reorder=0.3, snapshot=lambda: tuple(produced)
    )
    for i in range(150):
        if i % 40 == 0:
            consumer: Consumer[str] = Consumer("p")
            link.add_consumer(f"late{i}", consumer)
            consumer.start()
        produced.append(i)
        link.producer.produce(i)
        link.step()
    assert link.run_until(link.idle, 2000)
    for items in link.deliveries.values():
        assert reconstruct(items) == produced


def test_partition_times_out_both_sides_and_a_restart_recovers() -> None:
    produced: list[int] = []
    link = lossy_link(3, 1, snapshot=lambda: tuple(produced))
    assert link.run_until(lambda: all_synced(link), 50)
    link.loss = 1.0
    for i in range(10):
        produced.append(i)
        link.producer.produce(i)
    link.run(100)
    assert ConsumerLost("c0", EC.ConnectionTimeout) in link.producer_events
    assert link.consumer_events["c0"] == [ProducerLost("p", EC.ConnectionTimeout)]
    link.loss = 0.0
    link.remove_consumer("c0")
    fresh: Consumer[str] = Consumer("p")  # a new incarnation gets a new handle
    link.add_consumer("c0-2", fresh)
    fresh.start()
    assert link.run_until(link.idle, 50)
    assert link.deliveries["c0-2"] == [Synced(11, tuple(range(10)), False)]


def test_same_seed_same_run() -> None:
    def run(seed: int) -> tuple[Any, ...]:
        link = lossy_link(seed, 2, loss=0.3, duplication=0.2, reorder=0.4)
        for i in range(50):
            link.producer.produce(i)
            link.step()
        link.run(20)
        return (link.stats, link.deliveries, link.now)

    assert run(5) == run(5)
    assert run(5) != run(6)
