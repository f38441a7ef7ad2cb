"""The peering decisions of one endpoint, sans I/O: who is dialled, when again, who wins a race.

One :class:`PeeringMachine` per endpoint decides everything about TCP/TLS
peering that is not moving bytes: which addresses are dialled and redialled
(every ``retry`` seconds after a failure or a lost connection, until
``unpeer``), what a ``peer()`` call returns and when, which of two connections
to the same peer survives, and which failures are reported. It never touches
a socket, a clock or a task: the caller (``core/peering.py`` on asyncio, or a
test) feeds it *events* and carries out the *actions* each returns, as a
:class:`~broker_spark.protocol.peer_session.PeerSession`'s shell carries out its
events. Its timers are actions too (the shell calls back when one is due), so it
needs no ``now``.

Events (methods): ``listen``, ``peer``, ``unpeer``, ``close``; a dial that
ended (``dial_done``/``dial_failed``); a connection that came up, started
closing or was lost; a handshake that finished (``link_up``) or lost the
duplicate race (``redundant``); a connection that failed; a link that closed;
a neighbour's first routes (``routes_arrived``); and ``timer_fired``.

Actions (the dataclasses below): :class:`Listen`, :class:`Dial`,
:class:`CancelDial`, :class:`Abort` a connection, :class:`StartTimer` and
:class:`CancelTimer`, :class:`Resolve` the ``peer()`` calls waiting on an
address, :class:`Report` an error status, :class:`RemoveLink`.

The rules, as Broker has them:

- Every failed attempt is reported (an absent peer gives one
  ``peer_unavailable`` per ``retry`` interval) and fails the waiting
  ``peer()`` calls; ``retry`` 0 means one attempt, after which the address is
  forgotten.
- Duplicate connections (both sides dial at once): the handshake's originator
  (the smaller id) asks :meth:`PeeringMachine.claim` whether a connection may
  become the link to a peer; the first live claim wins, the other connection
  ends as redundant, and a ``peer()`` waiting on it succeeds once the kept
  connection is up (checked again after the handshake timeout, and redialled
  if the kept one never came).
- A handshake is not the end: ``peer()`` also waits until the shell says the
  link is ready (``routes_arrived``): the neighbour has taken the end of the
  handshake and our subscription (it answered a ping sent behind them) and,
  over version 2, we have its first subscription, so a publish right after
  ``peer()`` on either side is routed. The wait lasts at most
  ``routes_timeout`` seconds, after which ``peer()`` returns True anyway (the
  link is up). A link that closes before it is ready fails the attempt.
- What a neighbour is told (:func:`advertised_filter`): our own filter, plus,
  when forwarding, the filters of all *other* neighbours, which is what lets a
  middle endpoint that subscribes to nothing forward a chain's traffic.

Connections are opaque hashable handles to the machine (the asyncio
connection objects in the endpoint, strings in tests).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from broker_spark.errors import EC, SC
from broker_spark.status import NetworkInfo
from broker_spark.topic import Filter

__all__ = [
    "Abort",
    "Action",
    "CancelDial",
    "CancelTimer",
    "Dial",
    "Listen",
    "PeeringMachine",
    "RemoveLink",
    "Report",
    "Resolve",
    "StartTimer",
    "TargetView",
    "Timer",
    "advertised_filter",
]

#: An address peered with: (host, port).
Key = tuple[str, int]


# -- actions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timer:
    """One timer of one target; a fired timer that is no longer current is ignored."""

    kind: str  # "retry", "check" (after a redundant connection) or "routes"
    key: Key
    serial: int


@dataclass(frozen=True, slots=True)
class Listen:
    """Open a listening socket (report ``listen_failed`` if that fails)."""

    address: str
    port: int


@dataclass(frozen=True, slots=True)
class Dial:
    """Connect to ``key``; then ``connection_up`` and ``dial_done``, or ``dial_failed``."""

    key: Key


@dataclass(frozen=True, slots=True)
class CancelDial:
    """Stop connecting to ``key`` (no event follows)."""

    key: Key


@dataclass(frozen=True, slots=True)
class Abort:
    """Close the connection at once, unsent data dropped."""

    conn: Hashable


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Call ``timer_fired(timer)`` after ``delay`` seconds."""

    timer: Timer
    delay: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    timer: Timer


