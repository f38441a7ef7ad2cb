"""Peering two endpoints of the same process without sockets (an internal/test API).

A :class:`MemoryLink` is one core's view of a peer core in the same process.
Links come in pairs, one per side; a message batch that core A routes to its
link goes straight into the inbound :class:`~broker_spark.core.queues.Source`
of B's link, one ``extend`` and at most one wake-up of B's loop per batch.
Room is B's inbound room, so a slow subscriber on B stalls B's inbound source,
which fills, which stalls A's routing, which blocks A's publishers: end-to-end
backpressure with every buffer bounded (in-process links always apply
backpressure; the peer overflow policy is for network peers).

Filters travel as a callback on the other loop. :func:`connect` returns only
after both sides registered the link and know each other's filter, so a test
can publish right away; both sides report ``EndpointDiscovered`` then
``PeerAdded``, and :func:`disconnect` makes both report ``PeerRemoved``
(a side that shuts down makes the other report ``PeerLost``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from broker_spark.core.link import Link
from broker_spark.errors import SC, DeliveryError, ShutdownError
from broker_spark.status import PeerFlags

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = ["MemoryLink", "connect", "disconnect"]


class MemoryLink(Link):
    """This core's half of an in-process peering; ``other`` is the peer's half."""

    kind = "memory"

    __slots__ = ("other",)

    def __init__(self, core: Core, peer: Core, capacity: int | None = None) -> None:
        super().__init__(core, peer.node_id, flags=PeerFlags.Local, capacity=capacity)
        self.other: MemoryLink | None = None

    def room(self) -> int:
        assert self.other is not None
        return self.other.source.room()

    def want_room(self) -> None:
        assert self.other is not None
        self.other.source.want_room()

    def deliver(self, msgs: list) -> None:
        assert self.other is not None
        self.other.source.offer(msgs)

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        other = self.other
        if other is None or other.closed:
            return
        with contextlib.suppress(ShutdownError):
            other.core.loop_thread.call_soon(other.core.on_link_filter, other, prefixes)

    async def acknowledge(self, deadline: float) -> None:
        """What :meth:`deliver` handed over is in the peer's inbound queue already."""
        if self.closed:
            raise DeliveryError(f"the in-process peering with {self.peer_str} ended before the ack")

    def close(self, reason: SC = SC.PeerLost) -> None:
        if self.closed:
            return
        self.closed = True
        self.source.close()
        other = self.other
        if other is None or other.closed:
            return
        try:
            other.core.loop_thread.call_soon(other.core.remove_link, other, reason)
        except ShutdownError:
            other.closed = True


def _core(x: Any) -> Core:
    core = getattr(x, "_core", x)
    if not hasattr(core, "add_link"):
        raise TypeError(f"expected an Endpoint or Core, got {type(x).__name__}")
    return core


def connect(a: Any, b: Any, capacity: int | None = None) -> tuple[MemoryLink, MemoryLink]:
    """Peer endpoints ``a`` and ``b`` in memory; returns (a's link, b's link).

    Call from a thread that is neither endpoint's loop. ``capacity`` bounds
    each direction (default: the receiver's ``peer_buffer_size``).
    """
    ca, cb = _core(a), _core(b)
    if ca is cb:
        raise ValueError("cannot connect an endpoint to itself")
    la = MemoryLink(ca, cb, capacity)
    lb = MemoryLink(cb, ca, capacity)
    la.other, lb.other = lb, la
    # When A drains what B sent (la.source), a stalled B may continue, and vice versa.
    la.source.on_room = cb.wake
    lb.source.on_room = ca.wake
    ca.loop_thread.run_sync(ca.add_link, la)
    try:
        cb.loop_thread.run_sync(cb.add_link, lb)
    except BaseException:
        ca.loop_thread.run_sync(ca.remove_link, la, SC.PeerRemoved)
        raise
    # Barriers: each side's filter announcement was queued on the other loop
    # before these calls, so once they return both filters are in place.
    ca.loop_thread.run_sync(_noop)
    cb.loop_thread.run_sync(_noop)
    return la, lb


def disconnect(link: MemoryLink) -> None:
    """Unpeer: both sides report ``PeerRemoved``; returns once this side forgot the link."""
    core = link.core
    core.loop_thread.run_sync(core.remove_link, link, SC.PeerRemoved)
    other = link.other
    if other is not None:
        # Wait until the other side processed the removal too.
        with contextlib.suppress(ShutdownError):
            other.core.loop_thread.run_sync(_noop)


def _noop() -> None:
    return None
