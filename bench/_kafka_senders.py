"""The producers of bench/kafka_path.py: a Zeek node on ZeroMQ, and Zeek's Kafka plugin.

Each runs as a process of its own (``spawn``: its CPU is counted as the producer's), sends
:func:`_kafka_records.schedule`'s records, and reports through a pipe. Unpaced, a send the
transport refuses is retried (the run measures how fast the records can go); paced, it is
dropped and counted, as each real producer does with its defaults:

- **ZeroMQ**: a PUSH socket with Zeek's defaults (``log_sndhwm`` 1000, non-blocking sends,
  as ``DoPublishLogWrites``): a batch refused at the high-water mark is what Zeek drops;
- **Kafka**: ``confluent_kafka.Producer`` with librdkafka's defaults (``acks=all``, retries
  without end within ``message.timeout.ms`` 300 s, no idempotence, no compression unless
  asked), a topic per log, one JSON record a message; ``BufferError`` (its queue full) is
  what the plugin drops, and so is a message whose delivery failed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import _kafka_records as kr
from zeromq_logs import zeek_push

#: Records between two looks at the clock when paced: how smoothly a Kafka sender spreads
#: records (Zeek's Kafka plugin produces each record as it is written).
KAFKA_STEP = 100


def _pace(started: float, done: int, rate: float) -> None:
    if rate:
        ahead = started + done / rate - time.time()
        if ahead > 0:
            time.sleep(ahead)


def zeromq_sender(endpoint: str, records: int, rate: float, conn: Any) -> None:
    """Zeek's ZeroMQ logging into a relay node's PULL: ``records`` in batches of 1000."""
    import zmq

    templates = {p: kr.template(p) for p in kr.TABLES_MIX}
    ctx = zmq.Context()
    push = zeek_push(ctx, endpoint)
    conn.send("ready")
    conn.recv()
    sent = dropped = 0
    started = time.time()
    for path, count, first in kr.schedule(records):
        _pace(started, sent + dropped, rate)
        while True:
            frames = [
                b"log-write",
                b"bench_zeek",
                b"zeek-bin-serializer",
                kr.stamp_batch(templates[path], count, first, time.time()),
            ]
            try:
                push.send_multipart(frames, zmq.NOBLOCK)
                sent += count
                break
            except zmq.Again:  # Zeek: "Failed to send log write. HWM reached?"
                if rate:
                    dropped += count
                    break
                time.sleep(0.0005)
    conn.send({"sent": sent, "dropped": dropped, "first": started, "last": time.time()})
    push.close()
    ctx.term()


def quiet_librdkafka() -> logging.Logger:
    """A logger that keeps what librdkafka would print to stderr (each refused connection
    while the broker is down, its queues purged at the end); its settings stay the defaults."""
    quiet = logging.getLogger("bench.librdkafka")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    return quiet


def kafka_sender(
    bootstrap: str, records: int, rate: float, conn: Any, prefix: str, settings: dict[str, str]
) -> None:
    """Zeek's Kafka plugin: each record a JSON message on topic ``prefix + path``."""
    from confluent_kafka import Producer

    tails = {p: kr.json_tails(p) for p in kr.TABLES_MIX}
    failed = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, **settings}, logger=quiet_librdkafka())
    conn.send("ready")
    conn.recv()
    sent = dropped = 0
    started = time.time()
    for path, count, first in kr.schedule(records):
        topic = prefix + path
        pool = tails[path]
        for i in range(count):
            if rate and i % KAFKA_STEP == 0:
                _pace(started, sent + dropped, rate)
            line = kr.json_line(pool[(first + i) % len(pool)], first + i, time.time())
            while True:
                try:
                    producer.produce(topic, line, on_delivery=delivered)
                    sent += 1
                    break
                except BufferError:  # librdkafka's queue is full
                    if rate:
                        dropped += 1
                        break
                    producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(330)
    conn.send(
        {
            "sent": sent - failed[0] - left,
            "dropped": dropped + failed[0] + left,
            "first": started,
            "last": time.time(),
        }
    )
