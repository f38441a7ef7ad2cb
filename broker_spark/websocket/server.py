"""Serving Zeek's WebSocket JSON API (v1) on an endpoint's loop.

Each connection on ``/v1/messages/json`` goes through the handshake (a JSON
array of topic prefixes, answered with an ack) and then becomes a
:class:`~broker_spark.websocket.ws_link.WebSocketLink`: a lightweight peer whose
prefixes join the endpoint's filter (so they flood to peers like a local
subscriber's) and to which the core routes matching messages; what the client
publishes enters the central merge as if a peer had sent it, so local
subscribers and matching peers receive it and the sender does not get it back.

Bad input never ends a connection: a binary frame, malformed JSON, a value
that is not valid Broker data or a first message that is not a subscription
array is answered with a ``deserialization_failed`` error (context in
Broker's words, ``input #N contained ...``) and the connection stays usable;
nothing of a rejected message reaches anyone. Only a frame beyond
``max_size`` closes the connection (code 1009, by the ``websockets`` library)
and so does a client that reads too slowly (see the link).

Who may connect: with a ``token`` a client must send it (``Authorization:
Bearer TOKEN``, or as the password of its URL, which is HTTP Basic) or gets
401 before any WebSocket exists; beyond ``max_connections`` clients a new one
gets 503; a client that sends no subscriptions within
``SUBSCRIPTIONS_TIMEOUT`` is closed (1008). All three are counted in
:attr:`WebSocketServer.admission` (what ``status --relay`` and ``/metrics``
show). Zeek's own server has no token; without one, clients see the same API.

Shutdown: the core closes every link when the endpoint shuts down, and a
guard task, cancelled when the loop stops, closes the listening socket and
aborts whatever connection is left, including ones still in their opening
handshake, so no socket outlives the endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.http11 import Request, Response

from broker_spark.addresses import format_host_port
from broker_spark.admission import (
    DEFAULT_PER_ADDRESS,
    LISTEN_BACKLOG,
    UNAUTHORIZED,
    Admission,
    authorization_matches,
)
from broker_spark.core.node_message import DATA
from broker_spark.data.binary import encode
from broker_spark.data.json_codec import decode_client_message, decode_subscriptions, encode_ack
from broker_spark.errors import EC, SC, BrokerError
from broker_spark.status import NetworkInfo, PeerFlags
from broker_spark.websocket.json_messages import JSON_PATH, error_text, input_error
from broker_spark.websocket.ws_link import (
    CLOSE_GOING_AWAY,
    WebSocketLink,
    close_connection,
    close_now,
)

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = ["DEFAULT_MAX_CONNECTIONS", "SHUTDOWN_GRACE", "WebSocketServer"]

log = logging.getLogger(__name__)

#: Seconds a client has, once connected, to send its subscriptions (the API's first message).
SUBSCRIPTIONS_TIMEOUT = 10.0
#: Clients a server serves at once; beyond, a new one is answered 503.
DEFAULT_MAX_CONNECTIONS = 1024
#: Seconds an endpoint's shutdown gives connections to close politely before aborting them.
SHUTDOWN_GRACE = 0.25


#: Seconds a connection refused at its TCP accept has to send its request (and be answered
#: 503) before it is dropped: a real client sends it at once, a crowd costs no slot and
#: little time.
REFUSED_GRACE = 1.0


class _TrackedConnection(ServerConnection):
    """A server connection that registers itself from TCP accept to TCP close, and holds
    its place in the server's slots (``admission``, by its address) from then until its
    close: unidentified until it sent its subscriptions (:meth:`identified`).

    With ``tls`` the server listens in plain TCP and the connection starts TLS itself once
    it holds a slot, so one in its TLS handshake is counted too (asyncio's own TLS would
    make the connection only once the handshake is done)."""

    def __init__(
        self,
        *args: Any,
        registry: set[ServerConnection],
        admission: Admission,
        tls: ssl.SSLContext | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._registry = registry
        self._admission = admission
        self._tls = tls
        self._made = False  # the WebSocket connection made (after TLS, if any)
        #: what TLS delivered before the connection was made (the request may come with
        #: the client's last handshake flight), given to it once made
        self._early: list[bytes] = []
        self._early_eof = False
        self._address: str | None = None  # set while it holds a slot
        self._identified = False
        #: turned away at its accept: its request is answered 503 (``_check_request``)
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._registry.add(self)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        admitted = self._admission.enter(address)  # counted, logged once a minute per address
        if admitted:
            self._address = address
        if self._tls is None:
            self._made = True
            super().connection_made(transport)
            if not admitted:
                self.refused = True
                loop = asyncio.get_running_loop()
                loop.call_later(REFUSED_GRACE, transport.abort)  # type: ignore[attr-defined]
            return
        self.transport = transport  # type: ignore[assignment]  # until TLS replaces it
        if not admitted:  # a TLS client could not read a plain 503
            transport.abort()  # type: ignore[attr-defined]
            return
        transport.pause_reading()  # type: ignore[attr-defined]  # the ClientHello waits
        self._starting = asyncio.ensure_future(self._start_tls(transport))

    async def _start_tls(self, transport: asyncio.BaseTransport) -> None:
        """TLS on an admitted connection, then the WebSocket connection on top of it."""
        assert self._tls is not None
        try:
            secure = await asyncio.get_running_loop().start_tls(
                transport,  # type: ignore[arg-type]
                self,
                self._tls,
                server_side=True,
                ssl_handshake_timeout=SUBSCRIPTIONS_TIMEOUT,
            )
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
            self._admission.refuse("tls")
            log.debug("websocket client: TLS handshake failed (%s)", exc)
            transport.abort()  # type: ignore[attr-defined]
            self._lost()
            return
        if secure is None:  # closed meanwhile
            self._lost()
            return
        self._made = True
        super().connection_made(secure)
        for data in self._early:
            super().data_received(data)
        self._early.clear()
        if self._early_eof:
            super().eof_received()

    def data_received(self, data: bytes) -> None:
        if self._made:
            super().data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._made:
            return super().eof_received()
        self._early_eof = True
        return None

    def identified(self) -> None:
        """It sent its subscriptions: no longer one of the unidentified share."""
        if self._address is not None and not self._identified:
            self._identified = True
            self._admission.identify()

    def _lost(self) -> None:
        self._registry.discard(self)
        if self._address is not None:
            self._admission.leave(self._address, self._identified)
            self._address = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()
        if self._made:
            super().connection_lost(exc)


class WebSocketServer:
    """One listening socket of the WebSocket API; every method runs on the core's loop.

    ``send_capacity`` bounds each client's send queue (messages), ``max_size``
    each received frame (bytes), ``close_timeout`` the polite closing of a
    connection before it is aborted, ``max_connections`` the clients served at
    once (``per_address`` from one address; half of them before they sent their
    subscriptions); ``token`` (a secret, never shown) is what clients must present.
    """

    def __init__(
        self,
        core: Core,
        *,
        version: str,
        ssl_context: ssl.SSLContext | None,
        send_capacity: int,
        max_size: int,
        close_timeout: float,
        token: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        per_address: int = DEFAULT_PER_ADDRESS,
    ) -> None:
        self.core = core
        self._token = token or None
        self.admission = Admission("websocket", max_connections, per_address=per_address)
        self.version = version
        self.ssl_context = ssl_context
        self.send_capacity = send_capacity
        self.max_size = max_size
        self.close_timeout = close_timeout
        self.port = 0
        self.links: set[WebSocketLink] = set()
        self._connections: set[ServerConnection] = set()
        self._server: Server | None = None
        self._guard: asyncio.Task[None] | None = None

    async def start(self, address: str, port: int) -> int:
        """Bind and start serving; returns the bound port (OSError when binding fails)."""

        def make_connection(*args: Any, **kwargs: Any) -> ServerConnection:
            return _TrackedConnection(
                *args,
                registry=self._connections,
                admission=self.admission,
                tls=self.ssl_context,
                **kwargs,
            )

        self._server = await serve(
            self._handle,
            address,
            port,
            ssl=None,  # started by each connection once it holds a slot (_TrackedConnection)
            compression=None,  # neither Broker nor Zeek compress; it would only cost CPU
            max_size=self.max_size,
            close_timeout=self.close_timeout,
            process_request=self._check_request,
            create_connection=make_connection,  # type: ignore[arg-type]
            backlog=LISTEN_BACKLOG,  # to the loop's create_server
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.admission.address = format_host_port(address, self.port)
        self._guard = asyncio.get_running_loop().create_task(self._guard_until_stopped())
        return self.port

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """The opening request's slot, path and credential, before any WebSocket."""
        if isinstance(connection, _TrackedConnection) and connection.refused:
            return connection.respond(503, "too many clients\n")  # counted at its accept
        if request.path.partition("?")[0] != JSON_PATH:
            return connection.respond(404, f"Zeek's WebSocket API lives at {JSON_PATH}\n")
        if self._token is not None and not authorization_matches(
            request.headers.get("Authorization"), self._token
        ):
            self.admission.refuse(UNAUTHORIZED)
            log.warning("websocket client %s: no valid token; refused", _remote(connection))
            response = connection.respond(401, "this server needs a bearer token\n")
            response.headers["WWW-Authenticate"] = 'Bearer realm="broker-spark"'
            return response
        return None

    async def _guard_until_stopped(self) -> None:
        """Wait for the loop to stop (cancelling us), then leave nothing open behind."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            if self._server is not None:
                self._server.server.close()
            # The connections' handlers were cancelled too and close politely
            # (code 1001); give them a moment, then abort what is left.
            try:
                await asyncio.wait_for(self._wait_connections_closed(), SHUTDOWN_GRACE)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            finally:
                self.abort()

    def set_token(self, token: str | None) -> None:
        """Clients connecting from now on must send this token (a reload); None: no token."""
        self._token = token or None

    def abort(self) -> None:
        """Stop listening and drop every connection now (synchronous).

        A connection whose handler has not said goodbye yet still gets its
        close frame (1001, going away), written before the transport closes.
        """
        if self._server is not None:
            self._server.server.close()
        for link in list(self.links):
            link.close(SC.PeerLost)
        for conn in list(self._connections):
            close_now(conn, CLOSE_GOING_AWAY, "endpoint shutting down")

    async def _wait_connections_closed(self) -> None:
        while self._connections:
            await asyncio.sleep(0.01)

    # -- one connection ------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        core = self.core
        try:
            topics = await asyncio.wait_for(self._handshake(ws), SUBSCRIPTIONS_TIMEOUT)
        except ConnectionClosed:
            return
        except asyncio.TimeoutError:  # connected and silent: a probe, or a held-open socket
            self.admission.refuse("timeout")
            log.warning("websocket client %s: no subscriptions in time; closing", _remote(ws))
            with contextlib.suppress(Exception):
                await close_connection(ws, 1008, "no subscriptions in time", None, 1.0)
            return
        if isinstance(ws, _TrackedConnection):
            ws.identified()
        if core.closed:
            return
        host, port = ws.remote_address[:2]
        link = WebSocketLink(
            core,
            ws,
            prefixes=topics,
            send_capacity=self.send_capacity,
            network=NetworkInfo(str(host), int(port)),
            flags=PeerFlags.Remote | PeerFlags.Inbound,
        )
        try:
            core.add_link(link)
        except BrokerError:  # the endpoint is shutting down
            link.close()
            await close_connection(ws, link.close_code, "", None, self.close_timeout)
            return
        self.links.add(link)
        core.set_extra_filter(link, link.prefixes)
        reason = SC.PeerLost
        tasks: list[asyncio.Future[Any]] = []
        try:
            # The ack goes first; whatever the core routed to us meanwhile waits in the queue.
            await ws.send(encode_ack(core.node_id, self.version))
            reader = asyncio.ensure_future(self._read_loop(ws, link))
            tasks = [reader, asyncio.ensure_future(link.write_loop())]
            tasks.append(asyncio.ensure_future(link.ended.wait()))
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and isinstance(reader.exception(), ConnectionClosedOK):
                reason = SC.PeerRemoved
        except ConnectionClosed:
            pass
        finally:
            # The endpoint's shutdown may cancel us during this clean-up too: every step
            # still runs (the close falls back to close_now), then the cancellation goes on.
            for task in tasks:
                task.cancel()
            cancelled = False
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
            except asyncio.CancelledError:
                cancelled = True
            self.links.discard(link)
            core.set_extra_filter(link, ())
            core.remove_link(link, reason)
            try:
                await close_connection(
                    ws, link.close_code, link.close_reason, link.farewell, self.close_timeout
                )
            except asyncio.CancelledError:
                cancelled = True
            if cancelled:
                raise asyncio.CancelledError

    async def _handshake(self, ws: ServerConnection) -> tuple[str, ...]:
        """Read until the client sent its subscriptions, answering anything else with an error."""
        n = 0
        while True:
            frame = await ws.recv()
            n += 1
            if type(frame) is not str:
                context = f"handshake input #{n} is a binary frame; the API takes JSON text only"
            else:
                try:
                    return tuple(dict.fromkeys(decode_subscriptions(frame)))
                except BrokerError as exc:
                    context = (
                        f"handshake input #{n} is not the subscriptions "
                        f"(a JSON array of topic prefixes, sent first) -> {exc}"
                    )
            await ws.send(error_text(EC.DeserializationFailed, context))

    async def _read_loop(self, ws: ServerConnection, link: WebSocketLink) -> None:
        """Publish what the client sends, in order, answering bad input with errors."""
        recv = ws.recv
        ttl = self.core.options.ttl
        sender = link.peer_id
        n = 0
        while True:
            frame = await recv()
            n += 1
            if type(frame) is not str:
                link.send_text(input_error(n, "a binary frame; the API takes JSON text only"))
                continue
            try:
                msg = decode_client_message(frame)
                payload = encode(msg.value)
            except (BrokerError, ValueError) as exc:
                link.send_text(input_error(n, exc))
                continue
            node_msg = (msg.topic, payload, DATA, ttl, sender)
            if not link.offer(node_msg) and not await link.feed(node_msg):
                return


def _remote(connection: ServerConnection) -> str:
    try:
        host, port = connection.remote_address[:2]
    except Exception:  # already gone
        return "?"
    return format_host_port(host, port)
