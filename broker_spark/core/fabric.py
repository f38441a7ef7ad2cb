"""Version 2 on real links: the multi-hop fabric of one endpoint.

Two broker_spark endpoints whose hellos both offer version 2 route with the
developer guide's design (``protocol/routing.py``, ``protocol/multipath.py``):
subscriptions flood with their paths, every endpoint knows versioned paths to
all others, and each publication travels along a multipath, so endpoints that
subscribe to nothing still forward and loops never duplicate a message.

The :class:`Fabric` glues those sans-I/O pieces to the core without changing
how the core routes. Every version 2 link advertises, as its filter, the union
of the filters of all reachable version 2 endpoints, so the core hands it each
local publication that anyone in the fabric wants; the link then asks
:meth:`Fabric.header_for` whether its peer is the first hop of a branch of
that publication's multipath (and with which subtree), which the fabric
answers from a per-topic cache. Routed messages that arrive are forwarded here,
hop to hop, without ever decoding their payload; only a copy for this endpoint
enters the core, carrying the publisher as sender, so the core delivers it to
local subscribers and to version 1 peers (a gateway to Zeek), never back into
the fabric, which routed it already.

``disable_forwarding`` makes a leaf: it floods only its own subscription and
revocations, so no path ever runs through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker_spark.core.node_message import DATA
from broker_spark.data.varbyte import read_varbyte
from broker_spark.errors import EC, SC, BrokerError, DecodeError
from broker_spark.protocol.link_writer import LinkWriter
from broker_spark.protocol.multipath import Forwarder
from broker_spark.protocol.routing import (
    EndpointDiscovered,
    EndpointUnreachable,
    Router,
)
from broker_spark.protocol.v2_messages import (
    COMMAND_V2,
    DATA_V2,
    PathRevocation,
    RoutedMessage,
    SubscriptionUpdate,
    decode_v2,
    encode_v2,
    encode_v2_parts,
)
from broker_spark.status import EndpointInfo, Status
from broker_spark.topic import Filter

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = ["Fabric", "FabricConnection", "FabricLink", "RelayEntry"]

#: Topics whose branch tables are cached before the cache starts over.
BRANCH_CACHE_SIZE = 4096


def plan_payload(body: bytes) -> bytes:
    """The payload of a routed body whose header needed the full decoder."""
    _sender, _receiver, msg = decode_v2(body)
    assert isinstance(msg, RoutedMessage)
    return msg.payload


class FabricConnection(Protocol):
    """What the fabric needs of a version 2 link's connection (its send buffer and reading)."""

    decoder: Any  # the connection's EnvelopeReader: learns relay plans per header
    writer: LinkWriter | None  # the session's sending half: frames the copies forwarded

    def flush_soon(self) -> None: ...

    def room(self) -> int: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def fail(self, code: EC, message: str) -> None: ...


class FabricLink(Protocol):
    """What the fabric needs of a version 2 link (``core.tcp_link.TcpLink`` is one).

    Declared here, on the fabric's side, so the fabric does not know the link's
    module: the link uses the fabric, never the other way round.
    """

    peer_id: bytes
    closed: bool
    conn: FabricConnection

    def send_body(self, body: bytes) -> None: ...

    def report_invalid(self, what: str) -> None: ...


class RelayEntry:
    """What this hop does with one routed header, as learned by a link's envelope reader.

    Valid while the fabric's ``version`` (its routes and filters) is unchanged.
    """

    __slots__ = ("version", "head", "plan")

    def __init__(self, version: int, head: bytes, plan: tuple) -> None:
        self.version = version
        self.head = head
        self.plan = plan


