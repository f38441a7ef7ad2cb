"""Spark with Zeek's ZeroMQ cluster backend: logs through the logger role, events both ways.

Logs: a streaming query with ``zeromq.logs`` binds a PULL socket; a pyzmq PUSH in the
test process sends the batches a real Zeek PUSHed (``zeek-zmq-logs-http-methods``),
and the rows must equal what Spark reads from the JSON logs that Zeek wrote itself.
Events: an XPUB/XSUB proxy runs in the test process as Zeek's proxy thread does
(``zmq.proxy``); queries read and write through it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import zmq
from recorded import VECTORS
from spark_fixtures import free_port, running, spark, wait_for  # noqa: F401
from zeek_recordings import ZMQ_LOGS, zmq_local_lines, zmq_messages

from broker_spark.spark.zeek_schema import read_zeek_json, zeek_log_schema

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


def test_a_taken_logs_port_fails_the_query_with_the_option_named(spark) -> None:  # noqa: F811
    ctx = zmq.Context()
    taken = ctx.socket(zmq.PULL)
    taken.linger = 0
    port = taken.bind_to_random_port("tcp://127.0.0.1")
    try:
        df = _logs_reader(spark, f"tcp://127.0.0.1:{port}", logs="conn")
        query = df.writeStream.format("memory").queryName("zmq_taken").start()
        with running(query):
            deadline = time.monotonic() + 60
            while query.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not query.isActive
            assert "zeromq.logs" in str(query.exception())
            assert "cannot bind" in str(query.exception())
    finally:
        taken.close(0)
        ctx.term()
