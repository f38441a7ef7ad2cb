"""Zeek's logs into the spool: the ZeroMQ logger role (PULL) against Broker peering, same run.

Usage: ``python bench/zeromq_logs.py [--seconds S] [--json]``

A sender *process* plays a Zeek node: it sends the conn records of a real Zeek
(the recordings in ``tests/vectors``, repeated) as fast as it can or at ``--rate``,
for ``S`` seconds (10 by default), in one of two ways:

- **zeromq**: a PUSH socket with Zeek's defaults (``log_sndhwm`` 1000, sends
  without blocking, exactly as ``DoPublishLogWrites``) sends batches of 1000
  records (Zeek's ``Log::write_buffer_size``) in ``zeek-bin-serializer``; a send
  the socket refuses at its high-water mark is what Zeek drops, and is counted;
- **broker**: a peered endpoint publishes the same records as Zeek does over
  Broker (Batches of 400 LogWrites, ``Broker::log_batch_size``), pre-encoded.

The receiving side is what a Spark query's driver runs with default options:
:class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver` (or an endpoint's
subscription) drained by the :class:`~broker_spark.spool.pump.SpoolPump` into a
:class:`~broker_spark.spool.spool.Spool` in a temporary directory. Measured: log
records spooled per second while the sender sends and in all after a short drain
(counted from what the pump appended), and for ZeroMQ the records of the batches the
sender could not hand over (Zeek's drops). Both senders offer 340,000 records a
second (``--rate``); then the ZeroMQ sender again, as fast as it can, shows where
the receiving side's limit is (a Zeek that fast would drop what is counted).

Last, **a relay node as the cluster's logger**: ``broker-spark node --spool DIR
--zeromq-logs ENDPOINT`` as its own process (what runs next to Zeek), fed by the
same sender paced and as fast as it can; its spool is watched over the relay
protocol (``bounds``), so these figures include the node's whole path. Then the same
unpaced run while two reader processes fetch what it spooled, as Spark's tasks of a
``format=zeek-logs`` query of Zeek's JSON lines do (``relay_node_decoding``): the relay
decodes their rows (its default two decoders, each busy), so this is its ingest ceiling
while it decodes as much as it will, and the records it decoded a second beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

ZEEK_BATCH = 1000  # Log::write_buffer_size: the most records one ZeroMQ batch holds
BROKER_BATCH = 400  # Broker::log_batch_size


def _conn() -> tuple[Any, list[list[Any]]]:
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    from broker_spark.zeek.log_batch import decode_batch

    records: list[list[Any]] = []
    schema = None
    for frames in zmq_messages(ZMQ_LOGS):
        header, found = decode_batch(frames[3])
        if header.path == "conn":
            schema = header.schema
            records.extend(found)
    return schema, records


def zeek_push(ctx: Any, endpoint: str) -> Any:
    """A PUSH socket as a Zeek node's log sender has it (``log_sndhwm`` 1000), connected; it
    lingers 30 s, so that what it accepted is delivered after the sender's report."""
    import zmq

    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000  # Zeek's log_sndhwm
    push.linger = 30_000
    push.connect(endpoint)
    return push


