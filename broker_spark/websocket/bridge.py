"""Connecting an endpoint to a remote WebSocket API (a Zeek manager, another Broker).

A :class:`WebSocketPeer` dials the URL, sends its topics as the subscriptions,
reads the ack (the remote endpoint's id) and then bridges both ways through a
:class:`~broker_spark.websocket.ws_link.WebSocketLink`:

- data messages from the remote, on the topics we subscribed to (``topics``,
  sent as the first message), enter our central merge as if a peer had sent
  them: local subscribers get them, matching peers too;
- what we send is apart from that, as Zeek means it (its server takes a
  client's publication on any topic): by default every publication of this
  endpoint, whatever its topic; with ``publish_topics``, our publications
  and (when forwarding) peers' messages whose topic has one of those
  prefixes. A server that echoed a client's publications back would make
  them loop once through us; neither Broker nor Zeek does.

What we send is paced (:mod:`~broker_spark.websocket.pacing`): never more in
flight than the server's queue holds (``window``, Zeek's 32 by default),
each group of messages followed by a probe whose echo says the server
processed it; the server's rejections of our messages (Zeek's ``failed to
create Zeek event``) are reported as ``Error`` statuses and kept on the
link's pacer, attributed to the messages they concern.

Like a native peer it reports ``EndpointDiscovered`` then ``PeerAdded`` when
the ack arrives, ``PeerLost`` (and ``EndpointUnreachable``) when the
connection drops, ``PeerRemoved`` after :meth:`stop`, and ``EC.PeerUnavailable``
errors for failed attempts; it reconnects every ``retry`` seconds (0: one
attempt). Errors the remote server sends are reported as ``Error`` statuses.
The ack's endpoint id becomes the peer's id in statuses and ``peers()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
from typing import TYPE_CHECKING

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.uri import parse_uri

from broker_spark.addresses import without_credentials
from broker_spark.core.node_message import DATA
from broker_spark.data.binary import encode
from broker_spark.errors import EC, SC, BrokerError
from broker_spark.status import EndpointInfo, Error, NetworkInfo, PeerFlags
from broker_spark.websocket.json_messages import (
    JSON_PATH,
    ServerReply,
    parse_server_reply,
    subscriptions_text,
)
from broker_spark.websocket.pacing import DEFAULT_GROUP, DEFAULT_WINDOW, EchoPacer
from broker_spark.websocket.ws_link import WebSocketLink, close_connection

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = ["WebSocketPeer", "normalize_url", "without_credentials"]

#: Sent in the opening handshake; Zeek 8 shows it in cluster.log.
APPLICATION_NAME = "broker-spark"

_EC_BY_NAME = {ec.snake_name: ec for ec in EC}


def normalize_url(url: str) -> str:
    """``url`` with the API's path when it has none; ValueError when it is no ws(s) URL."""
    try:
        parsed = parse_uri(url)
    except Exception as exc:  # websockets' InvalidURI (which quotes the URL as given)
        shown = without_credentials(url)
        why = str(exc).replace(url, shown)
        raise ValueError(f"not a WebSocket URL: {shown!r} ({why})") from None
    if parsed.path in ("", "/"):
        base = url.rstrip("/") if not parsed.query else url.split("?", 1)[0].rstrip("/")
        return base + JSON_PATH + (f"?{parsed.query}" if parsed.query else "")
    return url


