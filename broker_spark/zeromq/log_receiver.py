"""broker-spark as a Zeek cluster's logger: a bound PULL socket that Zeek nodes PUSH logs to.

On Zeek's ZeroMQ cluster backend logs do not travel over publish/subscribe:
every node connects a PUSH socket to each entry of
``Cluster::Backend::ZeroMQ::connect_log_endpoints`` (the cluster's loggers) and
sends each flush of a log writer as one four-frame message: ``log-write``, its
node id, ``zeek-bin-serializer`` and the batch (ZEEK-ZEROMQ.md sections 1 and 2b).
Any program with a bound PULL socket can be that logger.

:class:`ZeroMQLogReceiver` is one, with the narrow interface the rest of
broker-spark takes log messages through (the Spark reader's pump, ``broker-spark
logs``, ``node --log-dir``): :meth:`take` / :meth:`take_stamped` return spool
records ``(topic, payload, sender[, received_at_ns])`` and :meth:`close` ends it.
Each batch is handed on as it arrived, on the topic ``zeek/logs/<stream id>``
(where a Zeek publishes logs over Broker) with the Zeek node's id as sender: the
log scanner reads ZeroMQ batches beside Broker's log messages
(:mod:`~broker_spark.zeek.log_scan`), so the spool, the schema history, the Spark
converter and the JSON lines take them as they take logs over Broker. Only the
header is checked here (parsed once per log): the records are found where they
are decoded, on Spark's executors, and not in this process, which Zeek drops
batches for when it falls behind.

Why a thread of its own: ZeroMQ's socket is read by one thread, which also
answers CURVE's ZAP requests and watches handshakes. The thread only receives
and queues raw batches, without copying them.

Taking only as fast as the consumer spools: what this process has taken off
the socket and not yet handed on lives only in its memory, and a crash loses
it, while what it leaves in ZeroMQ stays with the Zeek node (a PUSH queues
for a logger that is gone until it is back, and routes new batches to the
other loggers). So the queue is small (``max_queued_bytes``, 1 MiB by
default: a few hundred batches), ZeroMQ's receive queue is short
(``rcvhwm``, 100 messages) and the kernel's receive buffer fixed (``rcvbuf``,
64 KiB, instead of Linux's autotuning up to several MiB): past them the
thread stops reading until the consumer takes, and the backlog waits in the
Zeek node's queue (``log_sndhwm``, 1000 batches), where Zeek's own
high-water mark and its drop counters apply ("Failed to send log write. HWM
reached?"); a warning here says the consumer fell behind. docs/relay.md
states the window a crash can lose.

A planned stop loses nothing that was read: :meth:`finish` unbinds the
socket (its connections close, so Zeek's PUSH sends its next batches to the
other loggers and keeps the rest for this one), takes what ZeroMQ had
already received, and closes; the consumer takes what is queued until
:meth:`take` raises :class:`~broker_spark.errors.ShutdownError`. Only bytes
still inside TCP at that moment (sent by the node, not yet through ZeroMQ's
decoder here) are lost, which :attr:`received` lets a test tell apart.

Bad input costs only itself and is kept: a message that is not four frames,
names another serializer or holds a malformed header is counted in
:attr:`rejected`, logged (at most once a second) with its sender and what is
wrong, and handed on as an undecodable record
(:mod:`~broker_spark.zeek.undecodable`: its frames, its sender and the
reason) for the spool to keep, so a later broker-spark can decode it. With
CURVE (:class:`~broker_spark.zeromq.curve.CurveKeys`) the socket is a CURVE
server that lets in only the client public key, as Zeek's logger does; a client
turned away (wrong client key), or whose handshake fails (wrong server key, no
CURVE), is counted in :attr:`refused` and logged with its address.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import itertools
import logging
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

from broker_spark.data.msgpack_records import stamped
from broker_spark.errors import EC, BrokerError, DecodeError, ShutdownError
from broker_spark.zeek.log_batch import LOG_MESSAGE_TYPE, LOG_SERIALIZER, read_header
from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC, pack_undecodable
from broker_spark.zeromq.curve import CurveKeys, ZapHandler

__all__ = [
    "DEFAULT_MAX_QUEUED_BYTES",
    "DEFAULT_RCVBUF",
    "DEFAULT_RCVHWM",
    "LOG_TOPIC_PREFIX",
    "ZeroMQBindError",
    "ZeroMQLogReceiver",
]

log = logging.getLogger(__name__)

#: Messages ZeroMQ queues for the PULL socket (Zeek's own logger uses 1000): short, so a
#: backlog waits in the Zeek node's queue rather than in this process (see the module doc).
DEFAULT_RCVHWM = 100
#: The kernel's receive buffer of each connection (ZeroMQ's ``SO_RCVBUF``), fixed: Linux
#: would grow it to several MiB that a crash loses.
DEFAULT_RCVBUF = 64 * 1024
#: Bytes of received batches queued for the consumer before the socket is left unread.
DEFAULT_MAX_QUEUED_BYTES = 1024 * 1024
#: The topic prefix Zeek publishes logs on over Broker (``Broker::default_log_topic_prefix``).
LOG_TOPIC_PREFIX = "zeek/logs/"

#: Bytes of batches handed out per take, about: what a consumer appends to a spool at once.
TAKE_BYTES = 1024 * 1024
#: Messages received per turn before the thread looks at its other sockets (and lets
#: the consumer have the interpreter).
_TURN = 64
#: Milliseconds the thread waits for input before looking at its stop flag again.
_POLL_MS = 100
#: A planned stop reads until the connections were quiet this long (milliseconds), for at
#: most _DRAIN_MAX seconds (a sender that never pauses).
_QUIET_MS = 10
_DRAIN_MAX = 5.0
#: Seconds the thread waits for the consumer to take, when the queue is full, before it
#: looks at its other sockets again (a take wakes it at once).
_FULL_WAIT = 0.05
#: Monitor events that name an accepted connection's descriptor, and its end.
_CONNECTIONS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
_HANDSHAKE_FAILURES = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class ZeroMQBindError(BrokerError, OSError):
    """The PULL socket could not bind its endpoint."""

    code = EC.PeerUnavailable


class _Complaints:
    """Warnings about bad input, at most one a second (with how many were held back)."""

    def __init__(self) -> None:
        self._last = 0.0
        self._held = 0

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            self._held += 1
            return
        more = f" ({self._held} more since the last warning)" if self._held else ""
        log.warning("%s%s", text, more)
        self._last = now
        self._held = 0


class ZeroMQLogReceiver:
    """A bound PULL socket drained by a thread; Zeek's log batches out as they arrived.

    ``bind`` is a ZeroMQ endpoint (``tcp://0.0.0.0:5557``; port 0 or ``*`` picks a free
    one: see :attr:`endpoint`). ``curve`` makes it a CURVE server (its
    ``server_secretkey`` and ``client_publickey`` are needed). Starts receiving at once.
    """

    def __init__(
        self,
        bind: str,
        *,
        curve: CurveKeys | None = None,
        rcvhwm: int = DEFAULT_RCVHWM,
        rcvbuf: int = DEFAULT_RCVBUF,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    ) -> None:
        if curve is not None and curve.any:
            curve.require_server()
        else:
            curve = None
        self.max_queued_bytes = max_queued_bytes
        self.received = 0  # messages taken off the socket (good and undecodable)
        self.rejected = 0  # messages that do not decode (kept as undecodable records)
        self.refused = 0  # clients turned away by CURVE
        self._complain = _Complaints()
        #: (sender, batch frame) of a good message, (sender, kept payload bytes) of a bad one
        self._queue: deque[tuple[bytes, zmq.Frame | bytes]] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._finish = threading.Event()
        self._new_curve: CurveKeys | None = None  # keys a reload handed over, for the thread
        self._fds: set[int] = set()  # the accepted connections' descriptors (the monitor's)
        self._closed = False
        self._senders: dict[bytes, str] = {}
        self._context = zmq.Context(io_threads=1)
        try:
            self._pull = self._context.socket(zmq.PULL)
            self._pull.linger = 0
            self._pull.rcvhwm = rcvhwm
            self._pull.rcvbuf = rcvbuf
            self._zap: ZapHandler | None = None
            if curve is not None:
                self._zap = ZapHandler(self._context, curve.client_publickey, self._refuse)
                curve.configure_server(self._pull)
            self._monitor = self._pull.get_monitor_socket(_HANDSHAKE_FAILURES | _CONNECTIONS)
            try:
                self._pull.bind(_wildcard_port(bind))
            except zmq.ZMQError as exc:
                raise ZeroMQBindError(f"cannot bind the log PULL socket to {bind}: {exc}") from None
            self.endpoint: str = self._pull.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            self._close_sockets()
            raise
        self.curve = curve is not None
        self._thread = threading.Thread(
            target=self._run, name="broker-spark-zeromq-logs", daemon=True
        )
        self._thread.start()

    # --- the draining thread ----------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        if self._zap is not None:
            poller.register(self._zap.socket, zmq.POLLIN)
        reading = False
        try:
            while not self._stop.is_set():
                if self._finish.is_set():
                    self._last_reads()
                    break
                if self._new_curve is not None:
                    self._apply_curve()
                want = self._queued_bytes < self.max_queued_bytes
                if want != reading:
                    if want:
                        poller.register(self._pull, zmq.POLLIN)
                    else:
                        poller.unregister(self._pull)
                        self._complain(
                            f"ZeroMQ logs on {self.endpoint}: {self._queued_bytes} bytes wait "
                            "for a consumer that falls behind; not reading until it catches up "
                            "(Zeek drops batches when its queue to us is full)"
                        )
                    reading = want
                if not reading:  # wait for the consumer to take (it notifies), then look again
                    with self._cond:
                        if self._queued_bytes >= self.max_queued_bytes:
                            self._cond.wait(_FULL_WAIT)
                ready = dict(poller.poll(_POLL_MS if reading else 0))
                if self._zap is not None and self._zap.socket in ready:
                    self._zap.handle()
                if self._monitor in ready:
                    self._handshake_events()
                if self._pull in ready:
                    self._receive()
        except zmq.ContextTerminated:
            pass
        except Exception as exc:  # never silently: the consumer sees the end
            log.error("ZeroMQ logs on %s: the receiving thread failed: %s", self.endpoint, exc)
        finally:
            self._close_sockets()
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def _last_reads(self) -> None:
        """A planned stop: take all that ZeroMQ receives (whatever the queue holds) until the
        connections have been quiet for a moment (at most :data:`_DRAIN_MAX` seconds), so
        the kernel's buffers at both ends, which a close would discard, are as empty as they
        get: a busy host leaves a backlog there. Then at once unbind (the connections close:
        Zeek's PUSH routes to the other loggers and keeps what is due here for when it is
        back), and take what arrived in between."""
        deadline = time.monotonic() + _DRAIN_MAX
        while time.monotonic() < deadline:
            if self._receive(limit=_TURN * 16):
                continue
            self._handshake_events()  # connections accepted or gone meanwhile
            if self._unread():  # in the kernel, not yet through ZeroMQ: give it a moment
                time.sleep(0.001)
                continue
            if not self._pull.poll(_QUIET_MS):
                break  # nothing for a moment, nothing unread: what was in flight is here
        with contextlib.suppress(zmq.ZMQError):
            self._pull.unbind(self.endpoint)
        while self._receive(limit=None):
            pass

    def _receive(self, limit: int | None = _TURN) -> int:
        got: list[tuple[bytes, zmq.Frame | bytes]] = []
        size = 0
        recv = self._pull.recv_multipart
        turns = range(limit) if limit is not None else itertools.count()
        for _ in turns:
            try:
                # without copying: the batch's bytes are copied by the consumer, so this
                # thread holds the interpreter only briefly per message
                frames = recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            heads = [f.bytes for f in frames[:3]]
            bad = _bad_frames(heads, len(frames))
            if bad:
                self.rejected += 1
                # quoted: a sender's id is its own text, and must not forge a log line
                sender = repr(heads[1].decode("utf-8", "replace")) if len(heads) > 1 else "?"
                self._complain(
                    f"ZeroMQ logs on {self.endpoint}: a message from {sender} does not "
                    f"decode ({bad}); kept as an undecodable record"
                )
                kept = pack_undecodable("zeromq-logs", bad, [f.bytes for f in frames])
                got.append((heads[1] if len(heads) > 1 else b"", kept))
                size += len(kept)
                continue
            got.append((heads[1], frames[3]))
            size += len(frames[3])
        if got:
            with self._cond:
                self._queue.extend(got)
                self._queued_bytes += size
                self.received += len(got)
                self._cond.notify_all()
        return len(got)

    def _handshake_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            kind = event["event"]
            if kind == zmq.EVENT_ACCEPTED:  # its descriptor: what is unread in its buffer
                self._fds.add(int(event["value"]))
                continue
            if kind in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                self._fds.discard(int(event["value"]))
                continue
            address = event.get("endpoint", b"")
            where = address.decode("utf-8", "replace") if isinstance(address, bytes) else address
            if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                continue  # the ZAP handler said who and why
            self.refused += 1
            why = (
                "a ZeroMQ protocol error (a client with another server public key, or without CURVE)"
                if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                else f"error {event.get('value')}"
            )
            log.warning(
                "ZeroMQ logs on %s: the handshake with a client on %s failed: %s",
                self.endpoint,
                where,
                why,
            )

    def _unread(self) -> int:
        """Bytes the kernel holds for the accepted connections that ZeroMQ has not read yet
        (``FIONREAD`` on their descriptors, which the monitor names)."""
        total = 0
        size = array.array("i", [0])
        for fd in list(self._fds):
            try:
                fcntl.ioctl(fd, termios.FIONREAD, size, True)
            except OSError:  # closed meanwhile
                self._fds.discard(fd)
                continue
            total += size[0]
        return total

    def reload_curve(self, curve: CurveKeys) -> None:
        """New connections are let in with these CURVE keys (SIGHUP): the server secret key
        and the one client public key allowed; connections made before keep theirs. Only a
        receiver started with CURVE reloads (turning it on or off takes a restart)."""
        if self._zap is None:
            raise ValueError("this ZeroMQ log socket was started without CURVE")
        curve.require_server()
        self._new_curve = curve

    def _apply_curve(self) -> None:
        """On the thread that owns the socket: the keys of :meth:`reload_curve`."""
        curve, self._new_curve = self._new_curve, None
        assert curve is not None and self._zap is not None
        self._zap.allow(curve.client_publickey)
        curve.configure_server(self._pull)
        log.info("ZeroMQ logs on %s: new CURVE keys for new connections", self.endpoint)

    def _refuse(self, address: str, key: str) -> None:
        self.refused += 1
        log.warning(
            "ZeroMQ logs on %s: refused a client from %s: its CURVE public key %s is not the "
            "configured client_publickey",
            self.endpoint,
            address,
            key,
        )

    def _close_sockets(self) -> None:
        """Stop the monitor while its reading end is open and drained, then close: libzmq
        sends each event blocking (no peer, or a full pipe, blocks its I/O thread) under the
        lock that stopping the monitor takes, so closing the reading end first can hang the
        stop when a connection's end is reported meanwhile (as it is after the unbind)."""
        monitor = getattr(self, "_monitor", None)
        pull = getattr(self, "_pull", None)
        if pull is not None:
            if monitor is not None:
                with contextlib.suppress(zmq.ZMQError):
                    while True:
                        monitor.recv_multipart(zmq.NOBLOCK)  # make room: until Again
            with contextlib.suppress(zmq.ZMQError):
                pull.disable_monitor()
        for sock in (monitor, pull):
            if sock is not None:
                sock.close(0)
        zap = getattr(self, "_zap", None)
        if zap is not None:
            zap.close()
        self._context.term()

    # --- the consumer's side --------------------------------------------------------------

    def take(self, n: int, timeout: float | None) -> list[tuple[str, bytes, str]]:
        """Up to ``n`` log batches as soon as there are some, as ``(topic, batch, sender)``;
        ``[]`` after ``timeout`` seconds. Raises
        :class:`~broker_spark.errors.ShutdownError` once closed and drained."""
        out: list[tuple[str, bytes, str]] = []
        for batch_sender, frame in self._wait(n, timeout):
            sender = self._senders.get(batch_sender)
            if sender is None:
                sender = batch_sender.decode("utf-8", "replace")
                if len(self._senders) > 4096:
                    self._senders.clear()
                self._senders[batch_sender] = sender
            if isinstance(frame, bytes):  # kept undecodable
                out.append((UNDECODABLE_TOPIC, frame, sender))
                continue
            batch = frame.bytes
            try:
                header = read_header(batch)  # its columns, parsed once per log (cached)
            except DecodeError as exc:
                self.rejected += 1
                self._complain(
                    f"ZeroMQ logs on {self.endpoint}: a batch from {sender!r} does not decode "
                    f"({exc}); kept as an undecodable record"
                )
                frames = [LOG_MESSAGE_TYPE, batch_sender, LOG_SERIALIZER, batch]
                kept = pack_undecodable("zeromq-logs", str(exc), frames)
                out.append((UNDECODABLE_TOPIC, kept, sender))
                continue
            out.append((LOG_TOPIC_PREFIX + header.stream, batch, sender))
        return out

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]:
        """Like :meth:`take`, as spool records stamped with one ``clock_ns()`` read."""
        return stamped(self.take(n, timeout), clock_ns)

    def _wait(self, n: int, timeout: float | None) -> list[tuple[bytes, zmq.Frame | bytes]]:
        """Up to ``n`` batches (a batch becomes one or two messages), waiting for the first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue:
                if self._closed:
                    raise ShutdownError("the ZeroMQ log receiver is closed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                self._cond.wait(remaining)
            queue = self._queue
            most = max(1, n)
            taken = []
            size = 0
            while queue and len(taken) < most and size < TAKE_BYTES:
                item = queue.popleft()
                taken.append(item)
                size += len(item[1])
            self._queued_bytes -= size
            self._cond.notify_all()  # the reading thread waits for room
        return taken

    @property
    def queued(self) -> int:
        """Batches received and not taken yet."""
        return len(self._queue)

    def finish(self, timeout: float = 5.0) -> None:
        """A planned stop: stop taking from the network (unbind, so Zeek's nodes send to the
        other loggers), queue what ZeroMQ had received and release the socket; the consumer
        then takes what is queued until :meth:`take` raises ShutdownError."""
        self._finish.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def close(self) -> None:
        """Stop receiving and release the socket at once (idempotent; what is queued is
        dropped: :meth:`finish` first keeps it)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify_all()

    def __enter__(self) -> ZeroMQLogReceiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ZeroMQLogReceiver({self.endpoint!r}, received={self.received})"


def _bad_frames(frames: list[bytes], count: int) -> str:
    """What is wrong with a received message (its first frames, of ``count``) as a log
    message ("" when nothing)."""
    if count != 4:
        return f"{count} frames, a log message has 4"
    if frames[0] != LOG_MESSAGE_TYPE:
        return f"frame 0 is {frames[0][:40]!r}, not {LOG_MESSAGE_TYPE!r}"
    if frames[2] != LOG_SERIALIZER:
        return (
            f"serializer {frames[2][:40]!r}: only {LOG_SERIALIZER.decode()} is read "
            "(Zeek's default Cluster::log_serializer)"
        )
    return ""


def _wildcard_port(endpoint: str) -> str:
    """``tcp://host:0`` as ZeroMQ spells "any free port" (``tcp://host:*``)."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        return endpoint[:-1] + "*"
    return endpoint
