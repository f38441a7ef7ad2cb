"""``web_socket_peer`` against a Zeek-like WebSocket server: topics apart, pacing, Zeek's errors.

The server (``zeek_ws_server``, a fault-injecting test double of Zeek 9.1's
``Cluster::listen_websocket``) keeps 32 messages per client and drops a
client whose message finds its queue full; it answers what it cannot take
with Zeek's errors, in Zeek's words. A plain client that sends as fast as
it can is dropped; our bridge, paced by probes, never is.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from zeek_ws_server import ZeekLikeServer

import broker_spark as broker
from broker_spark import zeek
from broker_spark.data.json_codec import encode_data_message
from broker_spark.data.types import Count
from broker_spark.errors import EC
from broker_spark.status import Error
from broker_spark.websocket.manager import manager_for
from broker_spark.websocket.pacing import EchoPacer, is_probe_echo

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0
SEEN = "Site::seen(n: count, what: string)"


def plain() -> broker.Configuration:
    return broker.Configuration(broker.BrokerOptions(disable_ssl=True))


def _events(n: int, start: int = 0) -> list[Any]:
    return [zeek.Event("Site::seen", Count(i), f"e{i}") for i in range(start, start + n)]


def test_a_client_that_outruns_the_server_is_dropped() -> None:
    """The control: without pacing, a burst overruns the 32-message queue."""
    with ZeekLikeServer((SEEN,), work=0.002) as server:
        with connect(server.url + "/v1/messages/json") as ws:
            ws.send("[]")
            ack = json.loads(ws.recv(WAIT))
            assert ack == {
                "type": "ack",
                "endpoint": f"{server.node}-websocket-1",
                "version": "9.1.0-dev-debug",
            }
            text = encode_data_message("t", zeek.Event("Site::seen", Count(1), "x").as_data())
            with pytest.raises((ConnectionClosed, OSError)):
                for _ in range(5000):
                    ws.send(text)
                ws.recv(WAIT)
        assert server.dropped == 1
        assert len(server.accepted) < 5000


def test_a_paced_bridge_never_overruns_it_and_knows_when_all_was_processed() -> None:
    with ZeekLikeServer((SEEN,), work=0.0005) as server, broker.Endpoint(plain()) as ep:
        status = ep.make_status_subscriber()
        assert ep.web_socket_peer(server.url, [], retry=0)
        for event in _events(1500):
            ep.publish("zeek/site", event)
        assert ep.web_socket_flush(server.url, 60)
        assert server.dropped == 0
        assert server.most_queued <= 32
        assert [a[2][0] for a in server.accepted] == list(range(1500))
        assert {a[0] for a in server.accepted} == {"zeek/site"}
        # Zeek answered every probe (one per group of 16 or fewer) as it answers any text
        # that is not JSON; those answers are the echoes, not errors for the endpoint.
        assert 1500 / 16 <= len(server.errors) <= 1500
        assert set(server.errors) == {"failed to decode JSON object"}
        assert status.poll() == []


def test_subscriptions_and_publications_are_apart() -> None:
    """We receive what we subscribed to; we send on any topic (or only publish_topics)."""
    with ZeekLikeServer((SEEN,)) as server, broker.Endpoint(plain()) as ep:
        sub = ep.make_subscriber("zeek/in")
        assert ep.web_socket_peer(server.url, ["zeek/in"], retry=0)
        server.publish("zeek/in/x", zeek.Event("Site::seen", Count(7), "down").as_data())
        server.publish("zeek/other", zeek.Event("Site::seen", Count(8), "not ours").as_data())
        topic, data = sub.get(WAIT)
        assert (topic, zeek.Event(data).args()) == ("zeek/in/x", [Count(7), "down"])
        ep.publish("anywhere/at/all", _events(1)[0])
        assert ep.web_socket_flush(server.url, WAIT)
        assert [a[0] for a in server.accepted] == ["anywhere/at/all"]
        assert sub.get(0.2) is None
    with ZeekLikeServer((SEEN,)) as server, broker.Endpoint(plain()) as ep:
        assert ep.web_socket_peer(server.url, [], retry=0, publish_topics=["a/"])
        ep.publish("b/no", _events(1)[0])
        ep.publish("a/yes", _events(1, 1)[0])
        assert ep.web_socket_flush(server.url, WAIT)
        assert [a[0] for a in server.accepted] == ["a/yes"]


def test_zeek_rejections_are_reported_and_attributed() -> None:
    with ZeekLikeServer((SEEN,)) as server, broker.Endpoint(plain()) as ep:
        status = ep.make_status_subscriber()
        assert ep.web_socket_peer(server.url, [], retry=0, group=1)
        good, bad = _events(2)
        ep.publish("z", good)
        ep.publish("z", zeek.Event("Site::seen", 1, "an integer, not a count"))
        ep.publish("z", zeek.Event("Site::unknown", Count(1)))
        ep.publish("z", bad)
        assert ep.web_socket_flush(server.url, WAIT)
        errors = status.get(2, WAIT)
        assert all(isinstance(e, Error) and e.code() == EC.DeserializationFailed for e in errors)
        assert all("failed to create Zeek event" in e.message() for e in errors)
        link = manager_for(ep).link(server.url)
        assert [(r.first, r.end, r.context) for r in link.pacer.rejections] == [
            (1, 2, "failed to create Zeek event"),
            (2, 3, "failed to create Zeek event"),
        ]
        assert [a[2][0] for a in server.accepted] == [Count(0), Count(1)]


def test_a_dropped_bridge_is_lost_and_not_flushed() -> None:
    with ZeekLikeServer((SEEN,), drop_after=50) as server, broker.Endpoint(plain()) as ep:
        lost = threading.Event()
        assert ep.web_socket_peer(server.url, [], retry=0)
        for event in _events(200):
            ep.publish("z", event)
        if not ep.web_socket_flush(server.url, WAIT):
            lost.set()
        assert lost.is_set()
        assert server.dropped == 1


@pytest.mark.parametrize(
    ("window", "group", "sent"),
    [(32, 8, 100), (32, 1, 40), (2, 1, 10), (5, 4, 17)],
)
def test_the_pacer_never_lets_more_than_the_window_be_in_flight(
    window: int, group: int, sent: int
) -> None:
    """The pacer's arithmetic against a server simulated here, echoing in random order of time."""
    import random

    rng = random.Random(window * 100 + group)
    pacer = EchoPacer(window, group)
    server: list[str] = []  # what the server holds, unprocessed
    to_send = sent
    rejected = {7, 8, 15}
    replies: list[tuple[str, str]] = []
    data_no = 0
    while to_send or server or not pacer.idle:
        acted = False
        if to_send and pacer.may_send():
            server.append(f"data{data_no}")
            data_no += 1
            pacer.sent_data()
            to_send -= 1
            acted = True
        elif pacer.should_probe(bool(to_send)):
            server.append("probe")
            pacer.sent_probe()
            acted = True
        assert len(server) <= window
        if server and (not acted or rng.random() < 0.3):
            item = server.pop(0)
            if item == "probe":
                replies.append(("deserialization_failed", "failed to decode JSON object"))
            elif int(item[4:]) in rejected:
                replies.append(("deserialization_failed", "failed to create Zeek event"))
        while replies and (not acted or rng.random() < 0.5):
            code, context = replies.pop(0)
            assert pacer.on_error(code, context) == is_probe_echo(context)
    assert pacer.sent == pacer.confirmed == sent
    found = [r for r in pacer.rejections]
    assert len(found) == len([x for x in rejected if x < sent])
    for r, n in zip(found, sorted(x for x in rejected if x < sent), strict=True):
        assert r.first <= n < r.end
        assert r.end - r.first <= group
