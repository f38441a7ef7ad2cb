"""A WebSocket server that behaves like Zeek's (``Cluster::listen_websocket``), for the tests.

A test double of Zeek 9.1's WebSocket API, written from its source
(``src/cluster/websocket/WebSocket.cc``) and checked against the recorded
session (``tests/vectors/zeek-websocket-session``): the same path check
(``invalid_uri``, close 1008), subscriptions as the first message (no ack
for anything else), the ack ``{"type":"ack","endpoint":"<id>-websocket-<n>",
"version":...}``, and the same errors in the same words, sent in order:
``failed to decode JSON object``, ``no topic in top-level JSON object``,
``failed to create Zeek event`` (an event whose name or argument types its
declared handlers do not take: the handlers are signatures, checked with
:func:`~broker_spark.zeek.typed_values.event_conforms`).

Its "main loop" takes what the client sent from a queue of ``queue_size``
(Zeek's ``max_event_queue_size``, 32) a batch at a time, as Zeek's
``OnLoopProcess`` does, spending ``work`` seconds per message. The fault it
injects: a client whose message finds the queue full is dropped (its TCP
connection aborted), as users saw Zeek drop clients that outran it
(zeek/zeek#4440). (The Zeek recorded here blocks the client's thread
instead; dropping is the harsher behaviour, and the one to survive.)
``drop_after`` drops a client after that many messages, whatever the queue.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from broker_spark.data.json_codec import encode_data_message, from_json_obj
from broker_spark.errors import BrokerError
from broker_spark.zeek import event_name_and_args
from broker_spark.zeek.script_types import parse_signature
from broker_spark.zeek.typed_values import event_conforms

VERSION = "9.1.0-dev-debug"


def zeek_error(context: str, code: str = "deserialization_failed") -> str:
    """An error as Zeek writes it (compact JSON, ``context``)."""
    return json.dumps({"type": "error", "code": code, "context": context}, separators=(",", ":"))


@dataclass
class _Client:
    ws: ServerConnection
    subscriptions: list[str]
    received: int = 0
    queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)


class ZeekLikeServer:
    """Zeek's WebSocket API on 127.0.0.1 (a fault-injecting test double; see the module)."""

    def __init__(
        self,
        handlers: tuple[str, ...] = (),
        *,
        queue_size: int = 32,
        work: float = 0.0,
        drop_after: int | None = None,
        accept_non_events: bool = False,
    ) -> None:
        self.handlers = {s.name: s for s in map(parse_signature, handlers)}
        self.queue_size = queue_size
        self.work = work
        self.drop_after = drop_after
        self.accept_non_events = accept_non_events
        self.node = str(uuid.uuid5(uuid.NAMESPACE_DNS, "zeek-like"))
        self.accepted: list[tuple[str, str, tuple]] = []  # (topic, event name, arguments)
        self.other: list[tuple[str, Any]] = []  # non-events taken (accept_non_events)
        self.errors: list[str] = []  # contexts of the errors sent
        self.dropped = 0
        self.most_queued = 0
        self._clients: list[_Client] = []
        self._count = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zeek-like-ws", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> Any:
            return await serve(self._handle, "127.0.0.1", 0, compression=None, ping_interval=None)

        self._server = self._loop.run_until_complete(start())
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def close(self) -> None:
        async def stop() -> None:
            for client in list(self._clients):
                client.ws.transport.abort()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> ZeekLikeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def publish(self, topic: str, value: Any) -> None:
        """Send a data message to every client subscribed to a prefix of ``topic``."""
        text = encode_data_message(topic, value)

        async def send() -> None:
            for client in list(self._clients):
                if any(topic.startswith(p) for p in client.subscriptions):
                    await client.ws.send(text)

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)

    # -- one client -------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else ""
        if path != "/v1/messages/json":
            await ws.send(zeek_error("Invalid URI - use /v1/messages/json", "invalid_uri"))
            await ws.close(1008, "Invalid URI - use /v1/messages/json")
            return
        try:
            subscriptions = json.loads(await ws.recv())
        except (ValueError, ConnectionClosed):
            subscriptions = None
        if not isinstance(subscriptions, list) or not all(
            isinstance(s, str) for s in subscriptions
        ):
            what = "subscriptions not an array"
            if isinstance(subscriptions, list):
                what = "individual subscription not a string"
            await ws.send(zeek_error(what))
            try:
                async for _ in ws:  # no ack ever: later messages wait for it, as in Zeek
                    pass
            except ConnectionClosed:
                pass
            return
        self._count += 1
        endpoint = f"{self.node}-websocket-{self._count}"
        ack = {"type": "ack", "endpoint": endpoint, "version": VERSION}
        await ws.send(json.dumps(ack, separators=(",", ":")))
        client = _Client(ws, subscriptions)
        self._clients.append(client)
        loop_task = asyncio.ensure_future(self._main_loop(client))
        try:
            async for frame in ws:
                client.received += 1
                full = client.queue.qsize() >= self.queue_size
                if full or (self.drop_after is not None and client.received > self.drop_after):
                    self.dropped += 1
                    ws.transport.abort()
                    break
                client.queue.put_nowait(frame)
                self.most_queued = max(self.most_queued, client.queue.qsize())
        except ConnectionClosed:
            pass
        finally:
            loop_task.cancel()
            self._clients.remove(client)

    async def _main_loop(self, client: _Client) -> None:
        """Take everything queued at once (Zeek's OnLoopProcess), spend the work, answer."""
        queue = client.queue
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            if self.work:
                await asyncio.sleep(self.work * len(batch))
            for frame in batch:
                error = self._process(frame)
                if error is not None:
                    self.errors.append(error)
                    await client.ws.send(zeek_error(error))

    def _process(self, frame: Any) -> str | None:
        """What Zeek does with one message: None when it publishes it, else its error."""
        try:
            obj = json.loads(frame)
        except (ValueError, TypeError):
            return "failed to decode JSON object"
        if not isinstance(obj, dict):
            return "failed to decode JSON object"
        topic = obj.get("topic")
        if not isinstance(topic, str) or not topic:
            return "no topic in top-level JSON object"
        try:
            value = from_json_obj(obj)
        except BrokerError:
            return "failed to decode JSON object"
        event = event_name_and_args(value)
        if event is None:
            if self.accept_non_events:
                self.other.append((topic, value))
                return None
            return "failed to create Zeek event"
        name, args = event
        signature = self.handlers.get(name)
        if signature is None or not event_conforms(signature, name, args):
            return "failed to create Zeek event"
        self.accepted.append((topic, name, tuple(args)))
        return None
