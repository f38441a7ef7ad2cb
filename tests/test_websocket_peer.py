"""``Endpoint.web_socket_peer``: bridging an endpoint to a remote WebSocket API.

Between two of our endpoints (one serving, one connecting) and against a
small Zeek-like server written here with the ``websockets`` library.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import uuid
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

import broker_spark as broker
from broker_spark import zeek
from broker_spark.data.json_codec import encode_data_message
from broker_spark.data.types import Count
from broker_spark.errors import EC, SC
from broker_spark.status import Error, Status
from broker_spark.websocket.pacing import PROBE

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


def plain() -> broker.Configuration:
    return broker.Configuration(broker.BrokerOptions(disable_ssl=True))


def statuses(sub: Any, n: int) -> list[tuple[Any, str]]:
    got = sub.get(n, WAIT)
    assert len(got) == n, got
    return [(s.code(), str(s.context())) for s in got]


@pytest.fixture
def pair():
    with broker.Endpoint(plain()) as server, broker.Endpoint(plain()) as client:
        yield server, client


def test_bridge_between_two_endpoints_both_ways(pair):
    server, client = pair
    port = server.web_socket_listen()
    on_server = server.make_subscriber("/t")
    on_client = client.make_subscriber("/t")
    status = client.make_status_subscriber(True)
    assert client.web_socket_peer(f"ws://127.0.0.1:{port}", ["/t"], retry=0)  # path added
    assert statuses(status, 2) == [
        (SC.EndpointDiscovered, server.node_id()),
        (SC.PeerAdded, server.node_id()),
    ]
    assert client.await_peer(server.node_id(), 1.0)
    server.publish("/t/down", (Count(1), {"k": "v"}))
    assert on_client.get(WAIT) == ("/t/down", (Count(1), {"k": "v"}))
    client.publish("/t/up", {Count(2)})
    assert on_server.get(WAIT) == ("/t/up", {Count(2)})
    # Only the bridged topics cross, in both directions.
    server.publish("/other", 1)
    client.publish("/other", 2)
    server.publish("/t/fence", 3)
    client.publish("/t/fence", 4)
    assert on_client.get(WAIT) == ("/t/fence", 3)
    assert on_server.get(WAIT) == ("/t/fence", 4)


def test_bridge_over_wss_with_anonymous_tls():
    with broker.Endpoint() as server, broker.Endpoint() as client:
        port = server.web_socket_listen()
        sub = server.make_subscriber("/s")
        assert client.web_socket_peer(f"wss://127.0.0.1:{port}/v1/messages/json", "/s", retry=0)
        client.publish("/s/x", "over TLS")
        assert sub.get(WAIT) == ("/s/x", "over TLS")


def test_failed_peer_reports_unavailable(pair):
    _, client = pair
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        status = client.make_status_subscriber()
        assert not client.web_socket_peer(f"ws://127.0.0.1:{port}", ["/t"], retry=0)
        err = status.get(WAIT)
        assert isinstance(err, Error) and err.code() == EC.PeerUnavailable
        assert client.peers() == []


def test_bad_urls_are_refused(pair):
    _, client = pair
    for bad in ("http://example.com/", "not a url", "ws://"):
        with pytest.raises(ValueError):
            client.web_socket_peer(bad, ["/t"])


def test_peering_with_our_own_api_is_refused(pair):
    server, _ = pair
    port = server.web_socket_listen()
    status = server.make_status_subscriber()
    assert not server.web_socket_peer(f"ws://127.0.0.1:{port}", ["/t"], retry=0)
    err = status.get(WAIT)
    assert isinstance(err, Error) and err.code() == EC.PeerInvalid


def test_reconnects_after_the_server_restarts():
    with broker.Endpoint(plain()) as client:
        first = broker.Endpoint(plain())
        port = first.web_socket_listen()
        status = client.make_status_subscriber(True)
        assert client.web_socket_peer(f"ws://127.0.0.1:{port}", ["/r"], retry=0.05)
        assert statuses(status, 2)[1] == (SC.PeerAdded, first.node_id())
        first.shutdown()
        assert statuses(status, 2) == [
            (SC.PeerLost, first.node_id()),
            (SC.EndpointUnreachable, first.node_id()),
        ]
        with broker.Endpoint(plain()) as second:
            sub = second.make_subscriber("/r")
            assert second.web_socket_listen(port=port) == port
            # Failed attempts may be reported (as errors) until the new server is up.
            while True:
                item = status.get(WAIT)
                assert item is not None
                if isinstance(item, Status) and item.code() == SC.PeerAdded:
                    break
            assert str(item.context()) == second.node_id()
            client.publish("/r/x", "again")
            assert sub.get(WAIT) == ("/r/x", "again")


def test_connects_in_the_background_once_the_server_appears(pair):
    server, client = pair
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status = client.make_status_subscriber(True)
    assert not client.web_socket_peer(f"ws://127.0.0.1:{port}", ["/late"], retry=0.05)
    assert server.web_socket_listen(port=port) == port
    sub = server.make_subscriber("/late")
    while True:
        item = status.get(WAIT)
        assert item is not None
        if isinstance(item, Status) and item.code() == SC.PeerAdded:
            break
    client.publish("/late/x", 1)
    assert sub.get(WAIT) == ("/late/x", 1)


def test_unpeer_reports_removed_and_stops_the_flow(pair):
    server, client = pair
    port = server.web_socket_listen()
    address = f"ws://127.0.0.1:{port}/v1/messages/json"
    sub = client.make_subscriber("/u")
    status = client.make_status_subscriber(True)
    server_status = server.make_status_subscriber(True)
    assert client.web_socket_peer(address, ["/u"])
    statuses(status, 2)
    statuses(server_status, 2)
    assert client.web_socket_unpeer(address)
    assert statuses(status, 2) == [
        (SC.PeerRemoved, server.node_id()),
        (SC.EndpointUnreachable, server.node_id()),
    ]
    assert [c for c, _ in statuses(server_status, 2)] == [SC.PeerRemoved, SC.EndpointUnreachable]
    server.publish("/u/x", 1)
    assert sub.get(0.2) is None
    assert not client.web_socket_unpeer(address)


def test_shutdown_with_a_live_bridge_leaves_nothing_behind():
    before = set(threading.enumerate())
    with broker.Endpoint(plain()) as server:
        port = server.web_socket_listen()
        status = server.make_status_subscriber(True)
        client = broker.Endpoint(plain())
        assert client.web_socket_peer(f"ws://127.0.0.1:{port}", ["/z"], retry=0.05)
        statuses(status, 2)
        client.shutdown()
        assert [c for c, _ in statuses(status, 2)][0] in (SC.PeerRemoved, SC.PeerLost)
    assert {t for t in set(threading.enumerate()) - before if t.is_alive()} == set()


# -- against a Zeek-like server -------------------------------------------------------------


class FakeZeek:
    """A WebSocket server that acts like Zeek 8's: ack with a ``-websocket-N`` id, errors with "message"."""

    def __init__(self) -> None:
        self.node = f"{uuid.uuid4()}-websocket-3"
        self.received: queue.Queue[str] = queue.Queue()
        self.to_send: queue.Queue[str | None] = queue.Queue()
        self.subscriptions: list[str] | None = None
        self.app_name: str | None = None
        self.server = serve(self.handle, "127.0.0.1", 0)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, ws: ServerConnection) -> None:
        self.app_name = ws.request.headers.get("X-Application-Name")
        self.subscriptions = json.loads(ws.recv())
        ws.send(json.dumps({"type": "ack", "endpoint": self.node, "version": "8.0.0"}))
        done = threading.Event()

        def reader() -> None:
            try:
                for text in ws:
                    self.received.put(text)
            except ConnectionClosed:
                pass  # the bridge may drop the socket without a close frame at shutdown
            finally:
                done.set()

        reading = threading.Thread(target=reader, daemon=True)
        reading.start()
        while not done.is_set():
            try:
                text = self.to_send.get(timeout=0.05)
            except queue.Empty:
                continue
            if text is None:
                break
            ws.send(text)
        ws.close()
        reading.join(WAIT)

    def close(self) -> None:
        self.to_send.put(None)
        self.server.shutdown()
        self.thread.join(WAIT)


