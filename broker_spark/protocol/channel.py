"""Broker's reliable ordered channel: one producer, many consumers, no I/O.

Data stores need every clone to apply the master's updates exactly once and in
order (and the master to apply a clone's writes the same way), but the network
below may lose, duplicate and reorder messages whenever the topology changes.
Broker solves this with ``broker::internal::channel``; this module is the same
state machine as plain objects: feed what arrived (``receive``), advance time in
ticks (``tick``), collect what to send (``outgoing``), what happened (``events``)
and, on the consumer, what to apply (``deliverable``).

Sequence numbers start at 1. A :class:`Handshake` tells a consumer the first
sequence number it will see (Broker's ``offset`` is ``first_seq - 1``). Consumers
acknowledge cumulatively, ask for gaps with :class:`Nack` (``Nack((0,))`` asks for
the handshake), and the producer answers from a bounded buffer, or with
:class:`RetransmitFailed` when the event is gone. Payloads and handles are opaque.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from broker_spark.errors import EC, ProtocolError

__all__ = [
    "DEFAULT_BUFFER_CAPACITY",
    "DEFAULT_CONNECTION_TIMEOUT",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_NACK_TIMEOUT",
    "DEFAULT_WINDOW",
    "MAX_NACK_SEQS",
    "TICK_MILLISECONDS",
    "Consumer",
    "ConsumerAdded",
    "ConsumerMessage",
    "ConsumerLost",
    "CumulativeAck",
    "Delivered",
    "Delivery",
    "Event",
    "Gap",
    "HandshakeCompleted",
    "Handshake",
    "Heartbeat",
    "Nack",
    "Producer",
    "ProducerLost",
    "ProducerMessage",
    "Resynced",
    "RetransmitFailed",
    "Synced",
]

H = TypeVar("H", bound=Hashable)

TICK_MILLISECONDS = 100  # Broker's channel tick; the asyncio shell calls tick() this often
DEFAULT_HEARTBEAT_INTERVAL = 5  # ticks between heartbeats (and consumer acks)
DEFAULT_NACK_TIMEOUT = 2  # ticks without progress before a consumer nacks a gap
DEFAULT_CONNECTION_TIMEOUT = 100  # ticks of silence before the other side counts as lost
DEFAULT_BUFFER_CAPACITY = 4096  # events a producer keeps for retransmission
DEFAULT_WINDOW = 1024  # how far ahead of the next expected event a consumer buffers
MAX_NACK_SEQS = 65536  # longest nack a producer serves; bounds the work one message causes
_MAX_U16 = 0xFFFF  # attach_writer carries the heartbeat interval as a u16


# -- producer -> consumer -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Handshake:
    """Starts (or restarts) a consumer at ``first_seq``; ``snapshot`` is the state before it."""

    first_seq: int
    heartbeat_interval: int
    snapshot: Any = None


@dataclass(frozen=True, slots=True)
class Event:
    """One ordered payload."""

    seq: int
    content: Any


@dataclass(frozen=True, slots=True)
class RetransmitFailed:
    """Event ``seq`` was nacked but is no longer buffered: the consumer must skip it."""

    seq: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Keeps the consumer's timer alive and reveals the latest ``seq`` (loss at the tail)."""

    seq: int


# -- consumer -> producer -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CumulativeAck:
    """Everything up to and including ``seq`` was delivered; also a keepalive."""

    seq: int


@dataclass(frozen=True, slots=True)
class Nack:
    """Asks for these events again; ``(0,)`` asks for the handshake."""

    seqs: tuple[int, ...]


ProducerMessage = Handshake | Event | RetransmitFailed | Heartbeat
ConsumerMessage = CumulativeAck | Nack


# -- what a consumer delivers, in order ----------------------------------------


@dataclass(frozen=True, slots=True)
class Synced:
    """A handshake took effect: replace state by ``snapshot``; events follow from ``first_seq``."""

    first_seq: int
    snapshot: Any
    resync: bool


@dataclass(frozen=True, slots=True)
class Delivered:
    """The next event's payload."""

    seq: int
    content: Any


@dataclass(frozen=True, slots=True)
class Gap:
    """Event ``seq`` is lost for good (the producer answered retransmit_failed)."""

    seq: int


