"""One address cannot starve a listener: crowds from 127.0.0.2, readers from 127.0.0.1.

Linux routes all of 127.0.0.0/8 to the loopback device, so a socket bound to
127.0.0.2 stands for another host. On the relay's reader port, the Broker
peering listener and the WebSocket server, with TLS and without:

- a crowd of idle connections (no HELLO, no handshake, TLS not even begun) from
  one address holds at most its per-address cap, and a reader from another
  address is served meanwhile;
- the same crowd renewed as fast as it can open sockets, faster than any
  timeout drops them, changes nothing;
- a crowd from many addresses holds at most the unidentified share, and a
  reader that said who it is before keeps its place.

And ``/metrics`` holds a crowd from one address to its cap while a scraper from
another is answered.

The caps are made small (the same code path as 64, sooner). The decisions
themselves are tested without sockets in tests/test_address_slots.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import wait_for
from test_relay_readers_limited import _tls
from test_spark_relay import Relay
from websockets.sync.client import connect

import broker_spark as broker
from broker_spark.admission import LISTEN_BACKLOG, PER_ADDRESS, UNIDENTIFIED, Admission
from broker_spark.spool import metrics
from broker_spark.spool.relay_client import SpoolClient
from broker_spark.tls import make_contexts
from broker_spark.websocket.manager import manager_for

pytestmark = pytest.mark.timeout(60)

#: The cap per address in these tests.
CAP = 4


class Crowd:
    """Idle TCP connections to ``port`` from ``address``, as many as it can open: all at
    once (:meth:`open`), or renewed in a thread until closed (:meth:`renew`), the oldest
    dropped beyond ``hold``."""

    def __init__(self, port: int, address: str = "127.0.0.2", hold: int = 3 * CAP) -> None:
        self.port = port
        self.address = address
        self.hold = hold
        self.socks: deque[socket.socket] = deque()
        self.opened = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _one(self) -> None:
        try:
            sock = socket.create_connection(
                ("127.0.0.1", self.port), timeout=2, source_address=(self.address, 0)
            )
        except OSError:
            return
        self.opened += 1
        self.socks.append(sock)
        while len(self.socks) > self.hold:
            self.socks.popleft().close()

    def open(self, n: int) -> Crowd:
        self.hold = max(self.hold, n)
        for _ in range(n):
            self._one()
        return self

    def renew(self) -> Crowd:
        def run() -> None:
            while not self._stop.is_set():
                self._one()

        self._thread = threading.Thread(target=run, name="crowd")
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        while self.socks:
            self.socks.popleft().close()


@dataclass
class Target:
    """A listener under test: its port, its slots, and a reader (from 127.0.0.1) that
    connects, says who it is and is served."""

    port: int
    admission: Admission
    serve: Callable[[], Any]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from broker_spark.cli import main

    out = tmp_path_factory.mktemp("certs")
    assert main(["certs", "--out", str(out), "--nodes", "server", "reader"]) == 0
    return out


def _config(certs: Path, tls: bool, name: str = "server") -> broker.Configuration:
    options = broker.BrokerOptions(disable_ssl=not tls, connections_per_address=CAP)
    return _tls(certs, name).configuration(options) if tls else broker.Configuration(options)


@contextmanager
def _relay(tmp_path: Path, certs: Path, tls: bool) -> Iterator[Target]:
    r = Relay(tmp_path / "relay", config=_config(certs, tls))
    client_tls = make_contexts(_tls(certs, "reader")).client if tls else None
    try:
        r.publish(0, 10)
        admission = r.node.server.admission
        admission.per_address = CAP

        def serve() -> SpoolClient:
            reader = SpoolClient.tcp("127.0.0.1", r.port, client_tls)
            reader.hello("follow", "good")
            assert reader.request("bounds")["end"] == 10
            return reader

        yield Target(r.port, admission, serve)
    finally:
        r.close()


@contextmanager
def _peering(tmp_path: Path, certs: Path, tls: bool) -> Iterator[Target]:
    with broker.Endpoint(_config(certs, tls)) as ep:
        port = ep.listen("127.0.0.1", 0)
        peers: list[broker.Endpoint] = []

        def serve() -> broker.Endpoint:
            peer = broker.Endpoint(_config(certs, tls, "reader"))
            peers.append(peer)
            assert peer.peer("127.0.0.1", port, retry=0)
            return peer

        try:
            yield Target(port, ep.listen_admission(port), serve)
        finally:
            for peer in peers:
                peer.shutdown()


@contextmanager
def _websocket(tmp_path: Path, certs: Path, tls: bool) -> Iterator[Target]:
    with broker.Endpoint(_config(certs, tls)) as ep:
        port = ep.web_socket_listen("127.0.0.1", 0)
        admission = manager_for(ep).servers[port].admission
        scheme = "wss" if tls else "ws"
        client_tls = make_contexts(_tls(certs, "reader")).client if tls else None
        opened: list[Any] = []

        def serve() -> Any:
            url = f"{scheme}://127.0.0.1:{port}/v1/messages/json"
            ws = connect(url, ssl=client_tls).__enter__()
            opened.append(ws)
            ws.send(json.dumps(["/t"]))
            assert json.loads(ws.recv(timeout=10))["type"] == "ack"
            return ws

        try:
            yield Target(port, admission, serve)
        finally:
            for ws in opened:
                ws.close()


LISTENERS = {"relay": _relay, "peering": _peering, "websocket": _websocket}


@pytest.fixture(
    params=[(name, tls) for name in LISTENERS for tls in (False, True)],
    ids=lambda p: f"{p[0]}-{'tls' if p[1] else 'plain'}",
)
def target(request: pytest.FixtureRequest, tmp_path: Path, certs: Path) -> Iterator[Target]:
    name, tls = request.param
    with LISTENERS[name](tmp_path, certs, tls) as made:
        yield made


def _refused(admission: Admission, reason: str) -> int:
    return int(admission.snapshot()["refused"].get(reason, 0))


def test_a_crowd_from_one_address_holds_its_cap_and_others_are_served(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    target.admission.limit = 3 * CAP  # without the cap, the crowd would take every slot
    crowd = Crowd(target.port).open(5 * CAP)
    try:
        assert wait_for(lambda: _refused(target.admission, PER_ADDRESS) >= 4 * CAP, 10)
        assert target.admission.snapshot()["unidentified"] <= CAP
        said = [r for r in caplog.records if "127.0.0.2: connection refused" in r.message]
        assert len(said) == 1  # 16 refusals, one line (a minute has not passed)
        target.serve()  # from 127.0.0.1, while 127.0.0.2 holds all it could open
        target.serve()
        assert target.admission.snapshot()["connections"] <= CAP + 2 + 1  # (a closing one)
    finally:
        crowd.close()


def test_a_crowd_renewed_faster_than_any_timeout_changes_nothing(target: Target) -> None:
    target.admission.limit = 3 * CAP  # the crowd holds that many open (Crowd.hold)
    crowd = Crowd(target.port).renew()
    try:
        assert wait_for(lambda: crowd.opened > 10 * CAP, 10)
        for _ in range(3):
            target.serve()
        assert _refused(target.admission, PER_ADDRESS) > 0
    finally:
        crowd.close()
    assert crowd.opened > 10 * CAP  # it was renewed many times over while readers were served


def test_strangers_from_many_addresses_hold_a_share_and_a_reader_keeps_its_place(
    target: Target,
) -> None:
    target.admission.limit = 4 * CAP  # unidentified: half of it
    reader = target.serve()  # identified before the crowd came
    crowds = [Crowd(target.port, f"127.0.0.{i}").open(CAP) for i in range(2, 7)]
    try:
        assert wait_for(lambda: _refused(target.admission, UNIDENTIFIED) >= CAP, 10)
        assert target.admission.snapshot()["unidentified"] == 2 * CAP
        assert target.admission.connections >= 1
        _still_served(reader)
    finally:
        for crowd in crowds:
            crowd.close()


def _still_served(reader: Any) -> None:
    """The reader connected before the crowd is served during it."""
    if isinstance(reader, SpoolClient):
        assert reader.request("bounds")["end"] == 10
    elif isinstance(reader, broker.Endpoint):
        assert reader.peers()
    else:
        reader.send(json.dumps({"type": "data-message", "topic": "/t", "@data-type": "count",
                                "data": 1}))  # fmt: skip
        reader.ping().wait(10)


def test_the_metrics_hold_a_crowd_from_one_address_to_its_cap() -> None:
    server = metrics.MetricsServer(lambda: {"bytes": 7}, "127.0.0.1", 0, per_address=2)
    crowd = Crowd(server.port).open(6)
    try:
        assert wait_for(lambda: _refused(server.admission, PER_ADDRESS) == 4, 10)
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:  # from 127.0.0.1
            assert b"broker_spark_spool_bytes 7.0" in answer.read()
    finally:
        crowd.close()
        server.close()


# -- the kernel's queue before admission -------------------------------------------------


def _listen_backlog(port: int) -> int:
    """The queue the kernel keeps for the listening TCP socket on ``port`` (``ss`` shows it
    as a listener's Send-Q)."""
    listed = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    (line,) = listed.splitlines()
    return int(line.split()[2])


def _system_cap() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def test_every_listener_asks_the_kernel_for_a_long_queue(target: Target) -> None:
    assert _listen_backlog(target.port) == min(LISTEN_BACKLOG, _system_cap())


def test_the_metrics_server_asks_the_kernel_for_a_long_queue() -> None:
    server = metrics.MetricsServer(lambda: {"bytes": 7}, "127.0.0.1", 0)
    try:
        assert _listen_backlog(server.port) == min(LISTEN_BACKLOG, _system_cap())
    finally:
        server.close()


def test_a_burst_while_the_listener_is_busy_waits_in_the_queue(certs: Path) -> None:
    """300 connections opened while the endpoint's loop cannot accept each complete at
    once: the kernel queues them (the library default, 128, would drop the SYNs beyond it
    and each such client would wait a second for its retransmission)."""
    assert min(LISTEN_BACKLOG, _system_cap()) >= 300
    with broker.Endpoint(_config(certs, tls=False)) as ep:
        port = ep.listen("127.0.0.1", 0)
        busy = threading.Thread(target=ep.run_in_loop, args=(time.sleep, 3.0))
        busy.start()
        socks: list[socket.socket] = []
        try:
            for _ in range(300):
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=0.9))
        finally:
            for sock in socks:
                sock.close()
            busy.join()
        assert len(socks) == 300
