"""The command line on Zeek's ZeroMQ backend: ``logs --zeromq-bind``, ``node --zeromq-logs``,
``publish``/``subscribe --zeromq-proxy``, each a real ``broker-spark`` process fed by pyzmq
sockets playing a Zeek node (the recorded batches of a real Zeek)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import zmq
from spark_fixtures import free_port, wait_for
from zeek_recordings import ZMQ_LOGS, zmq_local_lines, zmq_messages
from zeromq_proxy import zeek_node, zeromq_proxy

pytestmark = pytest.mark.timeout(120)


def _push_recording(endpoint: str) -> None:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.linger = 10_000
    try:
        push.connect(endpoint)  # queued until the PULL is there, as Zeek's (log_immediate=F)
        for frames in zmq_messages(ZMQ_LOGS):
            push.send_multipart(frames)
    finally:
        push.close()
        ctx.term()


def test_logs_as_the_clusters_logger_print_zeeks_lines(spawn) -> None:  # noqa: F811
    where = f"tcp://127.0.0.1:{free_port()}"
    paths = ("http", "files", "reporter")
    total = sum(len(zmq_local_lines(ZMQ_LOGS, p)) for p in paths)
    logs = spawn(
        "logs", *paths, "--zeromq-bind", where, "--count", str(total), "--timeout", "60",
    )  # fmt: skip
    _push_recording(where)
    lines = logs.rest(60)
    assert logs.proc.returncode == 0, logs.stderr()
    by_path: dict[str, list[str]] = {}
    for line in lines:
        path = json.loads(line)["_path"]
        by_path.setdefault(path, []).append("{" + line[line.index(",") + 1 :])
    assert by_path == {p: zmq_local_lines(ZMQ_LOGS, p) for p in paths}


def test_a_node_writes_the_clusters_logs_into_a_directory(spawn, tmp_path) -> None:  # noqa: F811
    out = tmp_path / "logs"
    node = spawn(
        "node", "--no-listen", "--no-tls", "--log-dir", str(out), "--log-rotate", "0",
        "--zeromq-logs", "tcp://127.0.0.1:0",
    )  # fmt: skip
    where = node.expect(r"^zeromq logs on (tcp://\S+)$").group(1)
    node.expect("^ready$")
    _push_recording(where)
    conn = out / "conn.log"
    expected = zmq_local_lines(ZMQ_LOGS, "conn")
    wait_for(
        lambda: conn.exists() and len(conn.read_text().splitlines()) == len(expected),
        30,
        "conn.log",
    )
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0, node.stderr()
    for path in ("conn", "http", "files", "weird", "reporter", "packet_filter"):
        assert (out / f"{path}.log").read_text().splitlines() == zmq_local_lines(ZMQ_LOGS, path)


def test_publish_and_subscribe_through_the_proxy(spawn) -> None:  # noqa: F811
    with zeromq_proxy() as proxy:
        where = f"{proxy.xpub},{proxy.xsub}"
        sub = spawn("subscribe", "zeek/demo/", "--zeromq-proxy", where, "--count", "1")
        with zeek_node(proxy) as node:  # its XPUB sees the subscriptions the proxy forwards
            wait_for(lambda: node.sees("zeek/demo/"), 30, "the subscriber's subscription")
            done = subprocess.run(
                [sys.executable, "-m", "broker_spark", "publish", "zeek/demo/x",
                 "--event", "Demo::ping", '"hello"', "--zeromq-proxy", where],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            line = sub.rest(30)[0]
            assert "Demo::ping" in line and "hello" in line


def test_a_wrong_zeromq_proxy_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "broker_spark", "subscribe", "x", "--zeromq-proxy", "a,b,c"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "--zeromq-proxy" in done.stderr
