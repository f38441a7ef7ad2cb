"""Who a listening port lets in: bearer tokens, a bound on connections, refusals counted.

The WebSocket API and the metrics take a bearer token (or, for WebSocket
clients that can only put credentials into their URL, HTTP Basic with the token
as password); the relay, the WebSocket server and the metrics each serve a
bounded number of connections and turn the next one away. Every refusal is
counted by reason, in the status (``status --relay``) and in ``/metrics``. Real
sockets on loopback; the bounds are made small for the test.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spark_fixtures import wait_for
from test_spark_relay import Relay
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import broker_spark as broker
from broker_spark.admission import TOO_MANY, UNAUTHORIZED, Admission, authorization_matches
from broker_spark.spool import metrics
from broker_spark.spool.relay_client import RelayError, SpoolClient
from broker_spark.spool.relay_server import RelayServer
from broker_spark.websocket.manager import manager_for

pytestmark = pytest.mark.timeout(60)

TOKEN = "tok-3f9c2d1e8b7a6f5e"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_authorization_header_carries_the_token() -> None:
    assert authorization_matches(f"Bearer {TOKEN}", TOKEN)
    assert authorization_matches(f"bearer  {TOKEN} ", TOKEN)
    assert authorization_matches(_basic("zeek", TOKEN), TOKEN)
    assert authorization_matches(_basic("", TOKEN), TOKEN)
    for wrong in (
        None, "", TOKEN, f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ",
        f"Token {TOKEN}", _basic(TOKEN, "nope"), "Basic !!!not-base64!!!",
    ):  # fmt: skip
        assert not authorization_matches(wrong, TOKEN), wrong
    assert not authorization_matches("Bearer ", "")  # no token configured: nobody matches


@given(st.text(max_size=40))
def test_only_the_token_itself_matches(guess: str) -> None:
    assert authorization_matches(f"Bearer {guess}", TOKEN) == (guess.strip() == TOKEN)


def test_an_admission_bounds_and_counts() -> None:
    a = Admission("relay", 2, unidentified=2)
    assert a.enter() and a.enter() and not a.enter()
    a.leave()
    assert a.enter()
    a.refuse("timeout")
    snap = a.snapshot()
    assert snap["connections"] == 2 and snap["limit"] == 2
    assert snap["refused"] == {TOO_MANY: 1, "timeout": 1}
    with pytest.raises(ValueError):
        Admission("relay", 0)


# -- Broker peering ---------------------------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True])
def test_a_peering_listener_holds_at_most_its_bound(
    tls: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle sockets (in the TLS sniff, or in Broker's handshake) fill the bound; the next one
    is closed at once with an error status; when they go, peers are accepted again."""
    from broker_spark.core import listener

    monkeypatch.setattr(listener, "MAX_INBOUND", 3)  # 1024, sooner
    cfg = broker.Configuration(broker.BrokerOptions(disable_ssl=not tls))
    with broker.Endpoint(cfg) as ep, broker.Endpoint(cfg) as peer:
        statuses = ep.make_status_subscriber(True)
        port = ep.listen("127.0.0.1", 0)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(10)
        assert extra.recv(1) == b""  # closed at once, not held
        extra.close()

        def refused() -> bool:
            got = statuses.get(timeout=0.2)
            return isinstance(got, broker.Error) and "inbound connections held" in str(got)

        assert wait_for(refused, 10)
        for sock in idle:
            sock.close()
        assert wait_for(lambda: peer.peer("127.0.0.1", port, retry=0), 15)
        assert peer.peers()


# -- the WebSocket API ----------------------------------------------------------------------


def _ws_url(port: int, credentials: str = "") -> str:
    return f"ws://{credentials}127.0.0.1:{port}/v1/messages/json"


def _open(url: str, **kwargs: Any) -> Any:
    ws = connect(url, **kwargs).__enter__()
    ws.send(json.dumps(["/t"]))
    assert json.loads(ws.recv(timeout=5))["type"] == "ack"
    return ws


def test_a_websocket_server_with_a_token_admits_only_who_sends_it() -> None:
    cfg = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(cfg) as ep, broker.Endpoint(cfg) as bridge_ep:
        port = ep.web_socket_listen("127.0.0.1", 0, token=TOKEN)
        server = manager_for(ep).servers[port]
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": _basic("u", "x")}):
            with pytest.raises(InvalidStatus) as err:
                connect(_ws_url(port), additional_headers=headers).__enter__()
            assert err.value.response.status_code == 401
            assert "Bearer" in err.value.response.headers["WWW-Authenticate"]
        assert server.admission.snapshot()["refused"] == {UNAUTHORIZED: 3}
        good = _open(_ws_url(port), additional_headers={"Authorization": f"Bearer {TOKEN}"})
        in_url = _open(_ws_url(port, f"zeek:{TOKEN}@"))  # a client that can only use its URL
        assert wait_for(lambda: server.admission.connections == 2, 5)
        # Our own bridge sends the token too.
        assert bridge_ep.web_socket_peer(_ws_url(port), ["/t"], retry=0, token=TOKEN)
        sub = ep.make_subscriber("/t")
        good.send(json.dumps({"type": "data-message", "topic": "/t", "@data-type": "count",
                              "data": 1}))  # fmt: skip
        assert sub.get(timeout=5) is not None
        good.close()
        in_url.close()
        assert server.admission.snapshot()["refused"] == {UNAUTHORIZED: 3}


