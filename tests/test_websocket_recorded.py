"""Our WebSocket client through the exchange a real Zeek had with a client (recorded).

``tests/vectors/zeek-websocket-session`` holds a Python client's session
with Zeek 9.1's WebSocket API, on the Broker and on the ZeroMQ backend (the
same exchange). A server here replays Zeek's side of the ``main`` session:
it expects each recorded client message in turn (compared as JSON) and
answers with exactly what Zeek answered, byte for byte. Our endpoint's
bridge goes through the same exchange: subscribe and the ack, Zeek's
events arriving (the greeting, and the reply to ``from_client``), our typed
events (built from plain values with the handlers' signatures, as
``publish --signature`` builds them) published on topics we did not
subscribe to, Zeek's four rejections reported in Zeek's words and
attributed to the messages they concern, and Zeek's shutdown closing the
connection (1001). The two recorded messages no client of ours sends (a text
that is not JSON, a message without topic) have their recorded answers too:
the first is what every flow-control probe of ours is answered with.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from recorded import VECTORS
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import broker_spark as broker
from broker_spark import zeek
from broker_spark.cli.publish import _typed_event
from broker_spark.data.json_codec import from_json_obj
from broker_spark.data.types import Count, Port
from broker_spark.errors import EC, SC
from broker_spark.status import Error, Status
from broker_spark.websocket.manager import manager_for
from broker_spark.zeek.script_types import parse_signature

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0
SCRIPT = VECTORS / "zeek-websocket-session" / "scripts" / "ws-common.zeek"
INFO = "type WSTest::Info: record { n: count; label: string; tags: set[string]; };"
FROM_CLIENT = parse_signature("WSTest::from_client(c: count, a: addr, p: port, s: string)")
FROM_CLIENT_RICH = parse_signature(
    f"{INFO} WSTest::from_client_rich(i: int, d: double, t: time, iv: interval, "
    "e: transport_proto, st: set[string], tb: table[string] of count, v: vector of count, "
    "r: WSTest::Info)"
)


def _session(backend: str) -> list[tuple[str, str]]:
    """The ``main`` session's text messages, ``(direction, text)``, in order."""
    path = VECTORS / "zeek-websocket-session" / backend / "websocket.jsonl"
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [
        (r["dir"], r["text"]) for r in records if r["session"] == "main" and r["kind"] == "text"
    ]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class ReplayedZeek:
    """Zeek's side of a recorded session: each expected client message, then Zeek's answers."""

    def __init__(self, session: list[tuple[str, str]]) -> None:
        self.session = session
        self.not_json_answer = next(
            reply
            for (d, text), (_, reply) in zip(session, session[1:], strict=False)
            if d == "c2s" and _json(text) is None
        )
        self.mismatches: list[str] = []
        self.skipped: list[str] = []
        self.probes = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        async def start() -> Any:
            return await serve(self._handle, "127.0.0.1", 0, compression=None)

        self._server = self._loop.run_until_complete(start())
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _expected(self, position: int) -> tuple[int, str | None]:
        """The next client message we can send from ``position``, past those we cannot."""
        while position < len(self.session):
            direction, text = self.session[position]
            obj = _json(text)
            if direction == "c2s":
                if obj is None or (isinstance(obj, dict) and "topic" not in obj):
                    self.skipped.append(text)  # not JSON / no topic: no client of ours sends it
                else:
                    return position, text
            position += 1
        return position, None

    async def _answers(self, ws: ServerConnection, position: int) -> int:
        while position < len(self.session) and self.session[position][0] == "s2c":
            await ws.send(self.session[position][1])
            position += 1
        return position

    async def _handle(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._exchange(ws)

    async def _exchange(self, ws: ServerConnection) -> None:
        position = await self._answers(ws, 0)
        while True:
            frame = await ws.recv()
            if _json(frame) is None:  # a flow-control probe: Zeek's answer to text not JSON
                self.probes += 1
                await ws.send(self.not_json_answer)
                continue
            position, expected = self._expected(position)
            if expected is None:
                self.mismatches.append(f"unexpected {frame}")
                continue
            if json.loads(frame) != json.loads(expected):
                self.mismatches.append(f"sent {frame}\nZeek's client sent {expected}")
            position = await self._answers(ws, position + 1)
            if "WSTest::done" in expected:
                await ws.close(1001, "Terminating")  # as Zeek did when it terminated
                return


def _recorded_events(session: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    out = []
    for direction, text in session:
        obj = _json(text)
        if direction == "s2c" and obj.get("type") == "data-message":
            out.append((obj["topic"], from_json_obj(obj)))
    return out


@pytest.mark.parametrize("backend", ["broker", "zeromq"])
def test_the_recorded_exchange_with_zeek(backend: str) -> None:
    session = _session(backend)
    zeek_side = ReplayedZeek(session)
    url = f"ws://127.0.0.1:{zeek_side.port}"
    try:
        with broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True))) as ep:
            sub = ep.make_subscriber("zeek.test.ws.to-client.")
            status = ep.make_status_subscriber(True)
            assert ep.web_socket_peer(url, ["zeek.test.ws.to-client."], retry=0, group=1)
            ack = json.loads(next(text for d, text in session if d == "s2c"))
            added = status.get(2, WAIT)
            assert [s.code() for s in added] == [SC.EndpointDiscovered, SC.PeerAdded]
            assert str(added[1].context()).startswith(ack["endpoint"])  # the ack's endpoint
            greeting = sub.get(WAIT)
            assert greeting == _recorded_events(session)[0]
            assert zeek.Event(greeting[1]).args()[2] == -7
            # Typed events from plain values, as publish --signature makes them.
            simple = _typed_event(FROM_CLIENT, [42, "10.20.30.40", "8080/tcp", "hi from python"])
            ep.publish("zeek.test.ws.to-zeek.simple", simple)
            rich = _typed_event(
                FROM_CLIENT_RICH,
                {
                    "i": -3,
                    "d": 0.5,
                    "t": "2023-11-14T22:13:20.123",
                    "iv": "1500ms",
                    "e": "tcp",
                    "st": ["a", "b"],
                    "tb": {"k": 7},
                    "v": [1, 2],
                    "r": {"n": 5, "label": "rec", "tags": ["t"]},
                },
            )
            ep.publish("zeek.test.ws.to-zeek.rich", rich)
            reply = sub.get(WAIT)
            assert reply == _recorded_events(session)[1]
            assert zeek.Event(reply[1]).args()[1] == Count(43)
            # What Zeek refused: wrong types, an unknown event, too few arguments, no event.
            bad = "zeek.test.ws.to-zeek.bad"
            address = ipaddress.ip_address("10.0.0.1")
            ep.publish(
                bad, zeek.Event("WSTest::from_client", "not a count", address, Port(80, 1), "x")
            )
            ep.publish(bad, zeek.Event("WSTest::no_such_event", Count(1)))
            ep.publish(bad, zeek.Event("WSTest::from_client", Count(1)))
            ep.publish(bad, Count(5))
            assert ep.web_socket_flush(url, WAIT)
            errors = [s for s in status.get(4, WAIT) if isinstance(s, Error)]
            assert len(errors) == 4
            assert {e.code() for e in errors} == {EC.DeserializationFailed}
            assert all("failed to create Zeek event" in e.message() for e in errors)
            pacer = manager_for(ep).link(url).pacer
            assert [(r.first, r.end) for r in pacer.rejections] == [(2, 3), (3, 4), (4, 5), (5, 6)]
            ep.publish("zeek.test.ws.to-zeek.done", zeek.Event("WSTest::done", "bye"))
            lost = status.get(WAIT)
            assert isinstance(lost, Status) and lost.code() == SC.PeerLost
        assert zeek_side.mismatches == []
        assert zeek_side.probes >= 6
        assert len(zeek_side.skipped) == 2  # the two the recorded client sent to provoke errors
        assert Port(8080, Port.TCP) in simple.args()
    finally:
        zeek_side.close()
