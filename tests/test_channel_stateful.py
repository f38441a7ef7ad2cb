"""The reliable ordered channel under random interleavings of everything (Hypothesis
state machines): producing, delivering, losing, duplicating, reordering, ticking,
consumers crashing and coming back."""

from __future__ import annotations

from typing import Any

from channel_streams import GAP, reconstruct
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from broker_spark.protocol.channel import Consumer, Producer

# -- stateful: random interleavings of everything ------------------------------------------------


class ChannelMachine(RuleBasedStateMachine):
    """One producer, two consumer slots, and a wire the test manipulates message by message.

    A crashed or timed-out consumer comes back as a new incarnation under a new
    handle (as a restarted clone gets a new entity id); messages for an old
    incarnation are lost.
    """

    capacity = 1000

    def __init__(self) -> None:
        super().__init__()
        self.produced: list[int] = []
        self.producer: Producer[str] = Producer(
            heartbeat_interval=3,
            connection_timeout=60,
            buffer_capacity=self.capacity,
            snapshot=lambda: tuple(self.produced),
        )
        self.incarnations = {"a": 0, "b": 0}
        self.consumers: dict[str, Consumer[str]] = {}  # current incarnations by handle
        self.items: dict[str, list[Any]] = {}
        self.to_consumers: list[tuple[str, Any]] = []
        self.to_producer: list[tuple[str, Any]] = []

    @initialize()
    def start(self) -> None:
        for slot in self.incarnations:
            self.restart(slot)

    def restart(self, slot: str) -> None:
        old = f"{slot}{self.incarnations[slot]}"
        self.consumers.pop(old, None)
        self.items.pop(old, None)
        self.incarnations[slot] += 1
        handle = f"{slot}{self.incarnations[slot]}"
        consumer: Consumer[str] = Consumer("p", nack_timeout=2, connection_timeout=60, window=16)
        self.consumers[handle] = consumer
        self.items[handle] = []
        consumer.start()
        self.collect()

    def collect(self) -> None:
        self.to_consumers += self.producer.outgoing()
        self.producer.events()
        for handle, consumer in self.consumers.items():
            self.to_producer += [(handle, m) for m in consumer.outgoing()]
            self.items[handle] += consumer.deliverable()
            consumer.events()

    def to_consumer(self, handle: str, msg: Any) -> None:
        if handle in self.consumers:
            self.consumers[handle].receive(msg)

    @rule(count=st.integers(1, 4))
    def produce(self, count: int) -> None:
        for _ in range(count):
            self.produced.append(len(self.produced))
            self.producer.produce(self.produced[-1])
        self.collect()

    @precondition(lambda self: self.to_consumers)
    @rule(i=st.integers(0, 10_000), keep=st.booleans())
    def deliver_to_consumer(self, i: int, keep: bool) -> None:
        handle, msg = self.to_consumers[i % len(self.to_consumers)]
        if not keep:  # keep=True delivers a copy and leaves the original: a duplicate
            del self.to_consumers[i % len(self.to_consumers)]
        self.to_consumer(handle, msg)
        self.collect()

    @precondition(lambda self: self.to_producer)
    @rule(i=st.integers(0, 10_000), keep=st.booleans())
    def deliver_to_producer(self, i: int, keep: bool) -> None:
        handle, msg = self.to_producer[i % len(self.to_producer)]
        if not keep:
            del self.to_producer[i % len(self.to_producer)]
        self.producer.receive(handle, msg)
        self.collect()

    @precondition(lambda self: self.to_consumers)
    @rule(i=st.integers(0, 10_000))
    def drop_to_consumer(self, i: int) -> None:
        del self.to_consumers[i % len(self.to_consumers)]

    @precondition(lambda self: self.to_producer)
    @rule(i=st.integers(0, 10_000))
    def drop_to_producer(self, i: int) -> None:
        del self.to_producer[i % len(self.to_producer)]

    @rule(losses=st.integers(0, 2**16 - 1))
    def network_round(self, losses: int) -> None:
        """Deliver everything in flight except the messages the bits of ``losses`` pick."""
        wire, self.to_consumers = self.to_consumers, []
        back, self.to_producer = self.to_producer, []
        for index, (handle, msg) in enumerate(wire):
            if not losses >> (index % 16) & 1:
                self.to_consumer(handle, msg)
        for index, (handle, msg) in enumerate(back):
            if not losses >> ((index + 8) % 16) & 1:
                self.producer.receive(handle, msg)
        self.tick(1)

    @rule(ticks=st.integers(1, 12))
    def tick(self, ticks: int) -> None:
        for _ in range(ticks):
            self.producer.tick()
            for consumer in self.consumers.values():
                consumer.tick()
            self.collect()

    @rule(slot=st.sampled_from(["a", "b"]))
    def tick_one_consumer(self, slot: str) -> None:
        self.consumers[f"{slot}{self.incarnations[slot]}"].tick()
        self.collect()

    @rule(slot=st.sampled_from(["a", "b"]))
    def crash_consumer(self, slot: str) -> None:
        self.restart(slot)

    @invariant()
    def deliveries_are_consistent(self) -> None:
        for handle, items in self.items.items():
            if not items:
                continue
            state = reconstruct(items)
            for index, value in enumerate(state):
                assert value is GAP or value == self.produced[index], handle
            if self.capacity >= 1000:
                assert GAP not in state

    @invariant()
    def bounds_hold(self) -> None:
        assert self.producer.buffered <= self.capacity
        for handle, consumer in self.consumers.items():
            assert consumer.buffered <= consumer.window
            assert consumer.next_seq <= self.producer.seq + 1
            acked = self.producer.acked(handle)
            assert acked is None or acked <= self.producer.seq

    @invariant()
    def idle_means_everything_acked(self) -> None:
        if self.producer.idle():
            for handle in self.producer.consumers:
                assert self.producer.acked(handle) == self.producer.seq

    def flush(self) -> None:
        """Deliver everything on the wire, in order, until it is empty."""
        for _ in range(100):
            if not (self.to_consumers or self.to_producer):
                return
            wire, self.to_consumers = self.to_consumers, []
            for handle, msg in wire:
                self.to_consumer(handle, msg)
            back, self.to_producer = self.to_producer, []
            for handle, msg in back:
                self.producer.receive(handle, msg)
            self.collect()
        raise AssertionError("messages keep causing messages")

    def converged(self) -> bool:
        return (
            self.producer.idle()
            and set(self.producer.consumers) == set(self.consumers)
            and all(c.idle() for c in self.consumers.values())
        )

    def teardown(self) -> None:
        """Heal the network: everything in order, no loss; it must converge."""
        for _ in range(400):
            for slot in self.incarnations:
                if self.consumers[f"{slot}{self.incarnations[slot]}"].closed:
                    self.restart(slot)  # what a store does on producer_lost
            self.flush()
            if self.converged():
                break
            self.tick(1)
        else:
            raise AssertionError("channel did not converge on a healed network")
        for handle, items in self.items.items():
            state = reconstruct(items)
            assert len(state) == len(self.produced), handle
            for index, value in enumerate(state):
                assert value is GAP or value == self.produced[index]
            if self.capacity >= 1000:
                assert GAP not in state


class TinyBufferChannelMachine(ChannelMachine):
    capacity = 2


_stateful = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestChannelStateful = ChannelMachine.TestCase
TestChannelStateful.settings = _stateful
TestTinyBufferChannelStateful = TinyBufferChannelMachine.TestCase
TestTinyBufferChannelStateful.settings = _stateful
