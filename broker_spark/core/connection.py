"""One peer connection (TCP, or TLS over TCP): framing, the handshake, then its link.

A :class:`PeerConnection` is the asyncio protocol of one socket. It cuts the
received bytes into frames (:class:`~broker_spark.protocol.framing.FrameDecoder`),
runs the sans-I/O :class:`~broker_spark.protocol.handshake.Handshake` on them
until both sides are peered, then hands every later frame to its
:class:`~broker_spark.core.tcp_link.TcpLink`, which speaks to the core.

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
from broker_spark.errors import EC, SC, DecodeError, ShutdownError
from broker_spark.protocol.envelope_reader import EnvelopeReader
from broker_spark.protocol.handshake import Handshake
from broker_spark.protocol.link_health import HEALTHY, check_link
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
        self.decoder = EnvelopeReader(peering.max_frame_size)
        self.handshake: Handshake | None = None
        self.link: TcpLink | None = None
        #: No more input is handled once true (closing, or closed).
        self.closing = False
        self.lost = False
        self.last_rx = 0.0
        self.last_ping = 0.0
        self._sniff = not tls  # a plain endpoint checks the first byte for a TLS record
        self._timer: asyncio.TimerHandle | None = None
        # The write side: complete frames waiting for this iteration's flush.
        self._out: list[bytes] = []  # byte chunks forming whole frames
        self._out_msgs = 0  # messages among them (what the send buffer bound counts)
        self._capacity = peering.options.peer_buffer_size
        self._flush_pending = False
        self._paused = False
        self._paused_at = 0.0
        self._dropping = False
        self.dropped = 0
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
        self.last_rx = now
        hs = self.handshake = Handshake(
            peering.node_id,
            peering.advertised_filter(None),
            self.role,
            peering.versions,
            now,
            timeout=peering.handshake_timeout,
            is_redundant=self._is_redundant,
        )
        self._write_now(hs.start())
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
        if self.closing:
            link = self.link
            if link is not None and link.closed:
                # Unpeered: wait for the goodbye pong only.
                with contextlib.suppress(DecodeError):
                    link.receive_after_close(self.decoder.feed(data))
            return
        self.last_rx = self.loop.time()
        if self._sniff:
            self._sniff = False
            if data[:1] == b"\x16":
                self.fail(
                    EC.PeerIncompatible,
                    "the peer started a TLS handshake but this endpoint has SSL disabled "
                    "(disable_ssl differs between the two endpoints)",
                )
                return
        link = self.link
        if link is not None:
            # Peered: frames with known envelope headers come back as messages already.
            try:
                items, raw = self.decoder.feed_messages(data)
            except DecodeError as exc:
                self.fail(EC.InvalidMessage, f"invalid frame during the connection: {exc}")
                return
            if items:
                link.receive(items, raw)
            return
        try:
            bodies = self.decoder.feed(data)
        except DecodeError as exc:
            self.fail(EC.PeerInvalid, f"invalid frame during the handshake: {exc}")
            return
        if not bodies:
            return
        hs = self.handshake
        assert hs is not None
        i, n = 0, len(bodies)
        while i < n and not hs.done:
            out = hs.receive(bodies[i])
            i += 1
            if out:
                self._write_now(out)
            if hs.failed:
                self._handshake_failed()
                return
        if not hs.done:
            return
        self._handshake_done()
        link = self.link
        if link is None or i == n:
            return
        bodies = bodies[i:]
        link.receive(bodies, len(bodies))

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
        if link is None:
            hs = self.handshake
            if hs is not None and not hs.failed and not hs.done:
                what = "closed the connection"
                if self.decoder.pending:
                    what += f" in the middle of a frame ({self.decoder.pending} bytes pending)"
                detail = f": {exc}" if exc else ""
                self._report(
                    EC.PeerDisconnectDuringHandshake,
                    f"the peer {what} during the handshake{detail}",
                )
            return
        if link.closed:
            return
        if self.decoder.pending and not link.bye_received:
            self._report(
                EC.InvalidMessage,
                f"connection closed in the middle of a frame ({self.decoder.pending} bytes pending)",
            )
        self.peering.link_lost(link, SC.PeerRemoved if link.bye_received else SC.PeerLost)

    def pause_writing(self) -> None:
        self._paused = True
        self._paused_at = self.loop.time()

    def resume_writing(self) -> None:
        self._paused = False
        if self._dropping and self._out_msgs <= self._capacity // 2:
            self._dropping = False
        self._flush()

    # -- the handshake ------------------------------------------------------------

    def _is_redundant(self, peer_id: bytes) -> bool:
        return not self.peering.claim(peer_id, self)

    def _on_deadline(self) -> None:
        self._timer = None
        hs = self.handshake
        if hs is None or hs.done or hs.failed or self.closing:
            return
        self._write_now(hs.tick(self.loop.time()))
        if hs.failed:
            self._handshake_failed()
        else:  # the timer fired a hair early
            self._timer = self.loop.call_later(0.01, self._on_deadline)

    def _handshake_failed(self) -> None:
        hs = self.handshake
        assert hs is not None
        self._cancel_timer()
        code = hs.error_code or EC.Unspecified
        if code is EC.RedundantConnection:
            self.peering.redundant(self, hs.peer_id)
            self.close()
            return
        if code in (EC.PeerIncompatible, EC.PeerTimeout, EC.PeerInvalid):
            reported = code
        else:
            reported = EC.PeerInvalid
        message = hs.error_message or code.snake_name
        if reported is not code:
            message = f"{message} ({code.snake_name})"
        self.fail(reported, f"handshake failed: {message}")

    def _handshake_done(self) -> None:
        hs = self.handshake
        assert hs is not None and hs.peer_id is not None and hs.version is not None
        self._cancel_timer()
        peering = self.peering
        flags = PeerFlags.Remote | (
            PeerFlags.Outbound if self.role == "connector" else PeerFlags.Inbound
        )
        try:
            link = TcpLink(peering, self, hs.peer_id, hs.version, self.network, flags)
        except ShutdownError:
            self.abort()
            return
        link.prefixes = tuple(hs.peer_filter or ())
        link.sent_filter = hs.own_filter
        self.link = link
        if not peering.join(link):
            # Already peered over another connection (a race the originator missed).
            self.link = None
            link.closed = True
            link.source.close()
            peering.redundant(self, hs.peer_id)
            self.close()
            return
        self.last_rx = self.last_ping = self.loop.time()

    # -- writing --------------------------------------------------------------------

    def _write_now(self, frames: list[bytes]) -> None:
        """Handshake frames: written at once, in order."""
        if frames and self.transport is not None and not self.lost:
            self.transport.write(b"".join(frames))

    def room(self) -> int:
        """How many more messages the core may hand us (the bounded send buffer)."""
        if self._dropping or self.closing:
            return UNBOUNDED_ROOM
        return self._capacity - self._out_msgs

    def want_room(self) -> None:
        self._room_wanted = True

    def send(self, parts: list[bytes], count: int = 1) -> None:
        """Queue ``count`` messages made of the byte chunks ``parts`` (whole frames).

        They leave together, in one write, at the end of this loop iteration.
        """
        if self.closing:
            return
        if self._dropping and self._out_msgs + count > self._capacity:
            if self.peering.options.peer_overflow_policy == "drop_newest":
                self.dropped += count
                return
            self._drop_oldest(self._out_msgs + count - self._capacity)
        self._out.extend(parts)
        self._out_msgs += count
        if not self._flush_pending and not self._paused:
            self._flush_pending = True
            self.peering.core.defer(self._flush)

    def _drop_oldest(self, n: int) -> None:
        """Discard the ``n`` oldest queued frames (the buffer is cut at frame lengths)."""
        buf = b"".join(self._out)
        pos = 0
        for _ in range(min(n, self._out_msgs)):
            pos += 4 + int.from_bytes(buf[pos : pos + 4], "big")
        dropped = min(n, self._out_msgs)
        self._out = [buf[pos:]]
        self._out_msgs -= dropped
        self.dropped += dropped

    def send_now(self, frame: bytes) -> None:
        """A control frame (goodbye, pong) that must leave even while closing."""
        if self.transport is not None and not self.lost:
            self._out.append(frame)
            self._out_msgs += 1
            self._flush(force=True)

    def _flush(self, force: bool = False) -> None:
        self._flush_pending = False
        if (self._paused and not force) or self.lost or self.transport is None:
            return
        out = self._out
        if out:
            self._out = []
            self._out_msgs = 0
            self.transport.write(b"".join(out))
        if self._dropping and not self._paused:
            # The peer reads again and took everything: back to back-pressure.
            self._dropping = False
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
        """The periodic health check (decided by ``protocol.link_health``), carried out."""
        link = self.link
        if link is None or self.closing:
            return
        peering = self.peering
        verdict = check_link(
            now,
            last_rx=self.last_rx,
            last_ping=self.last_ping,
            ping_interval=peering.ping_interval,
            liveness_timeout=peering.liveness_timeout,
            paused=self._paused,
            dropping=self._dropping,
            queued=self._out_msgs,
            capacity=self._capacity,
            paused_at=self._paused_at,
            stall_timeout=peering.stall_timeout,
            policy=peering.options.peer_overflow_policy,
        )
        if verdict is HEALTHY:
            return
        if verdict.lost is not None:
            self.fail(EC.PeerTimeout, verdict.lost)
            return
        if verdict.ping:
            self.last_ping = now
            link.send_keepalive()
        if verdict.disconnect is not None:
            self.fail(EC.PeerTimeout, verdict.disconnect)
        elif verdict.drop is not None:
            self._dropping = True
            self._report(EC.PeerTimeout, verdict.drop)
            if self._room_wanted:
                self._room_wanted = False
                peering.core.wake()

    # -- closing ----------------------------------------------------------------------

    def _report(self, code: EC, message: str) -> None:
        """Tell status subscribers (and a waiting ``peer()``) why this connection failed."""
        hs = self.handshake
        peer_id = self.link.peer_id if self.link else (hs.peer_id if hs else None)
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
            self.peering.connection_closing(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def set_timer(self, delay: float, callback: Any) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(delay, callback)
