"""A link: the core's view of one neighbour (a directly connected peer).

The core needs four things from a neighbour, whatever carries the bytes: its
id, its filter (which topics it wants), a bounded path to send node messages
on, and a way to close. Everything else (sockets, TLS, the handshake,
framing, an in-process shortcut) lives in the subclass. Messages *from* the
neighbour enter the core through the link's :attr:`Link.source`, a bounded
:class:`~broker_spark.core.queues.Source` that the subclass feeds.

Subclasses implement :meth:`room`, :meth:`want_room`, :meth:`deliver`,
:meth:`send_filter` and :meth:`close`; the core calls all of them on its loop.
Each says what carries it in :attr:`Link.kind` and how its neighbour confirms
what it took in :meth:`Link.acknowledge` (``Endpoint.flush``), so nobody above
needs to tell link classes apart.

The contract, for a network link:

- ``deliver(msgs)`` gets node message tuples ``(topic, payload, kind, ttl,
  sender)`` (see :mod:`broker_spark.core.node_message`), never more than ``room()``
  allowed; write them as envelopes. When ``room()`` is 0 the core calls
  ``want_room()`` and stalls the flow; call ``core.wake()`` once room frees up.
- Received messages go into ``source`` with ``source.offer(msgs)`` after
  checking ``source.room()``; when it is full, pause reading, call
  ``source.want_room()`` and set ``source.on_room`` to resume reading.
- A new filter from the neighbour goes to ``core.on_link_filter(self, prefixes)``;
  a peering that is up to ``core.add_link(self)``; a lost one to
  ``core.remove_link(self, SC.PeerLost)`` (all on the core's loop).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from broker_spark.config import BrokerOptions
from broker_spark.core.queues import Sink, Source
from broker_spark.errors import SC, DeliveryError
from broker_spark.status import EndpointInfo, NetworkInfo, PeerFlags

__all__ = ["Link", "LinkCore"]


class LinkCore(Protocol):
    """What a link needs of the core it joins (``core.actor.Core`` is one).

    Declared here because the core routes to links and so imports this module;
    a link that named the core's class would make the two know each other.
    Subclasses that need more of the core keep it as ``self.core`` all the same.
    """

    options: BrokerOptions

    def id_to_str(self, node_id: bytes) -> str: ...

    def make_source(self, capacity: int, *, remote: bool = False, link: Any = None) -> Source: ...


class Link(Sink):
    """One neighbour of a core.

    ``prefixes`` is the neighbour's filter as a tuple (``str.startswith``
    takes a tuple, which makes matching one call); the core replaces it when
    the neighbour announces a new filter. ``takes_forwarded`` is False for a
    neighbour that gets only this endpoint's own publications (a WebSocket
    bridge that publishes what we publish, on any topic): the core then
    forwards no peer's message to it, and its prefixes are not asked of peers.
    """

    #: What carries the link: ``"broker"`` (Broker's wire protocol over TCP/TLS),
    #: ``"websocket"`` (a bridge to Zeek's WebSocket API), ``"zeromq"`` (a Zeek cluster's
    #: proxy) or ``"memory"`` (an in-process peering).
    kind: ClassVar[str] = "link"

    __slots__ = (
        "core",
        "peer_id",
        "peer_str",
        "network",
        "flags",
        "prefixes",
        "takes_forwarded",
        "source",
        "closed",
    )

    def __init__(
        self,
        core: Any,
        peer_id: bytes,
        *,
        network: NetworkInfo | None = None,
        flags: PeerFlags = PeerFlags.Remote,
        capacity: int | None = None,
    ) -> None:
        super().__init__()
        #: The core this link belongs to (a :class:`LinkCore`; typed loosely so that
        #: subclasses may use all of it).
        self.core = core
        self.peer_id = peer_id
        self.peer_str = core.id_to_str(peer_id)
        self.network = network if network is not None else NetworkInfo()
        self.flags = flags
        self.prefixes: tuple[str, ...] = ()
        self.takes_forwarded = True
        self.source: Source = core.make_source(
            capacity if capacity is not None else core.options.peer_buffer_size,
            remote=True,
            link=self,
        )
        self.closed = False

    def info(self) -> EndpointInfo:
        return EndpointInfo(self.peer_str, self.network)

    # -- what subclasses provide (called on the core's loop) ---------------------

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        """Tell the neighbour our complete new filter."""
        raise NotImplementedError

    def close(self, reason: SC = SC.PeerLost) -> None:
        """Close the connection (idempotent); ``reason`` is what the neighbour should report.

        Called by the core after it forgot the link, or by the subclass itself
        when the connection fails, in which case it then tells the core with
        :meth:`~broker_spark.core.actor.Core.remove_link`.
        """
        raise NotImplementedError

    async def acknowledge(self, deadline: float) -> None:
        """Return once the neighbour confirmed it took everything this link was handed.

        Runs on the core's loop; ``deadline`` is in the loop's time. Raises
        :class:`~broker_spark.errors.DeliveryError` naming the neighbour when the
        link closes first or the deadline passes. A kind of link that cannot
        confirm anything says so.
        """
        raise DeliveryError(f"a {self.kind} link ({self.peer_str}) cannot confirm delivery")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(peer={self.peer_str}, prefixes={list(self.prefixes)!r})"
