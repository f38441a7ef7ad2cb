"""The WebSocket API server against bad input, oversized frames and slow readers.

Bad input is answered with Broker's error message and the connection stays
usable; nothing of a rejected message reaches subscribers. Oversized frames
and clients that read too slowly are disconnected, without slowing anyone else.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

import broker_spark as broker
from broker_spark.data.json_codec import encode_data_message
from broker_spark.data.types import Count
from broker_spark.errors import EC, SC
from broker_spark.status import Error

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


@pytest.fixture
def ep():
    with broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True))) as e:
        yield e


def ws_open(port: int, **kwargs: Any) -> ClientConnection:
    return connect(f"ws://127.0.0.1:{port}/v1/messages/json", **kwargs).__enter__()


def handshake(ws: ClientConnection, topics: list[str]) -> dict:
    ws.send(json.dumps(topics))
    ack = json.loads(ws.recv(timeout=WAIT))
    assert ack["type"] == "ack"
    return ack


def expect_error(ws: ClientConnection, code: str = "deserialization_failed") -> str:
    msg = json.loads(ws.recv(timeout=WAIT))
    assert msg["type"] == "error", msg
    assert msg["code"] == code
    assert msg["context"] == msg["message"]  # Broker's key and Zeek 8's, same text
    return msg["context"]


def data(topic: str, value: Any) -> str:
    return encode_data_message(topic, value)


BAD_INPUT = {
    "malformed JSON": ("How is it going?", "contained malformed JSON"),
    "truncated JSON": ('{"type":"data-message","topic":"/b"', "contained malformed JSON"),
    "wrong @data-type": (
        '{"type":"data-message","topic":"/b/x","@data-type":"counter","data":1}',
        "unknown @data-type",
    ),
    "count with a decimal point": (
        '{"type":"data-message","topic":"/b/x","@data-type":"count","data":1.0}',
        "decimal point",
    ),
    "negative count": (
        '{"type":"data-message","topic":"/b/x","@data-type":"count","data":-1}',
        "count",
    ),
    "out-of-range port": (
        '{"type":"data-message","topic":"/b/x","@data-type":"port","data":"70000/tcp"}',
        "port",
    ),
    "bad nested value": (
        '{"type":"data-message","topic":"/b/x","@data-type":"vector","data":'
        '[{"@data-type":"count","data":1},{"@data-type":"integer","data":"2"}]}',
        "data[1]",
    ),
    "missing topic": ('{"type":"data-message","@data-type":"count","data":1}', "topic"),
    "not a data message": ('{"type":"ack"}', "data-message"),
    "a JSON array": ('["/late/subscription"]', "data message"),
    "NaN literal": ('{"type":"data-message","topic":"/b","@data-type":"real","data":NaN}', "NaN"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_is_answered_and_the_connection_stays_usable(ep, name):
    text, expected = BAD_INPUT[name]
    sub = ep.make_subscriber("/b")
    port = ep.web_socket_listen()
    with ws_open(port) as ws:
        handshake(ws, ["/b"])
        ws.send(data("/b/ok", Count(1)))
        ws.send(text)
        context = expect_error(ws)
        assert context.startswith("input #2 contained ")
        assert expected in context
        # Still usable: the next message is published, and nothing of the bad one was.
        ws.send(data("/b/ok", Count(3)))
        assert sub.get(2, WAIT) == [("/b/ok", Count(1)), ("/b/ok", Count(3))]
        assert sub.poll() == []
        ep.publish("/b/reply", "still here")
        assert json.loads(ws.recv(timeout=WAIT))["data"] == "still here"


def test_binary_frames_are_refused_but_harmless(ep):
    sub = ep.make_subscriber("/b")
    port = ep.web_socket_listen()
    with ws_open(port) as ws:
        handshake(ws, [])
        ws.send(data("/b/x", 1).encode())  # valid JSON, but in a binary frame
        assert "binary frame" in expect_error(ws)
        ws.send(data("/b/x", 2))
        assert sub.get(WAIT) == ("/b/x", 2)
        assert sub.poll() == []


@pytest.mark.parametrize(
    "first",
    [
        data("/b/x", 1),  # a data message before the handshake
        '{"topics": ["/b"]}',
        '["/b", 42]',
        "[",
        b'["/b"]',  # the right array, in a binary frame
    ],
)
def test_messages_before_the_handshake_are_refused(ep, first):
    sub = ep.make_subscriber("/b")
    port = ep.web_socket_listen()
    with ws_open(port) as ws:
        ws.send(first)
        context = expect_error(ws)
        assert context.startswith("handshake input #1 ")
        # The handshake can still happen, and the refused message was not published.
        handshake(ws, ["/b"])
        ws.send(data("/b/after", 2))
        assert sub.get(WAIT) == ("/b/after", 2)
        assert sub.poll() == []


def test_oversized_frames_close_the_connection(ep):
    sub = ep.make_subscriber("/big")
    port = ep.web_socket_listen(max_size=1000)
    with ws_open(port) as ws, ws_open(port) as bystander:
        handshake(ws, [])
        handshake(bystander, ["/big"])
        ws.send(data("/big/x", "x" * 2000))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=WAIT)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # message too big
        # Nothing was published, and the endpoint and other clients carry on.
        ep.publish("/big/ok", 1)
        assert json.loads(bystander.recv(timeout=WAIT))["data"] == 1
        bystander.send(data("/big/fine", "x" * 500))
        assert sub.get(WAIT) == ("/big/fine", "x" * 500)
        assert sub.poll() == []


def test_slow_client_is_disconnected_without_slowing_others(ep):
    status = ep.make_status_subscriber(True)
    port = ep.web_socket_listen(send_buffer_size=20)
    slow = ws_open(port, max_queue=1)  # reads one frame into memory, then stops reading
    fast = ws_open(port)
    try:
        handshake(slow, ["/big"])
        handshake(fast, ["/big"])
        assert len(status.get(4, WAIT)) == 4
        big = "x" * 65536
        overflow: list[Error] = []
        # Lockstep with the fast client: every message it gets was sent to both.
        for i in range(2000):
            ep.publish("/big/x", (Count(i), big))
            assert json.loads(fast.recv(timeout=WAIT))["data"][0]["data"] == i
            overflow = [s for s in status.poll() if isinstance(s, Error)]
            if overflow:
                break
        assert overflow, "the slow client was never disconnected"
        assert overflow[0].code() == EC.PeerTimeout
        assert "send buffer overflow" in overflow[0].message()
        assert ep._core.wait_until(lambda: len(ep._core.links) == 1, WAIT)
        # The slow client finds the error after what it had been sent, then a close frame.
        texts = []
        with pytest.raises(ConnectionClosed) as info:
            while True:
                texts.append(json.loads(slow.recv(timeout=WAIT)))
        assert texts[-1]["type"] == "error" and texts[-1]["code"] == "peer_timeout"
        assert all(m["type"] == "data-message" for m in texts[:-1])
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
        # The fast client never noticed.
        ep.publish("/big/after", "fine")
        assert json.loads(fast.recv(timeout=WAIT))["data"] == "fine"
    finally:
        slow.close()
        fast.close()


def test_a_flood_of_bad_input_from_a_non_reading_client_is_bounded(ep):
    """Error replies share the bounded send queue: a client that never reads them is dropped."""
    port = ep.web_socket_listen(send_buffer_size=5, close_timeout=0.2)
    status = ep.make_status_subscriber()
    # The client's own close_timeout (websockets' default 10 s) bounds how long its send()
    # waits for its reading thread, which a full max_queue holds: shorter than our WAIT.
    with ws_open(port, max_queue=1, close_timeout=1) as ws:
        handshake(ws, [])

        def flood() -> None:
            try:
                for _ in range(200_000):
                    ws.send("x" * 1000)
            except ConnectionClosed:
                pass

        t = threading.Thread(target=flood)
        t.start()
        err = status.get(WAIT)
        t.join(WAIT)
        assert isinstance(err, Error) and err.code() == EC.PeerTimeout
        assert not t.is_alive()
    assert ep._core.wait_until(lambda: not ep._core.links, WAIT)


def test_disconnect_statuses(ep):
    status = ep.make_status_subscriber(True)
    port = ep.web_socket_listen(max_size=100)
    with ws_open(port) as ws:
        handshake(ws, [])
        ws.send("y" * 500)
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=WAIT)
    codes = [s.code() for s in status.get(4, WAIT)]
    assert codes == [SC.EndpointDiscovered, SC.PeerAdded, SC.PeerLost, SC.EndpointUnreachable]
