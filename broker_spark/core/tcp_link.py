"""The core's view of a peer reached over TCP: node messages in and out (phase 3).

A :class:`TcpLink` exists once its :class:`~broker_spark.core.connection.PeerConnection`
finished the handshake. It hands the core's message tuples to its session's
:class:`~broker_spark.protocol.link_writer.LinkWriter`, which frames every byte
sent, turns received envelopes into tuples, and handles the control messages of WIRE.md:
``routing_update`` (the peer's new filter), ``ping``/``pong`` (answered at
once; the ``BYE`` goodbye on unpeer and shutdown) and, on a version 2 link, the
routing messages and routed publications of the multi-hop fabric
(:mod:`broker_spark.core.fabric`).

Both directions sit on the hot path, so the writer builds envelopes from a
cached header per (topic, type, TTL) plus the payload, and they are parsed
inline with the same checks as
:func:`~broker_spark.protocol.wire_messages.decode_node_message`. In version 1
the sender field always names us (the last hop), which is the rewrite a
forwarding hop does; the core has already decremented the TTL.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker_spark.core.link import Link
from broker_spark.errors import EC, SC, BrokerError, DecodeError, DeliveryError
from broker_spark.protocol.link_writer import LinkWriter
from broker_spark.protocol.v2_messages import COMMAND_V2, DATA_V2, REVOCATION
from broker_spark.protocol.wire_messages import (
    BROADCAST,
    ENVELOPE_HEADER_SIZE,
    MSG_COMMAND,
    MSG_DATA,
    MSG_PING,
    MSG_PONG,
    MSG_ROUTING_UPDATE,
    decode_filter,
    decode_node_message,
    with_sender_and_ttl,
)
from broker_spark.status import NetworkInfo, PeerFlags

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.fabric import Fabric

__all__ = ["LinkConnection", "LinkHost", "TcpLink"]

#: Our acknowledgement pings (``acknowledge``): 11 bytes like a goodbye token, but not
#: ``BYE``, so the peer only answers.
ACK_PREFIX = b"ACK"


class LinkConnection(Protocol):
    """What a link needs of the connection under it (``core.connection.PeerConnection``).

    The connection owns its link; the link only talks back through these.
    """

    closing: bool
    decoder: Any  # the connection's EnvelopeReader (learns headers)
    writer: LinkWriter | None  # the session's sending half (set once peered)

    def flush_soon(self) -> None: ...

    def flush_now(self) -> None: ...

    def room(self) -> int: ...

    def want_room(self) -> None: ...

    def close(self) -> None: ...

    def begin_goodbye(self, timeout: float) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class LinkHost(Protocol):
    """What a link needs of the endpoint's peering, declared here so the link never
    imports its owner: the fabric, the timing of goodbyes, and where its news go."""

    core: Core
    node_id: bytes
    fabric: Fabric
    bye_timeout: float
    refresh_filters: Callable[[], None]

    def link_closed(self, link: TcpLink, reason: SC) -> None: ...

    def link_lost(self, link: TcpLink, reason: SC) -> None: ...

    def peer_filter(self, link: TcpLink, prefixes: tuple[str, ...]) -> None: ...

    def report(self, code: EC, message: str, link: Link | None = None) -> None: ...


class TcpLink(Link):
    """One peered TCP/TLS connection, as the core sees it."""

    kind = "broker"

    __slots__ = (
        "conn",
        "peering",
        "version",
        "own_id",
        "sent_filter",
        "bye_received",
        "bye_token",
        "writer",
        "_acks",
    )

    def __init__(
        self,
        peering: LinkHost,
        conn: LinkConnection,
        peer_id: bytes,
        version: int,
        network: NetworkInfo,
        flags: PeerFlags,
    ) -> None:
        super().__init__(peering.core, peer_id, network=network, flags=flags)
        self.conn = conn
        self.peering = peering
        self.version = version
        self.own_id = peering.node_id
        self.sent_filter: tuple[str, ...] = ()
        self.bye_received = False
        self.bye_token: bytes | None = None
        self._acks: dict[bytes, asyncio.Future[None]] = {}  # our pings' tokens, awaiting pongs
        writer = conn.writer
        assert writer is not None, "a link starts once its session is peered"
        #: Every frame this link sends is made here (the session's sending half).
        self.writer: LinkWriter = writer
        self.source.on_room = conn.resume_reading

    # -- the Link contract (called by the core) --------------------------------

    def room(self) -> int:
        return self.conn.room()

    def want_room(self) -> None:
        self.conn.want_room()

    def deliver(self, msgs: list) -> None:
        if self.closed:
            return
        if self.version >= 2:
            fabric = self.peering.fabric
            self.writer.messages_v2(msgs, fabric.header_for, fabric.version)
        else:
            self.writer.messages(msgs)
        self.conn.flush_soon()

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        # Our advertised filter also depends on the other peers' filters.
        self.peering.refresh_filters()

    def announce(self, prefixes: tuple[str, ...]) -> None:
        """Send a version 1 routing_update with our filter for this peer, if it changed."""
        if prefixes != self.sent_filter and not self.closed:
            self.sent_filter = prefixes
            self.writer.routing_update(prefixes)
            self.conn.flush_soon()

    async def acknowledge(self, deadline: float) -> None:
        """A ping behind everything sent so far; return once its pong arrives.

        The peer reads in order and answers a ping only after reading every
        earlier message, so the pong means it has taken them all (WIRE.md).
        """
        if self.closed:
            raise DeliveryError(f"the peering with {self.peer_str} ended before the ack")
        loop = asyncio.get_running_loop()
        token = ACK_PREFIX + os.urandom(8)
        waiter = self._acks[token] = loop.create_future()
        self.writer.ping(token)
        self.conn.flush_soon()
        try:
            await asyncio.wait_for(waiter, max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise DeliveryError(
                f"the peer {self.peer_str} did not acknowledge the messages in time "
                "(no pong to our ping)"
            ) from None
        finally:
            self._acks.pop(token, None)

    def close(self, reason: SC = SC.PeerLost) -> None:
        if self.closed:
            return
        self.closed = True
        self.source.close()
        for waiter in self._acks.values():
            if not waiter.done():
                waiter.set_exception(
                    DeliveryError(f"the peering with {self.peer_str} ended before the ack")
                )
        self._acks.clear()
        peering = self.peering
        peering.link_closed(self, reason)
        conn = self.conn
        if conn.closing:
            return
        if self.bye_received:
            conn.close()
            return
        self._send_bye()
        if peering.core.closed:
            conn.close()  # shutting down: no waiting for the pong
            return
        # Unpeer: close on the matching pong, or after a while.
        conn.begin_goodbye(peering.bye_timeout)

    def _send_bye(self) -> None:
        self.bye_token = self.writer.bye()
        self.conn.flush_now()

    # -- sending control messages ----------------------------------------------------

    def send_body(self, body: bytes) -> None:
        """A control message encoded already (the fabric's version 2 routing messages)."""
        self.writer.body(body)
        self.conn.flush_soon()

    # -- receiving ---------------------------------------------------------------------

    def receive(self, items: list, raw: int) -> None:
        """Frames from the peer: data and commands to the core, the rest handled here.

        ``items`` come from the connection's :class:`EnvelopeReader`: message
        tuples for frames whose header it knew, ``bytes`` bodies for the
        ``raw`` others. A batch without raw bodies goes to the core as it is.
        """
        if not raw:
            self._offer(items)
            return
        batch: list = []
        append = batch.append
        pid = self.peer_id
        own = self.own_id
        v2 = self.version >= 2
        leaf = self.peering.fabric.leaf_multipath
        leaf_len = len(leaf)
        learn = self.conn.decoder.learn
        fabric = self.peering.fabric
        outbox: dict = {}  # copies for next hops, sent after the batch
        version = fabric.version
        for body in items:
            if type(body) is tuple:
                if len(body) == 5:  # a message from a known header
                    append(body)
                    continue
                entry, payloads = body  # routed messages with one known header
                if entry.version == version:
                    batch += fabric.relay_run(entry.plan, payloads, outbox)
                else:  # the routes changed since: plan them again
                    for payload in payloads:
                        msg = fabric.receive_routed(self, entry.head + payload, outbox)
                        if msg is not None:
                            append(msg)
                continue
            size = len(body)
            if size <= ENVELOPE_HEADER_SIZE - 1:
                self.report_invalid(f"truncated envelope of {size} bytes")
                continue
            kind = body[32]
            if kind == DATA_V2 and v2:
                # A publication for which we are a leaf receiver: no forwarding.
                end = ENVELOPE_HEADER_SIZE + ((body[35] << 8) | body[36])
                start = end + 17
                if (
                    size > start
                    and body[end + 16] == leaf_len
                    and body.startswith(leaf, start)
                    and (body[33] or body[34])
                ):
                    try:
                        topic = body[ENVELOPE_HEADER_SIZE:end].decode("utf-8")
                    except UnicodeDecodeError:
                        pass  # the full decoder reports it
                    else:
                        fields = (topic, MSG_DATA, (body[33] << 8) | body[34], body[end : end + 16])
                        learn(body[: start + leaf_len], fields)
                        append((topic, body[start + leaf_len :], MSG_DATA, fields[2], fields[3]))
                        continue
            if kind in (MSG_DATA, MSG_COMMAND):
                if not body.startswith(BROADCAST, 16) and not body.startswith(own, 16):
                    self._forward_unicast(body, outbox)
                    continue
                end = ENVELOPE_HEADER_SIZE + ((body[35] << 8) | body[36])
                if end > size:
                    self.report_invalid("envelope topic runs past the end of the frame")
                    continue
                try:
                    topic = body[ENVELOPE_HEADER_SIZE:end].decode("utf-8")
                except UnicodeDecodeError:
                    self.report_invalid("envelope topic is not UTF-8")
                    continue
                ttl = (body[33] << 8) | body[34]
                learn(body[:end], (topic, kind, ttl, pid))
                append((topic, body[end:], kind, ttl, pid))
            elif kind >= DATA_V2 and v2:
                if kind <= COMMAND_V2:
                    msg = fabric.receive_routed(self, body, outbox)
                    if msg is not None:
                        append(msg)
                elif kind <= REVOCATION:
                    if batch:  # hand over what came first: routing may close the link
                        self.source.offer(batch)
                        batch = []
                        append = batch.append
                    if outbox:
                        fabric.send_outbox(self, outbox)
                    fabric.receive_routing(self, body)
                else:
                    self.report_invalid(f"unknown message type 0x{kind:02x}")
                if self.closed:
                    if outbox:  # forward what arrived before the close
                        fabric.send_outbox(self, outbox)
                    return
            else:
                if batch:  # hand over what came first: a goodbye ping closes the link
                    self.source.offer(batch)
                    batch = []
                    append = batch.append
                if outbox:
                    fabric.send_outbox(self, outbox)
                self._control(body)
                if self.closed:
                    return
        if outbox:
            fabric.send_outbox(self, outbox)
        if batch:
            self._offer(batch)

    def _forward_unicast(self, body: bytes, outbox: dict) -> None:
        """A data or command message addressed to another endpoint (WIRE.md, version 1).

        It goes on to that endpoint when it is a direct neighbour (the rule of
        version 1: "the receiver is P"), with us as sender and one hop less of
        TTL, as the raw envelope (a version 2 link carries version 1 messages
        too); otherwise, or without forwarding or TTL, it is dropped. It is
        never delivered here.
        """
        if not self.peering.core.forwarding or len(body) < ENVELOPE_HEADER_SIZE:
            return
        target = self.peering.core.links.get(body[16:32])
        ttl = (body[33] << 8) | body[34]
        if target is None or target is self or not isinstance(target, TcpLink) or ttl <= 1:
            return
        fwd = with_sender_and_ttl(body, self.own_id, ttl - 1)
        box = outbox.get(target)
        if box is None:
            box = outbox[target] = [[], 0]
        box[0].append((b"", [fwd]))
        box[1] += 1

    def _offer(self, batch: list) -> None:
        """Hand received messages to the core; stop reading while its queue is full."""
        source = self.source
        source.offer(batch)
        if source.room() <= 0:
            source.want_room()
            self.conn.pause_reading()

    def _control(self, body: bytes) -> None:
        try:
            msg = decode_node_message(body)
        except DecodeError as exc:
            self.report_invalid(str(exc))
            return
        kind = msg.msg_type
        if kind == MSG_ROUTING_UPDATE:
            try:
                prefixes = decode_filter(msg.payload)
            except BrokerError as exc:
                self.report_invalid(f"invalid routing_update: {exc}")
                return
            self.peering.peer_filter(self, prefixes)
        elif kind == MSG_PING:
            self.writer.pong_for(msg)
            self.conn.flush_soon()
            if msg.payload_bytes.startswith(b"BYE") and len(msg.payload) == 11:
                self.bye_received = True
                self.peering.link_lost(self, SC.PeerRemoved)
        elif kind == MSG_PONG:
            payload = msg.payload_bytes
            if self.bye_token is not None and payload == self.bye_token:
                self.conn.close()
                return
            waiter = self._acks.pop(payload, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def receive_after_close(self, bodies: list[bytes]) -> None:
        """After our goodbye ping: close as soon as its pong arrives."""
        token = self.bye_token
        for body in bodies:
            if (
                token is not None
                and len(body) > 32
                and body[32] == MSG_PONG
                and body.endswith(token)
            ):
                self.conn.close()
                return

    def report_invalid(self, what: str) -> None:
        """An envelope we cannot parse: dropped (as Broker does), and reported."""
        self.peering.report(
            EC.InvalidMessage, f"dropped an invalid message from {self.peer_str}: {what}", self
        )