def test_a_websocket_server_serves_at_most_its_bound() -> None:
    cfg = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(cfg) as ep:
        port = ep.web_socket_listen("127.0.0.1", 0, max_connections=2)
        server = manager_for(ep).servers[port]
        first, second = _open(_ws_url(port)), _open(_ws_url(port))
        with pytest.raises(InvalidStatus) as err:
            connect(_ws_url(port)).__enter__()
        assert err.value.response.status_code == 503
        assert server.admission.snapshot()["refused"] == {TOO_MANY: 1}
        first.close()  # a place frees up when a client leaves
        assert wait_for(lambda: server.admission.connections == 1, 5)
        third = _open(_ws_url(port))
        second.close()
        third.close()
        assert wait_for(lambda: server.admission.connections == 0, 5)
        with pytest.raises(ValueError):
            ep.web_socket_listen("127.0.0.1", 0, max_connections=0)


def test_a_websocket_client_without_subscriptions_is_closed_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from websockets.exceptions import ConnectionClosed

    from broker_spark.websocket import server as ws_server

    monkeypatch.setattr(ws_server, "SUBSCRIPTIONS_TIMEOUT", 0.5)  # 10 s, sooner
    cfg = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(cfg) as ep:
        port = ep.web_socket_listen("127.0.0.1", 0)
        server = manager_for(ep).servers[port]
        silent = connect(_ws_url(port)).__enter__()
        good = _open(_ws_url(port))
        with pytest.raises(ConnectionClosed) as closed:
            silent.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert server.admission.snapshot()["refused"] == {"timeout": 1}
        good.send(json.dumps({"type": "data-message", "topic": "/t", "@data-type": "count",
                              "data": 1}))  # fmt: skip
        sub = ep.make_subscriber("/t")
        good.send(json.dumps({"type": "data-message", "topic": "/t", "@data-type": "count",
                              "data": 2}))  # fmt: skip
        assert sub.get(timeout=5) is not None  # the good client was served throughout
        good.close()


# -- the metrics ----------------------------------------------------------------------------


def _get(port: int, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_with_a_token_answer_only_who_sends_it() -> None:
    servers: list[metrics.MetricsServer] = []

    def status() -> dict[str, Any]:
        return {"bytes": 7, "listeners": [s.admission.snapshot() for s in servers]}

    server = metrics.MetricsServer(status, "127.0.0.1", 0, token=TOKEN)
    servers.append(server)
    try:
        code, body = _get(server.port)
        assert code == 401 and "broker_spark" not in body
        assert _get(server.port, {"Authorization": "Bearer nope"})[0] == 401
        code, body = _get(server.port, {"Authorization": f"Bearer {TOKEN}"})
        assert code == 200 and "broker_spark_spool_bytes 7.0" in body
        refused = 'broker_spark_listener_refused_total{listener="metrics",reason="unauthorized"}'
        assert f"{refused} 2.0" in body
        # This scrape's connection at least (an earlier one may still be closing).
        held = re.search(r'broker_spark_listener_connections\{listener="metrics"\} (\S+)', body)
        assert held is not None and 1 <= float(held.group(1)) <= 3
    finally:
        server.close()


# -- the relay ------------------------------------------------------------------------------


def test_a_relay_serves_at_most_its_bound_and_status_counts_what_it_refused(
    tmp_path: Path,
) -> None:
    relay = Relay(tmp_path / "relay")
    try:
        server: RelayServer = relay.node.server
        server.admission.limit = 2  # the same code path as 256, sooner
        relay.publish(0, 10)
        a = SpoolClient.tcp("127.0.0.1", relay.port, None)
        a.hello("follow", "a")
        b = SpoolClient.tcp("127.0.0.1", relay.port, None)
        b.hello("follow", "b")
        with pytest.raises(RelayError) as err:
            extra = SpoolClient.tcp("127.0.0.1", relay.port, None)
            try:
                extra.hello("follow", "c")
            finally:
                extra.close()
        assert err.value.relay_code == "too_many"
        b.close()  # a place frees up
        assert wait_for(lambda: server.admission.connections == 1, 5)
        garbage = socket.create_connection(("127.0.0.1", relay.port))
        garbage.sendall(b"\xff" * 64)
        garbage.settimeout(10)
        while garbage.recv(4096):
            pass
        garbage.close()
        status = relay.node.status()
        (listener,) = [x for x in status["listeners"] if x["listener"] == "relay"]
        assert listener["refused"] == {TOO_MANY: 1, "protocol": 1}
        assert listener["address"].endswith(f":{relay.port}")
        # The reader that stayed is still served.
        assert a.request("bounds")["end"] == 10
        a.close()
    finally:
        relay.close()
