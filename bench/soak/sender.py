"""A Zeek-like sender for the soak: a real Zeek's conn records, replayed with fresh uids.

``python bench/soak/sender.py MODE LEDGER TARGET... --rate R --batch N``

* ``zeromq``: a PUSH socket connected to every TARGET (``tcp://...``), Zeek's
  logger layout: ZeroMQ deals the batches round-robin over the loggers, as a
  Zeek cluster's nodes do with ``Cluster::logger`` nodes. Batches in
  ``zeek-bin-serializer``, Zeek's defaults (``log_sndhwm`` 1000, sends that
  never block).
* ``broker``: an endpoint peered with TARGET (``host:port``) publishing the
  same records as Zeek does over Broker (a LogCreate, then Batches of LogWrites).

Every record gets a uid no other record of the run has (``<tag><incarnation>x<seq>``)
and the current time as ``ts``. After each batch is handed to the socket the
sender appends ``<first uid seq> <count> <unix time>`` to LEDGER and flushes, so
what a SIGKILL interrupts is at most the batch in hand: the soak's checks then
know exactly which records were sent, and when. SIGTERM ends it after the
current batch (ZeroMQ's linger delivers what was accepted).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def conn_records() -> tuple[Any, list[list[Any]]]:
    """The schema and records of the recorded Zeek's conn log (ZeroMQ recording)."""
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    from broker_spark.zeek.log_batch import decode_batch

    schema, records = None, []
    for frames in zmq_messages(ZMQ_LOGS):
        header, found = decode_batch(frames[3])
        if header.path == "conn":
            schema = header.schema
            records.extend(found)
    assert schema is not None and records, "the recordings hold no conn log"
    return schema, records


def uid_of(tag: str, incarnation: int, seq: int) -> str:
    """The uid of record ``seq`` of a sender's incarnation (what the checks parse back)."""
    return f"{tag}{incarnation}x{seq}"


class Records:
    """Fresh records from the recorded ones: uid and ts replaced, the rest as Zeek wrote it."""

    def __init__(self, tag: str, incarnation: int) -> None:
        from broker_spark.zeek.types import ZeekTime

        self.schema, self.base = conn_records()
        names = [f.name for f in self.schema.fields]
        self.uid_at, self.ts_at = names.index("uid"), names.index("ts")
        self.tag, self.incarnation = tag, incarnation
        self.time = ZeekTime
        self.seq = 0

    def batch(self, n: int) -> tuple[int, list[list[Any]]]:
        first, now = self.seq, self.time(time.time())
        out = []
        for i in range(n):
            record = list(self.base[(first + i) % len(self.base)])
            record[self.uid_at] = uid_of(self.tag, self.incarnation, first + i)
            record[self.ts_at] = now
            out.append(record)
        self.seq += n
        return first, out


def _incarnation(ledger: Path) -> int:
    """How many times this sender started before (a line ``start N`` each time)."""
    if not ledger.exists():
        return 0
    return sum(1 for line in ledger.read_text().splitlines() if line.startswith("start "))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["zeromq", "broker"])
    p.add_argument("ledger", type=Path)
    p.add_argument("tag")
    p.add_argument("targets", nargs="+")
    p.add_argument("--rate", type=float, default=250.0, help="records a second")
    p.add_argument("--batch", type=int, default=50, help="records a batch")
    args = p.parse_args()
    from broker_spark.zeek.log_batch import BatchTranslator, encode_batch

    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    incarnation = _incarnation(args.ledger)
    records = Records(args.tag, incarnation)
    ledger = args.ledger.open("a", encoding="utf-8")
    ledger.write(f"start {incarnation} {time.time():.3f}\n")
    ledger.flush()
    send = _zeromq(args.targets) if args.mode == "zeromq" else _broker(args.targets[0])
    translator = BatchTranslator()
    began = time.monotonic()
    sent = 0
    while not stopping:
        ahead = began + sent / args.rate - time.monotonic()
        if ahead > 0:
            time.sleep(min(ahead, 0.5))
            continue
        first, batch = records.batch(args.batch)
        encoded = encode_batch(records.schema, batch)
        if send(encoded, translator):
            ledger.write(f"{incarnation} {first} {len(batch)} {time.time():.3f}\n")
            ledger.flush()
        else:  # refused at the high-water mark: Zeek drops it, and so do we (counted)
            ledger.write(f"dropped {incarnation} {first} {len(batch)} {time.time():.3f}\n")
            ledger.flush()
        sent += len(batch)
    send(None, translator)
    ledger.close()
    return 0


def _zeromq(targets: list[str]) -> Any:
    import zmq

    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000  # Zeek's log_sndhwm
    push.linger = 10_000
    for target in targets:
        push.connect(target)
    node = f"zeromq_soak_{os.getpid()}".encode()

    def send(batch: bytes | None, _translator: Any) -> bool:
        if batch is None:
            push.close()
            ctx.term()
            return True
        try:
            push.send_multipart([b"log-write", node, b"zeek-bin-serializer", batch], zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    return send


def _broker(target: str) -> Any:
    import broker_spark as broker

    host, _, port = target.rpartition(":")
    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    ep = broker.Endpoint(config)
    ep.peer_nosync(host, int(port), 1.0)  # redialled every second, as Zeek's Broker::peer
    deadline = time.monotonic() + 30
    while not ep.peer_subscriptions() and time.monotonic() < deadline:
        time.sleep(0.05)  # the relay's subscription, learnt in the handshake
    topic = "zeek/logs/Conn::LOG"
    node = f"soak-{os.getpid()}"

    def send(batch: bytes | None, translator: Any) -> bool:
        if batch is None:
            ep.shutdown()
            return True
        if not ep.peer_subscriptions():  # not peered: Zeek's publish would go nowhere too
            return False
        _header, messages = translator.translate(batch, node)
        ep.publish_encoded([(topic, m) for m in messages])
        return True

    return send


if __name__ == "__main__":
    sys.exit(main())