class WebSocketPeer:
    """One outgoing WebSocket bridge, kept up with retries; methods run on the core's loop."""

    def __init__(
        self,
        core: Core,
        url: str,
        topics: tuple[str, ...],
        *,
        publish_topics: tuple[str, ...] | None = None,
        window: int = DEFAULT_WINDOW,
        group: int = DEFAULT_GROUP,
        retry: float,
        ssl_context: ssl.SSLContext | None,
        send_capacity: int,
        max_size: int,
        open_timeout: float,
        close_timeout: float,
        token: str | None = None,
    ) -> None:
        self.core = core
        self._headers = {"X-Application-Name": APPLICATION_NAME}
        if token:  # a server that wants a bearer token (ours with --websocket-token)
            self._headers["Authorization"] = f"Bearer {token}"
        self.url = url
        self.shown = without_credentials(url)  # the URL in messages: no password
        self.topics = topics
        self.publish_topics = publish_topics
        self.window = window
        self.group = group
        self.retry = retry
        self.ssl_context = ssl_context
        self.send_capacity = send_capacity
        self.max_size = max_size
        self.open_timeout = open_timeout
        self.close_timeout = close_timeout
        uri = parse_uri(url)
        self.network = NetworkInfo(uri.host, uri.port, retry)
        self.link: WebSocketLink | None = None
        #: Resolved after the first attempt: True once acked, False if it failed.
        self.first_result: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def finished(self) -> bool:
        """True once the bridge gave up (``retry`` 0 and the attempt failed or ended)."""
        return self._task is not None and self._task.done()

    async def stop(self) -> None:
        """End the bridge for good: the peer is reported as removed."""
        self._stopping = True
        self._stop_event.set()
        link = self.link
        if link is not None:
            self.core.remove_link(link, SC.PeerRemoved)
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), self.close_timeout)
            except asyncio.TimeoutError:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _resolve(self, ok: bool) -> None:
        if not self.first_result.done():
            self.first_result.set_result(ok)

    def _fail(self, code: EC, message: str) -> None:
        self._resolve(False)
        if not self.core.closed:
            self.core.emit(Error(code, message, EndpointInfo("", self.network)))

    async def _run(self) -> None:
        try:
            while not self._stopping and not self.core.closed:
                await self._attempt()
                if self.retry <= 0 or self._stopping:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), self.retry)
        finally:
            self._resolve(False)

    async def _attempt(self) -> None:
        """One connection: dial, handshake, bridge until it ends."""
        secure = self.url.startswith("wss:")
        try:
            ws = await connect(
                self.url,
                ssl=self.ssl_context if secure else None,
                compression=None,
                proxy=None,
                open_timeout=self.open_timeout,
                close_timeout=self.close_timeout,
                max_size=self.max_size,
                additional_headers=self._headers,
            )
        except Exception as exc:  # OSError, a timeout, websockets' InvalidHandshake family
            self._fail(EC.PeerUnavailable, f"cannot connect to {self.shown}: {exc!r}")
            return
        link: WebSocketLink | None = None
        try:
            reply = await self._handshake(ws)
            if reply is None or self._stopping:
                return
            everything = self.publish_topics is None
            link = WebSocketLink(
                self.core,
                ws,
                prefixes=("",) if everything else self.publish_topics or (),
                send_capacity=self.send_capacity,
                network=self.network,
                flags=PeerFlags.Remote | PeerFlags.Outbound,
                peer_str=reply.a,
                pacer=EchoPacer(self.window, self.group),
            )
            link.takes_forwarded = not everything
            try:
                self.core.add_link(link)
            except BrokerError as exc:
                link.close()
                self._fail(exc.code, f"cannot peer with {self.shown}: {exc}")
                return
            self.link = link
            self._resolve(True)
            await self._bridge(ws, link)
        finally:
            self.link = None
            if link is not None:
                code, reason, farewell = link.close_code, link.close_reason, link.farewell
            else:
                code, reason, farewell = 1000, "", None
            await close_connection(ws, code, reason, farewell, self.close_timeout)

    async def _handshake(self, ws: ClientConnection) -> ServerReply | None:
        """Send the subscriptions and read the ack; None (reported) when it fails."""
        try:
            await ws.send(subscriptions_text(list(self.topics)))
            text = await asyncio.wait_for(ws.recv(), self.open_timeout)
            reply = parse_server_reply(text)
        except (ConnectionClosed, OSError, asyncio.TimeoutError, BrokerError) as exc:
            self._fail(EC.PeerUnavailable, f"no ack from {self.shown}: {exc!r}")
            return None
        if reply.kind != "ack":
            self._fail(EC.PeerInvalid, f"{self.shown} answered the subscriptions with {reply!r}")
            return None
        if reply.a == self.core.node_str:
            self._fail(EC.PeerInvalid, f"{self.shown} is this endpoint's own WebSocket API")
            return None
        return reply

    async def _bridge(self, ws: ClientConnection, link: WebSocketLink) -> None:
        reason = SC.PeerLost
        reader = asyncio.ensure_future(self._read_loop(ws, link))
        tasks = [reader, asyncio.ensure_future(link.write_loop())]
        tasks.append(asyncio.ensure_future(link.ended.wait()))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if self._stopping:
                reason = SC.PeerRemoved
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.core.remove_link(link, reason)

    async def _read_loop(self, ws: ClientConnection, link: WebSocketLink) -> None:
        """Publish the remote's data messages into our merge; report its errors."""
        core = self.core
        ttl = core.options.ttl
        sender = link.peer_id
        info = link.info()
        while True:
            text = await ws.recv()
            try:
                reply = parse_server_reply(text)
                if reply.kind == "data":
                    payload = encode(reply.b)
            except (BrokerError, ValueError) as exc:
                core.emit(
                    Error(EC.DeserializationFailed, f"bad message from {self.shown}: {exc}", info)
                )
                continue
            if reply.kind == "data":
                node_msg = (reply.a, payload, DATA, ttl, sender)
                if not link.offer(node_msg) and not await link.feed(node_msg):
                    return
            elif reply.kind == "error" and not link.server_error(reply.a, reply.b):
                code = _EC_BY_NAME.get(reply.a, EC.Unspecified)
                core.emit(Error(code, f"{self.shown} reported {reply.a}: {reply.b}", info))
