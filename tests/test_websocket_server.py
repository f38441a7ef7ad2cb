"""The WebSocket API server with a plain ``websockets`` client: handshake, data, filtering, TLS.

Every test talks to a real endpoint over loopback sockets with the
``websockets`` library's synchronous client, as a third-party Zeek client would.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from strategies import broker_values, same_value
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

import broker_spark as broker
from broker_spark import zeek
from broker_spark.certs import make_ca, make_node_cert, write_pem
from broker_spark.config import TLSSettings
from broker_spark.core import memory_link
from broker_spark.data.json_codec import decode_client_message, encode_data_message
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp
from broker_spark.errors import SC
from broker_spark.tls import make_contexts

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


def plain_endpoint() -> broker.Endpoint:
    return broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True)))


@pytest.fixture
def ep():
    with plain_endpoint() as e:
        yield e


@pytest.fixture
def port(ep: broker.Endpoint) -> int:
    p = ep.web_socket_listen()
    assert p > 0
    return p


def ws_open(address: str, **kwargs: Any) -> ClientConnection:
    """A connected client (entered, as websockets >= 17 wants; older versions alike)."""
    return connect(address, **kwargs).__enter__()


def url(port: int, scheme: str = "ws") -> str:
    return f"{scheme}://127.0.0.1:{port}/v1/messages/json"


def open_client(port: int, topics: list[str], **kwargs: Any) -> tuple[ClientConnection, dict]:
    """Connect, send the subscriptions, return the connection and the parsed ack."""
    scheme = "wss" if kwargs.get("ssl") is not None else "ws"
    ws = ws_open(url(port, scheme), **kwargs)
    ws.send(json.dumps(topics))
    ack = json.loads(ws.recv(timeout=WAIT))
    assert ack["type"] == "ack", ack
    return ws, ack


def recv_json(ws: ClientConnection) -> dict:
    return json.loads(ws.recv(timeout=WAIT))


def data_message(topic: str, value: Any) -> str:
    return encode_data_message(topic, value)


def fence(ep: broker.Endpoint, ws: ClientConnection, topic: str) -> list[dict]:
    """Publish a marker on ``topic`` and return everything ``ws`` received before it."""
    ep.publish(topic, "fence")
    seen = []
    while True:
        msg = recv_json(ws)
        if msg.get("topic") == topic and msg.get("data") == "fence":
            return seen
        seen.append(msg)


# -- handshake -------------------------------------------------------------------------


def test_handshake_answers_ack_with_endpoint_id_and_version(ep, port):
    ws, ack = open_client(port, ["/a", "/b"])
    with ws:
        assert set(ack) == {"type", "endpoint", "version"}
        assert ack["endpoint"] == ep.node_id()
        assert ack["version"] == broker.Version.string()


def test_other_paths_are_refused(port):
    with pytest.raises(InvalidStatus) as info:
        ws_open(f"ws://127.0.0.1:{port}/v2/whatever")
    assert info.value.response.status_code == 404


def test_client_is_a_peer_with_statuses(ep, port):
    status = ep.make_status_subscriber(True)
    ws, ack = open_client(port, ["/s"])
    added = status.get(2, WAIT)
    assert [s.code() for s in added] == [SC.EndpointDiscovered, SC.PeerAdded]
    assert added[1].context().network.get().address == "127.0.0.1"
    assert [p.peer.network.port for p in ep.peers()] == [added[1].context().network.port]
    ws.close()
    gone = status.get(2, WAIT)
    assert [s.code() for s in gone] == [SC.PeerRemoved, SC.EndpointUnreachable]
    assert ep._core.wait_until(lambda: not ep._core.links, WAIT)


def test_subscriptions_join_the_endpoint_filter_and_leave_with_the_client(ep, port):
    with plain_endpoint() as other:
        memory_link.connect(ep, other)
        ws, _ = open_client(port, ["/ws/x", "/ws/y"])
        core = other._core
        assert core.wait_until(
            lambda: {"/ws/x", "/ws/y"} <= set(core.peer_filters().get(ep.node_id(), ())), WAIT
        )
        ws.close()
        assert core.wait_until(lambda: not core.peer_filters().get(ep.node_id()), WAIT)


# -- data both ways ------------------------------------------------------------------------

EVERY_TYPE = [
    None,
    True,
    False,
    Count(0),
    Count(2**64 - 1),
    -(2**63),
    2**63 - 1,
    -7.5,
    0.1,
    "héllo wörld",
    b"\xff\xfe not utf-8",
    Enum("Conn::LOG"),
    ipaddress.ip_address("10.1.2.3"),
    ipaddress.ip_address("2001:db8::1"),
    ipaddress.ip_network("10.0.0.0/8"),
    ipaddress.ip_network("2001:db8::/32"),
    Port(80, Port.TCP),
    Port(53, Port.UDP),
    Port(8, Port.ICMP),
    Port(0, Port.Unknown),
    Timestamp.from_ns(1_649_574_000_123_000_000),
    Timespan.from_ns(1_500_000_000),
    Timespan.from_ns(-42),
    (Count(1), "two", (3.5, ())),
    {Count(1), Count(2), "three"},
    {"a": Count(1), ("k", 2): {"nested": (True, None)}},
    (),
    set(),
    {},
]


@pytest.mark.parametrize("value", EVERY_TYPE, ids=lambda v: type(v).__name__)
def test_every_type_from_client_to_subscriber_and_back(ep, port, value):
    sub = ep.make_subscriber("/v")
    ws, _ = open_client(port, ["/v"])
    with ws:
        ws.send(data_message("/v/in", value))
        topic, got = sub.get(WAIT)
        assert topic == "/v/in"
        assert same_value(got, value)
        ep.publish("/v/out", value)
        text = ws.recv(timeout=WAIT)
        assert text == data_message("/v/out", value)
        assert same_value(decode_client_message(text).value, value)


@settings(max_examples=40, deadline=None)
@given(value=broker_values(max_depth=3, max_size=4))
def test_server_renders_what_the_codec_renders(value):
    with plain_endpoint() as e:
        p = e.web_socket_listen()
        sub = e.make_subscriber("/h")
        ws, _ = open_client(p, ["/h"])
        with ws:
            e.publish("/h/out", value)
            assert ws.recv(timeout=WAIT) == encode_data_message("/h/out", value)
            text = encode_data_message("/h/in", value)
            ws.send(text)
            assert same_value(sub.get(WAIT)[1], decode_client_message(text).value)


def test_zeek_events_with_nested_arguments(ep, port):
    sub = ep.make_subscriber("/zeek")
    ws, _ = open_client(port, ["/zeek"])
    args = (
        Count(42),
        "test",
        ({"k": (ipaddress.ip_address("192.168.1.1"), Port(443, Port.TCP))}, {Enum("A")}),
        dt.datetime(2022, 4, 10, 7, 0, tzinfo=dt.timezone.utc),
    )
    with ws:
        ep.publish("/zeek/ev", zeek.Event("my_event", *args))
        msg = recv_json(ws)
        assert msg["@data-type"] == "vector"
        fmt, kind, content = msg["data"]
        assert fmt == {"@data-type": "count", "data": 1}
        assert kind == {"@data-type": "count", "data": 1}
        name, wire_args = content["data"][:2]
        assert name == {"@data-type": "string", "data": "my_event"}
        assert wire_args["data"][2]["data"][0]["@data-type"] == "table"
        assert wire_args["data"][3] == {
            "@data-type": "timestamp",
            "data": "2022-04-10T07:00:00.000",
        }
        # The same event sent by the client reaches a subscriber as a valid Zeek event.
        ws.send(json.dumps({"type": "data-message", "topic": "/zeek/in", **content_of(msg)}))
        topic, data = sub.get(WAIT)
        event = zeek.Event(data)
        assert topic == "/zeek/in" and event.valid()
        assert event.name() == "my_event"
        assert same_value(event.args()[2], args[2])


def content_of(msg: dict) -> dict:
    return {"@data-type": msg["@data-type"], "data": msg["data"]}


def test_subscriptions_filter_what_the_client_sees(ep, port):
    ws, _ = open_client(port, ["/a/", "/c"])
    with ws:
        for topic in ("/a/1", "/b/1", "/ab", "/c", "/c/d", "/a/2"):
            ep.publish(topic, topic)
        seen = [m["topic"] for m in fence(ep, ws, "/c/fence")]
        assert seen == ["/a/1", "/c", "/c/d", "/a/2"]


def test_publish_only_client_receives_nothing(ep, port):
    sub = ep.make_subscriber("/p")
    ws, _ = open_client(port, [])
    with ws:
        ep.publish("/p/x", 1)
        ws.send(data_message("/p/y", 2))
        assert sub.get(WAIT) == ("/p/y", 2)
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.2)


def test_client_publications_reach_other_clients_but_not_the_sender(ep, port):
    sender, _ = open_client(port, ["/t"])
    other, _ = open_client(port, ["/t"])
    with sender, other:
        sender.send(data_message("/t/x", Count(7)))
        assert recv_json(other) == json.loads(data_message("/t/x", Count(7)))
        assert fence(ep, sender, "/t/fence") == []


def test_client_publications_reach_native_subscribers_two_hops_away():
    with plain_endpoint() as a, plain_endpoint() as b, plain_endpoint() as c:
        memory_link.connect(a, b)
        memory_link.connect(b, c)
        b.forward(["/far"])  # b relays in both directions
        far = c.make_subscriber("/far")
        assert a._core.wait_until(lambda: "/far" in a._core.peer_filters()[b.node_id()], WAIT)
        port = a.web_socket_listen()
        ws, _ = open_client(port, ["/far"])
        with ws:
            ws.send(data_message("/far/x", ("nested", (Count(1),))))
            assert far.get(WAIT) == ("/far/x", ("nested", (Count(1),)))
            # ... and back: c publishes, the WebSocket client on a receives it.
            assert c._core.wait_until(
                lambda: "/far" in c._core.peer_filters().get(b.node_id(), ()), WAIT
            )
            c.publish("/far/back", 3)
            assert recv_json(ws) == json.loads(data_message("/far/back", 3))


def test_client_publications_cross_tcp_peering():
    """Client -> a -> (TCP peering) -> b's subscriber, and b's publications back to the client."""
    with plain_endpoint() as a, plain_endpoint() as b:
        try:
            tcp_port = b.listen("127.0.0.1", 0)
        except NotImplementedError:
            pytest.skip("TCP peering is not available")
        sub = b.make_subscriber("/tcp")
        assert a.peer("127.0.0.1", tcp_port, 0)
        ws, _ = open_client(a.web_socket_listen(), ["/tcp"])
        with ws:
            assert a._core.wait_until(
                lambda: "/tcp" in a._core.peer_filters().get(b.node_id(), ()), WAIT
            )
            ws.send(data_message("/tcp/x", {"k": Count(1)}))
            assert sub.get(WAIT) == ("/tcp/x", {"k": Count(1)})
            # The client's subscription flooded to b like a local subscriber's would.
            assert b._core.wait_until(
                lambda: "/tcp" in b._core.peer_filters().get(a.node_id(), ()), WAIT
            )
            b.publish("/tcp/back", "over tcp")
            assert recv_json(ws)["data"] == "over tcp"


# -- TLS -------------------------------------------------------------------------------------


def test_wss_with_anonymous_tls():
    with broker.Endpoint() as e:  # SSL on by default, no certificates: anonymous TLS
        port = e.web_socket_listen()
        sub = e.make_subscriber("/tls")
        client_ctx = make_contexts(TLSSettings()).client
        ws, ack = open_client(port, ["/tls"], ssl=client_ctx)
        with ws:
            assert ack["endpoint"] == e.node_id()
            ws.send(data_message("/tls/in", "secret"))
            assert sub.get(WAIT) == ("/tls/in", "secret")
            e.publish("/tls/out", "reply")
            assert recv_json(ws)["data"] == "reply"
        # A plain ws client cannot talk to a wss server.
        with pytest.raises(Exception):  # noqa: B017 (the handshake fails one way or another)
            ws_open(url(port), open_timeout=2)


def test_wss_with_certificates(tmp_path):
    ca = make_ca()
    server_pair, client_pair = make_node_cert(ca, "server"), make_node_cert(ca, "client")
    cfg = broker.Configuration(broker.BrokerOptions())
    cfg.openssl_cafile = str(write_pem(tmp_path / "ca.pem", ca.cert_pem))
    cfg.openssl_certificate = str(write_pem(tmp_path / "s.pem", server_pair.cert_pem))
    cfg.openssl_key = str(write_pem(tmp_path / "s.key", server_pair.key_pem))
    client_ctx = make_contexts(
        TLSSettings(
            certificate=str(write_pem(tmp_path / "c.pem", client_pair.cert_pem)),
            key=str(write_pem(tmp_path / "c.key", client_pair.key_pem)),
            cafile=cfg.openssl_cafile,
        )
    ).client
    with broker.Endpoint(cfg) as e:
        port = e.web_socket_listen()
        sub = e.make_subscriber("/mtls")
        ws, _ = open_client(port, ["/mtls"], ssl=client_ctx)
        with ws:
            ws.send(data_message("/mtls/x", Count(1)))
            assert sub.get(WAIT) == ("/mtls/x", Count(1))
        # Without a client certificate the server refuses the TLS handshake.
        with pytest.raises(Exception):  # noqa: B017
            c = ws_open(url(port, "wss"), ssl=make_contexts(TLSSettings()).client, open_timeout=2)
            c.send("[]")
            c.recv(timeout=2)


# -- many clients ------------------------------------------------------------------------------


def test_many_clients_at_once(ep, port):
    sub = ep.make_subscriber("/many", qsize=1000)
    clients = [open_client(port, [f"/many/{i}/"])[0] for i in range(20)]
    try:
        for i in range(20):
            ep.publish(f"/many/{i}/x", i)
        for i, ws in enumerate(clients):
            assert recv_json(ws)["data"] == i

        def publish(i: int, ws: ClientConnection) -> None:
            for k in range(25):
                ws.send(data_message(f"/many/from/{i}", k))

        threads = [threading.Thread(target=publish, args=(i, ws)) for i, ws in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        got = sub.get(20 * 25, WAIT)
        assert len(got) == 500
        for i in range(20):  # each client's messages arrive in the order it sent them
            assert [v for t, v in got if t == f"/many/from/{i}"] == list(range(25))
    finally:
        for ws in clients:
            ws.close()


def test_a_slow_subscriber_slows_a_publishing_client_without_losses():
    """Backpressure: the core stalls on the subscriber, the link's source fills, TCP pushes back."""
    opts = broker.BrokerOptions(disable_ssl=True, peer_buffer_size=8)
    with broker.Endpoint(broker.Configuration(opts)) as e:
        sub = e.make_subscriber("/bp", qsize=4)
        ws, _ = open_client(e.web_socket_listen(), [])
        n, blob = 3000, "z" * 10_000  # 30 MB: far more than socket buffers hold

        def publish() -> None:
            for i in range(n):
                ws.send(data_message("/bp/x", (Count(i), blob)))

        sender = threading.Thread(target=publish)
        with ws:
            sender.start()
            sender.join(0.3)
            assert sender.is_alive()  # held back while nobody reads
            got = []
            while len(got) < n:
                got.extend(sub.get(100, WAIT))
            sender.join(WAIT)
            assert [v[0] for _, v in got] == list(range(n))


