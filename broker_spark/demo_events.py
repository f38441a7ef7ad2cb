"""Synthetic Zeek-like connection events for the demo, published at a steady rate.

Each event is shaped like a row of Zeek's ``conn.log`` flattened into an
event's arguments, so a typed Spark schema can map it column by column::

    conn(ts, uid, orig_h, resp_h, resp_p, service, orig_bytes, resp_bytes)

with Broker types timestamp, string, address, address, port, string, count,
count. The mix of services and their byte sizes is skewed (much DNS, few
big SSH transfers) so the demo's per-service table has something to show.

The publisher runs in its own thread and paces itself against the clock
(``due = rate * elapsed - published``), publishing what is due every tick
with one ``publish_batch`` call: a steady rate whatever the tick's jitter,
without a sleep per event.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_spark.data import Count, Port
from broker_spark.zeek import Event

__all__ = [
    "EVENT_DDL",
    "EVENT_NAME",
    "EVENT_TOPIC",
    "SERVICES",
    "ConnectionEvents",
    "EventPublisher",
    "Service",
]

#: Where the demo publishes its connection events.
EVENT_TOPIC = "/zeek/demo/conn"
#: The events' name.
EVENT_NAME = "conn"
#: The typed Spark schema of the events read with ``format=zeek``: metadata, then the arguments.
EVENT_DDL = (
    "offset LONG, event STRING, ts TIMESTAMP, uid STRING, orig_h STRING, resp_h STRING,"
    " resp_p STRING, service STRING, orig_bytes BIGINT, resp_bytes BIGINT"
)


@dataclass(frozen=True)
class Service:
    """A service in the synthetic mix: its port, share of connections and typical sizes."""

    name: str
    port: Port
    weight: int
    orig_bytes: int  # median bytes sent by the originator
    resp_bytes: int  # median bytes sent by the responder


SERVICES: tuple[Service, ...] = (
    Service("dns", Port(53, Port.UDP), 40, 60, 120),
    Service("http", Port(80, Port.TCP), 25, 500, 20_000),
    Service("ssl", Port(443, Port.TCP), 25, 1_200, 60_000),
    Service("smtp", Port(25, Port.TCP), 6, 8_000, 400),
    Service("ssh", Port(22, Port.TCP), 4, 30_000, 90_000),
)

_UID_ALPHABET = string.ascii_letters + string.digits


class ConnectionEvents:
    """A deterministic source of connection events (seeded; timestamps from ``clock``)."""

    def __init__(self, seed: int = 7, clock: Callable[[], dt.datetime] | None = None) -> None:
        self._rng = random.Random(seed)
        self._clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self._weights = [s.weight for s in SERVICES]
        self._clients = [ipaddress.IPv4Address(0x0A000000 + i) for i in range(2, 250)]
        self._servers = [ipaddress.IPv4Address(0xC0A80000 + i) for i in range(1, 40)]

    def _bytes(self, median: int) -> int:
        return max(0, int(self._rng.lognormvariate(0.0, 0.8) * median))

    def make(self) -> Event:
        """One event, stamped now."""
        rng = self._rng
        service = rng.choices(SERVICES, self._weights)[0]
        return Event(
            EVENT_NAME,
            self._clock(),
            "C" + "".join(rng.choices(_UID_ALPHABET, k=17)),
            rng.choice(self._clients),
            rng.choice(self._servers),
            service.port,
            service.name,
            Count(self._bytes(service.orig_bytes)),
            Count(self._bytes(service.resp_bytes)),
        )

    def batch(self, count: int) -> list[Event]:
        return [self.make() for _ in range(count)]


class EventPublisher:
    """Publishes ``rate`` events a second to ``topic`` through ``publish_batch`` until stopped.

    ``publish_batch`` is anything taking ``(topic, value)`` pairs, normally
    :meth:`broker_spark.Endpoint.publish_batch`. ``published`` is exact once
    :meth:`stop` returned.
    """

    def __init__(
        self,
        publish_batch: Callable[..., None],
        rate: float,
        topic: str = EVENT_TOPIC,
        events: ConnectionEvents | None = None,
        tick: float = 0.05,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, not {rate}")
        self.rate = rate
        self.topic = topic
        self.published = 0
        self.error: BaseException | None = None
        self._publish_batch = publish_batch
        self._events = events or ConnectionEvents()
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-events", daemon=True)
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> EventPublisher:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop publishing and wait for the thread (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if not self._stopped:
            self._stopped = time.monotonic()

    @property
    def elapsed(self) -> float:
        end = self._stopped or time.monotonic()
        return end - self._started if self._started else 0.0

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                due = int(self.rate * (time.monotonic() - self._started)) - self.published
                if due > 0:
                    batch = self._events.batch(due)
                    self._publish_batch(*[(self.topic, event) for event in batch])
                    self.published += due
                self._stop.wait(self._tick)
        except BaseException as exc:  # reported by the demo, not lost in a thread
            self.error = exc
