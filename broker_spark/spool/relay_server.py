"""The spool protocol served over a Unix socket (a receiver) or TCP/TLS (a relay).

Each connection is a :class:`~broker_spark.spool.relay_protocol.RelayServerSession`
(which decides everything) driven by one coroutine on a
:class:`~broker_spark.core.loop_thread.LoopThread`: it feeds the session what
arrives, reads from the spool the ranges the session asks for, and waits for
the reader's bytes, the pump's next append, or a heartbeat's time. A
connection that sends what is not the protocol gets an ERROR and is closed;
the others go on. Rows a reader of Zeek's logs asks the relay to decode
(:mod:`~broker_spark.spool.served_rows`) are decoded on a small pool of threads, off
the loop. Memory per connection is bounded by the session's limits
(readers' frames are small) and by the socket's buffer (``drain`` waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from broker_spark.addresses import format_host_port
from broker_spark.admission import DEFAULT_PER_ADDRESS, LISTEN_BACKLOG, Admission
from broker_spark.columnar.converter_spec import ConverterSpecError
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.core.loop_thread import LoopThread
from broker_spark.spool.relay_protocol import (
    HEARTBEAT_INTERVAL,
    HELLO_TIMEOUT,
    RelayProtocolError,
    RelayServerSession,
    ServerEvent,
)
from broker_spark.spool.segment import DataLossError, SpoolError
from broker_spark.spool.served_records import keep_records
from broker_spark.spool.served_rows import RangeRows
from broker_spark.spool.service import SpoolService

__all__ = ["RelayServer"]

log = logging.getLogger(__name__)

_READ_SIZE = 1 << 16

#: Connections served at once on each socket (readers, followers, status requests); beyond,
#: a new one gets a ``too_many`` ERROR and is closed.
DEFAULT_MAX_CONNECTIONS = 256
#: When a relay compresses the records it sends a reader that offers a codec.
WIRE_COMPRESSION = ("auto", "always", "never")
#: Readers of Zeek's logs whose rows a relay decodes at once, each on a thread of its own
#: (a FOLLOW beyond them is served records, and its task decodes them): decoding then
#: takes at most this many of the relay's cores, and a backlog read by many tasks at
#: once is decoded by Spark's cores as well as the relay's.
DEFAULT_DECODERS = 2


@dataclass
class _Reader:
    """A connected reader as a status shows it."""

    session: RelayServerSession
    peer: str
    since: float

    def as_dict(self) -> dict[str, Any]:
        s = self.session
        return {
            "name": s.name,
            "role": s.role,
            "address": self.peer,
            "connected_s": round(time.time() - self.since, 1),
            "committed": s.committed,
            "next": s.next if s.following else None,
        }


class RelayServer:
    """Serves ``service``'s spool to readers: the server side of the spool protocol
    (:class:`~broker_spark.spool.relay_protocol.RelayServerSession`, one a connection), for
    a relay over TCP/TLS and for a receiver over its Unix socket.

    ``attach(fields)`` checks a local reader's HELLO (the receiver compares its
    options) and returns an error text or None; ``stop()`` is called on a
    local STOP request; ``on_readers(n)`` whenever the number of attached
    readers changes (the receiver's idle timer). ``grants`` limits readers over
    TCP to topic prefixes by the common name of their (verified) certificate,
    ``"*"`` for every other certificate; a name not there (and no ``"*"``) reads
    everything. The owner's own machine (the Unix socket) is never limited.

    At most ``max_connections`` connections are served at once on TCP and as
    many on the Unix socket; on TCP at most ``per_address`` from one address, and
    half the slots for connections in their TLS handshake or before their HELLO.
    What each turned away (``too-many``, ``per-address``, ``unidentified``,
    ``tls``, ``timeout``: no HELLO in time, ``protocol``, ``forbidden``) is counted in
    :attr:`admission` (TCP, the relay) and :attr:`control` (the Unix socket).
    """

    def __init__(
        self,
        service: SpoolService,
        *,
        attach: Callable[[dict[str, Any]], str | None] | None = None,
        stop: Callable[[], None] | None = None,
        on_readers: Callable[[int], None] | None = None,
        name: str = "broker-spark-spool-server",
        grants: Mapping[str, tuple[str, ...]] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        wire_compression: str = "auto",
        per_address: int = DEFAULT_PER_ADDRESS,
        decoders: int = DEFAULT_DECODERS,
    ) -> None:
        if decoders < 0:
            raise ValueError(f"decoders must be 0 or more, got {decoders}")
        if wire_compression not in WIRE_COMPRESSION:
            raise ValueError(
                f"wire_compression must be one of {', '.join(WIRE_COMPRESSION)}, "
                f"got {wire_compression!r}"
            )
        #: whether records are compressed for a reader that offers a codec: ``auto`` for
        #: readers on other machines (not over loopback or a Unix socket), ``always``, ``never``
        self.wire_compression = wire_compression
        self.service = service
        self.admission = Admission("relay", max_connections, per_address=per_address)
        # The owner's machine only: every connection is from the same "address".
        self.control = Admission("control", max_connections, per_address=max_connections)
        self._grants = dict(grants or {})
        self._attach = attach
        self._stop = stop
        self._on_readers = on_readers
        self._loop = LoopThread(name)
        self._servers: list[asyncio.base_events.Server] = []
        self._readers: dict[int, _Reader] = {}
        self._tasks: set[asyncio.Task] = set()
        self._tcp: tuple[str, int, bool] | None = None  # host, bound port, TLS
        #: readers of Zeek's logs whose rows may be decoded here at once (0: none)
        self.decoders = decoders
        self._rows: dict[int, RangeRows] = {}  # by session: readers whose converter was built
        self._decoding: set[int] = set()  # sessions whose current FOLLOW is answered with rows
        self._pool: ThreadPoolExecutor | None = None  # made for the first such reader
        #: Records decoded into rows for readers, in all.
        self.decoded_records = 0
        #: Records and bytes of records sent to followers, in all (what readers fetched).
        self.served_records = 0
        self.served_bytes = 0
        #: Bytes of records frames written to followers (less than ``served_bytes`` where
        #: records were compressed on the wire).
        self.wire_bytes = 0

    # --- listening ------------------------------------------------------------------------

    def serve_unix(self, path: str) -> None:
        """Serve readers of this machine on the Unix socket ``path`` (made owner-only)."""

        async def start() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server = await asyncio.start_unix_server(
                lambda r, w: self._spawn(r, w, local=True), path
            )
            os.chmod(path, 0o600)
            self._servers.append(server)
            self.control.address = path

        self._loop.run_coro(start())

    def serve_tcp(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Serve readers over TCP (TLS with ``tls``); returns the bound port."""

        async def start() -> int:
            server = await self._start_tcp(host, port, tls)
            bound = server.sockets[0].getsockname()[1]
            self._tcp = (host, bound, tls is not None)
            self.admission.address = format_host_port(host, bound)
            return bound

        return self._loop.run_coro(start())

    async def _start_tcp(
        self, host: str, port: int, tls: ssl.SSLContext | None
    ) -> asyncio.base_events.Server:
        # Plain TCP, and TLS started per connection once admitted: a connection in its TLS
        # handshake then holds a slot (an unidentified one) and is bounded per address.
        server = await asyncio.start_server(
            lambda r, w: self._spawn(r, w, local=False, tls=tls),
            host or None,
            port,
            backlog=LISTEN_BACKLOG,
        )
        self._servers.append(server)
        return server

    def reload(
        self, tls: ssl.SSLContext | None, grants: Mapping[str, tuple[str, ...]] | None
    ) -> None:
        """New connections use this TLS context and these reader grants (SIGHUP); the
        readers connected keep what they were admitted with until they reconnect. The
        listening socket is opened again on its port with the new context (connections
        made meanwhile are refused for that instant and retried by readers)."""
        self._grants = dict(grants or {})
        if self._tcp is None:
            return
        host, port, had_tls = self._tcp
        if (tls is not None) != had_tls:
            raise ValueError("TLS cannot be turned on or off without a restart")

        async def swap() -> None:
            old = [s for s in self._servers if _port_of(s) == port]
            for server in old:
                server.close()
                self._servers.remove(server)
            await self._start_tcp(host, port, tls)

        self._loop.run_coro(swap())

    def readers(self) -> list[dict[str, Any]]:
        """Every connected reader (attached readers and relay followers)."""

        def snapshot() -> list[dict[str, Any]]:
            return [r.as_dict() for r in self._readers.values() if r.session.role != "status"]

        return self._loop.run_sync(snapshot)

    def close(self, grace: float = 0.0) -> None:
        """Stop listening, let readers finish their current fetch for up to ``grace`` seconds
        (a task's range sent, a follower caught up with the spool's end), then close every
        connection and stop the loop (idempotent)."""
        if not self._loop.running:
            return

        async def stop() -> None:
            for server in self._servers:
                server.close()
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(map(self._fetching, self._readers.values())):
                await asyncio.sleep(0.05)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=1.0)

        with contextlib.suppress(Exception):
            self._loop.run_coro(stop(), timeout=3.0 + grace)
        self._loop.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _fetching(self, reader: _Reader) -> bool:
        """Whether a reader is in the middle of a fetch: records of its range still to send."""
        session = reader.session
        if not session.following:
            return False
        try:
            end = self.service.spool.end_offset()
        except SpoolError:
            return False
        stop = end if session.until is None else min(end, session.until)
        return session.next < stop

    # --- one connection -------------------------------------------------------------------

    def _spawn(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        local: bool,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if tls is not None:  # the ClientHello stays in the kernel until start_tls reads it
            writer.transport.pause_reading()
        task = asyncio.ensure_future(self._serve(reader, writer, local, tls))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        local: bool,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        peer = _peer_name(writer, local)
        address = "" if local else _peer_host(writer)
        admission = self.control if local else self.admission
        opened = asyncio.get_running_loop().time()
        if not admission.enter(address):  # counted, and logged once a minute per address
            if tls is None:  # a TLS client could not read a plain ERROR
                with contextlib.suppress(Exception):
                    writer.write(RelayServerSession.refusal("too_many", "too many connections"))
                    await writer.drain()
            writer.close()
            return
        identified: list[bool] = []
        try:
            if tls is not None and not await self._start_tls(writer, tls, peer, admission):
                return
            await self._serve_admitted(
                reader, writer, local, peer, admission, opened, identified.append
            )
        finally:
            admission.leave(address, bool(identified))

    async def _start_tls(
        self,
        writer: asyncio.StreamWriter,
        tls: ssl.SSLContext,
        peer: str,
        admission: Admission,
    ) -> bool:
        """TLS on an admitted connection, within the HELLO timeout; False (closed,
        counted as ``tls``) when it fails."""
        try:
            await writer.start_tls(tls, ssl_handshake_timeout=HELLO_TIMEOUT)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
            log.debug("spool reader %s: TLS handshake failed (%s)", peer, exc)
            admission.refuse("tls")
            writer.transport.abort()
            return False
        return True

    async def _serve_admitted(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        local: bool,
        peer: str,
        admission: Admission,
        opened: float,
        identified: Callable[[bool], None],
    ) -> None:
        """Serve one admitted connection; ``identified`` is called once its HELLO is
        answered (it then no longer counts against the unidentified share)."""
        loop = asyncio.get_running_loop()
        identity = "" if local else _common_name(writer)
        allowed = None
        if self._grants and not local:
            allowed = self._grants.get(identity, self._grants.get("*"))
        session = RelayServerSession(
            self.service.id or "",
            local=local,
            now=opened,  # TLS handshake and HELLO together within the HELLO timeout
            allowed=allowed,
            identity=f"certificate {identity!r}" if identity else "an anonymous reader",
            compress=self._compresses(writer, local),
        )
        key = id(session)
        self._readers[key] = _Reader(session, peer, time.time())
        woken = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(woken.set)

        unwatch = self.service.watch(wake)
        incoming: asyncio.Future = asyncio.ensure_future(reader.read(_READ_SIZE))
        attached = False
        try:
            while True:
                if await self._send_due(session, writer):
                    continue  # more may be due: look again before waiting
                waiter = asyncio.ensure_future(woken.wait())
                done, _ = await asyncio.wait(
                    {incoming, waiter},
                    timeout=HEARTBEAT_INTERVAL,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                waiter.cancel()
                woken.clear()
                if session.hello_overdue(loop.time()):  # silent, or a byte at a time
                    log.warning("spool reader %s: no HELLO in time; closing", peer)
                    admission.refuse("timeout")
                    writer.write(session.error("timeout", "no HELLO in time"))
                    return
                if incoming not in done:
                    continue
                data = incoming.result()
                if not data:
                    return  # the reader hung up
                incoming = asyncio.ensure_future(reader.read(_READ_SIZE))
                try:
                    events = session.receive(data)
                except RelayProtocolError as exc:
                    log.warning("spool reader %s: %s; closing its connection", peer, exc)
                    admission.refuse("protocol")
                    writer.write(session.error("protocol", str(exc)))
                    return
                for event in events:
                    if event.kind == "forbidden":
                        admission.refuse("forbidden")
                    outcome = self._handle(session, event)
                    if outcome is None:
                        continue
                    frame, close = outcome
                    writer.write(frame)
                    if close:
                        return
                    if event.kind == "hello" and session.role is not None:
                        admission.identify()
                        identified(True)
                    if event.kind == "hello" and session.role == "attach":
                        attached = True
                        self._readers_changed()
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError) as exc:
            log.info("spool reader %s: connection lost (%s)", peer, exc)
        finally:
            unwatch()
            incoming.cancel()
            del self._readers[key]
            self._rows.pop(key, None)
            self._decoding.discard(key)
            if attached:
                self._readers_changed()
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _send_due(self, session: RelayServerSession, writer: asyncio.StreamWriter) -> bool:
        """Send the records or the heartbeat that are due; whether records went."""
        spool = self.service.spool
        try:
            first, end = spool.start_offset(), spool.end_offset()
        except SpoolError:
            return False
        span = session.next_range(first, end)
        if span is None:
            beat = session.tick(time.monotonic(), first, end)
            if beat is not None:
                writer.write(beat)
                await writer.drain()
            return False
        lo, stop, budget = span
        try:
            data, hi = read_about(spool, lo, stop, budget)
        except DataLossError as exc:
            writer.write(session.lost(exc.earliest))
            await writer.drain()
            return False
        kept = None
        if session.narrowed:  # a reader of some topics or logs: only theirs
            data, kept = keep_records(data, session.served, session.served_logs)
        count = hi - lo if kept is None else kept
        self.served_records += count
        self.served_bytes += len(data)
        if session.rows_now:
            frame = await self._rows_frame(session, lo, hi, data, count)
        else:
            frame = session.records(lo, hi - lo, data, time.monotonic(), kept)
        self.wire_bytes += len(frame)
        writer.write(frame)
        await writer.drain()
        return True

    async def _rows_frame(
        self, session: RelayServerSession, lo: int, hi: int, data: bytes, count: int
    ) -> bytes:
        """The ROWS frame of records ``[lo, hi)`` (``data``, ``count`` of them for this
        reader), decoded on the decoders' pool; an ERROR ending the FOLLOW when the reader's
        converter refuses them (``mode=FAILFAST``)."""
        decoder = self._rows[id(session)]
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.decoders, "broker-spark-relay-decode")
        try:
            ipc, rows, counted = await loop.run_in_executor(self._pool, decoder.decode, data, count)
        except RecordConversionError as exc:
            self._decoding.discard(id(session))
            return session.refuse_rows(str(exc))
        except Exception as exc:  # a relay's fault: the reader fetches the records instead
            log.exception("spool reader %s: decoding offsets %d to %d failed", session.name, lo, hi)
            self._decoding.discard(id(session))
            return session.refuse_rows(f"the relay could not decode its rows: {exc}", "rows_failed")
        self.decoded_records += count
        frame = session.rows(lo, hi - lo, rows, counted, ipc, time.monotonic())
        if not session.following:  # the range is sent: another reader may have the decoder
            self._decoding.discard(id(session))
        return frame

    def _handle(self, session: RelayServerSession, event: ServerEvent) -> tuple[bytes, bool] | None:
        """The frame answering ``event`` and whether to close after it (None: no answer)."""
        service = self.service
        spool = service.spool
        if event.kind == "forbidden":
            log.warning("spool reader %s: forbidden: %s", session.identity, event.fields["message"])
            return session.error("forbidden", event.fields["message"]), True
        if event.kind == "hello":
            if session.role == "attach" and self._attach is not None:
                problem = self._attach(event.fields)
                if problem is not None:
                    return session.error("options_differ", problem), True
            if session.rows_spec is not None:
                self._build_rows(session)
            frame = session.welcome(spool.start_offset(), spool.end_offset(), service.schemas())
            return frame, False
        if event.kind == "follow":
            f = event.fields
            rows = self._decodes(session, f["from"], f["schemas"])
            refused = session.follow(
                f["from"], f["credit"], spool.start_offset(), spool.end_offset(), f["until"], rows
            )
            return (refused, False) if refused is not None else None
        if event.kind == "commit":
            return None
        op = event.fields["op"]
        if op == "status":
            status = service.status()
            status["readers"] = [
                r.as_dict() for r in self._readers.values() if r.session.role != "status"
            ]
            return session.reply(op, {"status": status}), False
        if op == "bounds":
            return session.reply(op, {**service.bounds(), "schemas": service.schemas()}), False
        if op == "state":
            return session.reply(op, service.state()), False
        if op == "restart_at":
            try:
                service.restart_at(event.fields["offset"])
            except (ValueError, SpoolError) as exc:
                return session.error("restart_refused", str(exc)), False
            return session.reply(op, service.state()), False
        if op == "stop":
            if self._stop is not None:
                asyncio.get_running_loop().call_soon(self._stop)
            return session.reply(op, {}), False
        return None  # pragma: no cover - the session refuses other requests

    def _decodes(self, session: RelayServerSession, start: int, digest: str | None) -> bool:
        """Whether a FOLLOW from ``start`` is answered with rows: the reader's converter was
        built, the schemas in force there are the ones it has (``digest``), and fewer than
        :attr:`decoders` other readers' FOLLOWs are being answered with rows."""
        key = id(session)
        self._decoding.discard(key)
        decoder = self._rows.get(key)
        if decoder is None or len(self._decoding) >= self.decoders:
            return False
        history = self.service.history
        if not decoder.begin(history.snapshot(start) if history is not None else [], digest):
            return False
        self._decoding.add(key)
        return True

    def _build_rows(self, session: RelayServerSession) -> None:
        """Build the converter a reader sent: its rows are then decoded here (compressed
        with lz4 where its records would be compressed); one that cannot be built is
        served records, as by a relay that decodes nothing."""
        assert session.rows_spec is not None
        if not self.decoders:
            return
        codec = "lz4" if session.compress else None
        try:
            self._rows[id(session)] = RangeRows(session.rows_spec, self.service.id or "", codec)
        except ConverterSpecError as exc:
            log.info("spool reader %s: its rows are not decoded here: %s", session.name, exc)
            return
        session.serve_rows(codec or "none")

    def _compresses(self, writer: asyncio.StreamWriter, local: bool) -> bool:
        if self.wire_compression == "auto":
            return not local and not _on_loopback(writer)
        return self.wire_compression == "always"

    def _readers_changed(self) -> None:
        if self._on_readers is not None:
            attached = sum(1 for r in self._readers.values() if r.session.role == "attach")
            self._on_readers(attached)


