"""A relay node keeps what every Zeek backend sends: a ZeroMQ cluster's logs, beside peers.

``broker-spark node --spool DIR --zeromq-logs ENDPOINT`` is one of a Zeek
cluster's loggers: a real process with a real PULL socket, fed by a real pyzmq
PUSH socket as a Zeek node's (the recorded batches of a real Zeek 9.1), while a
Broker peer publishes the recorded Broker log messages. Everything lands in the
spool, which the relay serves; ``status --relay`` and the Prometheus metrics
say per source what arrived and what was refused. Hostile senders (every kind
of garbage a PULL socket open to the network meets) cost only themselves.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest
import zmq
from spark_fixtures import plain_config, wait_for
from test_cli_support import Command, run_command
from zeek_recordings import ZMQ_LOGS, recording, zmq_local_lines, zmq_messages

import broker_spark as broker
from broker_spark.spool.relay_client import SpoolClient
from broker_spark.zeek.log_lines import LogLines
from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC, unpack_undecodable

pytestmark = pytest.mark.timeout(120)


def start_relay(spawn, spool: Path, *more: str) -> tuple[Command, dict[str, str]]:
    """A relay node taking Zeek's ZeroMQ logs; its announced addresses by name."""
    node = spawn(
        "node", "--no-tls", "--listen", "127.0.0.1:0", "--spool", str(spool),
        "--subscribe", "zeek/logs/", "--relay", "127.0.0.1:0",
        "--zeromq-logs", "tcp://127.0.0.1:0", "--metrics", "127.0.0.1:0", *more,
    )  # fmt: skip
    said: dict[str, str] = {}
    for name, pattern in (
        ("zeromq", r"^zeromq logs on (tcp://\S+)"),
        ("listen", r"^listening on (\S+)"),
        ("relay", r"^relay listening on (\S+)"),
        ("metrics", r"^metrics listening on (\S+)"),
    ):
        said[name] = node.expect(pattern, 30).group(1)
    node.expect("^ready$", 30)
    return node, said


def push_socket(endpoint: str) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.linger = 1000
    push.sndhwm = 1000  # Zeek's log_sndhwm
    push.connect(endpoint)
    return ctx, push


def spooled(relay: str, count: int, timeout: float = 30.0) -> list[tuple[str, bytes, str]]:
    host, port = relay.rsplit(":", 1)
    with SpoolClient.tcp(host, int(port), None) as client:
        client.hello("follow", "test")
        wait_for(lambda: int(client.request("bounds")["end"]) >= count, timeout, "spooled")
        end = int(client.request("bounds")["end"])
        from broker_spark.data.msgpack_records import unpack_records

        return [(r.topic, r.payload, r.sender) for r in unpack_records(client.fetch(0, end, 30))]


