"""Readers of a relay (``broker-spark node --spool``): replay from any offset, then follow.

The relay runs in the test process (its spool, endpoint and server, over real
sockets) except where the command itself is the subject; the reader's driver
side is called as Spark would, and its partitions are read as executors do.
"""

from __future__ import annotations

import json
import pickle
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import plain_config, wait_for
from test_cli_support import Command

import broker_spark as broker
from broker_spark import zeek
from broker_spark.columnar.record_batches import default_schema
from broker_spark.node.relay import RelayNode, SpoolSettings
from broker_spark.node.settings import size_value
from broker_spark.reader.in_process import BrokerDataLossError
from broker_spark.reader.options import parse_reader_options
from broker_spark.spark.compat import ReadAllAvailable
from broker_spark.spark.read.stream import StreamReader, stream_reader
from broker_spark.spool.relay_client import SpoolClient
from broker_spark.spool.segment import DataLossError
from broker_spark.spool.spool import Spool

pytestmark = pytest.mark.timeout(90)


class Relay:
    """A relay node in this process: an endpoint subscribed to ``zeek/``, its spool and its
    server, and a publisher endpoint peered with it."""

    def __init__(
        self,
        path: Path,
        tls: bool = False,
        port: int = 0,
        config: broker.Configuration | None = None,
        **spool: Any,
    ) -> None:
        if config is None:
            config = broker.Configuration(broker.BrokerOptions(disable_ssl=not tls))
        tls = tls or not config.options.disable_ssl
        self.node = RelayNode(
            SpoolSettings(
                str(path),
                ["zeek/"],
                ("127.0.0.1", port),
                spool.get("bytes"),
                None,
                spool.get("readers", {}),
                # only what a test sets: the rest are SpoolSettings' own defaults
                **{k: spool[k] for k in ("segment_bytes", "compression") if k in spool},
            )
        )
        self.endpoint = broker.Endpoint(config)
        self.node.subscribe(self.endpoint)
        port = self.endpoint.listen("127.0.0.1", 0)
        server_tls = None
        if tls:
            from broker_spark.node.serve import relay_tls as _relay_tls

            server_tls = _relay_tls(config)
        self.port = self.node.start(server_tls)
        self.publisher = broker.Endpoint(config)
        assert self.publisher.peer("127.0.0.1", port, retry=0)
        wait_for(lambda: self.publisher.peer_subscriptions(), 20, "the relay's subscription")

    def publish(self, first: int, count: int) -> None:
        self.publisher.publish_batch(
            *[
                (f"zeek/e/{i}", zeek.Event("ping", broker.Count(i)))
                for i in range(first, first + count)
            ]
        )
        spool = self.node.service.spool
        wait_for(lambda: spool.end_offset() >= first + count, 20, f"{first + count} spooled")

    def publish_encoded(self, messages: list) -> None:
        """Publish already-encoded messages (a recording's) and wait until they are spooled."""
        spool = self.node.service.spool
        end = spool.end_offset() + len(messages)
        self.publisher.publish_encoded(messages)
        wait_for(lambda: spool.end_offset() >= end, 30, f"{end} spooled")

    def close(self) -> None:
        self.publisher.shutdown()
        self.node.stop()
        self.endpoint.shutdown()


def write_tables_once(spark: Any, relay: Relay, checkpoint: Path, db: str) -> None:
    """``write_zeek_tables`` with its default arguments over everything ``relay`` holds, into
    tables ``{db}.{path}`` (quarantine ``{db}.quarantine``), as one ``availableNow`` run."""
    from broker_spark.spark.zeek_tables import write_zeek_tables

    source = (
        spark.readStream.format("broker")
        .option("relay", f"127.0.0.1:{relay.port}")
        .option("ssl.disable", "true")
        .option("startingOffsets", "earliest")
    )
    query = write_zeek_tables(
        source,
        str(checkpoint),
        table=f"{db}.{{path}}",
        quarantine=f"{db}.quarantine",
        trigger={"availableNow": True},
    )
    query.awaitTermination(180)
    assert query.exception() is None


@contextmanager
def tables_written_once(spark: Any, tmp_path: Path, rec: Any) -> Iterator[str]:
    """A database in ``tmp_path`` holding the tables ``write_tables_once`` writes of recording
    ``rec`` served by a relay, each log's table checked to hold its records once (by their
    positions); dropped at the end."""
    db = "zt_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db} LOCATION '{tmp_path / 'warehouse'}'")
    relay = Relay(tmp_path / "relay")
    try:
        relay.publish_encoded(rec.data)
        write_tables_once(spark, relay, tmp_path / "checkpoint", db)
        for path in rec.writes:
            positions = spark.table(f"{db}.{path}").select("offset", "record").collect()
            assert len(positions) == len(set(positions)) == len(rec.local_lines(path)), path
        assert not spark.catalog.tableExists(f"{db}.quarantine")
        yield db
    finally:
        relay.close()
        spark.sql(f"DROP DATABASE {db} CASCADE")


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    r = Relay(tmp_path / "relay")
    try:
        yield r
    finally:
        r.close()


