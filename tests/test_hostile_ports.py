"""Hostile clients on the relay, its owner's control socket and the metrics port.

The Broker, WebSocket and ZeroMQ ports have their own hostile-client tests
(test_peering_hostile*, test_websocket*, test_relay_sources). Here: clients that
send garbage, frames beyond the limit, half a frame and then nothing, or nothing
at all, and clients without a certificate where one is required. Each is
refused or dropped; the good client beside them is served throughout, and the
server's threads stay bounded. Deadlines are shortened for the test (the same
code path, sooner).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from spark_fixtures import wait_for
from test_spark_relay import Relay

import broker_spark.spool.metrics as metrics
import broker_spark.spool.relay_protocol as relay_protocol
from broker_spark.cli import main
from broker_spark.config import TLSSettings
from broker_spark.spool.relay_client import SpoolClient, SpoolClientError
from broker_spark.spool.relay_protocol import HELLO_TIMEOUT, RelayServerSession
from broker_spark.tls import make_contexts

pytestmark = pytest.mark.timeout(90)


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the server sent before it closed ``sock``; fails if it stays open longer."""
    sock.settimeout(seconds)
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def test_a_silent_connection_is_overdue_after_the_hello_timeout() -> None:
    session = RelayServerSession("r", now=100.0)
    assert not session.hello_overdue(100.0 + HELLO_TIMEOUT - 0.01)
    assert session.hello_overdue(100.0 + HELLO_TIMEOUT)
    hello = {"version": relay_protocol.PROTOCOL_VERSION, "role": "follow", "name": "x"}
    session.receive(relay_protocol.encode_message(relay_protocol.Kind.HELLO, hello))
    assert not session.hello_overdue(1e9)  # said hello: its own pace from then on


def test_idle_and_half_frame_clients_are_dropped_and_readers_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay_protocol, "HELLO_TIMEOUT", 0.5)
    relay = Relay(tmp_path / "relay")
    try:
        relay.publish(0, 20)
        reader = SpoolClient.tcp("127.0.0.1", relay.port, None)
        reader.hello("follow", "good")
        idle = [socket.create_connection(("127.0.0.1", relay.port)) for _ in range(20)]
        half = socket.create_connection(("127.0.0.1", relay.port))
        half.sendall(struct.pack(">I", 1000) + b"\x01partial")  # a frame that never ends
        slow = socket.create_connection(("127.0.0.1", relay.port))
        slow.sendall(struct.pack(">I", 1000))

        sent: list[int] = []

        def trickle() -> None:  # a byte every 0.1 s: never idle, never a HELLO
            for _ in range(50):
                try:
                    slow.sendall(b"x")
                except OSError:
                    return
                sent.append(1)
                time.sleep(0.1)

        dripping = threading.Thread(target=trickle)
        dripping.start()
        started = time.monotonic()
        for sock in [*idle, half, slow]:
            assert b"no HELLO in time" in _closed_within(sock, 10.0)
            sock.close()
        assert time.monotonic() - started < 8.0
        dripping.join()
        assert len(sent) < 40  # cut off while still sending, not after it stopped
        assert wait_for(lambda: len(relay.node.server.readers()) == 1, 10.0)
        assert len(reader.fetch(0, 20, 10)) > 0  # the good reader never noticed
        relay.publish(20, 5)
        assert len(reader.fetch(20, 25, 10)) > 0
        reader.close()
    finally:
        relay.close()


def test_a_relay_with_mutual_tls_refuses_clients_without_a_certificate(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    assert main(["certs", "--out", str(certs), "--nodes", "relay", "reader"]) == 0

    def settings(name: str) -> TLSSettings:
        return TLSSettings(
            certificate=str(certs / f"{name}.pem"), key=str(certs / f"{name}.key"),
            cafile=str(certs / "ca.pem"),
        )  # fmt: skip

    relay = Relay(tmp_path / "relay", config=settings("relay").configuration())
    try:
        relay.publish(0, 10)
        anonymous = make_contexts(TLSSettings()).client  # Broker's default: no certificate
        with pytest.raises(SpoolClientError):
            client = SpoolClient.tcp("127.0.0.1", relay.port, anonymous)
            client.hello("follow", "anonymous")
            client.fetch(0, 10, 10)
        plain = socket.create_connection(("127.0.0.1", relay.port))
        plain.sendall(b"\x00\x00\x00\x05hello")  # not even TLS
        _closed_within(plain, 15.0)
        plain.close()
        good = SpoolClient.tcp("127.0.0.1", relay.port, make_contexts(settings("reader")).client)
        good.hello("follow", "reader")
        assert len(good.fetch(0, 10, 10)) > 0
        good.close()
    finally:
        relay.close()


def test_the_control_socket_drops_garbage_and_serves_the_owner(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay")
    path = str(tmp_path / "control.sock")
    try:
        relay.node.server.serve_unix(path)
        relay.publish(0, 10)
        junk = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        junk.connect(path)
        junk.sendall(b"\xff" * 64)
        assert b"protocol" in _closed_within(junk, 10.0)
        junk.close()
        big = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        big.connect(path)
        big.sendall(struct.pack(">I", 64 << 20))  # a 64 MiB frame announced
        assert b"exceeds the maximum" in _closed_within(big, 10.0)
        big.close()
        owner = SpoolClient.unix(path, "control")
        owner.hello("follow", "owner")
        assert len(owner.fetch(0, 10, 10)) > 0
        owner.close()
    finally:
        relay.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def test_the_metrics_port_survives_garbage_and_bounds_idle_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics._Handler, "timeout", 0.5)
    monkeypatch.setattr(metrics, "MAX_CLIENTS", 8)
    server = metrics.MetricsServer(lambda: {"sources": [], "bytes": 7}, "127.0.0.1", 0)
    threads_before = threading.active_count()
    try:
        assert "broker_spark_spool_bytes 7.0" in _scrape(server.port)
        for junk in (b"\x00\xff" * 100 + b"\r\n\r\n", b"GET /" + b"x" * 70000 + b" HTTP/1.1\r\n"):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(junk)
            _closed_within(sock, 10.0)
            sock.close()
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(30)]
        # At most MAX_CLIENTS are held (each for the timeout); the rest are closed at once.
        assert threading.active_count() - threads_before <= 8 + 1
        for sock in idle:
            _closed_within(sock, 10.0)
            sock.close()
        assert "broker_spark_spool_bytes 7.0" in _scrape(server.port)
        assert wait_for(lambda: threading.active_count() <= threads_before + 1, 10.0)
    finally:
        server.close()
