"""Synthetic Zeek connections for the demo, published at a steady rate.

The demo publishes them as Zeek publishes its ``conn.log``
(:class:`ConnectionLogs`): a LogCreate with Zeek's standard conn columns,
then Batches of LogWrites on ``zeek/logs/Conn::LOG``, each record in Zeek's
binary serialization (``publish --generate conn``). They can also be Zeek
events shaped like a row of ``conn.log`` flattened into an event's arguments
(:class:`ConnectionEvents`, ``publish --generate conn-events``)::

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
from typing import Any

from broker_spark.data import Count, Enum, Port
from broker_spark.errors import SC
from broker_spark.zeek import Batch, Event, LogCreate, LogWrite, standard_schema
from broker_spark.zeek.types import zeek_interval, zeek_time

__all__ = [
    "CONN_LOG_TOPIC",
    "EVENT_DDL",
    "EVENT_NAME",
    "EVENT_TOPIC",
    "LOG_BATCH",
    "SERVICES",
    "ConnectionEvents",
    "ConnectionLogs",
    "EventPublisher",
    "Service",
]

#: Where Zeek publishes its conn log (``Broker::default_log_topic_prefix`` + the stream id).
CONN_LOG_TOPIC = "zeek/logs/Conn::LOG"
#: Records per Batch, at most, as Zeek's ``Broker::log_batch_size``.
LOG_BATCH = 400

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

    def greeting(self, topic: str) -> list[tuple[str, Any]]:
        """Nothing: events need no introduction."""
        return []

    def messages(self, count: int, topic: str) -> list[tuple[str, Any]]:
        return [(topic, event) for event in self.batch(count)]


class ConnectionLogs:
    """A deterministic source of ``conn.log`` records, as a Zeek sends them over Broker.

    The columns are Zeek's standard conn log; ``greeting`` is the LogCreate a
    Zeek sends first (and to every new peer), ``messages`` the records as
    Batches of at most :data:`LOG_BATCH` LogWrites.
    """

    schema = standard_schema("conn")

    def __init__(self, seed: int = 7, clock: Callable[[], float] = time.time) -> None:
        self._rng = random.Random(seed)
        self._clock = clock
        self._weights = [s.weight for s in SERVICES]
        self._clients = [ipaddress.IPv4Address(0x0A000000 + i) for i in range(2, 250)]
        self._servers = [ipaddress.IPv4Address(0xC0A80000 + i) for i in range(1, 40)]

    def record(self) -> list[Any]:
        """One record's values, in the conn log's column order, stamped now."""
        rng = self._rng
        service = rng.choices(SERVICES, self._weights)[0]
        udp = service.port.type() == Port.UDP
        orig = max(0, int(rng.lognormvariate(0.0, 0.8) * service.orig_bytes))
        resp = max(0, int(rng.lognormvariate(0.0, 0.8) * service.resp_bytes))
        orig_pkts = 1 + orig // 1400
        resp_pkts = 1 + resp // 1400
        header = 28 if udp else 52
        return [
            zeek_time(self._clock()),  # ts
            "C" + "".join(rng.choices(_UID_ALPHABET, k=17)),  # uid
            rng.choice(self._clients),  # id.orig_h
            Port(rng.randrange(1024, 65536), service.port.type()),  # id.orig_p
            rng.choice(self._servers),  # id.resp_h
            service.port,  # id.resp_p
            Enum("udp" if udp else "tcp"),  # proto
            service.name,  # service
            zeek_interval(round(rng.expovariate(1 / 2.0), 6)),  # duration
            Count(orig),  # orig_bytes
            Count(resp),  # resp_bytes
            "SF",  # conn_state
            True,  # local_orig
            False,  # local_resp
            Count(0),  # missed_bytes
            "Dd" if udp else "ShADadFf",  # history
            Count(orig_pkts),  # orig_pkts
            Count(orig + orig_pkts * header),  # orig_ip_bytes
            Count(resp_pkts),  # resp_pkts
            Count(resp + resp_pkts * header),  # resp_ip_bytes
            None,  # tunnel_parents
            Count(17 if udp else 6),  # ip_proto
        ]

    def greeting(self, topic: str = CONN_LOG_TOPIC) -> list[tuple[str, Any]]:
        return [(topic, LogCreate.of(self.schema))]

    def messages(self, count: int, topic: str = CONN_LOG_TOPIC) -> list[tuple[str, Any]]:
        writes = [LogWrite.of(self.schema, self.record()) for _ in range(count)]
        return [(topic, Batch(*writes[i : i + LOG_BATCH])) for i in range(0, count, LOG_BATCH)]


class EventPublisher:
    """Publishes ``rate`` events (or log records) a second to ``topic`` until stopped.

    ``publish_batch`` is anything taking ``(topic, value)`` pairs, normally
    :meth:`broker_spark.Endpoint.publish_batch`; ``events`` is the source
    (:class:`ConnectionEvents` by default, or :class:`ConnectionLogs`), whose
    ``greeting`` goes first, and again whenever ``peers_added`` (a status
    subscriber) reports a new peer, as a Zeek sends its LogCreates to every new
    peer. ``published`` counts records, exact once :meth:`stop` returned.
    """

    def __init__(
        self,
        publish_batch: Callable[..., None],
        rate: float,
        topic: str = EVENT_TOPIC,
        events: ConnectionEvents | ConnectionLogs | None = None,
        tick: float = 0.05,
        peers_added: Any = None,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, not {rate}")
        self.rate = rate
        self.topic = topic
        self.published = 0
        self.error: BaseException | None = None
        self._publish_batch = publish_batch
        self._events = events or ConnectionEvents()
        self._peers_added = peers_added
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

    def _greet_new_peers(self) -> None:
        if self._peers_added is None:
            return
        codes = [getattr(s, "code", lambda: None)() for s in self._peers_added.poll()]
        if SC.PeerAdded in codes:
            greeting = self._events.greeting(self.topic)
            if greeting:
                self._publish_batch(*greeting)

    def _run(self) -> None:
        try:
            greeting = self._events.greeting(self.topic)
            if greeting:
                self._publish_batch(*greeting)
            while not self._stop.is_set():
                self._greet_new_peers()
                due = int(self.rate * (time.monotonic() - self._started)) - self.published
                if due > 0:
                    self._publish_batch(*self._events.messages(due, self.topic))
                    self.published += due
                self._stop.wait(self._tick)
        except BaseException as exc:  # reported by the demo, not lost in a thread
            self.error = exc