@dataclass(frozen=True, slots=True)
class Resolve:
    """Answer every ``peer()`` call waiting on ``key`` with ``ok``."""

    key: Key
    ok: bool


@dataclass(frozen=True, slots=True)
class Report:
    """Emit an error status; ``network`` None for one not about a peer (a failed listen)."""

    code: EC
    message: str
    peer_id: bytes | None
    network: NetworkInfo | None


@dataclass(frozen=True, slots=True)
class RemoveLink:
    """Forget the peered neighbour ``peer_id`` (goodbye sent), reporting ``reason``."""

    peer_id: bytes
    reason: SC


Action = (
    Listen | Dial | CancelDial | Abort | StartTimer | CancelTimer | Resolve | Report | RemoveLink
)


@dataclass(frozen=True, slots=True)
class TargetView:
    """An address peered with, for ``peers()``: connecting now, or waiting to redial."""

    peer_id: bytes | None
    network: NetworkInfo
    connecting: bool


# -- state ----------------------------------------------------------------------------------


class _Target:
    """An address we peer with: dialled, and redialled after failures until unpeered."""

    __slots__ = (
        "key",
        "retry",
        "peer_id",
        "conn",
        "dialing",
        "timer",
        "routes_timer",
        "failures",
        "unpeered",
    )

    def __init__(self, key: Key, retry: float) -> None:
        self.key = key
        self.retry = retry
        self.peer_id: bytes | None = None
        self.conn: Hashable | None = None  # its connection, while not yet a link
        self.dialing = False
        self.timer: Timer | None = None  # a redial, or the check after a redundant connection
        #: Bounds the wait for a version 2 neighbour's first subscription.
        self.routes_timer: Timer | None = None
        self.failures = 0
        self.unpeered = False

    def network(self) -> NetworkInfo:
        return NetworkInfo(self.key[0], self.key[1], self.retry)


class _Conn:
    """A connection the machine knows: the target it was dialled for, and how far it got."""

    __slots__ = ("target", "closing", "linked")

    def __init__(self, target: _Target | None) -> None:
        self.target = target
        self.closing = False
        self.linked = False