class Fabric:
    """Router and forwarder of one endpoint, wired to its version 2 links."""

    def __init__(
        self,
        core: Core,
        *,
        routes_changed: Callable[[], None],
        union_changed: Callable[[], None],
    ) -> None:
        self.core = core
        self.own = core.node_id
        #: Called after every batch of routing news (a ``peer()`` may wait for routes).
        self._routes_changed = routes_changed
        #: Called when the union of filters changed (advertised filters need a refresh).
        self._union_changed = union_changed
        self.router = Router(self.own)
        self.forwarder = Forwarder(self.router)
        self.links: dict[bytes, FabricLink] = {}
        self.leaf = not self.core.forwarding
        #: Bumped whenever routes or filters change; links key their header caches on it.
        self.version = 0
        #: Union of the filters of every reachable version 2 endpoint.
        self.union: tuple[str, ...] = ()
        #: Reachable endpoints as id strings, readable from any thread.
        self.reachable_strs: frozenset[str] = frozenset()
        self._routes_version = -1
        self._branches: dict[str, dict[bytes, bytes]] = {}
        self._removing: bytes | None = None
        self._blocked: list[FabricConnection] = []
        # Per distinct routed header: what this hop does (see receive_routed).
        self._hops: dict[bytes | None, tuple] = {}
        self._hops_version = -1
        #: The multipath of a copy that ends here: us, flagged, no children.
        self.leaf_multipath = self.own + b"\x01\x00"

    # -- links ---------------------------------------------------------------------

    def add_link(self, link: FabricLink) -> None:
        self.links[link.peer_id] = link
        self.router.add_neighbor(link.peer_id)
        self.flush()
        self.core.on_link_filter(link, self.union)

    def remove_link(self, link: FabricLink) -> None:
        if self.links.get(link.peer_id) is not link:
            return
        del self.links[link.peer_id]
        self._removing = link.peer_id
        try:
            self.router.remove_neighbor(link.peer_id)
            self.flush()
        finally:
            self._removing = None

    def reachable(self, node: bytes) -> bool:
        return self.router.is_reachable(node)

    def set_filter(self, prefixes: tuple[str, ...]) -> None:
        if self.router.set_filter(prefixes):
            self.flush()

    # -- receiving -------------------------------------------------------------------

    def receive_routing(self, link: FabricLink, body: bytes) -> None:
        """A SUBSCRIPTION or REVOCATION from ``link``'s peer."""
        try:
            _sender, _receiver, msg = decode_v2(body)
            self.router.receive(link.peer_id, msg)
        except BrokerError as exc:
            # A peer that corrupts routing state cannot be trusted with more.
            link.conn.fail(EC.InvalidMessage, f"invalid routing message: {exc}")
            return
        self.flush()

    def receive_routed(self, link: FabricLink, body: bytes, outbox: dict) -> tuple | None:
        """A routed publication: queue its branches in ``outbox``; return a tuple if it is for us.

        What a hop does depends only on the header (type, TTL, topic, publisher,
        multipath), never on the payload, so the plan -- deliver or not, and the
        header for each child -- is computed once per distinct header and
        cached until the routes change. The link's envelope reader learns the
        plan too (a :class:`RelayEntry`), so later messages with the same
        header reach :meth:`relay` without being cut out and parsed. The
        copies for each next hop collect in ``outbox`` (``{link: [runs,
        count]}``, a run being a header and its payloads) and leave in one
        send per hop (:meth:`send_outbox`), framed by the hop's writer.
        """
        if self._hops_version != self.version:
            self._hops.clear()
            self._hops_version = self.version
        try:
            end = 37 + ((body[35] << 8) | body[36])
            mp_len, mp_start = read_varbyte(body, end + 16)
            mp_end = mp_start + mp_len
            key = body[32:mp_end] if mp_end <= len(body) else None
        except (IndexError, DecodeError):
            key = None
        plan = self._hops.get(key) if key is not None else None
        if plan is None:
            plan = self._plan_hop(link, body if key is None else body[:mp_end])
            if plan is None:
                return None
            if key is not None:
                if len(self._hops) >= BRANCH_CACHE_SIZE:
                    self._hops.clear()
                self._hops[key] = plan
        if key is None:
            return self.relay(plan, plan_payload(body), outbox)
        if body[32] == DATA_V2:
            head = body[:mp_end]
            link.conn.decoder.learn(head, RelayEntry(self.version, head, plan))
        return self.relay(plan, body[mp_end:], outbox)

    def relay(self, plan: tuple, payload: bytes, outbox: dict) -> tuple | None:
        """Carry out a hop's ``plan`` for one payload; the message for us, if any."""
        msgs = self.relay_run(plan, [payload], outbox)
        return msgs[0] if msgs else None

    def relay_run(self, plan: tuple, payloads: list[bytes], outbox: dict) -> list[tuple]:
        """Carry out a hop's ``plan`` for a run of payloads; the messages for us."""
        deliver, forwards = plan
        links = self.links
        for child, header in forwards:
            target = links.get(child)
            if target is None or target.closed:
                continue
            box = outbox.get(target)
            if box is None:
                box = outbox[target] = [[], 0]
            box[0].append((header, payloads))
            box[1] += len(payloads)
        if deliver is None:
            return []
        topic, kind, ttl, publisher = deliver
        return [(topic, payload, kind, ttl, publisher) for payload in payloads]

    def send_outbox(self, link: FabricLink, outbox: dict) -> None:
        """Send what :meth:`receive_routed` queued; stop reading ``link`` if a hop is full."""
        for target, (runs, count) in outbox.items():
            if target.closed:
                continue
            conn = target.conn
            writer = conn.writer
            if writer is None:
                continue
            writer.runs(runs, count)
            conn.flush_soon()
            if target.conn.room() <= 0 and link.conn not in self._blocked:
                # The next hop is backed up: stop reading from this one until it drains.
                self._blocked.append(link.conn)
                link.conn.pause_reading()
        outbox.clear()

    def _plan_hop(self, link: FabricLink, head: bytes) -> tuple | None:
        """Decode a routed message's header and work out what this hop does with it."""
        try:
            _sender, _receiver, msg = decode_v2(head)
            if not isinstance(msg, RoutedMessage):
                raise DecodeError("not a routed message")
            result = self.forwarder.receive(msg)
        except BrokerError as exc:
            link.report_invalid(f"invalid routed message: {exc}")
            return None
        forwards = [
            (child, encode_v2_parts(self.own, child, fwd)[0]) for child, fwd in result.forwards
        ]
        deliver = None
        if result.deliver:
            kind = DATA if msg.kind == DATA_V2 else 2
            deliver = (msg.topic, kind, msg.ttl, msg.publisher)
        return deliver, forwards

    def room_freed(self, conn: FabricConnection) -> None:
        """``conn`` flushed its send buffer: resume hops that waited for it."""
        if self._blocked and conn.room() > 0:
            blocked, self._blocked = self._blocked, []
            for c in blocked:
                c.resume_reading()

    # -- publishing ------------------------------------------------------------------

    def header_for(
        self, child: bytes, topic: str, kind: int, ttl: int, sender: bytes
    ) -> bytes | None:
        """The v2 header to put before a payload sent to neighbour ``child``, or None.

        None when ``child`` is on no branch of the topic's multipath, and for
        messages that came out of the fabric (their publisher is a known v2
        endpoint): those were routed along their multipath already.
        """
        own = self.own
        if sender != own and self.router.timestamp_of(sender) is not None:
            return None
        branches = self._branches.get(topic)
        if branches is None:
            if len(self._branches) >= BRANCH_CACHE_SIZE:
                self._branches.clear()
            plan, _unroutable = self.forwarder.plan(self.router.subscribers(topic))
            branches = self._branches[topic] = dict(plan)
        subtree = branches.get(child)
        if subtree is None or ttl < 1:
            return None
        routed = RoutedMessage(
            DATA_V2 if kind == DATA else COMMAND_V2, ttl, topic, sender, subtree, b""
        )
        return encode_v2_parts(own, child, routed)[0]

    # -- the router's output -------------------------------------------------------------

    def flush(self) -> None:
        """Send what the router wants sent, turn its events into statuses, refresh filters."""
        router = self.router
        own = self.own
        for nb, msg in router.outgoing():
            if self.leaf and not _own_message(msg, own):
                continue
            link = self.links.get(nb)
            if link is not None and not link.closed:
                link.send_body(encode_v2(own, nb, msg))
        core = self.core
        changed = False
        for ev in router.events():
            changed = True
            node = ev.endpoint
            if node in core.links:
                continue
            if isinstance(ev, EndpointDiscovered):
                code = SC.EndpointDiscovered
                text = "found a new endpoint in the network"
            elif isinstance(ev, EndpointUnreachable) and node != self._removing:
                code = SC.EndpointUnreachable
                text = "lost the last path"
            else:
                continue
            core.emit(Status(code, EndpointInfo(core.id_to_str(node)), text))
        self._routes_changed()
        if router.routes_version != self._routes_version:
            self._routes_version = router.routes_version
            self.version += 1
            self._branches.clear()
            changed = True
        if changed:
            self._update_union()

    def _update_union(self) -> None:
        router = self.router
        core = self.core
        union = Filter()
        reachable = router.reachable()
        for node in reachable:
            for prefix in router.filter_of(node) or ():
                union.add(prefix)
        self.reachable_strs = frozenset(core.id_to_str(n) for n in reachable)
        new = tuple(union.prefixes())
        if new != self.union:
            self.union = new
            for link in list(self.links.values()):
                core.on_link_filter(link, new)
            self._union_changed()
        core._notify_changed()


def _own_message(msg: object, own: bytes) -> bool:
    """Whether a leaf may send ``msg``: only its own subscription and revocations."""
    if isinstance(msg, SubscriptionUpdate):
        return msg.path == (own,)
    if isinstance(msg, PathRevocation):
        return msg.revoker == own
    return False