def _reader(port: int, **extra: str) -> StreamReader:
    opts = parse_reader_options(
        {"topics": "zeek/", "relay": f"127.0.0.1:{port}", "ssl.disable": "true", **extra}
    )
    return stream_reader(opts, default_schema(opts.format))


def only(offsets: dict) -> int:
    """The one relay's position in a reader's offsets."""
    [entry] = offsets["relays"].values()
    return entry["offset"]


def _numbers(reader: StreamReader, start: int, end: int) -> list[int]:
    remote = pickle.loads(pickle.dumps(reader))
    out = []
    for part in reader.partitions({"offset": start}, {"offset": end}):
        for batch in remote.read(pickle.loads(pickle.dumps(part))):
            for data in batch.column("data").to_pylist():
                out.append(json.loads(data)["data"][2]["data"][1]["data"][0]["data"])
    return out


def test_a_reader_replays_what_came_while_it_was_down(relay: Relay) -> None:
    relay.publish(0, 100)
    first = _reader(relay.port, startingOffsets="earliest", maxRecordsPerPartition="30")
    try:
        assert only(first.initialOffset()) == 0
        end = first.latestOffset({"offset": 0}, ReadAllAvailable())
        assert only(end) == 100
        parts = first.partitions({"offset": 0}, end)
        assert all(p.relay is not None and p.packed is None for p in parts)  # tasks fetch
        assert _numbers(first, 0, 100) == list(range(100))
        first.commit({"offset": 100})
    finally:
        first.stop()
    relay.publish(100, 250)  # no reader runs
    again = _reader(relay.port)
    try:
        assert only(again.latestOffset({"offset": 100}, ReadAllAvailable())) == 350
        assert _numbers(again, 100, 350) == list(range(100, 350))
    finally:
        again.stop()