Delivery = Synced | Delivered | Gap


# -- notifications ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerAdded:
    """The producer sent a handshake to ``handle`` (``resync``: it replaced an older one)."""

    handle: Hashable
    first_seq: int
    resync: bool


@dataclass(frozen=True, slots=True)
class HandshakeCompleted:
    """The first acknowledgement from ``handle`` arrived (Broker's ``handshake_completed``)."""

    handle: Hashable


@dataclass(frozen=True, slots=True)
class ConsumerLost:
    """The producer dropped ``handle`` (Broker's ``drop``), e.g. for ``EC.ConnectionTimeout``."""

    handle: Hashable
    reason: EC


@dataclass(frozen=True, slots=True)
class ProducerLost:
    """The consumer gave up on its producer; it is closed and ignores further input."""

    handle: Hashable
    reason: EC


@dataclass(frozen=True, slots=True)
class Resynced:
    """A newer handshake moved the consumer from ``old_next`` to ``first_seq``."""

    handle: Hashable
    old_next: int
    first_seq: int


def _positive(name: str, value: int, limit: int | None = None) -> int:
    if not isinstance(value, int) or value < 1 or (limit is not None and value > limit):
        bound = f" and at most {limit}" if limit is not None else ""
        raise ValueError(f"{name} must be an integer of at least 1{bound}, got {value!r}")
    return value


@dataclass(slots=True)
class _Path:
    """What the producer knows about one consumer."""

    first_seq: int
    acked: int
    last_seen: int
    last_ack: int
    pending: Handshake | None  # kept (with its snapshot) until the first ack, for resends


