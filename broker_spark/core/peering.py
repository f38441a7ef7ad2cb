"""TCP/TLS peering of one endpoint: listen, dial with retries, unpeer, and report.

One :class:`Peering` per endpoint, made on first use of ``listen``/``peer``,
living on the endpoint's loop next to the core. It owns the listening
sockets, the outbound *targets* (an address the user peered with, redialled
every ``retry`` seconds after a failure or a lost connection until
``unpeer``), the connections in their handshake, and the version 2
:class:`~broker_spark.core.fabric.Fabric`. Links that finish their handshake
join the core with ``add_link`` like any other link.

Filters: in version 1 a peer only forwards what its neighbours' filters ask
for, so an endpoint advertises to each neighbour its own filter plus, when
forwarding is on, the filters of all its *other* neighbours. That is what lets
a middle endpoint that subscribes to nothing forward a chain's traffic.
Version 2 links learn filters through subscription flooding instead, so over
version 2 ``peer()`` also waits for the neighbour's first subscription: at
most ``routes_timeout`` seconds, and a link that closes before it fails the
attempt, so ``peer()`` can never hang on a neighbour that is gone or silent.

Redundant connections: when two endpoints dial each other at once, the
handshake's originator (the smaller id) keeps whichever connection reaches it
first: :meth:`Peering.claim` answers its ``is_redundant`` question, and the
other connection ends with ``drop_conn(redundant_connection)``. A ``peer()``
whose connection was the redundant one succeeds when the kept one is up.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import ssl
import threading
import weakref
from typing import TYPE_CHECKING, Any

from broker_spark.config import Configuration
from broker_spark.core.fabric import Fabric
from broker_spark.core.listener import Listener
from broker_spark.core.tcp_link import TcpLink
from broker_spark.core.tls import TLSConfigError, TLSSettings, make_contexts
from broker_spark.errors import EC, SC
from broker_spark.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from broker_spark.status import (
    EndpointInfo,
    Error,
    NetworkInfo,
    PeerFlags,
    PeerInfo,
    PeerStatus,
)
from broker_spark.topic import Filter

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.connection import PeerConnection
    from broker_spark.core.link import Link

__all__ = ["Peering", "Target"]

#: Seconds between the periodic checks of every connection.
TICK_INTERVAL = 0.5

_registry: weakref.WeakKeyDictionary[Core, Peering] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


class Target:
    """An address we peer with: dialled, and redialled after failures until unpeered."""

    __slots__ = (
        "address",
        "port",
        "retry",
        "peer_id",
        "conn",
        "task",
        "timer",
        "routes_timer",
        "waiters",
        "failures",
        "unpeered",
    )

    def __init__(self, address: str, port: int, retry: float) -> None:
        self.address = address
        self.port = port
        self.retry = retry
        self.peer_id: bytes | None = None
        self.conn: PeerConnection | None = None
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        #: Bounds the wait for a version 2 neighbour's first subscription.
        self.routes_timer: asyncio.TimerHandle | None = None
        self.waiters: list[asyncio.Future[bool]] = []
        self.failures = 0
        self.unpeered = False

    def network(self) -> NetworkInfo:
        return NetworkInfo(self.address, self.port, self.retry)

    def resolve(self, ok: bool) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(ok)

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _seconds(value: Any) -> float:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


class Peering:
    """Network peering of one endpoint (every method runs on the endpoint's loop)."""

    #: Seconds a handshake (TLS included) may take.
    handshake_timeout = 10.0
    #: Send a keep-alive ping after this many idle seconds.
    ping_interval = 5.0
    #: Declare a peer lost after this many seconds without any data from it.
    liveness_timeout = 20.0
    #: Seconds ``peer()`` waits, after a version 2 handshake, for the neighbour's first
    #: subscription before it returns True anyway (the link is up; see link_added).
    routes_timeout = 5.0
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
        settings = TLSSettings(
            disable_ssl=bool(self.options.disable_ssl),
            certificate=config.openssl_certificate,
            key=config.openssl_key,
            cafile=config.openssl_cafile,
            capath=config.openssl_capath,
            passphrase=config.openssl_passphrase,
        )
        try:
            self.tls = make_contexts(settings)
        except (TLSConfigError, ssl.SSLError, OSError) as exc:
            self.tls = None
            self.tls_error = str(exc)
        self.closed = False
        self.conns: set[PeerConnection] = set()
        self.targets: dict[tuple[str, int], Target] = {}
        self.claims: dict[bytes, PeerConnection] = {}
        self.listeners: list[Listener] = []
        self.tasks: set[asyncio.Task] = set()
        self.fabric = Fabric(self)
        #: ``peer()`` targets connected over version 2, waiting for their neighbour's routes.
        self.awaiting_routes: set[Target] = set()
        self._refresh_pending = False
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

    # -- listening -----------------------------------------------------------------

    def listen(self, address: str, port: int) -> int:
        """Accept peers on ``address:port``; the bound port, or 0 (with an Error) on failure."""
        where = f"{address or '*'}:{port}"
        if self.tls_error is not None:
            self.report(EC.CannotOpenFile, f"cannot listen on {where}: {self.tls_error}")
            return 0
        try:
            listener = Listener(self, address, int(port))
        except OSError as exc:
            self.report(EC.CannotOpenResource, f"cannot listen on {where}: {exc}")
            return 0
        self.listeners.append(listener)
        return listener.port

    # -- dialling ---------------------------------------------------------------------

    async def peer(self, address: str, port: int, retry: Any = 10.0) -> bool:
        """Peer with ``address:port``; True once peered, False when the attempt failed."""
        return await self.start_peering(address, port, retry)

    def start_peering(self, address: str, port: int, retry: Any = 10.0) -> asyncio.Future[bool]:
        key = (str(address), int(port))
        fut: asyncio.Future[bool] = self.loop.create_future()
        if self.closed:
            fut.set_result(False)
            return fut
        target = self.targets.get(key)
        if target is None:
            target = self.targets[key] = Target(key[0], key[1], max(0.0, _seconds(retry)))
        else:
            target.retry = max(0.0, _seconds(retry))
            target.unpeered = False
        if target.peer_id is not None and target.peer_id in self.core.links:
            fut.set_result(True)
            return fut
        target.failures = 0
        target.waiters.append(fut)
        if target.task is None and target.conn is None:
            target.cancel_timer()
            self._dial(target)
        return fut

    def _dial(self, target: Target) -> None:
        target.timer = None
        if self.closed or target.unpeered or target.task is not None:
            return
        if self.tls_error is not None:
            self.attempt_failed(target, EC.CannotOpenFile, self.tls_error)
            return
        task = self.loop.create_task(self._connect(target))
        target.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self, target: Target) -> None:
        from broker_spark.core.connection import PeerConnection

        ctx = self.tls.client if self.tls is not None else None
        network = target.network()
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: PeerConnection(
                        self, "connector", network, target=target, tls=ctx is not None
                    ),
                    target.address,
                    target.port,
                    ssl=ctx,
                    ssl_handshake_timeout=self.handshake_timeout if ctx else None,
                ),
                self.handshake_timeout,
            )
        except asyncio.CancelledError:
            target.task = None
            raise
        except Exception as exc:
            target.task = None
            code, message = _classify(exc, f"{target.address}:{target.port}")
            self.attempt_failed(target, code, message)
            return
        target.task = None

    def attempt_failed(
        self, target: Target, code: EC, message: str, peer_id: bytes | None = None
    ) -> None:
        """A dial or its handshake failed: report it, and retry if asked to.

        Every failed attempt is reported, as Broker does (a retrying peering to
        an absent node gives one ``PeerUnavailable`` per ``retry`` interval):
        code waiting on the status subscriber for the next failure relies on it.
        """
        target.conn = None
        node = self.core.id_to_str(peer_id) if peer_id else ""
        self.core.emit(Error(code, message, EndpointInfo(node, target.network())))
        target.failures += 1
        target.resolve(False)
        if target.retry <= 0:
            # Tried once, as asked: forget the address.
            key = (target.address, target.port)
            if self.targets.get(key) is target:
                del self.targets[key]
            return
        self._schedule_retry(target)

    def _schedule_retry(self, target: Target) -> None:
        if (
            target.retry > 0
            and not target.unpeered
            and not self.closed
            and target.timer is None
            and target.task is None
            and target.conn is None
            and self.targets.get((target.address, target.port)) is target
        ):
            target.timer = self.loop.call_later(target.retry, self._dial, target)

    def redundant(self, conn: PeerConnection, peer_id: bytes | None) -> None:
        """``conn`` lost the race against another connection to the same peer."""
        target = conn.target
        if target is None or peer_id is None:
            return
        target.conn = None
        target.peer_id = peer_id
        if peer_id in self.core.links:
            target.failures = 0
            target.resolve(True)
            return

        def check() -> None:  # the kept connection should be up by now
            target.timer = None
            if peer_id in self.core.links:
                target.resolve(True)
            elif target.conn is None and target.task is None and not target.unpeered:
                self._dial(target)

        target.cancel_timer()
        target.timer = self.loop.call_later(self.handshake_timeout, check)

    # -- connections and links --------------------------------------------------------

    def claim(self, peer_id: bytes, conn: PeerConnection) -> bool:
        """The originator's question: may ``conn`` become the link to ``peer_id``?"""
        if peer_id in self.core.links:
            return False
        other = self.claims.get(peer_id)
        if other is not None and other is not conn and not other.closing:
            return False
        self.claims[peer_id] = conn
        return True

    def release_claim(self, conn: PeerConnection) -> None:
        for peer_id in [p for p, c in self.claims.items() if c is conn]:
            del self.claims[peer_id]

    def link_added(self, link: TcpLink) -> None:
        self.release_claim(link.conn)
        mine = link.conn.target
        ready = True
        if link.version >= 2:
            # Our filter first: the subscription the new neighbour gets at once must be
            # complete, since its peer() returns on it (filters otherwise reach the
            # fabric on the next refresh, and subscribers made before the first link
            # never asked for one).
            self._refresh()
            self.fabric.add_link(link)
            # Over version 2 we route by what the router knows: ``peer()`` returns
            # once it learned the neighbour's subscription, so a publish right after
            # it reaches the neighbour (its filter is known, as after a v1 handshake).
            ready = self.fabric.router.timestamp_of(link.peer_id) is not None
        for target in self.targets.values():
            if target is mine or target.peer_id == link.peer_id:
                target.peer_id = link.peer_id
                target.failures = 0
                target.cancel_timer()
                if ready:
                    target.resolve(True)
                else:
                    self._await_routes(target)
        self.refresh_filters()

    def _await_routes(self, target: Target) -> None:
        """Hold ``target``'s ``peer()`` calls until its neighbour's routes arrive, for a while.

        The wait is bounded (``routes_timeout``) because a neighbour that never
        floods its subscription would otherwise keep ``peer()`` blocked until
        shutdown. **Choice**: when the time is up ``peer()`` returns True: the
        handshake succeeded and the link is up, and publications reach the
        neighbour once its subscription arrives, as with any peer that has not
        subscribed yet. A link that closes first fails the wait (link_closed).
        """
        self.awaiting_routes.add(target)
        if target.routes_timer is not None:
            target.routes_timer.cancel()

        def give_up() -> None:
            target.routes_timer = None
            if target in self.awaiting_routes:
                self.awaiting_routes.discard(target)
                target.resolve(True)

        target.routes_timer = self.loop.call_later(self.routes_timeout, give_up)

    def _stop_awaiting_routes(self, target: Target) -> bool:
        """Forget ``target``'s wait for routes; True if it was waiting."""
        if target.routes_timer is not None:
            target.routes_timer.cancel()
            target.routes_timer = None
        if target in self.awaiting_routes:
            self.awaiting_routes.discard(target)
            return True
        return False

    def _awaiting_for(self, link: TcpLink) -> list[Target]:
        """The targets whose ``peer()`` waits for the routes of ``link``'s peer."""
        return [t for t in self.awaiting_routes if t.peer_id == link.peer_id]

    def routes_learned(self) -> None:
        """Resolve ``peer()`` calls whose version 2 neighbour's subscription has arrived."""
        router = self.fabric.router
        for target in list(self.awaiting_routes):
            if target.peer_id is not None and router.timestamp_of(target.peer_id) is not None:
                self._stop_awaiting_routes(target)
                target.resolve(True)

    def link_lost(self, link: TcpLink, reason: SC) -> None:
        """The connection under ``link`` ended (or said goodbye): tell the fabric, then the core."""
        self.fabric.remove_link(link)
        self.core.remove_link(link, reason)

    def link_closed(self, link: TcpLink, reason: SC) -> None:
        """Called once by every closing link, whoever closed it."""
        self.fabric.remove_link(link)
        self.release_claim(link.conn)
        for target in self._awaiting_for(link):
            # The link died before its routes came: that peer() failed (a redial
            # follows when retry > 0, as after any failed attempt).
            self._stop_awaiting_routes(target)
            if not self.closed and not target.unpeered:
                self.attempt_failed(
                    target,
                    EC.PeerDisconnectDuringHandshake,
                    f"{link.network!r}: the connection closed before the peer sent its "
                    "subscriptions (right after the handshake)",
                    link.peer_id,
                )
        for target in list(self.targets.values()):
            if target.peer_id == link.peer_id:
                if target.conn is link.conn:
                    target.conn = None
                self._schedule_retry(target)
        self.refresh_filters()

    def connection_failed(
        self, conn: PeerConnection, code: EC, message: str, peer_id: bytes | None
    ) -> None:
        target = conn.target
        if target is not None and conn.link is None:
            self.attempt_failed(target, code, f"{conn.network!r}: {message}", peer_id)
            return
        waiting = self._awaiting_for(conn.link) if conn.link is not None else []
        if waiting:
            # peer() still waits for this link's routes: the attempt failed after
            # all, reported once here (link_closed then finds nothing to fail).
            for target in waiting:
                self._stop_awaiting_routes(target)
                self.attempt_failed(target, code, f"{conn.network!r}: {message}", peer_id)
            return
        node = self.core.id_to_str(peer_id) if peer_id else ""
        self.core.emit(
            Error(code, f"{conn.network!r}: {message}", EndpointInfo(node, conn.network))
        )

    def report(self, code: EC, message: str, link: Link | None = None) -> None:
        self.core.emit(Error(code, message, link.info() if link is not None else None))

    # -- filters ------------------------------------------------------------------------

    def advertised_filter(self, link: Link | None) -> tuple[str, ...]:
        """What we ask ``link``'s peer for: our filter, plus the other neighbours' when forwarding."""
        core = self.core
        if not core.forwarding:
            return core.filter
        f = Filter(core.filter)
        for other in core.links.values():
            if other is not link:
                for prefix in other.prefixes:
                    f.add(prefix)
        return tuple(f.prefixes())

    def peer_filter(self, link: TcpLink, prefixes: tuple[str, ...]) -> None:
        """A version 1 peer announced its new filter."""
        self.core.on_link_filter(link, prefixes)
        self.refresh_filters()

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
            if core.forwarding:
                for prefix in link.prefixes:
                    mine.add(prefix)
        self.fabric.set_filter(tuple(mine.prefixes()))

    # -- unpeering and queries ------------------------------------------------------------

    def unpeer(self, address: str, port: int) -> bool:
        """Forget ``address:port``: no more redials, and a goodbye if peered. False if unknown."""
        key = (str(address), int(port))
        target = self.targets.pop(key, None)
        found = False
        link = None
        if target is not None:
            found = True
            target.unpeered = True
            target.cancel_timer()
            self._stop_awaiting_routes(target)
            if target.task is not None:
                target.task.cancel()
            if target.conn is not None and target.conn.link is None:
                target.conn.abort()
            target.resolve(False)
            if target.peer_id is not None:
                link = self.core.links.get(target.peer_id)
        else:
            for candidate in self.core.links.values():
                net = candidate.network
                if (net.address, net.port) == key:
                    link = candidate
                    break
        if link is not None:
            found = True
            self.core.remove_link(link, SC.PeerRemoved)
        if not found:
            self.report(EC.PeerInvalid, f"cannot unpeer from {address}:{port}: not a peer")
        return found

    def peers_snapshot(self) -> list[PeerInfo]:
        core = self.core
        out = [PeerInfo(x.info(), x.flags, PeerStatus.Peered) for x in core.links.values()]
        for target in self.targets.values():
            if target.peer_id is not None and target.peer_id in core.links:
                continue
            node = core.id_to_str(target.peer_id) if target.peer_id else ""
            pending = target.task is not None or target.conn is not None
            out.append(
                PeerInfo(
                    EndpointInfo(node, target.network()),
                    PeerFlags.Remote | PeerFlags.Outbound,
                    PeerStatus.Connecting if pending else PeerStatus.Reconnecting,
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
        for target in list(self.awaiting_routes):
            self._stop_awaiting_routes(target)
        for target in self.targets.values():
            target.cancel_timer()
            target.resolve(False)
        for task in list(self.tasks):
            task.cancel()
        for conn in list(self.conns):
            conn.abort()


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
