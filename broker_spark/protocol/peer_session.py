"""One Broker peer connection as a state machine: bytes in, events and bytes out.

The shape of h11's ``Connection`` and websockets' ``Protocol``: whoever owns the
socket (:class:`broker_spark.core.connection.PeerConnection` on asyncio, a test,
a fuzzer) feeds :meth:`PeerSession.receive_data` what it read with the time,
acts on the events it gets back, writes :meth:`PeerSession.data_to_send`, and
calls :meth:`PeerSession.tick` at :attr:`PeerSession.deadline` and on its
periodic health check. Everything that *decides* about one connection is here:

* the first byte: TLS on an endpoint without it is refused at once, with the
  reason (``disable_ssl`` differs between the two sides);
* framing (a frame above ``max_frame_size`` or a malformed length ends it);
* the handshake (:class:`~broker_spark.protocol.handshake.Handshake`), its
  deadline, and what its failure means (a redundant connection is not an error);
* once peered, envelopes read back into the core's message tuples
  (:class:`~broker_spark.protocol.envelope_reader.EnvelopeReader`), and the
  link's health: keep-alive pings, liveness, a stalled reader
  (:func:`~broker_spark.protocol.link_health.check_link`).

Once peered, every frame the connection sends comes from the session's
:class:`~broker_spark.protocol.link_writer.LinkWriter` (:attr:`PeerSession.writer`):
data and commands, routed copies, routing updates, pings, pongs, the goodbye, and
the keep-alives; it also holds the bounded send buffer and its overflow policy.
What the messages *mean* (routing, control messages, the goodbye) is the link's
(:mod:`broker_spark.core.tcp_link`), which says what to send; when to write is the
shell's, since it follows the transport's own flow control.

Bad input never raises: it ends in one :class:`Failed` event naming the reason,
after which the session takes nothing more (a fuzzer's invariant).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from broker_spark.errors import EC, DecodeError
from broker_spark.protocol.envelope_reader import EnvelopeReader
from broker_spark.protocol.handshake import Handshake
from broker_spark.protocol.link_health import HEALTHY, check_link
from broker_spark.protocol.link_writer import LinkWriter

__all__ = [
    "KEEPALIVE",
    "Failed",
    "Peered",
    "PeerSession",
    "Received",
    "Redundant",
    "Stalled",
]

#: Payload of our keep-alive pings: anything that is not a goodbye token.
KEEPALIVE = b"ALIVE"

#: The first byte of a TLS record (a ClientHello): what a TLS endpoint sends first.
_TLS_RECORD = b"\x16"

_HANDSHAKE_FAILURES = (EC.PeerIncompatible, EC.PeerTimeout, EC.PeerInvalid)


@dataclass(frozen=True, slots=True)
class Peered:
    """The handshake is done: the link may start (``peer_filter`` is the peer's filter,
    ``own_filter`` the one we advertised in the handshake)."""

    peer_id: bytes
    version: int
    peer_filter: tuple[str, ...]
    own_filter: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Received:
    """Frames from a peered session: message tuples for envelopes whose header the reader
    knew, ``bytes`` bodies for the ``raw`` others (see ``EnvelopeReader.feed_messages``)."""

    items: list
    raw: int


@dataclass(frozen=True, slots=True)
class Failed:
    """The connection must close: ``code`` and ``message`` say why (reported as an error)."""

    code: EC
    message: str


@dataclass(frozen=True, slots=True)
class Redundant:
    """The peer is reached over another connection already: close this one quietly."""

    peer_id: bytes | None


@dataclass(frozen=True, slots=True)
class Stalled:
    """The peer left our full send buffer unread too long; its overflow policy drops
    messages from now on, and this is reported (the connection stays)."""

    message: str


Event = Peered | Received | Failed | Redundant | Stalled


class PeerSession:
    """The protocol state of one peer connection, from its first byte to its end."""

    def __init__(
        self,
        node_id: bytes,
        own_filter: Iterable[str],
        role: Literal["connector", "acceptor"],
        versions: tuple[int, int],
        now: float,
        *,
        max_frame_size: int,
        handshake_timeout: float,
        is_redundant: Callable[[bytes], bool] | None = None,
        tls: bool = False,
        send_capacity: int = 1 << 16,
        overflow_policy: str = "disconnect",
    ) -> None:
        self.reader = EnvelopeReader(max_frame_size)
        self.handshake = Handshake(
            node_id,
            own_filter,
            role,
            versions,
            now,
            timeout=handshake_timeout,
            is_redundant=is_redundant,
        )
        self.node_id = node_id
        self.peer_id: bytes | None = None
        #: Peered, past the handshake.
        self.peered = False
        #: Ended (failed, redundant, or told so): nothing more is taken.
        self.ended = False
        #: Ended for a reason of its own (a Failed or Redundant event said why).
        self.failed = False
        self.last_rx = now
        self.last_ping = now
        self._sniff = not tls  # a plain endpoint checks the first byte for a TLS record
        self._capacity = send_capacity
        self._policy = overflow_policy
        #: The sending half once peered (None before): every frame the link sends.
        self.writer: LinkWriter | None = None
        self.handshake.start()
        self._out: list[bytes] = [self.handshake.data_to_send()]

    # -- the shell's side --------------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """When :meth:`tick` must run next for the handshake (None once it is over)."""
        hs = self.handshake
        return None if self.peered or self.ended or hs.done else hs.deadline

    @property
    def pending(self) -> int:
        """Bytes of a frame begun but not complete (a loss mid-frame is reported)."""
        return self.reader.pending

    def data_to_send(self) -> bytes:
        """What the session wants written, in order: the handshake's frames, then, once
        peered, what the :attr:`writer` holds (the shell writes it when the transport
        takes writes)."""
        out, self._out = self._out, []
        writer = self.writer
        if writer is not None:
            out.append(writer.data_to_send())
        return b"".join(out)

    def end(self) -> None:
        """The shell closes the connection: take nothing more, queue nothing more to send
        (but the goodbye and its answers: :meth:`LinkWriter.urgent`)."""
        self.ended = True
        if self.writer is not None:
            self.writer.closed = True

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """What the socket read, at ``now``; the events it leads to, in order."""
        if self.ended:
            return []
        self.last_rx = now
        if self._sniff:
            self._sniff = False
            if data[:1] == _TLS_RECORD:
                return self._fail(
                    EC.PeerIncompatible,
                    "the peer started a TLS handshake but this endpoint has SSL disabled "
                    "(disable_ssl differs between the two endpoints)",
                )
        if self.peered:
            # Peered: frames with known envelope headers come back as messages already.
            try:
                items, raw = self.reader.feed_messages(data)
            except DecodeError as exc:
                return self._fail(EC.InvalidMessage, f"invalid frame during the connection: {exc}")
            return [Received(items, raw)] if items else []
        try:
            bodies = self.reader.feed(data)
        except DecodeError as exc:
            return self._fail(EC.PeerInvalid, f"invalid frame during the handshake: {exc}")
        if not bodies:
            return []
        hs = self.handshake
        i, n = 0, len(bodies)
        while i < n and not hs.done:
            hs.receive(bodies[i])
            self._out.append(hs.data_to_send())
            i += 1
            if hs.failed:
                return self._handshake_failed()
        if not hs.done:
            return []
        events: list[Event] = [self._peered(now)]
        if i < n:
            rest = bodies[i:]
            events.append(Received(rest, len(rest)))
        return events

    def receive_after_close(self, data: bytes) -> list[bytes]:
        """After our goodbye (the link closed, the connection not yet): the frames that
        still arrive, for the link to find the goodbye's pong among; garbage is ignored."""
        try:
            return self.reader.feed(data)
        except DecodeError:
            return []

    def tick(self, now: float) -> list[Event]:
        """The handshake's deadline (see :attr:`deadline`)."""
        hs = self.handshake
        if self.peered or self.ended or hs.done or hs.failed:
            return []
        hs.tick(now)
        self._out.append(hs.data_to_send())
        return self._handshake_failed() if hs.failed else []

    def check_health(
        self,
        now: float,
        *,
        ping_interval: float,
        liveness_timeout: float,
        stall_timeout: float,
        policy: str,
        paused: bool = False,
        paused_at: float = 0.0,
        queued: int | None = None,
        capacity: int | None = None,
    ) -> list[Event]:
        """The periodic health check of a peered session; the transport's state comes from
        the shell (``paused``: it stopped taking our writes at ``paused_at``), how many
        messages wait from the :attr:`writer` (``queued`` and ``capacity`` override it). A
        keep-alive is queued behind what waits; a stalled reader under a drop policy sets
        the writer dropping."""
        if not self.peered or self.ended:
            return []
        writer = self.writer
        assert writer is not None
        verdict = check_link(
            now,
            last_rx=self.last_rx,
            last_ping=self.last_ping,
            ping_interval=ping_interval,
            liveness_timeout=liveness_timeout,
            paused=paused,
            dropping=writer.dropping,
            queued=writer.queued if queued is None else queued,
            capacity=writer.capacity if capacity is None else capacity,
            paused_at=paused_at,
            stall_timeout=stall_timeout,
            policy=policy,
        )
        if verdict is HEALTHY:
            return []
        if verdict.lost is not None:
            return self._fail(EC.PeerTimeout, verdict.lost)
        if verdict.ping:
            self.last_ping = now
            writer.ping(KEEPALIVE)
        if verdict.disconnect is not None:
            return self._fail(EC.PeerTimeout, verdict.disconnect)
        if verdict.drop is not None:
            writer.dropping = True
            return [Stalled(verdict.drop)]
        return []

    def lost_during_handshake(self, reason: str = "") -> Failed | None:
        """The connection closed before the handshake ended: why, for the report (None when
        the handshake was over, or had failed and said so already)."""
        hs = self.handshake
        if self.peered or self.failed or hs.done or hs.failed:
            return None
        what = "closed the connection"
        if self.reader.pending:
            what += f" in the middle of a frame ({self.reader.pending} bytes pending)"
        detail = f": {reason}" if reason else ""
        return Failed(
            EC.PeerDisconnectDuringHandshake, f"the peer {what} during the handshake{detail}"
        )

    # -- inside ---------------------------------------------------------------------------

    def _peered(self, now: float) -> Peered:
        hs = self.handshake
        assert hs.peer_id is not None and hs.version is not None
        self.peered = True
        self.last_ping = now
        self.peer_id = hs.peer_id
        self.writer = LinkWriter(self.node_id, hs.peer_id, self._capacity, self._policy)
        return Peered(hs.peer_id, hs.version, tuple(hs.peer_filter or ()), hs.own_filter)

    def _handshake_failed(self) -> list[Event]:
        hs = self.handshake
        code = hs.error_code or EC.Unspecified
        if code is EC.RedundantConnection:
            self.ended = self.failed = True
            return [Redundant(hs.peer_id)]
        message = hs.error_message or code.snake_name
        if code not in _HANDSHAKE_FAILURES:
            message, code = f"{message} ({code.snake_name})", EC.PeerInvalid
        return self._fail(code, f"handshake failed: {message}")

    def _fail(self, code: EC, message: str) -> list[Event]:
        self.ended = self.failed = True
        return [Failed(code, message)]
