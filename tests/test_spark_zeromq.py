"""Spark with Zeek's ZeroMQ cluster backend: logs through the logger role, events both ways.

Logs: a streaming query with ``zeromq.logs`` binds a PULL socket; a pyzmq PUSH in the
test process sends the batches a real Zeek PUSHed (``zeek-zmq-logs-http-methods``),
and the rows must equal what Spark reads from the JSON logs that Zeek wrote itself.
Events: an XPUB/XSUB proxy runs in the test process as Zeek's proxy thread does
(``zmq.proxy``); queries read and write through it.
"""

from __future__ import annotations

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

METADATA = ["_path", "topic", "sender", "received_at", "offset"]


def _logs_reader(session: Any, endpoint: str, **options: str) -> Any:
    reader = session.readStream.format("broker").option("format", "zeek-logs")
    reader = reader.option("zeromq.logs", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _push_recording(endpoint: str) -> None:
    """PUSH every recorded batch to ``endpoint``, as a Zeek node would: queued until the
    PULL is bound and connected (ZeroMQ redials), then sent."""
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.linger = 10_000
    try:
        push.connect(endpoint)
        for frames in zmq_messages(ZMQ_LOGS):
            push.send_multipart(frames)
    finally:
        push.close()
        ctx.term()


def _rows(session: Any, table: str, expected: int) -> None:
    wait_for(
        lambda: session.sql(f"select count(*) from {table}").first()[0] >= expected,
        90,
        f"{expected} rows in {table}",
    )


def test_logs_pushed_by_zeek_are_the_rows_of_its_own_json_logs(spark) -> None:  # noqa: F811
    conn_at = f"tcp://127.0.0.1:{free_port()}"
    all_at = f"tcp://127.0.0.1:{free_port()}"
    conn = _logs_reader(spark, conn_at, logs="conn")
    assert conn.schema == zeek_log_schema("conn")
    every = _logs_reader(spark, all_at)
    assert every.columns == ["_path", "log", "topic", "sender", "received_at", "offset"]
    with (
        running(conn.writeStream.format("memory").queryName("zmq_conn").start()),
        running(every.writeStream.format("memory").queryName("zmq_all").start()),
    ):
        _push_recording(conn_at)
        _push_recording(all_at)
        lines = {p: zmq_local_lines(ZMQ_LOGS, p) for p in ("conn", "http", "files", "reporter")}
        _rows(spark, "zmq_conn", len(lines["conn"]))
        _rows(spark, "zmq_all", 184)
        live = spark.sql("select * from zmq_conn")
        assert {r["topic"] for r in live.select("topic").collect()} == {"zeek/logs/Conn::LOG"}
        sender = zmq_messages(ZMQ_LOGS)[0][1].decode()
        assert {r["sender"] for r in live.select("sender").collect()} == {sender}
        live = live.drop(*METADATA)
        folder = VECTORS / ZMQ_LOGS / "sender"
        archived = read_zeek_json(spark, str(folder / "conn.log"), "conn").drop("_path")
        assert live.schema == archived.schema
        assert live.count() == archived.count() == len(lines["conn"])
        assert live.exceptAll(archived).count() == 0 and archived.exceptAll(live).count() == 0
        rows = spark.sql("select _path, log from zmq_all order by offset").collect()
        assert len(rows) == 184
        for path, expected in lines.items():  # Zeek's lines exactly, in order
            assert [r["log"] for r in rows if r["_path"] == path] == expected


def test_events_read_and_written_through_a_zeek_clusters_proxy(spark) -> None:  # noqa: F811
    """A stream reads the events a Zeek node publishes (the recorded frames) and a batch
    write publishes rows as Zeek events, both through the cluster's ZeroMQ proxy."""
    recorded = zmq_messages("zeek-zmq-events", "python/sub_received.jsonl")
    with zeromq_proxy() as proxy:
        where = f"{proxy.xpub},{proxy.xsub}"
        with zeek_node(proxy, ("zeek.test.to-zeek.",)) as node:
            df = (
                spark.readStream.format("broker")
                .option("zeromq.proxy", where)
                .option("topics", "zeek.test.from-zeek.")
                .option("format", "zeek")
                .load()
            )
            with running(df.writeStream.format("memory").queryName("zmq_events").start()):
                wait_for(lambda: node.sees("zeek.test.from-zeek."), 60, "the reader's subscription")
                for frames in recorded:
                    node.xpub.send_multipart(frames)
                _rows(spark, "zmq_events", 18)
                rows = spark.sql("select event, topic from zmq_events order by offset").collect()
                assert [r["event"] for r in rows][:2] == ["ZTest::ev_count", "ZTest::ev_int"]
                assert {r["topic"] for r in rows} == {"zeek.test.from-zeek.values"}
            events = spark.createDataFrame(
                [("ZTest::seen", "uid1", 3), ("ZTest::seen", "uid2", None)],
                "event STRING, uid STRING, n BIGINT",
            ).coalesce(1)
            (
                events.write.format("broker")
                .mode("append")
                .option("zeromq.proxy", where)
                .option("topic", "zeek.test.to-zeek.events")
                .option("format", "zeek")
                .save()
            )
            got = []
            while len(got) < 2 and node.xsub.poll(10_000):
                got.append(node.xsub.recv_multipart())
            assert [f[2] for f in got] == [b"broker-bin-v1"] * 2
            args = sorted((Event(decode(f[3])).args() for f in got), key=str)
            assert args == [["uid1", 3], ["uid2", None]]