def _zmq_sender(endpoint: str, seconds: float, rate: float, conn: Any) -> None:
    import zmq

    from broker_spark.zeek.log_batch import encode_batch

    schema, records = _conn()
    batch = encode_batch(schema, (records * (ZEEK_BATCH // len(records) + 1))[:ZEEK_BATCH])
    frames = [b"log-write", b"zeromq_bench_node", b"zeek-bin-serializer", batch]
    ctx = zmq.Context()
    push = zeek_push(ctx, endpoint)
    conn.send("ready")
    conn.recv()
    sent = dropped = 0
    began = time.monotonic()
    stop = began + seconds
    while time.monotonic() < stop:
        if rate:
            ahead = began + (sent + dropped) * ZEEK_BATCH / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        try:
            push.send_multipart(frames, zmq.NOBLOCK)
            sent += 1
        except zmq.Again:  # Zeek: "Failed to send log write. HWM reached?"
            if rate:
                dropped += 1
            else:
                time.sleep(0.0001)  # as fast as it can: an offer refused is retried
    conn.send((sent * ZEEK_BATCH, dropped * ZEEK_BATCH, time.monotonic() - began))
    push.close()
    ctx.term()


def _broker_sender(port: int, seconds: float, rate: float, conn: Any) -> None:
    import broker_spark as broker
    from broker_spark.zeek.log_batch import BatchTranslator, encode_batch

    schema, records = _conn()
    batch = encode_batch(schema, (records * (BROKER_BATCH // len(records) + 1))[:BROKER_BATCH])
    _header, (create, message) = BatchTranslator().translate(batch, "bench")
    topic = "zeek/logs/Conn::LOG"
    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(config) as ep:
        assert ep.peer("127.0.0.1", port, retry=0)
        while not ep.peer_subscriptions():
            time.sleep(0.01)
        ep.publish_encoded([(topic, create)])
        conn.send("ready")
        conn.recv()
        sent = 0
        began = time.monotonic()
        stop = began + seconds
        while time.monotonic() < stop:
            if rate:
                ahead = began + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            ep.publish_encoded([(topic, message)] * 8)
            sent += 8 * BROKER_BATCH
        conn.send((sent, 0, time.monotonic() - began))
        conn.recv()


def _spool_run(source: Any, sender: mp.Process, conn: Any, seconds: float) -> dict[str, Any]:
    from broker_spark.spool.pump import SpoolPump
    from broker_spark.spool.schema_history import LogSchemaHistory
    from broker_spark.spool.spool import Spool

    directory = tempfile.mkdtemp(prefix="bench-spool-")
    history = LogSchemaHistory()
    spool = Spool(directory)
    pump = SpoolPump(source, spool, observe=history.observe)
    pump.start()
    try:
        assert conn.recv() == "ready"
        conn.send("go")
        started = time.monotonic()
        sent, dropped, elapsed = conn.recv()
        during = history._records  # spooled while the sender sent
        window = time.monotonic() - started
        settle = time.monotonic() + 30  # then what was sent, within a short drain
        while history._records < sent and time.monotonic() < settle:
            time.sleep(0.05)
        took = time.monotonic() - started
        spooled = history._records
    finally:
        pump.stop()
        source.close()
        spool.close()
        shutil.rmtree(directory, ignore_errors=True)
    conn.send("bye")
    sender.join(30)
    return {
        "offered_records": sent + dropped,
        "sent_records": sent,
        "dropped_records": dropped,
        "spooled_records": spooled,
        "spooled_while_sending_per_second": round(during / window),
        "spooled_per_second": round(spooled / took),
        "sender_seconds": round(elapsed, 2),
        "seconds": round(took, 2),
    }


def run_zeromq(seconds: float, rate: float = 0.0) -> dict[str, Any]:
    from broker_spark.zeromq.log_receiver import ZeroMQLogReceiver

    receiver = ZeroMQLogReceiver("tcp://127.0.0.1:0")
    here, there = mp.Pipe()
    sender = mp.Process(target=_zmq_sender, args=(receiver.endpoint, seconds, rate, there))
    sender.start()
    return _spool_run(receiver, sender, here, seconds)


def run_broker(seconds: float, rate: float = 0.0) -> dict[str, Any]:
    import broker_spark as broker

    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    ep = broker.Endpoint(config)
    try:
        subscription = ep.make_raw_subscriber(["zeek/logs/"], qsize=8192)
        port = ep.listen("127.0.0.1", 0)
        here, there = mp.Pipe()
        sender = mp.Process(target=_broker_sender, args=(port, seconds, rate, there))
        sender.start()
        return _spool_run(subscription, sender, here, seconds)
    finally:
        ep.shutdown()


def _decoding_reader(port: int, stop: Any, conn: Any) -> None:
    """A process fetching what a relay spooled, range after range, as a task of a
    ``format=zeek-logs`` query of JSON lines does: the relay decodes the rows. Sends the
    records it was sent as rows, and those it was sent as records (the relay's decoders
    were busy), when ``stop`` is set."""
    from broker_spark.columnar.converter_spec import converter_spec, schemas_digest
    from broker_spark.columnar.log_converter import LogConverter
    from broker_spark.config import TLSSettings
    from broker_spark.reader.options import HostPort
    from broker_spark.reader.relay_fetch import fetch_from_relay
    from broker_spark.spark.source import arrow_schema_of
    from broker_spark.spark.zeek_schema import generic_log_schema, log_columns
    from broker_spark.spool.relay_client import SpoolClient
    from broker_spark.spool.schema_history import LogSchemaHistory

    schema = generic_log_schema(relay=True)
    spec = converter_spec(LogConverter(arrow_schema_of(schema), log_columns(schema, ())))
    ssl, relay = TLSSettings(disable_ssl=True), HostPort("127.0.0.1", port)
    rows = records = lo = 0
    with SpoolClient.tcp("127.0.0.1", port, None) as client:
        client.hello("follow", "bench-reader")
        while not stop.is_set():
            bounds = client.request("bounds")
            end = min(int(bounds["end"]), lo + 100)  # 100 batches: 100,000 records
            if end <= lo:
                time.sleep(0.01)
                continue
            history = LogSchemaHistory()
            history.merge(bounds["schemas"])
            fetched = fetch_from_relay(
                relay, ssl, lo, end, converter=spec, schemas=schemas_digest(history.snapshot(lo))
            )
            if fetched.rows is None:
                records += fetched.count * ZEEK_BATCH
            else:
                rows += sum(b.num_rows for frame in fetched.rows for b in frame.batches)
            lo = end
    conn.send((rows, records))


def run_relay_node(seconds: float, rate: float = 0.0, readers: int = 0) -> dict[str, Any]:
    """The ZeroMQ sender against ``broker-spark node --spool --zeromq-logs`` (a process);
    ``readers`` processes fetch and have the relay decode what it spools meanwhile."""
    import re
    import subprocess

    from broker_spark.spool.relay_client import SpoolClient

    directory = tempfile.mkdtemp(prefix="bench-relay-node-")
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker_spark",
            "node",
            "--no-tls",
            "--no-listen",
            "--spool",
            str(Path(directory) / "spool"),
            "--subscribe",
            "zeek/logs/",
            "--zeromq-logs",
            "tcp://127.0.0.1:0",
            "--relay",
            "127.0.0.1:0",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        said: dict[str, str] = {}
        assert node.stdout is not None
        for line in node.stdout:
            if m := re.match(r"zeromq logs on (\S+)", line):
                said["zeromq"] = m.group(1)
            elif m := re.match(r"relay listening on \S+:(\d+)", line):
                said["relay"] = m.group(1)
            elif line.strip() == "ready":
                break
        here, there = mp.Pipe()
        sender = mp.Process(target=_zmq_sender, args=(said["zeromq"], seconds, rate, there))
        sender.start()
        stop = mp.Event()
        fetchers = [mp.Pipe() for _ in range(readers)]
        reading = [
            mp.Process(target=_decoding_reader, args=(int(said["relay"]), stop, theirs))
            for _ours, theirs in fetchers
        ]
        for process in reading:
            process.start()
        with SpoolClient.tcp("127.0.0.1", int(said["relay"]), None) as client:
            client.hello("follow", "bench")

            def spooled() -> int:
                return int(client.request("bounds")["end"]) * ZEEK_BATCH

            assert here.recv() == "ready"
            here.send("go")
            started = time.monotonic()
            sent, dropped, elapsed = here.recv()
            during, window = spooled(), time.monotonic() - started
            stop.set()
            decoded = [ours.recv() for ours, _theirs in fetchers]
            settle = time.monotonic() + 30
            while spooled() < sent and time.monotonic() < settle:
                time.sleep(0.05)
            took = time.monotonic() - started
            total = spooled()
        sender.join(30)
        for process in reading:
            process.join(30)
    finally:
        node.terminate()
        node.wait(30)
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "offered_records": sent + dropped,
        "sent_records": sent,
        "dropped_records": dropped,
        "spooled_records": total,
        "spooled_while_sending_per_second": round(during / window),
        "spooled_per_second": round(total / took),
        "sender_seconds": round(elapsed, 2),
        "seconds": round(took, 2),
        **(
            {
                "decoded_per_second": round(sum(r for r, _ in decoded) / window),
                "sent_as_records_per_second": round(sum(n for _, n in decoded) / window),
            }
            if readers
            else {}
        ),
    }


#: Records a second both senders offer: above the 300,000 a second the Spark path aims at.
OFFERED_RATE = 340_000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="sending time per run")
    parser.add_argument("--rate", type=float, default=OFFERED_RATE, help="records/s offered")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    mp.set_start_method("spawn")
    results = {
        "broker": run_broker(args.seconds, args.rate),
        "zeromq": run_zeromq(args.seconds, args.rate),
        "zeromq_unpaced": run_zeromq(args.seconds),
        "relay_node": run_relay_node(args.seconds, args.rate),
        "relay_node_unpaced": run_relay_node(args.seconds),
        "relay_node_decoding": run_relay_node(args.seconds, readers=2),
    }
    for name in ("broker", "zeromq", "relay_node"):
        results[name]["offered_rate"] = args.rate
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("| path | offered | spooled while sending | spooled in all | dropped by the sender |")
    print("| --- | ---: | ---: | ---: | ---: |")
    paced = ("broker", "zeromq", "relay_node")
    for name in (*paced, "zeromq_unpaced", "relay_node_unpaced", "relay_node_decoding"):
        r = results[name]
        offered = f"{args.rate:,.0f}/s" if name in paced else "as fast as it can"
        print(
            f"| {name} | {offered} | {r['spooled_while_sending_per_second']:,}/s | "
            f"{r['spooled_records']:,} of {r['sent_records']:,} | {r['dropped_records']:,} |"
        )
    r = results["relay_node_decoding"]
    print(
        f"\nwhile spooling as fast as it can, the relay decoded {r['decoded_per_second']:,} "
        f"records/s for two readers ({r['sent_as_records_per_second']:,}/s sent as records)"
    )


if __name__ == "__main__":
    main()