def status(relay: str) -> dict:
    done = run_command("status", "--relay", relay, "--no-tls", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def by_kind(st: dict) -> dict[str, dict]:
    return {s["kind"]: s for s in st["sources"]}


def lines_by_path(records: list[tuple[str, bytes, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, line in LogLines().lines([(p, s) for _t, p, s in records]):
        out.setdefault(path, []).append(line)
    return out


def test_a_relay_node_is_a_zeromq_logger_and_a_broker_peer_at_once(spawn, tmp_path) -> None:
    node, said = start_relay(spawn, tmp_path / "spool")
    messages = zmq_messages(ZMQ_LOGS)
    ctx, push = push_socket(said["zeromq"])
    zeek = broker.Endpoint(plain_config())
    try:
        for frames in messages:
            push.send_multipart(frames)
        host, port = said["listen"].rsplit(":", 1)
        assert zeek.peer(host, int(port), 0)
        wait_for(lambda: any("zeek/logs" in str(t) for t in zeek.peer_subscriptions()), 30)
        broker_logs = recording("zeek-logs-dns-edns-ecs").data
        zeek.publish_encoded(broker_logs)
        got = spooled(said["relay"], len(messages) + len(broker_logs))
    finally:
        zeek.shutdown()
        push.close()
        ctx.term()
    assert len(got) == len(messages) + len(broker_logs)
    zmq_sender = messages[0][1].decode()
    from_zmq = [r for r in got if r[2] == zmq_sender]
    assert [p for _t, p, _s in from_zmq] == [m[3] for m in messages]  # as they arrived
    for path in ("conn", "http"):
        assert lines_by_path(from_zmq)[path] == zmq_local_lines(ZMQ_LOGS, path)
    dns = recording("zeek-logs-dns-edns-ecs")
    from_peer = [r for r in got if r[2] != zmq_sender]
    assert lines_by_path(from_peer) == {p: dns.local_lines(p) for p in dns.writes}
    shown = run_command("status", "--relay", said["relay"], "--no-tls").stdout
    assert "sources        2" in shown and "zeromq logs tcp://127.0.0.1:" in shown
    assert "listeners      3" in shown and "relay     127.0.0.1:" in shown  # +peering, metrics
    assert "peering   127.0.0.1:" in shown
    kinds = by_kind(status(said["relay"]))
    assert kinds["zeromq-logs"]["arrived"] == len(messages)
    assert kinds["zeromq-logs"]["batches_received"] == len(messages)
    assert kinds["broker"]["arrived"] == len(broker_logs)
    text = urllib.request.urlopen(f"http://{said['metrics']}/metrics", timeout=10).read().decode()
    assert f'broker_spark_source_messages_total{{source="zeromq-logs"}} {len(messages)}.0' in text
    assert f'broker_spark_source_messages_total{{source="broker"}} {len(broker_logs)}.0' in text
    assert "broker_spark_spool_end_offset " in text and "broker_spark_relay_readers " in text
    assert 'broker_spark_listener_connections{listener="relay"}' in text
    assert node.signal() == 0


def _raw_tcp(address: str, payload: bytes) -> socket.socket:
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    if payload:
        s.sendall(payload)
    return s


@pytest.mark.slow  # 3 s of hostile senders: make test-slow (make test stays under 5 minutes)
def test_hostile_zeromq_senders_cost_only_themselves(spawn, tmp_path) -> None:
    """Wrong frame counts, other serializers, empty and 20 MB frames, random, truncated and
    altered batches, bytes that are not ZeroMQ at all, idle connections: each is counted and
    logged, the node runs on, and every good batch around them arrives intact."""
    node, said = start_relay(spawn, tmp_path / "spool")
    pid = node.proc.pid
    rss_before = _rss_kib(pid)
    messages = zmq_messages(ZMQ_LOGS)
    good = messages[:20]
    batch = good[0][3]
    bad = [
        [b"log-write"],  # one frame
        [b"log-write", b"n", b"zeek-bin-serializer"],  # three
        [b"log-write", b"n", b"zeek-bin-serializer", batch, b"extra"],  # five
        [b"log-write", b"n", b"broker-bin-v1", batch],  # another serializer
        [b"event", b"n", b"zeek-bin-serializer", batch],  # not a log write
        [b"", b"", b"", b""],  # empty frames
        [b"log-write", b"n", b"zeek-bin-serializer", b""],  # an empty batch
        [b"log-write", b"n", b"zeek-bin-serializer", os.urandom(64)],  # random
        [b"log-write", b"n", b"zeek-bin-serializer", batch[: len(batch) // 2]],  # truncated
        [b"log-write", b"n", b"zeek-bin-serializer", b"\xff" * 8 + batch[8:]],  # altered head
        [b"log-write", b"n", b"zeek-bin-serializer", b"\x00" * (20 << 20)],  # 20 MB of nothing
    ]
    idle = [_raw_tcp(said["zeromq"], b"") for _ in range(5)]  # connect, say nothing
    garbage = [_raw_tcp(said["zeromq"], os.urandom(4096)) for _ in range(3)]  # not ZMTP
    ctx, push = push_socket(said["zeromq"])
    try:
        for i, frames in enumerate(good):
            push.send_multipart(frames)
            if i < len(bad):
                push.send_multipart(bad[i])
        spooled(said["relay"], len(good))
        # the node is alive and still takes batches after all that
        push.send_multipart(messages[20])
        last = messages[20][3]
        got = wait_for(
            lambda: (found := spooled(said["relay"], 0)) and found[-1][1] == last and found,
            30,
            "the last good batch",
        )
    finally:
        push.close()
        ctx.term()
        for s in idle + garbage:
            s.close()
    payloads = [p for _t, p, _s in got]
    wanted = [m[3] for m in good] + [last]
    assert [p for p in payloads if p in wanted] == wanted  # every good batch, in order
    # nothing is dropped at the door: what does not decode is kept as an undecodable record
    # (its frames, in the order it came), and a batch with a good head but bad records is
    # kept as a batch (its records are refused where they are decoded, on the executors)
    # (ZeroMQ reads some of the random bytes on raw connections as old-style messages: they
    # are kept too)
    kept = [list(unpack_undecodable(p).frames) for t, p, _s in got if t == UNDECODABLE_TOPIC]
    refused = [b for i, b in enumerate(bad) if i != 8]
    assert [k for k in kept if k in refused] == refused
    others = [p for t, p, _s in got if t != UNDECODABLE_TOPIC and p not in wanted]
    assert others == [bad[8][3]]
    source = by_kind(status(said["relay"]))["zeromq-logs"]
    assert source["undecodable"] == len(kept) >= len(refused), source
    text = urllib.request.urlopen(f"http://{said['metrics']}/metrics", timeout=10).read().decode()
    assert f'broker_spark_source_undecodable_total{{source="zeromq-logs"}} {len(kept)}.0' in text
    assert node.proc.poll() is None
    assert _rss_kib(pid) - rss_before < 200 * 1024  # the 20 MB batch came and went
    # each is counted; the log says so (at most once a second, so a flood cannot fill it)
    assert "does not decode" in node.stderr() and "kept as an undecodable record" in node.stderr()
    assert by_kind(status(said["relay"]))["zeromq-logs"]["refused"]["connection"] >= 3
    # garbage on the Broker port: that connection is refused and counted, the node runs on
    _raw_tcp(said["listen"], b"\x00\x00\x00\x05hello").close()
    wait_for(
        lambda: (
            by_kind(status(said["relay"])).get("broker", {}).get("refused", {}).get("connection")
        ),
        30,
        "the refused Broker connection counted",
    )
    assert node.signal() == 0


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_zeromq_logs_need_somewhere_to_go(tmp_path) -> None:
    done = run_command("node", "--no-tls", "--zeromq-logs", "tcp://127.0.0.1:0")
    assert done.returncode != 0
    assert "--zeromq-logs needs --spool DIR" in done.stderr


def test_a_relay_node_writes_log_files_from_the_same_socket(spawn, tmp_path) -> None:
    """``--spool`` and ``--log-dir`` together: every batch reaches both."""
    logs = tmp_path / "logs"
    node, said = start_relay(spawn, tmp_path / "spool", "--log-dir", str(logs), "--log-rotate", "0")
    messages = zmq_messages(ZMQ_LOGS)
    ctx, push = push_socket(said["zeromq"])
    try:
        for frames in messages:
            push.send_multipart(frames)
        assert len(spooled(said["relay"], len(messages))) == len(messages)
        expected = zmq_local_lines(ZMQ_LOGS, "conn")
        wait_for(
            lambda: (
                (logs / "conn.log").exists()
                and len((logs / "conn.log").read_text().splitlines()) == len(expected)
            ),
            30,
            "conn.log written",
        )
    finally:
        push.close()
        ctx.term()
    assert node.signal() == 0
    assert (logs / "conn.log").read_text().splitlines() == expected
    assert (logs / "http.log").read_text().splitlines() == zmq_local_lines(ZMQ_LOGS, "http")