class Producer(Generic[H]):
    """The sending side: numbers payloads, fans them out, retransmits on nack.

    ``snapshot`` (optional) is called whenever a handshake is made; its result
    travels in the handshake (a master's ``ack_clone`` carries the store's
    state). Calling it right when the sequence position is fixed keeps snapshot
    and ``first_seq`` consistent, and a resent handshake carries the same one.

    ``nack 0`` from a consumer that already acknowledged its handshake means it
    lost its state: it is started afresh at the current position. A consumer
    repeats ``nack 0`` until answered, while a stale copy of its first request
    (reordered behind its acks) arrives once, so such a restart waits until the
    consumer sent no ack for ``rehandshake_grace`` ticks (default: two heartbeat
    intervals). This saves live consumers a spurious resync (a snapshot transfer).
    """

    def __init__(
        self,
        *,
        heartbeat_interval: int = DEFAULT_HEARTBEAT_INTERVAL,
        connection_timeout: int = DEFAULT_CONNECTION_TIMEOUT,
        buffer_capacity: int = DEFAULT_BUFFER_CAPACITY,
        snapshot: Callable[[], Any] | None = None,
        max_nack: int = MAX_NACK_SEQS,
        rehandshake_grace: int | None = None,
    ) -> None:
        self.heartbeat_interval = _positive("heartbeat_interval", heartbeat_interval, _MAX_U16)
        self.connection_timeout = _positive("connection_timeout", connection_timeout)
        self.buffer_capacity = _positive("buffer_capacity", buffer_capacity)
        self.max_nack = _positive("max_nack", max_nack)
        self.rehandshake_grace = (
            2 * self.heartbeat_interval
            if rehandshake_grace is None
            else _positive("rehandshake_grace", rehandshake_grace)
        )
        self._snapshot = snapshot
        self._seq = 0  # last produced sequence number
        self._buf: deque[Event] = deque()  # contiguous run of recent events
        self._paths: dict[H, _Path] = {}
        self._now = 0
        self._out: list[tuple[H, ProducerMessage]] = []
        self._events: list[ConsumerAdded | HandshakeCompleted | ConsumerLost] = []
        self.retransmits = 0
        self.retransmit_failures = 0
        self.stale_handshake_requests = 0

    @property
    def seq(self) -> int:
        """The last produced sequence number (0 before the first)."""
        return self._seq

    @property
    def consumers(self) -> tuple[H, ...]:
        return tuple(self._paths)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def acked(self, handle: H) -> int | None:
        """What ``handle`` acknowledged so far, or None if it is not a consumer."""
        path = self._paths.get(handle)
        return None if path is None else path.acked

    def add(self, handle: H) -> bool:
        """Start serving ``handle`` from the next event; False if it is already served."""
        if handle in self._paths:
            return False
        self._handshake(handle, resync=False)
        return True

    def remove(self, handle: H) -> bool:
        """Stop serving ``handle`` (no event: the caller decided it)."""
        if self._paths.pop(handle, None) is None:
            return False
        self._prune()
        return True

    def produce(self, content: Any) -> int:
        """Send ``content`` to every consumer; returns its sequence number."""
        self._seq += 1
        if not self._paths:
            return self._seq  # a later consumer starts after it, so nobody can ask for it
        event = Event(self._seq, content)
        self._buf.append(event)
        if len(self._buf) > self.buffer_capacity:
            self._buf.popleft()
        for handle in self._paths:
            self._out.append((handle, event))
        return self._seq

    def receive(self, handle: H, msg: ConsumerMessage) -> None:
        """Handle an ack or nack from ``handle``; ProtocolError if it cannot be valid."""
        if isinstance(msg, CumulativeAck):
            self._on_ack(handle, msg.seq)
        elif isinstance(msg, Nack):
            self._on_nack(handle, msg.seqs)
        else:
            raise ProtocolError(
                f"channel producer: unexpected {type(msg).__name__} from {handle!r}"
            )

    def tick(self) -> None:
        """Advance one tick: heartbeats (or pending handshakes), then timeouts."""
        self._now += 1
        if self._now % self.heartbeat_interval == 0:
            beat = Heartbeat(self._seq)
            for handle, path in self._paths.items():
                self._out.append((handle, path.pending or beat))
        lost = [
            h for h, p in self._paths.items() if self._now - p.last_seen >= self.connection_timeout
        ]
        for handle in lost:
            del self._paths[handle]
            self._events.append(ConsumerLost(handle, EC.ConnectionTimeout))
        if lost:
            self._prune()

    def idle(self) -> bool:
        """Every consumer completed its handshake and acknowledged every event."""
        return all(p.pending is None and p.acked >= self._seq for p in self._paths.values())

    def outgoing(self) -> list[tuple[H, ProducerMessage]]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[ConsumerAdded | HandshakeCompleted | ConsumerLost]:
        out, self._events = self._events, []
        return out

    def _handshake(self, handle: H, *, resync: bool) -> None:
        first = self._seq + 1
        snapshot = self._snapshot() if self._snapshot is not None else None
        hs = Handshake(first, self.heartbeat_interval, snapshot)
        self._paths[handle] = _Path(first, first - 1, self._now, self._now, hs)
        self._out.append((handle, hs))
        self._events.append(ConsumerAdded(handle, first, resync))
        self._prune()

    def _on_ack(self, handle: H, seq: int) -> None:
        path = self._paths.get(handle)
        if path is None:
            return  # not (or no longer) ours; it will time out and ask again with nack 0
        if not isinstance(seq, int) or seq < 0 or seq > self._seq:
            raise ProtocolError(
                f"channel producer: cumulative_ack {seq!r} from {handle!r} is beyond "
                f"the last produced sequence number {self._seq}"
            )
        path.last_seen = path.last_ack = self._now
        if path.pending is not None and seq >= path.first_seq - 1:
            path.pending = None
            self._events.append(HandshakeCompleted(handle))
        if seq > path.acked:
            path.acked = seq
            self._prune()

    def _on_nack(self, handle: H, seqs: tuple[int, ...]) -> None:
        if len(seqs) > self.max_nack:
            raise ProtocolError(
                f"channel producer: nack from {handle!r} lists {len(seqs)} sequence numbers, "
                f"more than {self.max_nack}"
            )
        for seq in seqs:
            if not isinstance(seq, int) or seq < 0 or seq > self._seq:
                raise ProtocolError(
                    f"channel producer: nack from {handle!r} asks for {seq!r}, "
                    f"last produced is {self._seq}"
                )
        path = self._paths.get(handle)
        if 0 in seqs:
            if path is None:
                self._handshake(handle, resync=False)
            elif path.pending is not None:
                path.last_seen = self._now
                self._out.append((handle, path.pending))  # same position, same snapshot
            elif self._now - path.last_ack < self.rehandshake_grace:
                path.last_seen = self._now
                self.stale_handshake_requests += 1  # it still acks: a late copy
            else:
                self._handshake(handle, resync=True)  # it lost its state: start it afresh
            return
        if path is None:
            return
        path.last_seen = self._now
        for seq in dict.fromkeys(seqs):
            if seq < path.first_seq:
                continue  # from before this consumer's handshake; not its business
            # Answer even what it acknowledged (a stale copy costs a resend): a
            # nack left unanswered could stall a consumer for good.
            event = self._lookup(seq)
            if event is not None:
                self.retransmits += 1
                self._out.append((handle, event))
            else:
                self.retransmit_failures += 1
                self._out.append((handle, RetransmitFailed(seq)))

    def _lookup(self, seq: int) -> Event | None:
        if not self._buf or seq < self._buf[0].seq:
            return None
        return self._buf[seq - self._buf[0].seq]  # contiguous, and seq <= self._seq

    def _prune(self) -> None:
        floor = min((p.acked for p in self._paths.values()), default=self._seq)
        while self._buf and self._buf[0].seq <= floor:
            self._buf.popleft()


