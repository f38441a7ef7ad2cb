"""Every byte a peered link sends, framed here: the sending half of a peer session.

:class:`~broker_spark.protocol.peer_session.PeerSession` decides what is read and
what the handshake and the keep-alives write; once peered, its :class:`LinkWriter`
makes every other frame of the connection: the core's data and commands (version 1
envelopes from a cached header per topic, type and TTL; version 2 routed
publications from the fabric's headers), routed copies a hop forwards, routing
updates, routing messages of version 2, pings, pongs and the goodbye. It also
holds the bounded send buffer and its overflow policy, since both are decisions
about bytes: which frames wait, and which are dropped when the peer reads too
slowly. The shell (:class:`~broker_spark.core.connection.PeerConnection`) only
writes what :meth:`LinkWriter.data_to_send` gives it, when its transport takes
writes; the link (:class:`~broker_spark.core.tcp_link.TcpLink`) only says what to
send. So a test sees a link's every outgoing byte without a socket, as websockets'
``Protocol`` shows with ``send_*`` and ``data_to_send``.

It sits on the hot path: a batch of messages becomes one list of byte chunks
(length prefix, cached header, payload), joined once per write.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from broker_spark.protocol.framing import frame_prefix
from broker_spark.protocol.wire_messages import (
    BROADCAST,
    bye_token,
    encode_node_message,
    encode_ping,
    encode_pong_for,
    encode_routing_update,
)

__all__ = ["HEAD_CACHE_SIZE", "LinkWriter", "Run"]

#: Cached envelope headers per link before the cache starts over.
HEAD_CACHE_SIZE = 4096

_U32 = frame_prefix

#: A run of frames that share one header: ``(header, payloads)``; each frame is the
#: header followed by one payload (a header of ``b""`` sends the payloads as bodies).
Run = tuple[bytes, list[bytes]]


class LinkWriter:
    """The outgoing frames of one peered connection, and the bound on how many wait.

    ``capacity`` messages may wait for the transport; past it the link's room is 0
    (the core holds back) until the peer is found stalled, when ``policy`` decides:
    ``drop_newest`` refuses what comes, ``drop_oldest`` drops what waits longest.
    """

    __slots__ = (
        "own_id",
        "peer_id",
        "capacity",
        "policy",
        "queued",
        "dropping",
        "dropped",
        "closed",
        "_out",
        "_heads",
        "_v2_heads",
        "_v2_version",
    )

    def __init__(self, own_id: bytes, peer_id: bytes, capacity: int, policy: str) -> None:
        self.own_id = own_id
        self.peer_id = peer_id
        self.capacity = capacity
        self.policy = policy
        #: Messages among the waiting bytes (what the bound counts).
        self.queued = 0
        #: The peer was found stalled: the overflow policy drops instead of holding back.
        self.dropping = False
        #: Messages the overflow policy dropped, in all.
        self.dropped = 0
        #: The connection is closing: only :meth:`urgent` frames are taken.
        self.closed = False
        self._out: list[bytes] = []  # byte chunks forming whole frames
        self._heads: dict[tuple[str, int, int], bytes] = {}
        self._v2_heads: dict[tuple[str, int, int, bytes], bytes | None] = {}
        self._v2_version = -1

    # -- the shell's side ------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Every waiting frame, in order; the buffer is empty afterwards."""
        out = self._out
        if not out:
            return b""
        self._out = []
        self.queued = 0
        return b"".join(out)

    def close(self) -> None:
        """The connection closes: what waits still goes, nothing new but :meth:`urgent`."""
        self.closed = True

    def room(self) -> int:
        """How many more messages may be queued before the core should hold back."""
        return self.capacity - self.queued

    # -- what the link sends ------------------------------------------------------------

    def messages(self, msgs: list) -> None:
        """The core's messages ``(topic, payload, kind, ttl, ...)`` as version 1 envelopes
        from us to everyone (the last hop names itself: the rewrite a forwarding hop does)."""
        heads = self._heads
        parts: list[bytes] = []
        extend = parts.extend
        topic = None
        ttl = kind = -1
        head = b""
        size = 0
        for m in msgs:
            if m[0] is not topic or m[3] != ttl or m[2] != kind:
                topic, kind, ttl = m[0], m[2], m[3]
                key = (topic, kind, ttl)
                head = heads.get(key) or self._head(key)
                size = len(head)
            payload = m[1]
            extend((_U32(size + len(payload)), head, payload))
        self._queue(parts, len(msgs))

    def _head(self, key: tuple[str, int, int]) -> bytes:
        topic, kind, ttl = key
        head = encode_node_message(self.own_id, BROADCAST, kind, ttl, topic, b"")
        if len(self._heads) >= HEAD_CACHE_SIZE:
            self._heads.clear()
        self._heads[key] = head
        return head

    def messages_v2(
        self,
        msgs: list,
        header_for: Callable[[bytes, str, int, int, bytes], bytes | None],
        routes_version: int,
    ) -> None:
        """The core's messages ``(topic, payload, kind, ttl, sender)`` as version 2 routed
        publications: ``header_for`` (the fabric's) gives the header for this peer, or None
        where the peer is on no branch of the message's multipath (nothing is sent);
        headers are cached until ``routes_version`` changes."""
        heads = self._v2_heads
        if self._v2_version != routes_version or len(heads) >= HEAD_CACHE_SIZE:
            heads.clear()
            self._v2_version = routes_version
        parts: list[bytes] = []
        extend = parts.extend
        count = 0
        topic = sender = None
        ttl = kind = -1
        head: bytes | None = None
        size = 0
        peer = self.peer_id
        for m in msgs:
            if m[0] is not topic or m[4] is not sender or m[3] != ttl or m[2] != kind:
                topic, kind, ttl, sender = m[0], m[2], m[3], m[4]
                key = (topic, kind, ttl, sender)
                head = heads.get(key, False)  # type: ignore[arg-type]
                if head is False:
                    head = heads[key] = header_for(peer, *key)
                size = len(head) if head is not None else 0
            if head is None:
                continue
            payload = m[1]
            extend((_U32(size + len(payload)), head, payload))
            count += 1
        if count:
            self._queue(parts, count)

    def runs(self, runs: Iterable[Run], count: int) -> None:
        """Frames a hop forwards, ``count`` in all: each run's header before each payload."""
        parts: list[bytes] = []
        extend = parts.extend
        for header, payloads in runs:
            size = len(header)
            for payload in payloads:
                extend((_U32(size + len(payload)), header, payload))
        self._queue(parts, count)

    def body(self, body: bytes) -> None:
        """One control message whose body is encoded already (a version 2 routing message)."""
        self._queue([_U32(len(body)), body], 1)

    def routing_update(self, prefixes: Iterable[str]) -> None:
        """Version 1's ``routing_update``: our filter for this peer."""
        self.body(encode_routing_update(self.own_id, self.peer_id, tuple(prefixes)))

    def ping(self, token: bytes) -> None:
        """A ping the peer answers with a pong carrying ``token`` (after what came first)."""
        self.body(encode_ping(self.own_id, self.peer_id, token))

    def pong_for(self, ping: Any) -> None:
        """The pong answering a received ping (a decoded ``NodeMessage``)."""
        self.body(encode_pong_for(ping, self.own_id))

    def bye(self) -> bytes:
        """The goodbye ping (WIRE.md): sent even while closing; its token, to know its pong."""
        token = bye_token(int.from_bytes(os.urandom(8), "little"))
        self.urgent(encode_ping(self.own_id, self.peer_id, token))
        return token

    def urgent(self, body: bytes) -> None:
        """A control frame that must leave even while the connection closes."""
        self._out += (_U32(len(body)), body)
        self.queued += 1

    # -- the bound ----------------------------------------------------------------------

    def peer_reads_again(self) -> None:
        """The transport takes writes again: once at most half the bound waits, the core is
        held back again instead of the overflow policy dropping (a write of everything
        waiting leaves none)."""
        if self.dropping and self.queued <= self.capacity // 2:
            self.dropping = False

    def _queue(self, parts: list[bytes], count: int) -> None:
        if self.closed:
            return
        if self.dropping and self.queued + count > self.capacity:
            if self.policy == "drop_newest":
                self.dropped += count
                return
            self._drop_oldest(self.queued + count - self.capacity)
        self._out += parts
        self.queued += count

    def _drop_oldest(self, n: int) -> None:
        """Discard the ``n`` oldest waiting frames (the buffer is cut at frame lengths)."""
        buf = b"".join(self._out)
        pos = 0
        dropped = min(n, self.queued)
        for _ in range(dropped):
            pos += 4 + int.from_bytes(buf[pos : pos + 4], "big")
        self._out = [buf[pos:]]
        self.queued -= dropped
        self.dropped += dropped
