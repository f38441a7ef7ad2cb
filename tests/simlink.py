"""A deterministic lossy link between one channel producer and its consumers.

Channel (and store) behaviour under loss, duplication and reordering is what
matters, and real sockets neither produce those on demand nor repeat them. This
driver does, from a seed: every message sent is lost, duplicated or delayed by
a few ticks with the given probabilities, and each :meth:`SimLink.step` is one
tick of simulated time (deliver what is due, tick every party, collect output).
Nothing here reads a clock; the same seed gives the same run.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from broker_spark.protocol.channel import Consumer, Delivery, Producer

__all__ = ["LinkStats", "SimLink"]

H = TypeVar("H", bound=Hashable)

_TO_CONSUMER = 0
_TO_PRODUCER = 1


@dataclass(slots=True)
class LinkStats:
    """Counts of what the link did to the messages handed to it."""

    sent: int = 0
    lost: int = 0
    duplicated: int = 0
    delayed: int = 0
    delivered: int = 0


@dataclass(slots=True)
class SimLink(Generic[H]):
    """Moves messages between ``producer`` and ``consumers`` (keyed by their handles).

    ``loss``, ``duplication`` and ``reorder`` are per-message probabilities; a
    reordered message arrives 1 to ``max_delay`` ticks later than the others (which
    take one tick). The probabilities may be changed between steps, e.g. ``loss=1``
    to cut the link. Deliveries and events are drained into ``deliveries``,
    ``producer_events`` and ``consumer_events`` after every step.
    """

    producer: Producer[H]
    consumers: dict[H, Consumer[Any]] = field(default_factory=dict)
    seed: int = 0
    loss: float = 0.0
    duplication: float = 0.0
    reorder: float = 0.0
    max_delay: int = 4
    now: int = 0
    stats: LinkStats = field(default_factory=LinkStats)
    deliveries: dict[H, list[Delivery]] = field(default_factory=dict)
    producer_events: list[Any] = field(default_factory=list)
    consumer_events: dict[H, list[Any]] = field(default_factory=dict)
    _rng: random.Random = field(init=False)
    _flight: list[tuple[int, int, int, H, Any]] = field(default_factory=list, init=False)
    _counter: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        for handle in list(self.consumers):
            self.deliveries.setdefault(handle, [])
            self.consumer_events.setdefault(handle, [])

    def add_consumer(self, handle: H, consumer: Consumer[Any]) -> None:
        self.consumers[handle] = consumer
        self.deliveries.setdefault(handle, [])
        self.consumer_events.setdefault(handle, [])

    def remove_consumer(self, handle: H) -> None:
        """Take a consumer off the link (a crash): messages to it vanish from now on."""
        self.consumers.pop(handle, None)

    @property
    def in_flight(self) -> int:
        return len(self._flight)

    def step(self) -> None:
        """One tick: deliver what is due, tick everybody, collect and schedule output."""
        self.now += 1
        self._collect()  # whatever the caller produced between steps leaves now
        while self._flight and self._flight[0][0] <= self.now:
            _, _, direction, handle, msg = heapq.heappop(self._flight)
            if direction == _TO_PRODUCER:
                self.stats.delivered += 1
                self.producer.receive(handle, msg)
            elif handle in self.consumers:
                self.stats.delivered += 1
                self.consumers[handle].receive(msg)
        self.producer.tick()
        for consumer in self.consumers.values():
            consumer.tick()
        self._collect()

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    def run_until(self, done: Callable[[], bool], max_ticks: int) -> bool:
        """Step until ``done()`` holds (True) or ``max_ticks`` passed (False)."""
        for _ in range(max_ticks):
            if done():
                return True
            self.step()
        return done()

    def idle(self) -> bool:
        """Producer and every open consumer idle, and nothing on the wire."""
        return (
            not self._flight
            and self.producer.idle()
            and all(c.idle() for c in self.consumers.values() if not c.closed)
        )

    def _collect(self) -> None:
        for handle, msg in self.producer.outgoing():
            self._send(_TO_CONSUMER, handle, msg)
        self.producer_events.extend(self.producer.events())
        for handle, consumer in self.consumers.items():
            for msg in consumer.outgoing():
                self._send(_TO_PRODUCER, handle, msg)
            self.deliveries[handle].extend(consumer.deliverable())
            self.consumer_events[handle].extend(consumer.events())

    def _send(self, direction: int, handle: H, msg: Any) -> None:
        self.stats.sent += 1
        rng = self._rng
        if rng.random() < self.loss:
            self.stats.lost += 1
            return
        copies = 1
        if rng.random() < self.duplication:
            self.stats.duplicated += 1
            copies = 2
        for _ in range(copies):
            delay = 1
            if rng.random() < self.reorder:
                self.stats.delayed += 1
                delay += rng.randint(1, self.max_delay)
            self._counter += 1
            heapq.heappush(self._flight, (self.now + delay, self._counter, direction, handle, msg))
