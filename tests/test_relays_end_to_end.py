"""A Zeek cluster with two loggers, both broker-spark relay nodes, into one Spark query.

Two ``broker-spark node --spool --relay`` processes play a Zeek cluster's two
loggers, fed the way a Zeek cluster feeds its loggers:

* ZeroMQ backend: one PUSH socket connected to both PULL sockets (as every Zeek
  node's), so ZeroMQ spreads the batches round robin;
* Broker backend: a peered endpoint publishing each Batch to one logger's topic
  in turn (as Zeek's logger pool does), both relays getting the LogCreates.

The batches are a real Zeek's conn records (the ZeroMQ recording), each sent
with a fresh uid, so a record read twice or never is seen. One query reads both
relays as one stream (``relay=h1:p1,h2:p2``). Midway relay 1 is killed with
SIGKILL: while it is down the query goes on reading relay 2, and once relay 1
runs again on its spool the query takes it up where it was. In the end every
record sent is in the sink exactly once.

ZeroMQ and Broker acknowledge nothing: what a logger had received but not yet
written when it was killed is lost, for Zeek's own loggers as for these. So the
sender pauses around the kill until both relays hold what it sent (what a
collector guarantees is that what it holds survives, and that a query misses
nothing it holds); the kill comes while the query is reading.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import spark_fixtures
import zmq
from spark_fixtures import free_port, plain_config, wait_for
from test_cli_support import Command
from zeek_recordings import ZMQ_LOGS, zmq_messages

import broker_spark as broker
from broker_spark.zeek.log_batch import BatchTranslator, decode_batch, encode_batch

spark = spark_fixtures.spark

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]


def conn_batches() -> tuple[Any, list[list[Any]]]:
    """The recorded conn records and their schema."""
    records: list[list[Any]] = []
    schema = None
    for frames in zmq_messages(ZMQ_LOGS):
        header, found = decode_batch(frames[3])
        if header.path == "conn":
            schema, records = header.schema, records + found
    return schema, records


class RelayProcess:
    """``broker-spark node`` as one of the cluster's loggers, restartable on its spool."""

    def __init__(self, tmp: Path, name: str, *source: str) -> None:
        self.args = (
            "node", "--no-tls", "--spool", str(tmp / name), "--subscribe", "zeek/logs/",
            "--relay", f"127.0.0.1:{free_port()}", *source,
        )  # fmt: skip
        self.logs = tmp / f"{name}-logs"
        self.address = self.args[self.args.index("--relay") + 1]
        self.cmd: Command | None = None
        self.start()

    def start(self) -> None:
        self.cmd = Command(*self.args, tmp=self.logs)
        self.cmd.expect("^ready$", 60)

    def kill(self) -> None:
        assert self.cmd is not None
        self.cmd.proc.kill()  # SIGKILL: no goodbye, no flush
        self.cmd.close()

    def close(self) -> None:
        if self.cmd is not None:
            self.cmd.close()


