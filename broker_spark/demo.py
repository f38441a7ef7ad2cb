"""The demo that ``make demo`` runs until the Spark data source lands.

Two endpoints are joined in-process; one publishes synthetic Zeek
``connection_established``-like events at a steady rate, the other subscribes
and aggregates connections and bytes per service, printing a short summary.
It exercises the real data path: values are encoded once with Broker's binary
encoding, routed through both cores and decoded by the subscriber.
"""

from __future__ import annotations

import ipaddress
import random
import threading
import time
from collections import Counter

from broker_spark.core.memory_link import connect
from broker_spark.data import Count, Port
from broker_spark.endpoint import Endpoint
from broker_spark.zeek import Event

SERVICES = ("http", "dns", "ssl", "ssh", "smtp")
TOPIC = "/zeek/demo/conn"


def make_event(rng: random.Random, seq: int) -> Event:
    service = rng.choice(SERVICES)
    return Event(
        "connection_established",
        Count(seq),
        ipaddress.IPv4Address(rng.randrange(0x0A000000, 0x0AFFFFFF)),
        Port(rng.choice((80, 53, 443, 22, 25)), Port.TCP),
        service,
        Count(rng.randrange(40, 150_000)),
    )


def run(seconds: float = 5.0, rate: int = 20_000, out=print) -> dict[str, int]:
    """Publish for ``seconds`` at about ``rate`` events/s; return the totals seen.

    The analyst reads in its own thread: publishing blocks when the subscriber
    falls behind (backpressure), so the reader must not share the publisher's thread.
    """
    rng = random.Random(7)
    conns: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    stop = threading.Event()

    def consume(sub) -> None:
        while not stop.is_set():
            for _topic, value in sub.get(1024, 0.1):
                args = Event(value).args()
                conns[args[3]] += 1
                nbytes[args[3]] += int(args[4])

    with Endpoint() as sensor, Endpoint() as analyst:
        sub = analyst.make_subscriber(TOPIC, qsize=4096)
        connect(sensor, analyst)
        reader = threading.Thread(target=consume, args=(sub,), name="demo-analyst")
        reader.start()
        out(f"sensor {sensor.node_id()[:8]} -> analyst {analyst.node_id()[:8]} on {TOPIC}")
        published = 0
        start = time.monotonic()
        tick = 0.05
        try:
            while (elapsed := time.monotonic() - start) < seconds:
                due = int(rate * (elapsed + tick)) - published
                if due > 0:
                    events = [(TOPIC, make_event(rng, published + i)) for i in range(due)]
                    sensor.publish_batch(*events)
                    published += due
                time.sleep(tick)
            deadline = time.monotonic() + 5
            while sum(conns.values()) < published and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            reader.join()
        took = time.monotonic() - start
    received = sum(conns.values())
    out(f"published {published} events, received {received} in {took:.1f} s")
    out(f"{'service':<8} {'connections':>12} {'bytes':>14}")
    for service in sorted(conns):
        out(f"{service:<8} {conns[service]:>12} {nbytes[service]:>14}")
    out("(the Spark structured-streaming demo arrives with the Spark data source)")
    return {"published": published, "received": received}