class Consumer(Generic[H]):
    """The receiving side: reorders, deduplicates, nacks gaps, acks, detects silence.

    The consumer hands out :data:`Delivery` items in order through
    :meth:`deliverable`: a :class:`Synced` for each handshake that took effect
    (carrying the producer's snapshot), then :class:`Delivered` payloads and
    :class:`Gap` markers by sequence number. Acks cover only what was handed out,
    so a producer's ``idle()`` means the user really processed everything.

    ``ack_interval`` defaults to the heartbeat interval the handshake announces.
    ``window`` bounds the out-of-order buffer: events further ahead are dropped
    and nacked again later.
    """

    def __init__(
        self,
        producer_handle: H,
        *,
        nack_timeout: int = DEFAULT_NACK_TIMEOUT,
        connection_timeout: int = DEFAULT_CONNECTION_TIMEOUT,
        ack_interval: int | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.producer_handle = producer_handle
        self.nack_timeout = _positive("nack_timeout", nack_timeout)
        self.connection_timeout = _positive("connection_timeout", connection_timeout)
        self._ack_interval_fixed = (
            None if ack_interval is None else _positive("ack_interval", ack_interval)
        )
        self.ack_interval = self._ack_interval_fixed or DEFAULT_HEARTBEAT_INTERVAL
        self.window = _positive("window", window, MAX_NACK_SEQS)
        self._next = 0  # next sequence number to deliver; 0 until the first handshake
        self._last_seq = 0  # highest sequence number known to exist
        self._buf: dict[int, Event | None] = {}  # out of order; None = retransmit failed
        self._ready: deque[Delivery] = deque()
        self._delivered = 0  # highest sequence number handed out by deliverable()
        self._acked = -1  # last cumulative ack sent
        self._ack_due = False
        self._now = 0
        self._last_heard = 0
        self._stalled = 0  # ticks without progress while a gap exists
        self._since_ack = 0
        self._since_hello = 0
        self._started = False
        self._closed = False
        self._out: list[ConsumerMessage] = []
        self._events: list[ProducerLost | Resynced] = []
        self.duplicates = 0
        self.dropped_ahead = 0
        self.stale_handshakes = 0

    @property
    def initialized(self) -> bool:
        return self._next > 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def next_seq(self) -> int:
        """The next sequence number to deliver (0 before the handshake)."""
        return self._next

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def start(self) -> None:
        """Ask the producer for a handshake (``nack 0``); repeated until one arrives."""
        if not self._started and not self.initialized:
            self._started = True
            self._out.append(Nack((0,)))

    def receive(self, msg: ProducerMessage) -> None:
        """Handle one message from the producer; ProtocolError if it cannot be valid."""
        if not isinstance(msg, (Handshake, Event, RetransmitFailed, Heartbeat)):
            raise ProtocolError(f"channel consumer: unexpected {type(msg).__name__}")
        seq = msg.first_seq if isinstance(msg, Handshake) else msg.seq
        if not isinstance(seq, int) or seq < (0 if isinstance(msg, Heartbeat) else 1):
            raise ProtocolError(
                f"channel consumer: {type(msg).__name__} with sequence number {seq!r}"
            )
        if self._closed:
            return
        self._last_heard = self._now
        if isinstance(msg, Handshake):
            self._on_handshake(msg)
        elif not self.initialized:
            return  # retransmitted after the handshake, on nack
        elif isinstance(msg, Heartbeat):
            self._last_seq = max(self._last_seq, msg.seq)
        elif seq < self._next:
            self.duplicates += 1
        elif seq >= self._next + self.window:
            self.dropped_ahead += 1
            self._last_seq = max(self._last_seq, seq)
        elif isinstance(msg, Event):
            if self._buf.get(seq) is not None:
                self.duplicates += 1
                return
            self._store(seq, msg)
        elif seq not in self._buf:
            self._store(seq, None)  # RetransmitFailed; a real event would win

    def tick(self) -> None:
        """Advance one tick: producer timeout, nack of gaps, periodic ack."""
        if self._closed:
            return
        self._now += 1
        if self._now - self._last_heard >= self.connection_timeout:
            self._closed = True
            self._events.append(ProducerLost(self.producer_handle, EC.ConnectionTimeout))
            return
        if not self.initialized:
            if self._started:
                self._since_hello += 1
                if self._since_hello >= self.nack_timeout:
                    self._since_hello = 0
                    self._out.append(Nack((0,)))
            return
        missing = self.missing()
        if missing:
            self._stalled += 1
            if self._stalled >= self.nack_timeout:
                self._stalled = 0
                self._out.append(Nack(missing))
        else:
            self._stalled = 0
        self._since_ack += 1
        if self._ack_due or self._since_ack >= self.ack_interval:
            self._ack_due = False
            self._since_ack = 0
            self._acked = self._delivered
            self._out.append(CumulativeAck(self._delivered))

    def missing(self) -> tuple[int, ...]:
        """Sequence numbers known to exist but not received, at most ``window`` of them."""
        if not self.initialized:
            return ()
        top = min(max(self._last_seq, max(self._buf, default=0)), self._next + self.window - 1)
        return tuple(s for s in range(self._next, top + 1) if s not in self._buf)

    def deliverable(self) -> list[Delivery]:
        """Drain what is ready, in order; acks will cover it from now on."""
        out = list(self._ready)
        self._ready.clear()
        for item in out:
            if isinstance(item, Synced):
                self._delivered = item.first_seq - 1
                self._ack_due = True
            else:
                self._delivered = item.seq
        return out

    def idle(self) -> bool:
        """Synced, nothing missing or buffered, everything handed out and acknowledged."""
        return (
            self.initialized
            and not self._closed
            and not self._buf
            and not self._ready
            and self._last_seq < self._next
            and self._acked == self._next - 1
        )

    def outgoing(self) -> list[ConsumerMessage]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[ProducerLost | Resynced]:
        out, self._events = self._events, []
        return out

    def _on_handshake(self, hs: Handshake) -> None:
        if not isinstance(hs.heartbeat_interval, int) or not 0 <= hs.heartbeat_interval <= _MAX_U16:
            raise ProtocolError(f"channel consumer: heartbeat interval {hs.heartbeat_interval!r}")
        resync = self.initialized
        if resync:
            if hs.first_seq <= self._next:
                self.stale_handshakes += 1  # a late copy, or nothing we lack: keep going
                return
            self._events.append(Resynced(self.producer_handle, self._next, hs.first_seq))
            self._buf = {s: e for s, e in self._buf.items() if s >= hs.first_seq}
        self._next = hs.first_seq
        self._last_seq = max(self._last_seq, hs.first_seq - 1)
        self.ack_interval = self._ack_interval_fixed or hs.heartbeat_interval or self.ack_interval
        self._stalled = 0
        self._ready.append(Synced(hs.first_seq, hs.snapshot, resync))
        self._advance()

    def _store(self, seq: int, event: Event | None) -> None:
        self._buf[seq] = event
        self._last_seq = max(self._last_seq, seq)
        self._advance()

    def _advance(self) -> None:
        while self._next in self._buf:
            event = self._buf.pop(self._next)
            self._ready.append(
                Gap(self._next) if event is None else Delivered(self._next, event.content)
            )
            self._next += 1
            self._stalled = 0
