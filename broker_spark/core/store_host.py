"""The stores of one endpoint: routing of command messages, the channel tick, peer loss.

Each endpoint that attaches a store gets one :class:`StoreHost`, living on the
endpoint's loop next to the core. It

- registers the core's handler for command messages (envelope type 2) and
  hands each one, still encoded, to the store actor listening on its topic
  (``<name>/<$>/data/master`` or ``.../clone``); actors decode in batches;
- sends what the actors produce: command messages enter the core through one
  local :class:`~broker_spark.core.queues.Source`, so they reach every peer
  whose filter matches (the topics travel in the actors' filters), and go
  straight to other actors of this endpoint that listen on the topic (a master
  and a clone of one store may share an endpoint);
- publishes store events to local subscribers through a second source whose
  messages carry TTL 1, so they reach local subscribers and never leave;
- ticks every actor every 100 ms (Broker's channel tick), only while stores exist;
- watches peer statuses: when an endpoint becomes unreachable, masters drop
  its clones and writers at once and clones whose master lived there start
  asking for a new one, instead of waiting for the channel's 10-second timeout;
- answers :meth:`master_taken`, Broker's ``has_remote_master``.

Everything here runs on the loop; :func:`host_for` may be called from any thread.

The host owns its actors, so the arrow runs from here to
:mod:`broker_spark.core.store_actor`: the actors know only the narrow
:class:`~broker_spark.core.store_actor.ActorHost` protocol, which this class
fulfils, never this module.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker_spark.core.node_message import COMMAND
from broker_spark.core.queues import Source, SubscriberQueue
from broker_spark.errors import SC
from broker_spark.protocol.channel import TICK_MILLISECONDS
from broker_spark.status import Error, Status
from broker_spark.store.commands import master_topic

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.link import Link
    from broker_spark.core.store_actor import StoreActor

__all__ = ["EVENTS_TTL", "TICK_SECONDS", "StoreHost", "host_for"]

#: Seconds between channel ticks.
TICK_SECONDS = TICK_MILLISECONDS / 1000
#: Store events are for local subscribers only: a TTL of 1 is never forwarded.
EVENTS_TTL = 1
#: Command messages waiting in the outgoing source before actors stop taking new writes.
OUT_CAPACITY = 8192
#: Store events waiting for slow subscribers before actors stop taking new writes.
EVENTS_CAPACITY = 8192


_hosts_lock = threading.Lock()


def host_for(core: Core) -> StoreHost:
    """The store host of ``core``, made on first use (any thread).

    It hangs off the core (attribute ``store_host``), so it lives exactly as long.
    """
    with _hosts_lock:
        host: StoreHost | None = getattr(core, "store_host", None)
        if host is None:
            host = StoreHost(core)
            core.loop_thread.run_sync(host.start)
            core.store_host = host  # type: ignore[attr-defined]
        return host


class StoreHost:
    """Store actors of one endpoint and what they share."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.loop = core.loop_thread.loop
        self.ttl = core.options.ttl
        self.node_id = core.node_id
        self.masters: dict[str, StoreActor] = {}
        self.clones: dict[str, StoreActor] = {}
        self.listeners: dict[str, list[StoreActor]] = {}
        self.out: Source = core.make_source(OUT_CAPACITY)
        self.events: Source = core.make_source(EVENTS_CAPACITY, remote=True)
        self.out.on_room = self._room_again
        self.events.on_room = self._room_again
        self._statuses = SubscriberQueue((), 256, "drop_oldest", receive_statuses=True)
        self._timer: object = None
        self._object_ids = 0
        self.closed = False

    def start(self) -> None:
        core = self.core
        core.handlers[COMMAND] = self.on_command
        core.add_status_subscriber(self._statuses)
        hooks = getattr(core, "close_hooks", None)
        if hooks is not None:
            hooks.append(self.close)

    def new_object_id(self) -> int:
        """A fresh object id for an entity of this endpoint (Broker's actor ids)."""
        self._object_ids += 1
        return self._object_ids

    # -- actors -------------------------------------------------------------------

    def add(self, actor: StoreActor) -> None:
        """Start routing ``actor``'s topic to it and ticking it."""
        table = self.masters if actor.role == "master" else self.clones
        table[actor.name] = actor
        self.listeners.setdefault(actor.listen_topic, []).append(actor)
        self.core.set_extra_filter(actor, (actor.listen_topic,))
        if self._timer is None:
            self._timer = self.loop.call_later(TICK_SECONDS, self._tick)

    def remove(self, actor: StoreActor) -> None:
        table = self.masters if actor.role == "master" else self.clones
        if table.get(actor.name) is actor:
            del table[actor.name]
        group = self.listeners.get(actor.listen_topic, [])
        if actor in group:
            group.remove(actor)
            if not group:
                del self.listeners[actor.listen_topic]
        self.core.set_extra_filter(actor, ())

    def actors(self) -> list[StoreActor]:
        return [*self.masters.values(), *self.clones.values()]

    def master_taken(self, name: str) -> str | None:
        """The peer whose filter shows a master for ``name`` (Broker's ``has_remote_master``).

        A master subscribes to ``<name>/<$>/data/master``. A filter entry that
        covers that topic *and* reaches into its reserved ``<$>`` part counts;
        a plain subscription to ``<name>`` (or anything shorter) does not, so
        ordinary subscribers never block a master. Like Broker's check, a
        master whose subscription is still in flight goes unnoticed.
        """
        topic = master_topic(name)
        for peer, prefixes in self.core.peer_filters().items():
            for p in prefixes:
                if topic.startswith(p) and "<$>" in p[len(name) :]:
                    return peer
        return None

    # -- routing ------------------------------------------------------------------

    def on_command(self, msg: tuple, from_link: Link | None) -> None:
        """A command message from a peer: queue its payload for the listening actors."""
        group = self.listeners.get(msg[0])
        if group:
            for actor in group:
                actor.enqueue(msg[1])

    def send(self, msgs: list[tuple], sender: StoreActor) -> None:
        """Send command messages to peers and to the other local actors on their topics."""
        self.out.offer(msgs)
        listeners = self.listeners
        if len(listeners) > 1 or sender.listen_topic not in listeners:
            for msg in msgs:
                group = listeners.get(msg[0])
                if group:
                    for actor in group:
                        if actor is not sender:
                            actor.enqueue(msg[1])

    def wants_events(self, topic: str) -> bool:
        """Whether any local subscriber would receive a store event on ``topic``."""
        return any(topic.startswith(q.prefixes) for q in self.core.subscribers)

    def publish_events(self, msgs: list[tuple]) -> None:
        self.events.offer(msgs)

    def emit(self, item: Error) -> None:
        """An error from an actor for the endpoint's status subscribers."""
        self.core.emit(item)

    def has_room(self) -> bool:
        """Whether actors may take more writes (the outgoing sources are not backed up)."""
        out, events = self.out, self.events
        if out.room() > 0 and events.room() > 0:
            return True
        out.want_room()
        events.want_room()
        return out.room() > 0 and events.room() > 0

    def _room_again(self) -> None:
        for actor in self.actors():
            actor.wake()

    # -- time -------------------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        if self.closed:
            return
        lost = self._lost_peers()
        for actor in self.actors():
            if lost:
                actor.peers_lost(lost)
            actor.tick()
        if self.masters or self.clones:
            self._timer = self.loop.call_later(TICK_SECONDS, self._tick)

    def _lost_peers(self) -> set[bytes]:
        lost: set[bytes] = set()
        for item in self._statuses.poll():
            if isinstance(item, Status) and item.code() == SC.EndpointUnreachable:
                with contextlib.suppress(ValueError):
                    lost.add(uuid.UUID(item.context().node).bytes)
        return lost

    # -- shutdown -----------------------------------------------------------------

    def close(self) -> None:
        """Close every actor (committing SQLite backends) and fail what waits on them."""
        if self.closed:
            return
        self.closed = True
        timer, self._timer = self._timer, None
        cancel: Callable[[], None] | None = getattr(timer, "cancel", None)
        if cancel is not None:
            cancel()
        for actor in self.actors():
            actor.close()
        self.masters.clear()
        self.clones.clear()
        self.listeners.clear()
        self._statuses.close()
