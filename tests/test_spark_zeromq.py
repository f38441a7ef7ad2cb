"""Spark with Zeek's ZeroMQ cluster backend: logs through the logger role, events both ways.

Logs: a streaming query with ``zeromq.logs`` binds a PULL socket; a pyzmq PUSH in the
test process sends the batches a real Zeek PUSHed (``zeek-zmq-logs-http-methods``),
and the rows must equal what Spark reads from the JSON logs that Zeek wrote itself.
Events: an XPUB/XSUB proxy runs in the test process as Zeek's proxy thread does
(``zmq.proxy``); queries read and write through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import zmq
from recorded import VECTORS
from spark_fixtures import free_port, running, spark, wait_for  # noqa: F401
from zeek_recordings import ZMQ_LOGS, zmq_local_lines, zmq_messages
from zeromq_proxy import zeek_node, zeromq_proxy

from broker_spark.data.binary import decode
from broker_spark.spark.zeek_schema import read_zeek_json, zeek_log_schema
from broker_spark.zeek import Event

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

METADATA = ["_path", "topic", "sender", "received_at", "offset", "record"]


def _logs_reader(session: Any, endpoint: str, **options: str) -> Any:
    reader = session.readStream.format("broker").option("format", "zeek-logs")
    reader = reader.option("zeromq.logs", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@contextmanager
def _pushing_recording(*endpoints: str) -> Iterator[None]:
    """PUSH every recorded batch to each endpoint, as a Zeek node would: queued at once
    (the PULLs are bound when their queries start: ZeroMQ redials until then), sent as
    soon as a PULL is there; the sockets close when the block ends."""
    ctx = zmq.Context()
    pushes = []
    try:
        for endpoint in endpoints:
            push = ctx.socket(zmq.PUSH)
            push.linger = 0
            push.connect(endpoint)
            pushes.append(push)
            for frames in zmq_messages(ZMQ_LOGS):
                push.send_multipart(frames)
        yield
    finally:
        for push in pushes:
            push.close(0)
        ctx.term()


def _rows(session: Any, table: str, expected: int) -> None:
    wait_for(
        lambda: session.sql(f"select count(*) from {table}").first()[0] >= expected,
        90,
        f"{expected} rows in {table}",
    )


def test_logs_and_events_through_zeeks_zeromq_backend(spark) -> None:  # noqa: F811
    """Three queries at once (one test: Spark's first batches take seconds, so they wait
    together): a conn log with typed columns and all logs as Zeek's lines, each reader the
    logger of its own PUSH (as Zeek's node is), and the events a Zeek node publishes
    through the cluster's proxy."""
    recorded = zmq_messages("zeek-zmq-events", "python/sub_received.jsonl")
    conn_at = f"tcp://127.0.0.1:{free_port()}"
    all_at = f"tcp://127.0.0.1:{free_port()}"
    conn = _logs_reader(spark, conn_at, logs="conn")
    assert conn.schema == zeek_log_schema("conn")
    every = _logs_reader(spark, all_at)
    assert every.columns == ["_path", "log", "topic", "sender", "received_at", "offset", "record"]
    with zeromq_proxy() as proxy, zeek_node(proxy, ("zeek.test.to-zeek.",)) as node:
        where = f"{proxy.xpub},{proxy.xsub}"
        events = (
            spark.readStream.format("broker")
            .option("zeromq.proxy", where)
            .option("topics", "zeek.test.from-zeek.")
            .option("format", "zeek")
            .load()
        )
        with (
            running(conn.writeStream.format("memory").queryName("zmq_conn").start()),
            running(every.writeStream.format("memory").queryName("zmq_all").start()),
            running(events.writeStream.format("memory").queryName("zmq_events").start()),
            _pushing_recording(conn_at, all_at),
        ):
            wait_for(lambda: node.sees("zeek.test.from-zeek."), 60, "the reader's subscription")
            for frames in recorded:
                node.xpub.send_multipart(frames)
            lines = {p: zmq_local_lines(ZMQ_LOGS, p) for p in ("conn", "http", "files", "reporter")}
            _rows(spark, "zmq_conn", len(lines["conn"]))
            _rows(spark, "zmq_all", 184)
            _rows(spark, "zmq_events", 18)
        # logs: the typed rows are what Spark reads from Zeek's own JSON log
        live = spark.sql("select * from zmq_conn")
        sender = zmq_messages(ZMQ_LOGS)[0][1].decode()
        meta = live.select("topic", "sender").collect()
        assert len(meta) == len(lines["conn"])
        assert {(r["topic"], r["sender"]) for r in meta} == {("zeek/logs/Conn::LOG", sender)}
        live = live.drop(*METADATA)
        folder = VECTORS / ZMQ_LOGS / "sender"
        archived = read_zeek_json(spark, str(folder / "conn.log"), "conn").drop("_path")
        assert live.schema == archived.schema  # equal multisets of rows, both ways:
        assert live.exceptAll(archived).count() == 0 and archived.exceptAll(live).count() == 0
        rows = spark.sql("select _path, log from zmq_all order by offset").collect()
        assert len(rows) == 184
        for path, expected in lines.items():  # Zeek's lines exactly, in order
            assert [r["log"] for r in rows if r["_path"] == path] == expected
        # events in: as Zeek published them
        rows = spark.sql("select event, topic from zmq_events order by offset").collect()
        assert [r["event"] for r in rows] == [Event(decode(f[3])).name() for f in recorded]
        assert {r["topic"] for r in rows} == {"zeek.test.from-zeek.values"}


def test_a_writer_task_publishes_rows_as_zeek_events_through_the_proxy() -> None:
    """What a write task runs on an executor, called here directly (the Spark plumbing
    around it is the one every other write test exercises): rows become Zeek events in
    Zeek's four frames, and the task returns once ZeroMQ wrote them out."""
    import pyarrow as pa

    from broker_spark.reader.options import parse_writer_options
    from broker_spark.spark.write.writers import BrokerBatchWriter

    batch = pa.RecordBatch.from_pydict(
        {"event": ["ZTest::seen", "ZTest::seen"], "uid": ["uid1", "uid2"], "n": [3, None]},
        pa.schema([("event", pa.string()), ("uid", pa.string()), ("n", pa.int64())]),
    )
    with zeromq_proxy() as proxy, zeek_node(proxy, ("zeek.test.to-zeek.",)) as node:
        options = parse_writer_options(
            {
                "zeromq.proxy": f"{proxy.xpub},{proxy.xsub}",
                "topic": "zeek.test.to-zeek.events",
                "format": "zeek",
            }
        )
        done = BrokerBatchWriter(options, batch.schema).write(iter([batch]))
        assert done.published == 2
        got = []
        while len(got) < 2 and node.xsub.poll(10_000):
            got.append(node.xsub.recv_multipart())
    assert [f[0] for f in got] == [b"zeek.test.to-zeek.events"] * 2
    assert [f[2] for f in got] == [b"broker-bin-v1"] * 2
    assert all(f[1].startswith(b"zeromq_broker-spark_") for f in got)
    args = sorted((Event(decode(f[3])).args() for f in got), key=str)
    assert args == [["uid1", 3], ["uid2", None]]
