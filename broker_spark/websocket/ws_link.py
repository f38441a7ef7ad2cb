"""One WebSocket connection as a neighbour of the core (a "lightweight peer").

Both roles use it: a client connected to our server, and our own connection
to a remote server. To the core it is a :class:`~broker_spark.core.link.Link`
like any peer: the core routes to it the data messages whose topic matches
``prefixes`` (never the ones it sent itself), and what arrives on it enters
the central merge through ``source`` as if a peer had sent it.

Why the send side of a server's link never pushes back on the core: a
WebSocket client is a third-party program that may read slowly or stop
reading. If its buffer could stall the core, one slow client would slow the
endpoint and everyone else. So ``room()`` is unbounded and ``deliver``
appends to a bounded queue of node messages; when a delivery would overflow
it, the link gives up on the client: the queue is dropped, an error for the
client is kept as the last word, and the owner closes the connection.
Messages are rendered to JSON only when the writer takes them, so a burst
costs a reference per message.

Our own bridge to a server (the client role) is the other way round: the
server's queue is small and a server that is outrun drops us, so what we
send is paced (:mod:`~broker_spark.websocket.pacing`) and the link's room is
what its queue has left: a publisher faster than the server waits.

The receive side does push back: the reader waits for room in ``source``
before taking the next frame, so a client that publishes faster than the
endpoint routes is slowed down by TCP, with every buffer bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from broker_spark.core.link import Link
from broker_spark.core.node_message import DATA
from broker_spark.core.queues import UNBOUNDED_ROOM
from broker_spark.errors import EC, SC, BrokerError, DeliveryError, ShutdownError
from broker_spark.status import Error, NetworkInfo, PeerFlags
from broker_spark.websocket.json_messages import error_text, render_data_message
from broker_spark.websocket.pacing import PROBE, EchoPacer

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_NORMAL",
    "CLOSE_OVERFLOW",
    "OVERFLOW_CODE",
    "WebSocketLink",
    "close_connection",
    "close_now",
]

#: WebSocket close codes we use (RFC 6455): normal, going away (shutdown),
#: policy violation (the client read too slowly).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_OVERFLOW = 1008

#: The Broker error code a disconnected slow client (and the status subscribers) see.
OVERFLOW_CODE = EC.PeerTimeout


class WebSocketLink(Link):
    """The core's view of one WebSocket connection, with its bounded send queue.

    ``ws`` is a connection of the ``websockets`` library (asyncio API) on the
    core's loop. The owner runs :meth:`write_loop` in a task, feeds received
    messages with :meth:`feed`, waits on ``ended`` and then closes the
    connection with ``close_code``/``close_reason``, sending ``farewell``
    first when there is one.
    """

    kind = "websocket"

    __slots__ = (
        "ws",
        "out",
        "send_capacity",
        "close_code",
        "close_reason",
        "farewell",
        "ended",
        "_writer_waiting",
        "_wake",
        "_source_room",
        "_loop",
        "_thread",
        "pacer",
        "_room_wanted",
    )

    def __init__(
        self,
        core: Core,
        ws: Any,
        *,
        prefixes: tuple[str, ...],
        send_capacity: int,
        network: NetworkInfo | None = None,
        flags: PeerFlags = PeerFlags.Remote,
        peer_str: str | None = None,
        pacer: EchoPacer | None = None,
    ) -> None:
        # WebSocket clients carry no endpoint id of their own: each connection gets one.
        super().__init__(core, uuid.uuid4().bytes, network=network, flags=flags)
        if peer_str is not None:
            self.peer_str = peer_str
        self.prefixes = tuple(prefixes)
        self.ws = ws
        self.out: deque[Any] = deque()
        self.send_capacity = send_capacity
        self.close_code = CLOSE_NORMAL
        self.close_reason = ""
        self.farewell: str | None = None
        self.ended = asyncio.Event()
        self._writer_waiting = False
        self._wake = asyncio.Event()
        self._source_room = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.source.on_room = self._on_source_room
        #: Paces what we publish to a server (our client role; see websocket.pacing).
        self.pacer = pacer
        self._room_wanted = False

    # -- the Link contract (called on the core's loop) -----------------------------

    def room(self) -> int:
        if self.pacer is None:
            return UNBOUNDED_ROOM
        # Paced (our own bridge to a server): the server sets the pace, and what we
        # publish waits in the core, then in the publisher, rather than piling up here.
        return max(0, self.send_capacity - len(self.out))

    def want_room(self) -> None:
        if self.pacer is not None:
            self._room_wanted = True

    def deliver(self, msgs: list) -> None:
        if self.closed:
            return
        out = self.out
        if len(out) + len(msgs) > self.send_capacity:
            self._overflow()
            return
        for m in msgs:
            if m[2] == DATA:  # store commands and other kinds are not for WebSocket clients
                out.append(m)
        if self._writer_waiting:
            self._writer_waiting = False
            self._wake.set()

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        """Nothing to do: the WebSocket API has no way to announce a filter."""
        return None

    def close(self, reason: SC = SC.PeerLost) -> None:
        if self.closed:
            return
        if self.core.closed and self.close_code == CLOSE_NORMAL:
            self.close_code, self.close_reason = CLOSE_GOING_AWAY, "endpoint shutting down"
        self.closed = True
        self.source.close()
        self._set(self.ended)
        self._set(self._wake)

    # -- sending ----------------------------------------------------------------------

    def send_text(self, text: str) -> None:
        """Queue a ready JSON text (an error reply) behind what is already queued."""
        if self.closed:
            return
        if len(self.out) >= self.send_capacity:
            self._overflow()
            return
        self.out.append(text)
        if self._writer_waiting:
            self._writer_waiting = False
            self._wake.set()

    async def write_loop(self) -> None:
        """Send queued messages as JSON text frames until the link closes."""
        if self.pacer is not None:
            await self._paced_write_loop(self.pacer)
            return
        out = self.out
        send = self.ws.send
        while not self.closed:
            if not out:
                self._writer_waiting = True
                self._wake.clear()
                await self._wake.wait()
                continue
            await send(_text_of(out.popleft()))

    async def _paced_write_loop(self, pacer: EchoPacer) -> None:
        """Send data messages as the pacer allows, each group followed by a probe."""
        out = self.out
        send = self.ws.send
        while not self.closed:
            if out and pacer.may_send():
                item = out.popleft()
                if self._room_wanted and len(out) <= self.send_capacity // 2:
                    self._room_wanted = False
                    self.core.wake()
                await send(_text_of(item))
                if type(item) is not str:
                    pacer.sent_data()
            elif pacer.should_probe(bool(out)):
                await send(PROBE)
                pacer.sent_probe()
            else:  # wait for more to send, or for an echo to open the window
                if out:
                    self._render_ahead(pacer.window)
                self._writer_waiting = True
                self._wake.clear()
                await self._wake.wait()

    def _render_ahead(self, count: int) -> None:
        """Render the next ``count`` queued messages while the server catches up, so that
        when its echo opens the window they go out at once and it is not kept waiting."""
        out = self.out
        for i in range(min(count, len(out))):
            item = out[i]
            if type(item) is tuple:
                out[i] = _Rendered(_text_of(item))

    def server_error(self, code: str, context: str) -> bool:
        """An error the server sent (client role); True if it was a probe's echo."""
        if self.pacer is None:
            return False
        echo = self.pacer.on_error(code, context)
        if echo:
            self._writer_waiting = False
            self._wake.set()
        return echo

    def settled(self) -> bool:
        """Nothing left to send, and (paced) the server processed everything sent."""
        if self.out:
            return False
        return self.pacer.idle if self.pacer is not None else self._writer_waiting

    async def acknowledge(self, deadline: float) -> None:
        """Paced (our bridge to a server): the echo of the last probe says the server
        *processed* everything before it (:mod:`~broker_spark.websocket.pacing`). Unpaced:
        once the writer sent everything, a WebSocket ping, whose pong comes after it."""
        loop = asyncio.get_running_loop()
        if self.pacer is not None:
            await self._until(
                self.settled,
                deadline,
                "the WebSocket server processed every message (the echo of the last probe)",
            )
            if self.closed:
                raise DeliveryError(
                    f"the connection to the WebSocket server {self.peer_str} was lost before it "
                    "processed every message"
                )
            return
        await self._until(
            lambda: not self.out and self._writer_waiting,
            deadline,
            "the WebSocket bridge sent every message",
        )
        if self.closed:
            raise DeliveryError(f"the WebSocket bridge to {self.peer_str} closed before the pong")
        try:
            waiter = await self.ws.ping()
            await asyncio.wait_for(waiter, max(0.1, deadline - loop.time()))
        except Exception as exc:
            raise DeliveryError(f"the WebSocket API did not answer our ping: {exc}") from None

    async def _until(self, done: Any, deadline: float, what: str) -> None:
        """Poll ``done()`` (or the link's end) on the loop until ``deadline``."""
        loop = asyncio.get_running_loop()
        delay = 0.0005
        while not (self.closed or done()):
            if loop.time() > deadline:
                raise DeliveryError(f"timed out waiting until {what}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _overflow(self) -> None:
        """Give up on a reader that fell ``send_capacity`` messages behind."""
        waiting = len(self.out)
        self.out.clear()
        message = (
            f"send buffer overflow: {waiting} messages waiting for a WebSocket peer "
            "that reads too slowly; disconnecting it"
        )
        self.farewell = error_text(OVERFLOW_CODE, message)
        self.close_code, self.close_reason = CLOSE_OVERFLOW, "send buffer overflow"
        self.close(SC.PeerLost)
        # Not from inside the core's routing (we are called from its flush): soon.
        self._loop.call_soon(self._report_overflow, message)

    def _report_overflow(self, message: str) -> None:
        core = self.core
        if core.closed:
            return
        core.emit(Error(OVERFLOW_CODE, message, self.info()))
        core.remove_link(self, SC.PeerLost)

    # -- receiving ----------------------------------------------------------------------

    def offer(self, msg: tuple) -> bool:
        """Hand one received node message to the core if it has room now (the fast path)."""
        src = self.source
        if self.closed or src.room() <= 0:
            return False
        src.offer([msg])
        return True

    async def feed(self, msg: tuple) -> bool:
        """Hand one received node message to the core, waiting for room; False once closed."""
        src = self.source
        while src.room() <= 0 and not self.closed:
            self._source_room.clear()
            src.want_room()
            if src.room() > 0:
                break
            await self._source_room.wait()
        if self.closed:
            return False
        src.offer([msg])
        return True

    def _on_source_room(self) -> None:
        self._set(self._source_room)

    def _set(self, event: asyncio.Event) -> None:
        """Set ``event`` from any thread (the core may close us from outside its loop)."""
        if threading.get_ident() == self._thread:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(event.set)


class _Rendered(str):
    """A queued data message already rendered as JSON (a plain ``str`` is a ready reply)."""

    __slots__ = ()


def _text_of(item: Any) -> str:
    """The JSON text of a queued item: a ready text, or a node message rendered now."""
    if isinstance(item, str):
        return item
    try:
        return render_data_message(item[0], item[1])
    except (BrokerError, ValueError) as exc:
        return error_text(
            EC.SerializationFailed,
            f"cannot render the message on topic {item[0]!r} as JSON -> {exc}",
        )


async def close_connection(
    ws: Any, code: int, reason: str, farewell: str | None, timeout: float
) -> None:
    """Close ``ws`` politely within ``timeout`` seconds (sending ``farewell`` first), else abort.

    Always leaves the transport closed, also when cancelled (endpoint shutdown).
    """

    async def polite() -> None:
        if farewell is not None:
            await ws.send(farewell)
        await ws.close(code, reason)

    try:
        await asyncio.wait_for(polite(), timeout)
    except (asyncio.TimeoutError, OSError, ShutdownError):
        pass
    except Exception as exc:  # websockets' ConnectionClosed and friends: already closed
        if not _is_connection_closed(exc):
            raise
    finally:
        close_now(ws, code, reason)


def close_now(ws: Any, code: int, reason: str) -> None:
    """Close ``ws`` at once, without waiting: its close frame if it is still open, then the
    transport (:func:`_drop_transport`). What a cancelled or aborted close falls back to, so a
    peer learns why even from an endpoint that is shutting down."""
    from websockets.protocol import State

    with contextlib.suppress(Exception):  # any state but open: nothing more to say
        if ws.protocol.state is State.OPEN:
            ws.protocol.send_close(code, reason)
            ws.send_data()
    _drop_transport(getattr(ws, "transport", None))


def _drop_transport(transport: Any) -> None:
    """Close ``transport`` now: gracefully when nothing waits to be sent, else abort.

    An abort resets the connection, and a peer that receives the reset before
    it has read our close frame loses the frame (it sees a dropped connection,
    not code 1001); a plain close sends what is written and then a FIN, at once
    when the buffer is empty. A peer that does not read, leaving data queued
    (also behind an earlier close), is aborted, so nothing waits on it.
    """
    if transport is None:
        return
    if transport.get_write_buffer_size() == 0:
        transport.close()  # (idempotent)
    else:
        transport.abort()


def _is_connection_closed(exc: BaseException) -> bool:
    from websockets.exceptions import ConnectionClosed, InvalidState

    return isinstance(exc, (ConnectionClosed, InvalidState))