def test_shutdown_closes_clients_with_going_away():
    before = set(threading.enumerate())
    e = plain_endpoint()
    port = e.web_socket_listen()
    clients = [open_client(port, ["/x"])[0] for _ in range(3)]
    e.shutdown()
    for ws in clients:
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=WAIT)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1001
        ws.close()
    # The listening socket is gone and no thread of the endpoint is left.
    with pytest.raises(OSError):
        ws_open(url(port), open_timeout=2)
    assert {t for t in set(threading.enumerate()) - before if t.is_alive()} == set()


def test_zeekpys_decimal_nanoseconds_are_accepted(ep, port):
    """zeekpy 0.3.1 writes every interval as float nanoseconds
    (``f"{td.total_seconds() * 1000_000_000}ns"``); this is its exact message for
    ``publish("/zeek/in", "tick", [timedelta(seconds=1.5), timedelta(days=200)])``."""
    sub = ep.make_subscriber("/zeek")
    message = {
        "topic": "/zeek/in",
        "type": "data-message",
        "@data-type": "vector",
        "data": [
            {"@data-type": "count", "data": 1},
            {"@data-type": "count", "data": 1},
            {
                "@data-type": "vector",
                "data": [
                    {"@data-type": "string", "data": "tick"},
                    {
                        "@data-type": "vector",
                        "data": [
                            {"@data-type": "timespan", "data": "1500000000.0ns"},
                            {"@data-type": "timespan", "data": "1.728e+16ns"},
                        ],
                    },
                ],
            },
        ],
    }
    ws, _ = open_client(port, ["/zeek/out"])
    with ws:
        ws.send(json.dumps(message))
        topic, data = sub.get(WAIT)
        event = zeek.Event(data)
        assert (topic, event.name()) == ("/zeek/in", "tick")
        assert event.args() == [dt.timedelta(seconds=1.5), dt.timedelta(days=200)]
        # Written back as Broker writes it: an integer with the coarsest exact unit.
        ep.publish("/zeek/out", event)
        args = recv_json(ws)["data"][2]["data"][1]["data"]
        assert [a["data"] for a in args] == ["1500ms", "17280000s"]