def test_bridge_to_a_zeek_like_server():
    zeek_server = FakeZeek()
    try:
        with broker.Endpoint(plain()) as ep:
            sub = ep.make_subscriber("zeek/")
            status = ep.make_status_subscriber(True)
            assert ep.web_socket_peer(f"ws://127.0.0.1:{zeek_server.port}", ["zeek/"], retry=0)
            assert zeek_server.subscriptions == ["zeek/"]
            assert zeek_server.app_name == "broker-spark"
            assert statuses(status, 2)[1] == (SC.PeerAdded, zeek_server.node)
            # An event from Zeek, as Zeek 8 renders it (with an empty metadata vector).
            event = (Count(1), Count(1), ("hello", (Count(3),), ()))
            zeek_server.to_send.put(encode_data_message("zeek/test", event))
            topic, data = sub.get(WAIT)
            assert topic == "zeek/test"
            assert zeek.Event(data).name() == "hello"
            assert list(zeek.Event(data).args()) == [Count(3)]
            # Zeek 8 error messages carry "message" (Broker's carry "context").
            zeek_server.to_send.put(
                json.dumps(
                    {"type": "error", "code": "deserialization_failed", "message": "no topic"}
                )
            )
            err = status.get(WAIT)
            assert isinstance(err, Error) and err.code() == EC.DeserializationFailed
            assert "no topic" in err.message()
            # Our publications go to Zeek as data messages, on any topic (Zeek's server takes
            # a client's publication whatever it subscribed to), each group of them followed
            # by a flow-control probe.
            ep.publish("zeek/reply", zeek.Event("pong", Count(4)))
            ep.publish("elsewhere", 1)
            wanted = [
                encode_data_message("zeek/reply", zeek.Event("pong", Count(4))),
                encode_data_message("elsewhere", 1),
            ]
            got = []
            while sum(t != PROBE for t in got) < 2 or got[-1] != PROBE:
                got.append(zeek_server.received.get(timeout=WAIT))
            assert [t for t in got if t != PROBE] == wanted
            assert got[-1] == PROBE
    finally:
        zeek_server.close()