class Sink:
    """The query's rows as (relay, offset, uid), from its foreachBatch."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def write(self, df: Any, batch_id: int) -> None:
        got = [(r.relay, r.offset, r.uid) for r in df.select("relay", "offset", "uid").collect()]
        with self.lock:
            self.rows += got

    def uids(self) -> list[str]:
        with self.lock:
            return [uid for _r, _o, uid in self.rows]

    def by_relay(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for relay, _o, _u in self.rows:
                out[relay] = out.get(relay, 0) + 1
            return out


class Feeder:
    """Sends conn batches with fresh uids (``send(n)``), remembering every uid sent."""

    def __init__(self, send_batch: Any) -> None:
        self.schema, self.template = conn_batches()
        self.uid_at = self.schema.names.index("uid")
        self.sent: list[str] = []
        self._send_batch = send_batch
        self._batch = 0

    def send(self, batches: int, pause: float = 0.01, **route: Any) -> None:
        for _ in range(batches):
            records = []
            for i in range(3):
                values = list(self.template[(self._batch * 3 + i) % len(self.template)])
                values[self.uid_at] = f"C{self._batch:06d}x{i}"
                records.append(values)
            self._send_batch(encode_batch(self.schema, records), self._batch, **route)
            self.sent += [r[self.uid_at] for r in records]
            self._batch += 1
            time.sleep(pause)


def run_query(spark: Any, relays: list[RelayProcess], checkpoint: Path, sink: Sink) -> Any:
    return (
        spark.readStream.format("broker")
        .option("format", "zeek-logs")
        .option("logs", "conn")
        .option("relay", ",".join(r.address for r in relays))
        .option("startingOffsets", "earliest")
        .option("ssl.disable", "true")
        .load()
        .writeStream.foreachBatch(sink.write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def through_an_outage(
    spark: Any, tmp: Path, relays: list[RelayProcess], feeder: Feeder, **during: Any
) -> None:
    """Feed, kill relay 1 while the query reads, feed on, restart it, feed; then check."""
    sink = Sink()
    query = run_query(spark, relays, tmp / "checkpoint", sink)
    try:
        feeder.send(40)
        wait_for(lambda: len(sink.uids()) >= len(feeder.sent), 90, "the first batches read")
        relays[0].kill()
        before = len(sink.uids())
        # relay 1 is down: the query keeps reading relay 2 (over ZeroMQ the batches meant for
        # relay 1 wait in the sender's queue for it, as Zeek's do: log_immediate is off)
        feeder.send(30, **during)
        wait_for(lambda: len(sink.uids()) > before, 90, "relay 2 read while relay 1 is down")
        time.sleep(1.0)
        relays[0].start()  # on its spool: the same relay, taken up where it was
        feeder.send(40)
        wait_for(lambda: len(sink.uids()) >= len(feeder.sent), 120, "every record read")
        time.sleep(1.0)  # nothing more comes (a record read twice would come now)
        assert query.exception() is None
    finally:
        query.stop()
    uids = sink.uids()
    assert len(uids) == len(set(uids)), "a record was read twice"
    assert sorted(uids) == sorted(feeder.sent), "a record is missing"
    assert len(sink.by_relay()) == 2  # both relays contributed


@pytest.fixture
def cleanup() -> Iterator[list[Any]]:
    things: list[Any] = []
    try:
        yield things
    finally:
        for thing in reversed(things):
            thing.close()


def test_two_zeromq_loggers_one_query_through_a_killed_logger(
    spark: Any, tmp_path: Path, cleanup: list[Any]
) -> None:
    pulls = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    relays = [
        RelayProcess(tmp_path, f"relay-{i}", "--no-listen", "--zeromq-logs", pulls[i])
        for i in range(2)
    ]
    cleanup += relays
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000  # Zeek's log_sndhwm; log_immediate is off, as Zeek's
    push.linger = 0
    for pull in pulls:  # one PUSH connected to every logger: ZeroMQ's round robin
        push.connect(pull)

    def send(batch: bytes, n: int) -> None:
        push.send_multipart([b"log-write", b"zeek-worker-1", b"zeek-bin-serializer", batch])

    try:
        through_an_outage(spark, tmp_path, relays, Feeder(send))
    finally:
        push.close()
        ctx.term()


def test_two_broker_loggers_one_query_through_a_killed_logger(
    spark: Any, tmp_path: Path, cleanup: list[Any]
) -> None:
    ports = [free_port() for _ in range(2)]
    relays = [
        RelayProcess(
            tmp_path,
            f"relay-{i}",
            "--listen",
            f"127.0.0.1:{ports[i]}",
            "--subscribe",
            f"zeek/cluster/node/logger-{i + 1}/",
        )  # fmt: skip
        for i in range(2)
    ]
    cleanup += relays
    zeek = broker.Endpoint(plain_config())
    cleanup.append(type("Shut", (), {"close": lambda self: zeek.shutdown()})())
    for port in ports:
        zeek.peer_nosync("127.0.0.1", port, 1.0)  # redialled after a loss, as Zeek does

    def subscribed(topic: str) -> bool:
        return any(
            str(t).startswith(topic) or topic.startswith(str(t)) for t in zeek.peer_subscriptions()
        )

    translator = BatchTranslator()

    def send(batch: bytes, n: int, only: int | None = None) -> None:
        logger = (n % 2 + 1) if only is None else only  # the pool's round robin
        topic = f"zeek/cluster/node/logger-{logger}/"
        wait_for(lambda: subscribed(topic), 60, f"a subscription to {topic}")
        _header, messages = translator.translate(batch, "zeek-worker-1")
        for message in messages:
            # the LogCreate to every relay, the Batch to the chosen logger's
            is_create = message is messages[0] and len(messages) > 1
            zeek.publish_encoded([("zeek/logs/Conn::LOG" if is_create else topic, message)])

    wait_for(lambda: subscribed("zeek/cluster/node/logger-2/"), 60, "both relays peered")
    through_an_outage(spark, tmp_path, relays, Feeder(send), only=2)