class PeeringMachine:
    """The peering decisions of one endpoint; see the module docstring."""

    def __init__(
        self,
        *,
        handshake_timeout: float = 10.0,
        routes_timeout: float = 5.0,
        tls_error: str | None = None,
    ) -> None:
        #: Seconds a handshake may take (also when the kept connection of a race is due).
        self.handshake_timeout = handshake_timeout
        #: Seconds ``peer()`` waits for a version 2 neighbour's first subscription.
        self.routes_timeout = routes_timeout
        #: Why TLS cannot work (a bad certificate or key): every listen and dial fails with it.
        self.tls_error = tls_error
        self.closed = False
        self.targets: dict[Key, _Target] = {}
        self.conns: dict[Hashable, _Conn] = {}
        #: The originator's claims: which connection may become the link to a peer.
        self.claims: dict[bytes, Hashable] = {}
        #: Peered neighbours (over our connections) and the network each is reached at.
        self.links: dict[bytes, tuple[Hashable, NetworkInfo]] = {}
        self._serials = itertools.count(1)

    # -- requests -----------------------------------------------------------------------

    def listen(self, address: str, port: int) -> list[Action]:
        if self.tls_error is not None:
            where = f"{address or '*'}:{port}"
            return [
                Report(EC.CannotOpenFile, f"cannot listen on {where}: {self.tls_error}", None, None)
            ]
        return [Listen(address, port)]

    def listen_failed(self, address: str, port: int, reason: str) -> list[Action]:
        where = f"{address or '*'}:{port}"
        return [Report(EC.CannotOpenResource, f"cannot listen on {where}: {reason}", None, None)]

    def peer(self, address: str, port: int, retry: float) -> tuple[bool | None, list[Action]]:
        """A ``peer()`` call: its answer now (True/False), or None to wait for a Resolve."""
        key = (address, port)
        if self.closed:
            return False, []
        target = self.targets.get(key)
        retry = max(0.0, retry)
        if target is None:
            target = self.targets[key] = _Target(key, retry)
        else:
            target.retry = retry
            target.unpeered = False
        if target.peer_id is not None and target.peer_id in self.links:
            return True, []
        target.failures = 0
        out: list[Action] = []
        if not target.dialing and target.conn is None:
            self._cancel_timer(target, out)
            self._dial(target, out)
        return None, out

    def unpeer(self, address: str, port: int) -> tuple[bool, list[Action]]:
        """Forget ``address:port``: no more redials, and a goodbye if peered; False if unknown.

        Without a target for the address, a peered neighbour reached at it (one
        that dialled us) is unpeered instead.
        """
        key = (address, port)
        out: list[Action] = []
        target = self.targets.pop(key, None)
        peer_id: bytes | None = None
        found = False
        if target is not None:
            found = True
            target.unpeered = True
            self._cancel_timer(target, out)
            self._stop_awaiting_routes(target, out)
            if target.dialing:
                target.dialing = False
                out.append(CancelDial(key))
            if target.conn is not None:
                record = self.conns.get(target.conn)
                if record is None or not record.linked:
                    out.append(Abort(target.conn))  # a linked one says goodbye instead
            out.append(Resolve(key, False))
            if target.peer_id in self.links:
                peer_id = target.peer_id
        else:
            for node, (_conn, network) in self.links.items():
                if (network.address, network.port) == key:
                    peer_id = node
                    break
        if peer_id is not None:
            found = True
            out.append(RemoveLink(peer_id, SC.PeerRemoved))
        if not found:
            out.append(
                Report(
                    EC.PeerInvalid, f"cannot unpeer from {address}:{port}: not a peer", None, None
                )
            )
        return found, out

    def close(self) -> list[Action]:
        """The endpoint shuts down: every wait fails, every dial and connection ends."""
        if self.closed:
            return []
        self.closed = True
        out: list[Action] = []
        for target in self.targets.values():
            self._stop_awaiting_routes(target, out)
            self._cancel_timer(target, out)
            if target.dialing:
                target.dialing = False
                out.append(CancelDial(target.key))
            out.append(Resolve(target.key, False))
        out.extend(Abort(conn) for conn in self.conns)
        return out

    # -- dialling -----------------------------------------------------------------------

    def dial_done(self, key: Key) -> list[Action]:
        """The dial of ``key`` connected (its ``connection_up`` came first).

        The connection may have failed already (a peer that drops it at once can
        do so before the dial returns); the redial it could not schedule while
        the dial ran is scheduled now.
        """
        target = self.targets.get(key)
        out: list[Action] = []
        if target is not None and target.dialing:
            target.dialing = False
            if target.conn is None:
                self._schedule_retry(target, out)
        return out

    def dial_failed(self, key: Key, code: EC, message: str) -> list[Action]:
        """The dial of ``key`` failed before any Broker byte was exchanged."""
        target = self.targets.get(key)
        out: list[Action] = []
        if target is not None and target.dialing:
            target.dialing = False
            self._attempt_failed(target, code, message, None, out)
        return out

    def _dial(self, target: _Target, out: list[Action]) -> None:
        if self.closed or target.unpeered or target.dialing:
            return
        if self.tls_error is not None:
            self._attempt_failed(target, EC.CannotOpenFile, self.tls_error, None, out)
            return
        target.dialing = True
        out.append(Dial(target.key))

    def _attempt_failed(
        self, target: _Target, code: EC, message: str, peer_id: bytes | None, out: list[Action]
    ) -> None:
        """A dial or its handshake failed: report it, fail the waiting calls, retry if asked."""
        target.conn = None
        out.append(Report(code, message, peer_id, target.network()))
        target.failures += 1
        self._resolve(target, False, out)
        if target.retry <= 0:
            # Tried once, as asked: forget the address.
            if self.targets.get(target.key) is target:
                del self.targets[target.key]
            return
        self._schedule_retry(target, out)

    def _schedule_retry(self, target: _Target, out: list[Action]) -> None:
        if (
            target.retry > 0
            and not target.unpeered
            and not self.closed
            and target.timer is None
            and not target.dialing
            and target.conn is None
            and self.targets.get(target.key) is target
        ):
            target.timer = self._timer("retry", target)
            out.append(StartTimer(target.timer, target.retry))

    # -- connections ----------------------------------------------------------------------

    def connection_up(self, conn: Hashable, key: Key | None) -> list[Action]:
        """A connection exists (dialled for ``key``, or accepted with ``key`` None)."""
        if self.closed:
            return [Abort(conn)]
        target = self.targets.get(key) if key is not None else None
        self.conns[conn] = _Conn(target)
        if target is not None:
            target.conn = conn
        return []

    def connection_closing(self, conn: Hashable) -> None:
        """``conn`` began to close: it can no longer become a link (nor hold a claim)."""
        record = self.conns.get(conn)
        if record is not None:
            record.closing = True

    def connection_lost(self, conn: Hashable) -> None:
        self.conns.pop(conn, None)
        self._release_claim(conn)

    def claim(self, peer_id: bytes, conn: Hashable) -> bool:
        """The originator's question: may ``conn`` become the link to ``peer_id``?

        No if a link to that peer exists, or another live connection claimed it
        first; the loser of a simultaneous dial ends as redundant.
        """
        if peer_id in self.links:
            return False
        other = self.claims.get(peer_id)
        if other is not None and other != conn:
            record = self.conns.get(other)
            if record is not None and not record.closing:
                return False
        self.claims[peer_id] = conn
        return True

    def _release_claim(self, conn: Hashable) -> None:
        for peer_id in [p for p, c in self.claims.items() if c == conn]:
            del self.claims[peer_id]

    def redundant(self, conn: Hashable, peer_id: bytes | None) -> list[Action]:
        """``conn`` lost the race against another connection to the same peer."""
        record = self.conns.get(conn)
        target = record.target if record is not None else None
        out: list[Action] = []
        if target is None or peer_id is None:
            return out
        target.conn = None
        target.peer_id = peer_id
        if peer_id in self.links:
            target.failures = 0
            self._resolve(target, True, out)
            return out
        # The kept connection should be up within a handshake; check then.
        self._cancel_timer(target, out)
        target.timer = self._timer("check", target)
        out.append(StartTimer(target.timer, self.handshake_timeout))
        return out

    def link_up(
        self, conn: Hashable, peer_id: bytes, network: NetworkInfo, *, routes_known: bool = True
    ) -> list[Action]:
        """``conn`` finished its handshake and its link joined the core.

        ``routes_known`` False: the link is not ready yet (see the module doc), its
        ``peer()`` calls wait for :meth:`routes_arrived`.
        A link that comes up after :meth:`close` (its handshake raced the
        shutdown) changes nothing: close aborted its connection and answered
        every ``peer()``, and no timer may start any more.
        """
        if self.closed:
            return []
        self._release_claim(conn)
        self.links[peer_id] = (conn, network)
        record = self.conns.get(conn)
        mine = None
        if record is not None:
            record.linked = True
            mine = record.target
        out: list[Action] = []
        for target in self.targets.values():
            if target is mine or target.peer_id == peer_id:
                target.peer_id = peer_id
                target.failures = 0
                self._cancel_timer(target, out)
                if routes_known:
                    self._resolve(target, True, out)
                else:
                    self._await_routes(target, out)
        return out

    def connection_failed(
        self,
        conn: Hashable,
        code: EC,
        message: str,
        peer_id: bytes | None,
        network: NetworkInfo,
        *,
        linked: bool,
    ) -> list[Action]:
        """``conn`` fails (``linked``: after its handshake): report it, once, where it belongs."""
        out: list[Action] = []
        record = self.conns.get(conn)
        target = record.target if record is not None else None
        text = f"{network!r}: {message}"
        if target is not None and not linked:
            self._attempt_failed(target, code, text, peer_id, out)
            return out
        waiting = self._awaiting_for(peer_id) if linked else []
        if waiting:
            # peer() still waits for this link's routes: the attempt failed after all,
            # reported once here (link_closed then finds nothing to fail).
            for target in waiting:
                self._stop_awaiting_routes(target, out)
                self._attempt_failed(target, code, text, peer_id, out)
            return out
        out.append(Report(code, text, peer_id, network))
        return out

    def link_closed(self, conn: Hashable, peer_id: bytes, network: NetworkInfo) -> list[Action]:
        """The link over ``conn`` closed (whoever closed it): fail waits, schedule redials."""
        out: list[Action] = []
        self._release_claim(conn)
        entry = self.links.get(peer_id)
        if entry is not None and entry[0] == conn:
            del self.links[peer_id]
        for target in self._awaiting_for(peer_id):
            # The link died before its routes came: that peer() failed (a redial
            # follows when retry > 0, as after any failed attempt).
            self._stop_awaiting_routes(target, out)
            if not self.closed and not target.unpeered:
                self._attempt_failed(
                    target,
                    EC.PeerDisconnectDuringHandshake,
                    f"{network!r}: the connection closed before the peer sent its "
                    "subscriptions (right after the handshake)",
                    peer_id,
                    out,
                )
        for target in list(self.targets.values()):
            if target.peer_id == peer_id:
                if target.conn == conn:
                    target.conn = None
                self._schedule_retry(target, out)
        return out

    # -- version 2: waiting for the neighbour's routes ------------------------------------------

    def awaiting_routes(self) -> set[bytes]:
        """The neighbours whose first subscription some ``peer()`` call still waits for."""
        return {
            t.peer_id
            for t in self.targets.values()
            if t.routes_timer is not None and t.peer_id is not None
        }

    def routes_arrived(self, peer_id: bytes) -> list[Action]:
        """``peer_id``'s link is ready (see the module doc): its ``peer()`` calls return True."""
        out: list[Action] = []
        for target in self._awaiting_for(peer_id):
            self._stop_awaiting_routes(target, out)
            self._resolve(target, True, out)
        return out

    def _await_routes(self, target: _Target, out: list[Action]) -> None:
        """Hold ``target``'s ``peer()`` calls until its neighbour's routes arrive, for a while.

        The wait is bounded (``routes_timeout``) because a neighbour that never
        floods its subscription would otherwise keep ``peer()`` blocked until
        shutdown. **Choice**: when the time is up ``peer()`` returns True: the
        handshake succeeded and the link is up, and publications reach the
        neighbour once its subscription arrives, as with any peer that has not
        subscribed yet. A link that closes first fails the wait (link_closed).
        """
        self._stop_awaiting_routes(target, out)
        target.routes_timer = self._timer("routes", target)
        out.append(StartTimer(target.routes_timer, self.routes_timeout))

    def _stop_awaiting_routes(self, target: _Target, out: list[Action]) -> None:
        if target.routes_timer is not None:
            out.append(CancelTimer(target.routes_timer))
            target.routes_timer = None

    def _awaiting_for(self, peer_id: bytes | None) -> list[_Target]:
        return [
            t
            for t in self.targets.values()
            if t.routes_timer is not None and t.peer_id is not None and t.peer_id == peer_id
        ]

    # -- timers -----------------------------------------------------------------------------

    def timer_fired(self, timer: Timer) -> list[Action]:
        """A timer came due; one that was cancelled or replaced since is ignored."""
        out: list[Action] = []
        target = self.targets.get(timer.key)
        if target is None or self.closed:
            return out
        if timer == target.routes_timer:
            target.routes_timer = None
            self._resolve(target, True, out)  # routes_timeout: the link is up, see _await_routes
        elif timer == target.timer:
            target.timer = None
            if timer.kind == "retry":
                self._dial(target, out)
            elif target.peer_id is not None and target.peer_id in self.links:
                self._resolve(target, True, out)  # the kept connection of a race is up
            elif target.conn is None and not target.dialing and not target.unpeered:
                self._dial(target, out)
        return out

    def _timer(self, kind: str, target: _Target) -> Timer:
        return Timer(kind, target.key, next(self._serials))

    def _cancel_timer(self, target: _Target, out: list[Action]) -> None:
        if target.timer is not None:
            out.append(CancelTimer(target.timer))
            target.timer = None

    def _resolve(self, target: _Target, ok: bool, out: list[Action]) -> None:
        if self.targets.get(target.key) is target:
            out.append(Resolve(target.key, ok))

    # -- queries ------------------------------------------------------------------------------

    def network(self, key: Key) -> NetworkInfo | None:
        """The address ``key`` with its retry interval, while it is a target."""
        target = self.targets.get(key)
        return target.network() if target is not None else None

    def targets_view(self) -> list[TargetView]:
        """Every address peered with, for ``peers()`` (linked ones included)."""
        return [
            TargetView(t.peer_id, t.network(), t.dialing or t.conn is not None)
            for t in self.targets.values()
        ]


def advertised_filter(
    own: tuple[str, ...], forwarding: bool, others: Iterable[tuple[str, ...]]
) -> tuple[str, ...]:
    """What we ask one neighbour for: our filter, plus the ``others``' filters when forwarding.

    ``others`` are the filters of every neighbour but the one asked; without
    forwarding an endpoint only ever asks for what it subscribes to itself.
    """
    if not forwarding:
        return own
    f = Filter(own)
    for prefixes in others:
        for prefix in prefixes:
            f.add(prefix)
    return tuple(f.prefixes())