def test_a_reader_goes_on_across_a_restart_of_the_relay(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay")
    reader = _reader(relay.port, startingOffsets="earliest")
    try:
        relay.publish(0, 30)
        reader.initialOffset()
        assert only(reader.latestOffset({"offset": 0}, ReadAllAvailable())) == 30
        port = relay.port
        relay.close()
        assert only(reader.latestOffset({"offset": 30}, ReadAllAvailable())) == 30
        relay = Relay(tmp_path / "relay", port=port)  # the same spool, the same address
        relay.publish(30, 20)
        assert only(reader.latestOffset({"offset": 30}, ReadAllAvailable())) == 50
        assert _numbers(reader, 0, 50) == list(range(50))
    finally:
        reader.stop()
        relay.close()
    other = Relay(tmp_path / "another", port=port)  # another spool behind the same address
    again = _reader(port)
    try:
        again.initialOffset()
        other.close()
        other = Relay(tmp_path / "another-again", port=port)
        with pytest.raises(BrokerDataLossError, match="another spool"):
            again.latestOffset({"offset": 0}, ReadAllAvailable())
    finally:
        again.stop()
        other.close()


def test_latest_starts_at_the_relays_end_and_inline_partitions_carry_records(
    relay: Relay,
) -> None:
    relay.publish(0, 20)
    reader = _reader(relay.port, partitionData="inline")
    try:
        assert only(reader.initialOffset()) == 20
        relay.publish(20, 30)
        end = reader.latestOffset({"offset": 20}, ReadAllAvailable())
        assert only(end) == 50
        parts = reader.partitions({"offset": 20}, end)
        assert all(p.packed is not None for p in parts)
        assert _numbers(reader, 20, 50) == list(range(20, 50))
    finally:
        reader.stop()


def test_offsets_the_relay_dropped_are_data_loss(tmp_path: Path) -> None:
    # Small files, so retention can drop some; kept as written, so the spool's size is what
    # was written when retention runs: a compressed file would take the total under the
    # limit before it cuts, or not, as the compressing thread's timing has it.
    relay = Relay(tmp_path / "relay", bytes=None, segment_bytes=4096, compression="none")
    try:
        spool = relay.node.service.spool
        relay.publish(0, 300)
        assert spool.compression == "none"  # no thread changes the sizes under the test
        assert len(list((tmp_path / "relay").glob("*.log"))) > 2  # sealed files to drop
        strict = _reader(relay.port, startingOffsets="earliest")
        lenient = _reader(relay.port, startingOffsets="earliest", failOnDataLoss="false")
        try:
            strict.initialOffset()
            lenient.initialOffset()
            # planned while the relay held them all, dropped before the tasks fetch them
            [part] = strict.partitions({"offset": 0}, {"offset": 300})
            [kept] = lenient.partitions({"offset": 0}, {"offset": 300})
            spool.retention_bytes = 8192
            earliest = spool.enforce_retention(0)
            assert 0 < earliest < 300
            with pytest.raises(DataLossError, match=f"earliest.*{earliest}"):
                list(pickle.loads(pickle.dumps(strict)).read(part))
            rows = [b.num_rows for b in pickle.loads(pickle.dumps(lenient)).read(kept)]
            assert sum(rows) == 300 - earliest
            # planned after: the reader's driver side sees the loss itself
            with pytest.raises(BrokerDataLossError, match=f"offsets 0 to {earliest - 1}"):
                strict.partitions({"offset": 0}, {"offset": 300})
            assert _numbers(lenient, 0, 300) == list(range(earliest, 300))
        finally:
            strict.stop()
            lenient.stop()
    finally:
        relay.close()


def test_garbage_gets_an_error_and_the_relay_keeps_serving(relay: Relay) -> None:
    relay.publish(0, 50)
    follower = SpoolClient.tcp("127.0.0.1", relay.port, None)
    try:
        follower.hello("follow", "good")
        junk = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        junk.sendall(b"GET /v1/messages/json HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := junk.recv(4096):
            answer += chunk
        junk.close()
        assert b"protocol" in answer and b"exceeds the maximum" in answer  # then closed
        beyond = SpoolClient.tcp("127.0.0.1", relay.port, None)
        beyond.hello("follow", "too far")
        with pytest.raises(Exception, match="beyond the end"):
            beyond.fetch(60, 70, 10)
        beyond.close()
        assert len(follower.fetch(0, 50, 10)) > 0  # the good reader was never disturbed
    finally:
        follower.close()


def test_a_relay_speaks_tls_as_its_peerings(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay", tls=True)  # anonymous TLS, Broker's default
    try:
        relay.publish(0, 10)
        plain = _reader(relay.port, startingOffsets="earliest")
        with pytest.raises(Exception, match="relay 127.0.0.1"):
            plain.initialOffset()
        plain.stop()
        opts = parse_reader_options(
            {"topics": "zeek/", "relay": f"127.0.0.1:{relay.port}", "startingOffsets": "earliest"}
        )
        reader = stream_reader(opts, default_schema(opts.format))
        try:
            assert only(reader.initialOffset()) == 0
            assert _numbers(reader, 0, 10) == list(range(10))
        finally:
            reader.stop()
    finally:
        relay.close()


def test_the_command_runs_a_relay_and_status_shows_readers(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    node = Command(
        "node", "--listen", "127.0.0.1:0", "--no-tls", "--spool", str(spool),
        "--subscribe", "zeek/", "--relay", "127.0.0.1:0", tmp=tmp_path / "logs",
    )  # fmt: skip
    try:
        node.expect(r"^node ")
        peer_port = int(node.expect(r"^listening on 127\.0\.0\.1:(\d+)$").group(1))
        relay_port = int(node.expect(r"^relay listening on 127\.0\.0\.1:(\d+)$").group(1))
        node.expect("^ready$")
        with broker.Endpoint(plain_config()) as publisher:
            assert publisher.peer("127.0.0.1", peer_port, retry=0)
            wait_for(lambda: publisher.peer_subscriptions(), 20, "the relay's subscription")
            publisher.publish_batch(*[("zeek/x", broker.Count(i)) for i in range(40)])
            reader = _reader(relay_port, startingOffsets="earliest")
            try:
                reader.initialOffset()
                wait_for(
                    lambda: only(reader.latestOffset({"offset": 0}, ReadAllAvailable())) == 40,
                    20,
                    "40 records at the relay",
                )
                reader.commit({"offset": 25})
                status = Command(
                    "status", "--relay", f"127.0.0.1:{relay_port}", "--no-tls", "--json",
                    tmp=tmp_path / "logs",
                )  # fmt: skip
                shown = json.loads("\n".join(status.rest()))
                assert (shown["start"], shown["end"]) == (0, 40)
                assert [p["status"] for p in shown["peers"]] == ["Peered"]
                assert shown["oldest_age_s"] is not None and shown["bytes"] > 0
                [mine] = [r for r in shown["readers"] if r["name"] == "reader"]
                assert mine["committed"] == 25
            finally:
                reader.stop()
        node.proc.send_signal(2)
        assert node.proc.wait(15) == 0
    finally:
        node.close()
    with Spool(str(spool), readonly=True) as kept:  # durable: the next relay starts there
        assert (kept.start_offset(), kept.end_offset()) == (0, 40)


def test_sizes() -> None:
    assert size_value("1g") == 1 << 30 and size_value("512m") == 512 << 20
    assert size_value("4096") == 4096 and size_value("2KiB") == 2048
    for bad in ("", "-1", "1x", "0"):
        with pytest.raises(ValueError):
            size_value(bad)
