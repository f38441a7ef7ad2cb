"""One peer connection (TCP, or TLS over TCP): the socket's shell around a sans-I/O session.

A :class:`PeerConnection` is the asyncio protocol of one socket. What arrives
goes to its :class:`~broker_spark.protocol.peer_session.PeerSession`, which
decides everything about the connection (the first byte, framing, the
handshake and its deadline, the link's health) and answers with events; this
shell carries them out: it writes what the session wants sent, starts the
:class:`~broker_spark.core.tcp_link.TcpLink` once peered and hands it what the
session read, and closes and reports when the session says so.

Why an ``asyncio`` protocol and not streams: received bytes arrive with no task
switch, and the frames of one batch (a routing pass of the core, or what one
read forwards) leave in one ``transport.write`` at its end (``Core.defer``). It is a ``BufferedProtocol`` so reads land in one buffer
per connection (see :meth:`PeerConnection.get_buffer`). Flow control uses the
transport's own signals: ``pause_writing``/``resume_writing`` bound what we
buffer for a slow peer, and ``pause_reading`` stops reading while the core's
inbound queue for this peer is full, so TCP's window pushes back on the sender.

What a connection does with bad input: anything the handshake rejects, a frame
above the size limit, TLS bytes on a plain endpoint, a handshake that misses
its deadline, or a peer that goes silent closes this connection only, with an
``Error`` status naming the reason; the endpoint's other peers never notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, Literal, Protocol

from broker_spark.config import BrokerOptions
from broker_spark.core.queues import UNBOUNDED_ROOM
from broker_spark.core.tcp_link import LinkHost, TcpLink
from broker_spark.errors import EC, SC, ShutdownError
from broker_spark.protocol.link_writer import LinkWriter
from broker_spark.protocol.peer_session import (
    Failed,
    Peered,
    PeerSession,
    Received,
    Redundant,
    Stalled,
)
from broker_spark.status import NetworkInfo, PeerFlags

__all__ = ["ConnectionHost", "PeerConnection"]

#: Bytes the transport may buffer before it asks us to stop writing.
WRITE_HIGH_WATER = 1 << 20

#: Seconds a closing connection may take to flush before it is aborted.
CLOSE_GRACE = 1.0

#: Bytes read from the socket (or TLS) at a time, into the connection's own buffer.
READ_BUFFER_SIZE = 256 * 1024


class ConnectionHost(LinkHost, Protocol):
    """What a connection needs of the endpoint's peering, which owns it.

    Declared on the connection's side so the connection never imports its
    owner: settings it reads, the core's I/O batching, and the events it
    reports back up (the peering decides what they mean).
    """

    loop: asyncio.AbstractEventLoop
    options: BrokerOptions
    closed: bool
    versions: tuple[int, ...]
    handshake_timeout: float
    max_frame_size: int
    ping_interval: float
    liveness_timeout: float
    stall_timeout: float

    def advertised_filter(self, link: Any) -> tuple[str, ...]: ...

    def connection_made(self, conn: PeerConnection) -> bool: ...

    def connection_closing(self, conn: PeerConnection) -> None: ...

    def connection_lost(self, conn: PeerConnection) -> None: ...

    def connection_failed(
        self, conn: PeerConnection, code: EC, message: str, peer_id: bytes | None
    ) -> None: ...

    def claim(self, peer_id: bytes, conn: PeerConnection) -> bool: ...

    def redundant(self, conn: PeerConnection, peer_id: bytes | None) -> None: ...

    def join(self, link: TcpLink) -> bool: ...

    def room_freed(self, conn: PeerConnection) -> None: ...


class PeerConnection(asyncio.BufferedProtocol):
    """The protocol of one peer socket, from connect/accept to close."""

    def __init__(
        self,
        peering: ConnectionHost,
        role: Literal["connector", "acceptor"],
        network: NetworkInfo,
        *,
        key: tuple[str, int] | None = None,
        tls: bool = False,
    ) -> None:
        self.peering = peering
        self.loop = peering.loop
        self.role = role
        self.network = network
        #: The address this connection was dialled for (None when accepted).
        self.key = key
        self.tls = tls
        self.transport: Any = None
        #: The protocol state (made when the socket connects).
        self.session: PeerSession | None = None
        #: The session's envelope reader (the link teaches it headers).
        self.decoder: Any = None
        self.link: TcpLink | None = None
        #: No more input is handled once true (closing, or closed).
        self.closing = False
        self.lost = False
        self._timer: asyncio.TimerHandle | None = None
        # The write side: the session's writer holds the frames; this only says when.
        self._flush_pending = False
        self._paused = False
        self._paused_at = 0.0
        self._room_wanted = False
        self._reading_paused = False
        # The read side: asyncio reads into this buffer (see get_buffer).
        self._rview = memoryview(bytearray(READ_BUFFER_SIZE))

    def __repr__(self) -> str:
        return f"PeerConnection({self.role}, {self.network!r}, link={self.link!r})"

    # -- asyncio callbacks -----------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peering = self.peering
        if not peering.connection_made(self):
            self.abort()
            return
        now = self.loop.time()
        session = self.session = PeerSession(
            peering.node_id,
            peering.advertised_filter(None),
            self.role,
            peering.versions,
            now,
            max_frame_size=peering.max_frame_size,
            handshake_timeout=peering.handshake_timeout,
            is_redundant=self._is_redundant,
            tls=self.tls,
            send_capacity=peering.options.peer_buffer_size,
            overflow_policy=peering.options.peer_overflow_policy,
        )
        self.decoder = session.reader
        self._write_now(session.data_to_send())
        self._timer = self.loop.call_at(now + peering.handshake_timeout, self._on_deadline)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where asyncio reads to: one buffer per connection, reused for every read.

        Reading into our own buffer spares a fresh 256 KiB object per read,
        which matters most under TLS, where asyncio's copying path allocates
        one per TLS record (16 KiB), and the allocator returns the memory to
        the system and faults it back in every time. It must be a memoryview:
        asyncio's TLS layer fills the rest of a buffer through a slice of it.
        """
        return self._rview

    def buffer_updated(self, nbytes: int) -> None:
        # What the bytes queue for the core is routed, and what that writes is
        # flushed, before this callback returns (see Core.begin_io).
        core = self.peering.core
        core.begin_io()
        try:
            self.data_received(self._rview[:nbytes].tobytes())
        finally:
            core.end_io()

    def data_received(self, data: bytes) -> None:
        session = self.session
        if self.closing or session is None:
            link = self.link
            if link is not None and link.closed and session is not None:
                # Unpeered: wait for the goodbye pong only.
                link.receive_after_close(session.receive_after_close(data))
            return
        handshaking = not session.peered
        events = session.receive_data(data, self.loop.time())
        if handshaking:  # the handshake's frames; once peered, writes wait for _flush
            self._write_now(session.data_to_send())
        for event in events:
            if type(event) is Received:
                link = self.link
                if link is not None:
                    link.receive(event.items, event.raw)
            elif type(event) is Peered:
                self._handshake_done(event)
            else:
                self._on_end(event)
            if self.closing:
                return

    def _on_end(self, event: Failed | Redundant | Stalled) -> None:
        """What the session says ends (or, for a stall, troubles) the connection."""
        if type(event) is Redundant:
            self._cancel_timer()
            self.peering.redundant(self, event.peer_id)
            self.close()
        elif type(event) is Failed:
            self._cancel_timer()
            self.fail(event.code, event.message)
        elif type(event) is Stalled:  # the session set its writer dropping
            self._report(EC.PeerTimeout, event.message)
            if self._room_wanted:
                self._room_wanted = False
                self.peering.core.wake()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.closing = True
        self._cancel_timer()
        try:
            self._report_loss(exc)
        finally:
            # Last: until now the peering still knows which address this connection
            # was dialled for, so a loss during the handshake counts as that attempt.
            self.peering.connection_lost(self)

    def _report_loss(self, exc: Exception | None) -> None:
        link = self.link
        session = self.session
        if session is not None:
            session.end()
        if link is None:
            failed = None if session is None else session.lost_during_handshake(str(exc or ""))
            if failed is not None:
                self._report(failed.code, failed.message)
            return
        if link.closed:
            return
        if session is not None and session.pending and not link.bye_received:
            self._report(
                EC.InvalidMessage,
                f"connection closed in the middle of a frame ({session.pending} bytes pending)",
            )
        self.peering.link_lost(link, SC.PeerRemoved if link.bye_received else SC.PeerLost)

    def pause_writing(self) -> None:
        self._paused = True
        self._paused_at = self.loop.time()

    def resume_writing(self) -> None:
        self._paused = False
        writer = self.writer
        if writer is not None:
            writer.peer_reads_again()
        self._flush()

    # -- the handshake ------------------------------------------------------------

    def _is_redundant(self, peer_id: bytes) -> bool:
        return not self.peering.claim(peer_id, self)

    def _on_deadline(self) -> None:
        self._timer = None
        session = self.session
        if session is None or session.deadline is None or self.closing:
            return
        events = session.tick(self.loop.time())
        self._write_now(session.data_to_send())
        for event in events:
            self._on_end(event)  # type: ignore[arg-type]
        if not events and session.deadline is not None:  # the timer fired a hair early
            self._timer = self.loop.call_later(0.01, self._on_deadline)

    def _handshake_done(self, peered: Peered) -> None:
        self._cancel_timer()
        peering = self.peering
        flags = PeerFlags.Remote | (
            PeerFlags.Outbound if self.role == "connector" else PeerFlags.Inbound
        )
        try:
            link = TcpLink(peering, self, peered.peer_id, peered.version, self.network, flags)
        except ShutdownError:
            self.abort()
            return
        link.prefixes = peered.peer_filter
        link.sent_filter = peered.own_filter
        self.link = link
        if not peering.join(link):
            # Already peered over another connection (a race the originator missed).
            self.link = None
            link.closed = True
            link.source.close()
            peering.redundant(self, peered.peer_id)
            self.close()

    # -- writing --------------------------------------------------------------------

    def _write_now(self, data: bytes) -> None:
        """What the session wants sent during the handshake: written at once."""
        if data and self.transport is not None and not self.lost:
            self.transport.write(data)

    @property
    def writer(self) -> LinkWriter | None:
        """The session's sending half (None before the handshake is done)."""
        return self.session.writer if self.session is not None else None

    @property
    def dropped(self) -> int:
        """Messages the overflow policy dropped on this connection."""
        writer = self.writer
        return writer.dropped if writer is not None else 0

    def room(self) -> int:
        """How many more messages the core may hand us (the bounded send buffer)."""
        writer = self.writer
        if writer is None or writer.dropping or self.closing:
            return UNBOUNDED_ROOM
        return writer.room()

    def want_room(self) -> None:
        self._room_wanted = True

    def flush_soon(self) -> None:
        """The writer holds new frames: they leave together, in one write, at the end of
        this loop iteration (unless the transport stopped taking writes)."""
        if not self._flush_pending and not self._paused and not self.closing:
            self._flush_pending = True
            self.peering.core.defer(self._flush)

    def flush_now(self) -> None:
        """The writer holds a frame that must leave even while closing (the goodbye)."""
        if self.transport is not None and not self.lost:
            self._flush(force=True)

    def _flush(self, force: bool = False) -> None:
        self._flush_pending = False
        if (self._paused and not force) or self.lost or self.transport is None:
            return
        session = self.session
        out = session.data_to_send() if session is not None else b""
        if out:
            self.transport.write(out)
        writer = self.writer
        if writer is not None and not self._paused:
            writer.peer_reads_again()  # everything was written: nothing waits
        if self._room_wanted and not self._paused:
            self._room_wanted = False
            self.peering.core.wake()
        self.peering.room_freed(self)

    # -- reading back-pressure -----------------------------------------------------

    def pause_reading(self) -> None:
        if not self._reading_paused and not self.lost and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and not self.lost and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()

    # -- periodic checks (called by the peering) --------------------------------------

    def tick(self, now: float) -> None:
        """The periodic health check (decided by the session), carried out."""
        session = self.session
        if self.link is None or self.closing or session is None:
            return
        peering = self.peering
        events = session.check_health(
            now,
            ping_interval=peering.ping_interval,
            liveness_timeout=peering.liveness_timeout,
            stall_timeout=peering.stall_timeout,
            policy=peering.options.peer_overflow_policy,
            paused=self._paused,
            paused_at=self._paused_at,
        )
        self.flush_soon()  # a keep-alive, if one was due: behind what is queued
        for event in events:
            self._on_end(event)  # type: ignore[arg-type]

    # -- closing ----------------------------------------------------------------------

    def _report(self, code: EC, message: str) -> None:
        """Tell status subscribers (and a waiting ``peer()``) why this connection failed."""
        session = self.session
        peer_id = (
            self.link.peer_id if self.link else (session.handshake.peer_id if session else None)
        )
        self.peering.connection_failed(self, code, message, peer_id)

    def fail(self, code: EC, message: str) -> None:
        """Close because of ``message``; report it; a peered link counts as lost."""
        if self.closing:
            return
        self._report(code, message)
        link = self.link
        self.close()
        if link is not None and not link.closed:
            self.peering.link_lost(link, SC.PeerLost)

    def close(self) -> None:
        """Close after flushing what is queued (aborted if that takes too long)."""
        if self.lost:
            return
        self._begin_closing()
        self._cancel_timer()
        if self.transport is not None:
            self._flush(force=True)
            self.transport.close()
            self._timer = self.loop.call_later(CLOSE_GRACE, self.abort)

    def abort(self) -> None:
        """Close at once, dropping whatever is unsent."""
        self._begin_closing()
        self._cancel_timer()
        if self.transport is not None and not self.lost:
            self.transport.abort()

    def begin_goodbye(self, timeout: float) -> None:
        """Our goodbye ping is out: read nothing but its pong, and close after ``timeout``."""
        self._begin_closing()
        self.set_timer(timeout, self.close)

    def _begin_closing(self) -> None:
        if not self.closing:
            self.closing = True
            writer = self.writer
            if writer is not None:
                writer.close()
            self.peering.connection_closing(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def set_timer(self, delay: float, callback: Any) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(delay, callback)