def read_about(spool: Any, lo: int, stop: int, budget: int) -> tuple[bytes, int]:
    """Records from ``lo`` on, about ``budget`` bytes of them but not beyond ``stop``: read a
    step of the spool's index interval at a time (each step starts at an index entry, so it
    costs no skipping), the steps growing while the records are small."""
    parts: list[bytes] = []
    size = 0
    at = lo
    step = max(1, spool.index_interval - lo % spool.index_interval)
    while at < stop and size < budget:
        hi = min(stop, at + step)
        chunk = spool.read_packed(at, hi)
        parts.append(chunk)
        size += len(chunk)
        at = hi
        step = spool.index_interval * max(1, (budget - size) // max(1, 4 * len(chunk)))
    return b"".join(parts), at


def _on_loopback(writer: asyncio.StreamWriter) -> bool:
    peer = writer.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer:
        return True  # not an IP connection
    try:
        address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # a dual-stack socket's IPv4 peer
    return (mapped or address).is_loopback


def _port_of(server: asyncio.base_events.Server) -> int | None:
    sockets = server.sockets or ()
    for sock in sockets:
        name = sock.getsockname()
        if isinstance(name, tuple):
            return int(name[1])
    return None


def _common_name(writer: asyncio.StreamWriter) -> str:
    """The common name of the client's certificate (verified: mutual TLS), else ""."""
    ssl_object = writer.get_extra_info("ssl_object")
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def _peer_host(writer: asyncio.StreamWriter) -> str:
    """The client's address, what per-address slots are counted by."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


def _peer_name(writer: asyncio.StreamWriter, local: bool) -> str:
    if local:
        return "local"
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return format_host_port(peer[0], peer[1])
    return str(peer)
