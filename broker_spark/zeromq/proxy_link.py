"""Joining a Zeek cluster's ZeroMQ publish/subscribe as a node: the proxy as one neighbour.

On Zeek's ZeroMQ backend every node connects an XSUB socket to the proxy's XPUB
(``connect_xsub_endpoint``, port 5555 by default) and an XPUB socket to the
proxy's XSUB (``connect_xpub_endpoint``, 5556), and the proxy forwards
subscriptions one way and messages the other (ZEEK-ZEROMQ.md sections 1, 2a, 2c).
To the core, :class:`ZeroMQLink` is a :class:`~broker_spark.core.link.Link` like
a peer, so publications and subscriptions go through the same central merge:

* our filter goes out on the XSUB as ZeroMQ subscription messages (``0x01`` or
  ``0x00`` and the prefix), changes only;
* the link's own filter is the subscriptions the cluster's nodes announced, as
  our XPUB sees them, so the core routes to it only what someone wants (and
  ``peer_subscriptions()`` and the writers' wait for subscribers work as for
  peers);
* a data message is sent as Zeek's four frames: topic, our node id,
  ``broker-bin-v1``, the payload, which *is* the Broker binary data we route
  (Zeek's ``broker-bin-v1`` serializer), so nothing is re-encoded either way;
* what arrives on the XSUB enters the merge as if a peer had sent it; a message
  that is not four frames or uses another serializer is dropped with an error
  status, our own (by node id, as Zeek does) silently.

The sockets live on the endpoint's event loop, read when their file descriptor
says so (ZeroMQ's descriptor is edge-triggered: each turn reads until nothing is
left, and after sending, pending input is looked for at once). The XPUB has
``XPUB_NODROP``, as Zeek's: at its high-water mark a send fails, the link keeps
the rest, reports no room, and the core waits until ZeroMQ takes more, so a
fast publisher is slowed down instead of losing messages. Receiving pushes back
too: with the core's source full, the XSUB is left unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from broker_spark.core.link import Link
from broker_spark.core.node_message import DATA
from broker_spark.errors import EC, SC, DeliveryError
from broker_spark.status import Error, NetworkInfo, PeerFlags
from broker_spark.zeromq.curve import CurveKeys

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = [
    "EVENT_SERIALIZER",
    "INTERNAL_TOPIC_PREFIX",
    "LINGER_MS",
    "SNDHWM",
    "ZeroMQLink",
    "wait_until",
    "zeromq_node_id",
]

log = logging.getLogger(__name__)

#: Frame 2 of an event message: Zeek's default ``Cluster::event_serializer``.
EVENT_SERIALIZER = b"broker-bin-v1"
#: Zeek's defaults (options.zeek): ``linger_ms``, ``xpub_sndhwm``, ``xsub_rcvhwm``.
LINGER_MS = 500
SNDHWM = 1000
RCVHWM = 1000
#: Topics nodes subscribe to only to see their subscription come back (Zeek's
#: ``Cluster::Backend::ZeroMQ::internal_topic_prefix``): never data.
INTERNAL_TOPIC_PREFIX = "zeek.zeromq.internal."
#: Messages read per turn before the loop runs other callbacks.
_TURN = 512
_MONITORED = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_DISCONNECTED
)


class ZeroMQLink(Link):
    """The cluster's proxy as a neighbour of the core; every method runs on the core's loop.

    ``on_handshake(socket_name, ok, why)`` hears how each socket's handshake with the
    proxy went (the joiner waits on it); ``terminated`` is set once the context is
    gone after :meth:`close` (everything queued sent, or ``linger_ms`` passed).
    """

    kind = "zeromq"

    def __init__(
        self,
        core: Core,
        xsub_endpoint: str,
        xpub_endpoint: str,
        *,
        node_id: str,
        curve: CurveKeys | None = None,
        linger_ms: int = LINGER_MS,
        sndhwm: int = SNDHWM,
        rcvhwm: int = RCVHWM,
        on_handshake: Callable[[str, bool, str], None] | None = None,
    ) -> None:
        super().__init__(
            core,
            uuid.uuid4().bytes,
            network=NetworkInfo(xsub_endpoint, 0, 0.0),
            flags=PeerFlags.Remote | PeerFlags.Outbound,
        )
        self.peer_str = f"zeromq-proxy {xsub_endpoint} {xpub_endpoint}"
        self.node_id = node_id.encode("utf-8")
        self.xsub_endpoint = xsub_endpoint
        self.xpub_endpoint = xpub_endpoint
        self.linger_ms = linger_ms
        self.on_handshake = on_handshake
        self.subscriptions: set[str] = set()  # what the cluster's nodes subscribe to
        self.internal: set[str] = set()  # their readiness markers (INTERNAL_TOPIC_PREFIX)
        self.announced: set[str] = set()  # what we told the proxy we want
        self.backlog: deque[tuple] = deque()
        self.sent = 0
        self.received = 0
        self.rejected = 0
        self.terminated = threading.Event()
        self.joined = False  # set once the joiner added the link to the core
        self._warned = 0.0
        self._loop = asyncio.get_running_loop()
        self._reading_xsub = False
        self._context = zmq.Context(io_threads=1)
        try:
            self.xsub = self._context.socket(zmq.XSUB)
            self.xpub = self._context.socket(zmq.XPUB)
            self.xsub.rcvhwm = rcvhwm
            self.xpub.sndhwm = sndhwm
            self.xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.xpub.setsockopt(zmq.XPUB_NODROP, 1)
            for sock in (self.xsub, self.xpub):
                sock.linger = linger_ms
                if curve is not None:
                    curve.configure_client(sock)
            self._monitors = {
                "XSUB": self.xsub.get_monitor_socket(_MONITORED),
                "XPUB": self.xpub.get_monitor_socket(_MONITORED),
            }
            self.xsub.connect(xsub_endpoint)
            self.xpub.connect(xpub_endpoint)
        except zmq.ZMQError:
            self._context.destroy(0)
            raise
        self.source.on_room = self._on_source_room
        self._watch(self.xsub, self._read_xsub)
        self._watch(self.xpub, self._read_xpub)
        for name, monitor in self._monitors.items():
            self._watch(
                monitor, lambda name=name, monitor=monitor: self._read_monitor(name, monitor)
            )
        self._reading_xsub = True

    def _watch(self, sock: zmq.Socket, callback: Callable[[], None]) -> None:
        self._loop.add_reader(sock.getsockopt(zmq.FD), callback)
        self._loop.call_soon(callback)  # the descriptor is edge-triggered: look once now

    # -- the Link contract ----------------------------------------------------------------

    def room(self) -> int:
        if self.backlog:
            return 0
        return self.core.options.peer_buffer_size

    def want_room(self) -> None:
        return None  # the XPUB's readiness is watched whenever the backlog holds something

    def deliver(self, msgs: list) -> None:
        if self.closed:
            return
        if self.backlog:
            self.backlog.extend(msgs)
        else:
            self._send(msgs)
        self._look_again()

    def _send(self, msgs: Any) -> None:
        """Send as many of ``msgs`` as ZeroMQ takes; keep the rest in the backlog."""
        send = self.xpub.send_multipart
        node_id = self.node_id
        sent = 0
        for i, m in enumerate(msgs):
            if m[2] != DATA:  # store commands do not travel over ZeroMQ
                continue
            try:
                send([m[0].encode("utf-8"), node_id, EVENT_SERIALIZER, m[1]], zmq.NOBLOCK)
            except zmq.Again:
                rest = list(msgs)[i:]
                self.backlog.extend(rest)
                break
            sent += 1
        self.sent += sent

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        """Subscribe to what is new in ``prefixes`` on the proxy, unsubscribe what left."""
        if self.closed:
            return
        wanted = set(prefixes)
        for topic in sorted(wanted - self.announced):
            self.xsub.send(b"\x01" + topic.encode("utf-8"))
        for topic in sorted(self.announced - wanted):
            self.xsub.send(b"\x00" + topic.encode("utf-8"))
        self.announced = wanted
        self._look_again()

    def subscribe_marker(self, topic: str, subscribe: bool = True) -> None:
        """Subscribe (or not) to a topic of our own, outside the core's filter: seeing it
        come back on the XPUB tells the joiner the proxy forwards both ways."""
        self.xsub.send((b"\x01" if subscribe else b"\x00") + topic.encode("utf-8"))
        self._look_again()

    async def acknowledge(self, deadline: float) -> None:
        """ZeroMQ acknowledges nothing: the most it tells is that the XPUB handed every
        message to its connection with the proxy. So: wait until the backlog went into the
        socket, then leave (the link is closed, as the core forgets it) and wait until
        ZeroMQ's context ends, which it does once the socket's queue is written, or once
        ``linger_ms`` passed, which fails the acknowledgement."""
        loop = asyncio.get_running_loop()
        delay = 0.0005
        while self.backlog and not self.closed:
            if loop.time() > deadline:
                raise DeliveryError("timed out waiting until the ZeroMQ link sent its backlog")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        if self.closed:
            raise DeliveryError(f"the ZeroMQ link to {self.peer_str} closed before the ack")
        started = loop.time()
        self.core.remove_link(self, SC.PeerRemoved)
        while not self.terminated.is_set():
            if loop.time() > deadline:
                raise DeliveryError(f"the ZeroMQ proxy {self.peer_str} did not take the messages")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        if loop.time() - started >= self.linger_ms / 1000:
            raise DeliveryError(
                f"the ZeroMQ proxy {self.peer_str} did not take the messages within "
                f"{self.linger_ms} ms"
            )

    def close(self, reason: SC = SC.PeerLost) -> None:
        if self.closed:
            return
        self.closed = True
        self.source.close()
        self.backlog.clear()
        sockets = [self.xsub, self.xpub, *self._monitors.values()]
        for sock in sockets:
            with contextlib.suppress(zmq.ZMQError, ValueError, RuntimeError):
                self._loop.remove_reader(sock.getsockopt(zmq.FD))
        for sock in (self.xsub, self.xpub):
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
        for monitor in self._monitors.values():
            monitor.close(0)
        self.xsub.close(0)  # nothing of ours waits in the XSUB but subscriptions
        self.xpub.close(self.linger_ms)
        # Terminating waits until what the XPUB holds is sent or the linger passed: not here.
        threading.Thread(
            target=self._terminate, name="broker-spark-zeromq-term", daemon=True
        ).start()

    def _terminate(self) -> None:
        try:
            self._context.term()
        finally:
            self.terminated.set()

    # -- reading ---------------------------------------------------------------------------

    def _look_again(self) -> None:
        """After a send, input may be waiting without the descriptor saying so: look."""
        if not self.closed:
            self._loop.call_soon(self._read_xpub)
            if self._reading_xsub:
                self._loop.call_soon(self._read_xsub)

    def _read_xsub(self) -> None:
        if self.closed or not self._reading_xsub:
            return
        core = self.core
        src = self.source
        ttl = core.options.ttl
        sender = self.peer_id
        own = self.node_id
        batch: list[tuple] = []
        room = src.room()
        recv = self.xsub.recv_multipart
        core.begin_io()
        try:
            for _ in range(min(_TURN, room)):
                try:
                    frames = recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) != 4 or frames[2] != EVENT_SERIALIZER:
                    self._reject(frames)
                    continue
                if frames[1] == own:
                    continue  # our own publication, back through the proxy
                try:
                    topic = frames[0].decode("utf-8")
                except UnicodeDecodeError:
                    self._reject(frames)
                    continue
                batch.append((topic, frames[3], DATA, ttl, sender))
            else:
                if room > _TURN:  # more may wait: next turn, after other callbacks
                    self._loop.call_soon(self._read_xsub)
            if batch:
                self.received += len(batch)
                src.offer(batch)
            if src.room() <= 0:
                self._reading_xsub = False
                src.want_room()
        finally:
            core.end_io()

    def _on_source_room(self) -> None:
        if not self.closed and not self._reading_xsub:
            self._reading_xsub = True
            self._loop.call_soon(self._read_xsub)

    def _reject(self, frames: list[bytes]) -> None:
        self.rejected += 1
        if len(frames) != 4:
            why = f"{len(frames)} frames, an event message has 4"
        else:
            why = (
                f"serializer {frames[2][:40]!r}: only {EVENT_SERIALIZER.decode()} is read "
                "(Zeek's default Cluster::event_serializer)"
            )
        sender = frames[1][:80].decode("utf-8", "replace") if len(frames) > 1 else "?"
        text = f"dropped a message from {sender} via the ZeroMQ proxy: {why}"
        if self.rejected <= 3 or self.rejected % 1000 == 0:
            log.warning("%s (%d so far)", text, self.rejected)
        self.core.emit(Error(EC.DeserializationFailed, text, self.info()))

    def _read_xpub(self) -> None:
        """Subscriptions the cluster's nodes announce, and room to send again."""
        if self.closed:
            return
        changed = False
        while True:
            try:
                frame = self.xpub.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if not frame or frame[0] > 1:
                continue  # not a subscription message
            topic = frame[1:].decode("utf-8", "surrogateescape")
            if topic.startswith(INTERNAL_TOPIC_PREFIX):  # a node checking its proxy: not for us
                (self.internal.add if frame[0] == 1 else self.internal.discard)(topic)
                continue
            if frame[0] == 1:
                if topic not in self.subscriptions:
                    self.subscriptions.add(topic)
                    changed = True
            elif topic in self.subscriptions:
                self.subscriptions.discard(topic)
                changed = True
        if changed:
            self.core.on_link_filter(self, tuple(sorted(self.subscriptions)))
        if self.backlog and self.xpub.getsockopt(zmq.EVENTS) & zmq.POLLOUT:
            pending = list(self.backlog)
            self.backlog.clear()
            self._send(pending)
            if not self.backlog:
                self.core.wake()
        if self.backlog:
            # ZeroMQ signals room on the same descriptor, but only as an edge: poll gently.
            self._loop.call_later(0.001, self._read_xpub)

    def _read_monitor(self, name: str, monitor: zmq.Socket) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while not self.closed:
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            kind = event["event"]
            endpoint = self.xsub_endpoint if name == "XSUB" else self.xpub_endpoint
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                if self.on_handshake is not None:
                    self.on_handshake(name, True, "")
            elif kind == zmq.EVENT_DISCONNECTED:
                log.info("the ZeroMQ proxy's %s at %s disconnected; ZeroMQ redials", name, endpoint)
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self.joined:
                # a connection lost during a handshake once joined: ZeroMQ redials (not
                # fatal to Zeek either, scripts/policy/frameworks/cluster/backend/zeromq/
                # main.zeek); said every 10 s at most, as ZeroMQ retries every 0.1 s
                now = time.monotonic()
                if now - self._warned >= 10.0:
                    self._warned = now
                    log.warning(
                        "the %s handshake with the ZeroMQ proxy at %s failed (error %s); "
                        "ZeroMQ retries",
                        name,
                        endpoint,
                        event.get("value"),
                    )
            else:
                why = _handshake_failure(kind, event.get("value"))
                text = f"the {name} handshake with the ZeroMQ proxy at {endpoint} failed: {why}"
                log.warning("%s", text)
                self.core.emit(Error(EC.PeerInvalid, text, self.info()))
                if self.on_handshake is not None:
                    self.on_handshake(name, False, text)


def _handshake_failure(kind: int, value: Any) -> str:
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"the proxy refused our CURVE client key (ZAP status {value})"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return "a ZeroMQ protocol error: a wrong CURVE server public key, or CURVE on one side only"
    return (
        f"the proxy closed the connection during the handshake (error {value}): with CURVE, "
        "a wrong server public key, or the proxy does not use CURVE"
    )


def zeromq_node_id(endpoint_id: str) -> str:
    """Our node id on the cluster (frame 1), unique per endpoint, in the spirit of Zeek's
    ``zeromq_<node>_<host>_<pid>_N<unique>``."""
    import os
    import socket

    return f"zeromq_broker-spark_{socket.gethostname()}_{os.getpid()}_N{endpoint_id}"


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` from a thread other than the loop's (for joiners)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
