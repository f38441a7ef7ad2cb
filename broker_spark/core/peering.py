"""TCP/TLS peering of one endpoint on asyncio: the shell around the peering decisions.

One :class:`Peering` per endpoint, made on first use of ``listen``/``peer``,
living on the endpoint's loop next to the core. What to do is decided by the
sans-I/O :class:`~broker_spark.protocol.peering.PeeringMachine` (who is dialled
and redialled when, what a ``peer()`` call answers, which of two racing
connections survives, what is reported); this shell feeds it events with the
loop's time and carries out its actions: it binds listeners, dials, runs
timers, resolves the futures of ``peer()`` calls and emits statuses.

Ownership runs one way: the peering owns its listeners, connections and the
version 2 :class:`~broker_spark.core.fabric.Fabric`; a connection owns its
link. Those lower parts never import this module: each declares, on its own
side, the narrow interface it needs of its owner (``ConnectionHost``,
``LinkHost``; the listener and the fabric take callbacks), and this class
provides them. Links that finish their handshake join the core with
``add_link`` like any other link.

When ``peer()`` returns, both sides know each other's subscriptions. The handshake
gives the dialler the listener's filter, but the listener may not have taken the
handshake's last message yet when the dialler is done (it is the originator's
``originator_ack``), and over version 2 our first subscription travels after the
handshake. So a new link that a ``peer()`` call waits for first sends a ping
behind all that, and ``peer()`` returns on its pong: a peer reads in order and
answers a ping only after every earlier message (WIRE.md), so by then it has the
link and our subscriptions, and a publication it makes right after our ``peer()``
returned reaches us.

Filters: in version 1 a peer only forwards what its neighbours' filters ask
for, so each neighbour is told :func:`~broker_spark.protocol.peering.advertised_filter`
(our filter plus, when forwarding, the other neighbours'). Version 2 links
learn filters through subscription flooding instead.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import socket
import ssl
import threading
import weakref
from typing import TYPE_CHECKING, Any

from broker_spark.admission import Slot
from broker_spark.config import Configuration, TLSSettings
from broker_spark.core.connection import PeerConnection
from broker_spark.core.fabric import Fabric
from broker_spark.core.listener import Listener, classify_tls_failure
from broker_spark.core.tcp_link import TcpLink
from broker_spark.errors import EC, SC, DeliveryError, PeeringError, ShutdownError
from broker_spark.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from broker_spark.protocol.peering import (
    Abort,
    Action,
    CancelDial,
    CancelTimer,
    Dial,
    Listen,
    PeeringMachine,
    RemoveLink,
    Report,
    Resolve,
    StartTimer,
    Timer,
    advertised_filter,
)
from broker_spark.status import (
    EndpointInfo,
    Error,
    NetworkInfo,
    PeerFlags,
    PeerInfo,
    PeerStatus,
)
from broker_spark.tls import TLSConfigError, make_contexts
from broker_spark.topic import Filter

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.link import Link

__all__ = ["Peering"]

#: Seconds between the periodic checks of every connection.
TICK_INTERVAL = 0.5

_registry: weakref.WeakKeyDictionary[Core, Peering] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()

Key = tuple[str, int]


def _seconds(value: Any) -> float:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


class Peering:
    """Network peering of one endpoint (every method runs on the endpoint's loop)."""

    #: Send a keep-alive ping after this many idle seconds.
    ping_interval = 5.0
    #: Declare a peer lost after this many seconds without any data from it.
    liveness_timeout = 20.0
    #: Seconds to wait for the pong of our goodbye ping before closing anyway.
    bye_timeout = 3.0
    #: Seconds a peer may leave its full send buffer unread before the overflow policy applies.
    stall_timeout = 5.0
    #: Largest frame accepted from a peer.
    max_frame_size = DEFAULT_MAX_FRAME_SIZE
    #: Protocol versions offered in our hello.
    versions = (1, 2)

    def __init__(self, core: Core, config: Configuration) -> None:
        self.core = core
        self.loop = core.loop_thread.loop
        self.options = config.options
        self.node_id = core.node_id
        self.tls_error: str | None = None
        settings = TLSSettings.of(config)
        try:
            self.tls = make_contexts(settings)
        except (TLSConfigError, ssl.SSLError, OSError) as exc:
            self.tls = None
            self.tls_error = str(exc)
        self.machine = PeeringMachine(tls_error=self.tls_error)
        self.closed = False
        self.conns: set[PeerConnection] = set()
        self.listeners: list[Listener] = []
        #: Dials and accepted sockets in their TLS handshake.
        self.tasks: set[asyncio.Task] = set()
        self._accepting = 0
        #: each accepted connection's place in its listener's slots, until it is lost
        self._slots: dict[PeerConnection, Slot] = {}
        self._dials: dict[Key, asyncio.Task] = {}
        self._timers: dict[Timer, asyncio.TimerHandle] = {}
        self._waiters: dict[Key, list[asyncio.Future[bool]]] = {}
        self.fabric = Fabric(
            core, routes_changed=self._routes_changed, union_changed=self.refresh_filters
        )
        self._refresh_pending = False
        #: Links whose peer answered the ping sent behind the handshake (see the module doc).
        self._synced: weakref.WeakSet[TcpLink] = weakref.WeakSet()
        core.reachable_elsewhere = self.fabric.reachable
        core.close_hooks.append(self.close)
        self._ticker = self.loop.call_later(TICK_INTERVAL, self._tick)

    @classmethod
    def of(cls, core: Core, config: Configuration) -> Peering:
        """The endpoint's peering, made (on its loop) the first time it is needed."""
        with _registry_lock:
            found = _registry.get(core)
            if found is None:
                found = _registry[core] = core.loop_thread.run_sync(cls, core, config)
            return found

    @staticmethod
    def existing(core: Core) -> Peering | None:
        return _registry.get(core)

    # -- settings the machine uses ---------------------------------------------------

    @property
    def handshake_timeout(self) -> float:
        """Seconds a handshake (TLS included) may take."""
        return self.machine.handshake_timeout

    @handshake_timeout.setter
    def handshake_timeout(self, value: float) -> None:
        self.machine.handshake_timeout = value
        for listener in self.listeners:
            listener.handshake_timeout = value

    @property
    def routes_timeout(self) -> float:
        """Seconds ``peer()`` waits, after the handshake, for the link to be ready (the
        neighbour's pong and, over version 2, its first subscription) before it returns
        True anyway (the link is up)."""
        return self.machine.routes_timeout

    @routes_timeout.setter
    def routes_timeout(self, value: float) -> None:
        self.machine.routes_timeout = value

    @property
    def awaiting_routes(self) -> set[bytes]:
        """The neighbours whose first subscription a ``peer()`` call still waits for."""
        return self.machine.awaiting_routes()

    # -- carrying out the machine's actions ----------------------------------------------

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Resolve):
                for fut in self._waiters.pop(action.key, ()):
                    if not fut.done():
                        fut.set_result(action.ok)
            elif isinstance(action, Report):
                self._emit_error(action.code, action.message, action.peer_id, action.network)
            elif isinstance(action, StartTimer):
                self._timers[action.timer] = self.loop.call_later(
                    action.delay, self._timer_fired, action.timer
                )
            elif isinstance(action, CancelTimer):
                handle = self._timers.pop(action.timer, None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(action, Dial):
                self._dial(action.key)
            elif isinstance(action, CancelDial):
                task = self._dials.pop(action.key, None)
                if task is not None:
                    task.cancel()
            elif isinstance(action, Abort):
                action.conn.abort()  # type: ignore[attr-defined]
            elif isinstance(action, RemoveLink):
                link = self.core.links.get(action.peer_id)
                if link is not None:
                    self.core.remove_link(link, action.reason)
            else:  # Listen is carried out where it is asked for (listen returns the port)
                raise AssertionError(f"unexpected peering action {action!r}")

    def _emit_error(
        self, code: EC, message: str, peer_id: bytes | None, network: NetworkInfo | None
    ) -> None:
        where = None
        if network is not None:
            where = EndpointInfo(self.core.id_to_str(peer_id) if peer_id else "", network)
        self.core.emit(Error(code, message, where))

    def _timer_fired(self, timer: Timer) -> None:
        self._timers.pop(timer, None)
        self._apply(self.machine.timer_fired(timer))

    # -- listening -----------------------------------------------------------------

    def listen(self, address: str, port: int) -> int:
        """Accept peers on ``address:port``; the bound port, or 0 (with an Error) on failure."""
        port = int(port)
        for action in self.machine.listen(address, port):
            if not isinstance(action, Listen):
                self._apply([action])
                return 0
        try:
            listener = Listener(
                self.loop,
                address,
                port,
                node_id=self.node_id,
                tls=self.tls is not None,
                handshake_timeout=self.handshake_timeout,
                accepted=self._accepted,
                report=self.report,
                per_address=self.options.connections_per_address,
            )
        except OSError as exc:
            self._apply(self.machine.listen_failed(address, port, str(exc)))
            return 0
        self.listeners.append(listener)
        return listener.port

    def _accepted(self, sock: socket.socket, network: NetworkInfo, tls: bool, slot: Slot) -> None:
        self._accepting += 1
        self._track(self.loop.create_task(self._accept(sock, network, tls, slot)))

    async def _accept(
        self, sock: socket.socket, network: NetworkInfo, tls: bool, slot: Slot
    ) -> None:
        """Its listener's ``slot`` is held until the connection is lost (identified once its
        handshake is done: :meth:`join`)."""
        ctx = self.tls.server if (tls and self.tls is not None) else None
        made: list[PeerConnection] = []

        def protocol() -> PeerConnection:
            conn = PeerConnection(self, "acceptor", network, tls=tls)
            self._slots[conn] = slot
            made.append(conn)
            return conn

        try:
            await self.loop.connect_accepted_socket(
                protocol,
                sock,
                ssl=ctx,
                ssl_handshake_timeout=self.handshake_timeout if ctx else None,
            )
        except asyncio.CancelledError:
            sock.close()
            raise
        except Exception as exc:
            sock.close()
            self.report(*classify_tls_failure(exc, network, self.handshake_timeout))
        finally:
            if not made or made[0].transport is None:  # never up: no longer pending
                self._accepting -= 1
                slot.leave()
                if made:
                    self._slots.pop(made[0], None)

    def _track(self, task: asyncio.Task) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- dialling ---------------------------------------------------------------------

    async def peer(self, address: str, port: int, retry: Any = 10.0) -> bool:
        """Peer with ``address:port``; True once peered, False when the attempt failed."""
        return await self.start_peering(address, port, retry)

    def start_peering(self, address: str, port: int, retry: Any = 10.0) -> asyncio.Future[bool]:
        key = (str(address), int(port))
        fut: asyncio.Future[bool] = self.loop.create_future()
        answer, actions = self.machine.peer(key[0], key[1], _seconds(retry))
        if answer is not None:
            fut.set_result(answer)
        else:
            self._waiters.setdefault(key, []).append(fut)
        self._apply(actions)
        return fut

    def _dial(self, key: Key) -> None:
        task = self.loop.create_task(self._connect(key))
        self._dials[key] = task
        self._track(task)

    async def _connect(self, key: Key) -> None:
        ctx = self.tls.client if self.tls is not None else None
        network = self.machine.network(key) or NetworkInfo(*key)
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: PeerConnection(
                        self, "connector", network, key=key, tls=ctx is not None
                    ),
                    key[0],
                    key[1],
                    ssl=ctx,
                    ssl_handshake_timeout=self.handshake_timeout if ctx else None,
                ),
                self.handshake_timeout,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._dial_ended(key)
            self._apply(self.machine.dial_failed(key, *_classify(exc, f"{key[0]}:{key[1]}")))
            return
        self._dial_ended(key)
        self._apply(self.machine.dial_done(key))

    def _dial_ended(self, key: Key) -> None:
        current = asyncio.current_task()
        if self._dials.get(key) is current:
            del self._dials[key]

    # -- what connections tell their owner (ConnectionHost) ----------------------------------

    def connection_made(self, conn: PeerConnection) -> bool:
        """A socket is up; False when the endpoint is closing (the connection aborts)."""
        if conn.role == "acceptor":
            self._accepting -= 1  # counted among the connections from here on
        if self.closed:
            return False
        self.conns.add(conn)
        self._apply(self.machine.connection_up(conn, conn.key))
        return True

    def connection_closing(self, conn: PeerConnection) -> None:
        self.machine.connection_closing(conn)

    def connection_lost(self, conn: PeerConnection) -> None:
        self.conns.discard(conn)
        slot = self._slots.pop(conn, None)
        if slot is not None:
            slot.leave()
        self.machine.connection_lost(conn)

    def claim(self, peer_id: bytes, conn: PeerConnection) -> bool:
        """The originator's question: may ``conn`` become the link to ``peer_id``?"""
        if peer_id in self.core.links:
            return False
        return self.machine.claim(peer_id, conn)

    def redundant(self, conn: PeerConnection, peer_id: bytes | None) -> None:
        """``conn`` lost the race against another connection to the same peer."""
        self._apply(self.machine.redundant(conn, peer_id))

    def join(self, link: TcpLink) -> bool:
        """A handshake finished: the link joins the core; False if the peer is linked already."""
        try:
            self.core.add_link(link)
        except (PeeringError, ShutdownError):
            return False
        slot = self._slots.get(link.conn)
        if slot is not None:
            slot.identify()  # a peer that finished its handshake keeps its place
        if link.version >= 2:
            # Our filter first: the subscription the new neighbour gets at once must be
            # complete, since its peer() returns on it (filters otherwise reach the
            # fabric on the next refresh, and subscribers made before the first link
            # never asked for one).
            self._refresh()
            self.fabric.add_link(link)
        # peer() returns once the link is ready (_ready): the neighbour has taken the
        # handshake and our subscription, and, over version 2, we know its own.
        self._apply(self.machine.link_up(link.conn, link.peer_id, link.network, routes_known=False))
        self.refresh_filters()
        if link.peer_id in self.machine.awaiting_routes():  # a peer() call waits for it
            self._track(self.loop.create_task(self._sync(link)))
        return True

    async def _sync(self, link: TcpLink) -> None:
        """Ping behind the handshake (and our first subscription); on the pong the peer
        has them all, so ``peer()`` may return (see the module doc).

        A link that closes first fails the waiting ``peer()`` calls (``link_closed``);
        a peer that never answers leaves them to ``routes_timeout``, as a version 2
        neighbour that never sends its subscription does.
        """
        try:
            await link.acknowledge(self.loop.time() + self.routes_timeout)
        except DeliveryError:
            return
        if link.closed:
            return
        self._synced.add(link)
        self._routes_changed()

    def _ready(self, peer_id: bytes) -> bool:
        """Whether a ``peer()`` call for ``peer_id`` may return: its link is synced and,
        over version 2, we route by what the router knows, so it must have learned the
        neighbour's subscription (its filter is known, as after a version 1 handshake)."""
        link = self.core.links.get(peer_id)
        if not isinstance(link, TcpLink) or link not in self._synced:
            return False
        return link.version < 2 or self.fabric.router.timestamp_of(peer_id) is not None

    def connection_failed(
        self, conn: PeerConnection, code: EC, message: str, peer_id: bytes | None
    ) -> None:
        self._apply(
            self.machine.connection_failed(
                conn, code, message, peer_id, conn.network, linked=conn.link is not None
            )
        )

    def room_freed(self, conn: PeerConnection) -> None:
        self.fabric.room_freed(conn)

    # -- what links tell their owner (LinkHost) -------------------------------------------------

    def link_lost(self, link: TcpLink, reason: SC) -> None:
        """The connection under ``link`` ended (or said goodbye): tell the fabric, then the core."""
        self.fabric.remove_link(link)
        self.core.remove_link(link, reason)

    def link_closed(self, link: TcpLink, reason: SC) -> None:
        """Called once by every closing link, whoever closed it."""
        self.fabric.remove_link(link)
        self._apply(self.machine.link_closed(link.conn, link.peer_id, link.network))
        self.refresh_filters()

    def peer_filter(self, link: TcpLink, prefixes: tuple[str, ...]) -> None:
        """A version 1 peer announced its new filter."""
        self.core.on_link_filter(link, prefixes)
        self.refresh_filters()

    def report(self, code: EC, message: str, link: Link | None = None) -> None:
        self.core.emit(Error(code, message, link.info() if link is not None else None))

    def _routes_changed(self) -> None:
        """A link synced or the fabric learned routes: ``peer()`` calls waiting may return."""
        for peer_id in self.machine.awaiting_routes():
            if self._ready(peer_id):
                self._apply(self.machine.routes_arrived(peer_id))

    # -- filters ------------------------------------------------------------------------

    def advertised_filter(self, link: Link | None) -> tuple[str, ...]:
        """What we ask ``link``'s peer for (see protocol.peering.advertised_filter)."""
        core = self.core
        return advertised_filter(
            core.filter,
            core.forwarding,
            (
                other.prefixes
                for other in core.links.values()
                if other is not link and other.takes_forwarded
            ),
        )

    def refresh_filters(self) -> None:
        """Recompute advertised filters soon (coalesced: one pass per loop iteration)."""
        if not self._refresh_pending and not self.closed:
            self._refresh_pending = True
            self.loop.call_soon(self._refresh)

    def _refresh(self) -> None:
        self._refresh_pending = False
        if self.closed or self.core.closed:
            return
        core = self.core
        mine = Filter(core.filter)
        for link in list(core.links.values()):
            if isinstance(link, TcpLink) and link.version >= 2:
                continue
            if isinstance(link, TcpLink):
                link.announce(self.advertised_filter(link))
            if core.forwarding and link.takes_forwarded:
                for prefix in link.prefixes:
                    mine.add(prefix)
        self.fabric.set_filter(tuple(mine.prefixes()))

    # -- unpeering and queries ------------------------------------------------------------

    def unpeer(self, address: str, port: int) -> bool:
        """Forget ``address:port``: no more redials, and a goodbye if peered. False if unknown."""
        found, actions = self.machine.unpeer(str(address), int(port))
        self._apply(actions)
        return found

    def peers_snapshot(self) -> list[PeerInfo]:
        core = self.core
        out = [PeerInfo(x.info(), x.flags, PeerStatus.Peered) for x in core.links.values()]
        for view in self.machine.targets_view():
            if view.peer_id is not None and view.peer_id in core.links:
                continue
            node = core.id_to_str(view.peer_id) if view.peer_id else ""
            out.append(
                PeerInfo(
                    EndpointInfo(node, view.network),
                    PeerFlags.Remote | PeerFlags.Outbound,
                    PeerStatus.Connecting if view.connecting else PeerStatus.Reconnecting,
                )
            )
        return out

    # -- periodic checks and shutdown ---------------------------------------------------------

    def _tick(self) -> None:
        if self.closed:
            return
        now = self.loop.time()
        for conn in list(self.conns):
            conn.tick(now)
        self._ticker = self.loop.call_later(TICK_INTERVAL, self._tick)

    def close(self) -> None:
        """Stop listening and dialling and close every connection (the core is closing)."""
        if self.closed:
            return
        self.closed = True
        self._ticker.cancel()
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
        self._apply(self.machine.close())
        for task in list(self.tasks):
            task.cancel()
        for conn in list(self.conns):
            conn.abort()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


def _classify(exc: BaseException, where: str) -> tuple[EC, str]:
    """An EC code and a message for a failed dial (before any Broker byte was exchanged)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return EC.PeerInvalid, (
            f"TLS handshake with {where} failed: the peer's certificate does not verify "
            f"({exc.verify_message or exc.reason})"
        )
    if isinstance(exc, ssl.SSLError):
        return EC.PeerIncompatible, (
            f"TLS handshake with {where} failed: {exc.reason or exc} (do both endpoints "
            "use the same TLS settings? a peer with disable_ssl speaks plain TCP)"
        )
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return EC.PeerUnavailable, f"cannot connect to {where}: timed out"
    if isinstance(exc, ConnectionResetError):
        return EC.PeerIncompatible, (
            f"connection to {where} reset during the TLS handshake "
            "(the peer rejected our TLS settings?)"
        )
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        return EC.PeerUnavailable, f"cannot connect to {where}: {reason}"
    return EC.PeerUnavailable, f"cannot connect to {where}: {exc!r}"
