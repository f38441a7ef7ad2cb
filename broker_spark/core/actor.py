"""The core actor: the central merge of one endpoint.

Everything flows through here, on the endpoint's loop (so no locks): this
endpoint's publications, messages from neighbours (links) and messages
injected as if from a neighbour. The core routes each message to

- the links whose filter matches its topic (never back to the link it came
  from; messages from peers only when forwarding is enabled and TTL remains),
- the local subscribers whose prefixes match, for messages from peers only:
  an endpoint never delivers its own publications to its own subscribers.

Routing works on batches and on *runs* of consecutive messages with the same
topic: the destinations of a topic are looked up once (and cached), the room
of every destination is checked once per run, and a run moves into each
destination's pending list as one slice. Destinations report ``room()``; when
a blocking destination is full the core delivers what fits, keeps the rest of
the batch (``Source.held``), parks the source among the stalled ones and asks
the destination to wake it (``want_room``). A stalled source stops being
drained, its producers fill it and then block: that is how a slow subscriber
slows down a publisher, with every buffer bounded on the way.

The core also keeps the endpoint's filter (union of the local subscribers'
prefixes and ``forward`` topics), tells links when it changes, and emits
status events to status subscribers.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from threading import get_ident
from time import monotonic
from typing import TYPE_CHECKING

from broker_spark.config import BrokerOptions
from broker_spark.core.node_message import COMMAND, DATA, SharedMessage
from broker_spark.core.queues import UNBOUNDED_ROOM, Sink, Source, SubscriberQueue
from broker_spark.errors import EC, SC, PeeringError, ShutdownError
from broker_spark.status import Error, Status
from broker_spark.topic import Filter

if TYPE_CHECKING:
    from broker_spark.core.link import Link
    from broker_spark.core.loop_thread import LoopThread

__all__ = ["Core"]

#: Messages taken from one source at a time.
BATCH = 1024
#: Messages routed per loop callback before yielding to other callbacks.
PUMP_BUDGET = 8192
#: Distinct topics whose routes are cached before the cache starts over.
ROUTE_CACHE_SIZE = 4096
#: The sender id injected messages carry unless told otherwise.
INJECTED_SENDER = bytes(15) + b"\x01"

#: Where a topic goes: subscribers, links for our own publications, links for peers' messages
#: (those that take forwarded messages: a WebSocket bridge may take only our own).
_Route = tuple[tuple[SubscriberQueue, ...], tuple["Link", ...], tuple["Link", ...]]

_STATUS_MESSAGES = {
    SC.EndpointDiscovered: "found a new peer in the network",
    SC.PeerAdded: "handshake successful",
    SC.PeerRemoved: "removed connection to remote peer",
    SC.PeerLost: "lost connection to remote peer",
    SC.EndpointUnreachable: "lost the last path",
}


class Core:
    """The state and routing of one endpoint; every method runs on its loop unless noted."""

    def __init__(self, node_id: bytes, options: BrokerOptions, loop_thread: LoopThread) -> None:
        self.node_id = node_id
        self.node_str = self.id_to_str(node_id)
        self.options = options
        self.loop_thread = loop_thread
        self._loop = loop_thread.loop
        self._call_soon_threadsafe = loop_thread.loop.call_soon_threadsafe
        #: The loop thread's id: wake-ups from the loop itself skip the self-pipe.
        self._loop_ident = loop_thread.thread.ident
        self.forwarding = not options.disable_forwarding
        self.subscribers: list[SubscriberQueue] = []
        self.status_subscribers: list[SubscriberQueue] = []
        self.forwarded: list[str] = []
        #: Filters that join ours on behalf of lightweight peers (WebSocket clients), by owner.
        self.extra_filters: dict[object, tuple[str, ...]] = {}
        self.filter: tuple[str, ...] = ()
        self.links: dict[bytes, Link] = {}
        #: Handlers for message kinds other than data (command messages of stores).
        self.handlers: dict[int, Callable[[tuple, Link | None], None]] = {}
        self.sources: weakref.WeakSet[Source] = weakref.WeakSet()
        #: Guards ``sources`` and ``closed`` against sources made while shutting down.
        self._sources_lock = threading.Lock()
        self.closed = False
        self.at_exit = False  # closing because the interpreter exits (set by the endpoint)
        #: Notified whenever links or their filters change (see :meth:`wait_until`).
        self.changed = threading.Condition()
        #: topic -> (subscribers, links for our own publications, links for peers' messages)
        self._routes: dict[str, _Route] = {}
        self._ready: deque[Source] = deque()
        self._stalled: list[Source] = []
        self._wake_pending = False
        # Batching on the loop thread (see begin_io and defer): a pump asked for while
        # received bytes are handled runs when they are done, and connection flushes
        # asked for during a pump or an I/O callback run at its end, not a loop
        # iteration later (each iteration costs a poll and a trip through asyncio).
        self._io_depth = 0
        self._pump_after_io = False
        self._pumping = False
        self._deferred: list[Callable[[], None]] = []
        self._bid = 0
        self._inject: Source | None = None
        self._inject_lock = threading.Lock()
        #: Called (on the loop) at the end of :meth:`close`: transports such as TCP peering.
        self.close_hooks: list[Callable[[], None]] = []
        #: Whether a node is still reachable over other paths when its link goes (multi-hop).
        self.reachable_elsewhere: Callable[[bytes], bool] = lambda _node: False

    @staticmethod
    def id_to_str(node_id: bytes) -> str:
        return str(uuid.UUID(bytes=node_id))

    # -- waking (any thread) ----------------------------------------------------------

    def schedule(self, src: Source) -> None:
        """Queue ``src`` for draining and make sure a pump is scheduled (thread-safe)."""
        self._ready.append(src)
        if not self._wake_pending:
            self._wake_pending = True
            self._schedule_pump()

    def wake(self) -> None:
        """Retry stalled sources soon (thread-safe): some destination has room again."""
        if not self._wake_pending:
            self._wake_pending = True
            self._schedule_pump()

    def _schedule_pump(self) -> None:
        """Run :meth:`_pump` soon.

        From the loop's own thread (a link that received messages) a plain
        ``call_soon`` does: ``call_soon_threadsafe`` would also write to the
        loop's self-pipe, a system call that releases the GIL to whichever
        thread wants it, for up to a switch interval.
        """
        # A closed loop means the endpoint is gone; nothing left to wake.
        with contextlib.suppress(RuntimeError):
            if get_ident() != self._loop_ident:
                self._call_soon_threadsafe(self._pump)
            elif self._io_depth and not self._pumping:
                self._pump_after_io = True  # end_io runs it
            else:
                self._loop.call_soon(self._pump)

    # -- batching on the loop thread ---------------------------------------------------

    def begin_io(self) -> None:
        """The loop thread starts handling received bytes (pair with :meth:`end_io`)."""
        self._io_depth += 1

    def end_io(self) -> None:
        """Received bytes handled: route what they queued, then flush what that wrote.

        Doing both here, in the same loop iteration as the read, keeps a
        message's way through an endpoint to one wake-up of its loop.
        """
        self._io_depth -= 1
        if self._io_depth:
            return
        if self._pump_after_io:
            self._pump_after_io = False
            self._pump()
        if self._deferred:
            self._run_deferred()

    def defer(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at the end of the current pump or I/O callback, else soon (loop only).

        Connections flush their send buffers this way: everything routed in
        one batch leaves in one write, right after the batch.
        """
        if self._io_depth or self._pumping:
            self._deferred.append(fn)
        else:
            self._loop.call_soon(fn)

    def _run_deferred(self) -> None:
        while self._deferred:
            fns, self._deferred = self._deferred, []
            for fn in fns:
                fn()

    def make_source(
        self, capacity: int, *, remote: bool = False, link: Link | None = None
    ) -> Source:
        """A new bounded input into this core (thread-safe); closed at shutdown."""
        src = Source(self.schedule, capacity, remote=remote, link=link)
        with self._sources_lock:
            if self.closed:
                raise ShutdownError("the endpoint is shut down")
            self.sources.add(src)
        return src

    def inject(self, msgs: list[tuple]) -> None:
        """Feed node messages as if a peer had sent them (thread-safe, blocks when full).

        Each message is ``(topic, payload, kind, ttl, sender)``; they reach local
        subscribers and are forwarded like messages from a real neighbour.
        """
        src = self._inject
        if src is None:
            with self._inject_lock:
                src = self._inject
                if src is None:
                    src = self.make_source(self.options.peer_buffer_size, remote=True)
                    self._inject = src
        src.put_many(msgs)

    # -- the pump -------------------------------------------------------------------

    def _pump(self) -> None:
        self._wake_pending = False
        if self.closed:
            return
        self._pumping = True
        try:
            self._drain()
        finally:
            self._pumping = False
            if self._deferred and not self._io_depth:
                self._run_deferred()

    def _drain(self) -> None:
        ready = self._ready
        if self._stalled:
            for src in self._stalled:
                src.stalled = False
            ready.extend(self._stalled)
            self._stalled = []
        budget = PUMP_BUDGET
        while ready:
            if budget <= 0:
                self._wake_pending = True
                self._loop.call_soon(self._pump)
                return
            src = ready.popleft()
            if src.stalled:
                continue
            src.flagged = False
            budget -= self._process(src, min(BATCH, budget))

    def _process(self, src: Source, limit: int) -> int:
        batch = src.held
        if batch is not None:
            start = src.held_pos
            src.held = None
        else:
            batch = src.take(limit)
            if not batch:
                return 1
            start = 0
        if src.remote:
            done = self._route_remote(batch, start, src.link)
        else:
            done = self._route_local(batch, start)
        if done < len(batch):
            src.held = batch
            src.held_pos = done
            src.stalled = True
            self._stalled.append(src)
        elif src.items:
            src.flagged = True
            self._ready.append(src)
        return max(done - start, 1)

    @staticmethod
    def _room(dests: tuple[Sink, ...], bid: int, touched: list[Sink]) -> int:
        """The room every destination in ``dests`` still has in this batch.

        At zero, registers with the full destinations for a wake-up *before*
        re-checking, so a consumer that frees room in between either sees the
        request or is seen here; zero after that means the flow stalls.
        """
        room = UNBOUNDED_ROOM
        for d in dests:
            if d._bid != bid:
                d._bid = bid
                d._room = d.room()
                d._pending = []
                touched.append(d)
            if d._room < room:
                room = d._room
        if room > 0:
            return room
        room = UNBOUNDED_ROOM
        for d in dests:
            if d._room <= 0:
                d.want_room()
                d._room = d.room() - len(d._pending)
            if d._room < room:
                room = d._room
        return max(room, 0)

    @staticmethod
    def _flush(touched: list[Sink]) -> None:
        for d in touched:
            pending = d._pending
            if pending:
                d._pending = []
                d.deliver(pending)

    def _route_local(self, batch: list[tuple], i: int) -> int:
        """Route this endpoint's own publications (to matching links only) from index ``i``.

        Returns the index of the first message not routed (``len(batch)`` when all were).
        """
        routes = self._routes
        bid = self._bid = self._bid + 1
        touched: list[Sink] = []
        n = len(batch)
        while i < n:
            topic = batch[i][0]
            route = routes.get(topic)
            if route is None:
                route = self._route(topic)
            links = route[1]
            if links:
                room = self._room(links, bid, touched)
                if room <= 0:
                    break
                stop = i + room if room < n - i else n
            else:
                stop = n
            # A run: consecutive messages on the same topic, as far as there is room.
            j = i + 1
            while j < stop and batch[j][0] == topic:
                j += 1
            if links:
                chunk = batch[i:j] if (i or j < n) else batch
                k = j - i
                for d in links:
                    d._pending.extend(chunk)
                    d._room -= k
            i = j
        self._flush(touched)
        return i

    def _route_remote(self, batch: list[tuple], i: int, from_link: Link | None) -> int:
        """Route messages from a neighbour, from index ``i``: to local subscribers and onwards.

        Returns the index of the first message not routed (``len(batch)`` when all were).
        """
        routes = self._routes
        nid = self.node_id
        forwarding = self.forwarding
        bid = self._bid = self._bid + 1
        touched: list[Sink] = []
        n = len(batch)
        while i < n:
            msg = batch[i]
            if msg[4] == nid:  # our own publication came back around a loop
                i += 1
                continue
            if msg[2] != DATA:
                if msg[2] == COMMAND and forwarding and msg[3] > 1:
                    # Store commands flood onwards like data (they reach masters and
                    # clones behind us); room first, so a stalled retry never repeats.
                    onward_links = (routes.get(msg[0]) or self._route(msg[0]))[2]
                    if from_link in onward_links:
                        onward_links = tuple(x for x in onward_links if x is not from_link)
                    if onward_links:
                        if self._room(onward_links, bid, touched) <= 0:
                            break
                        fwd = (msg[0], msg[1], COMMAND, msg[3] - 1, msg[4])
                        for d in onward_links:
                            d._pending.append(fwd)
                            d._room -= 1
                self._other_kind(msg, from_link)
                i += 1
                continue
            topic = msg[0]
            route = routes.get(topic)
            if route is None:
                route = self._route(topic)
            subs, _own, links = route
            if links:
                if not forwarding:
                    links = ()
                elif from_link is not None and from_link in links:
                    links = tuple(x for x in links if x is not from_link)
            if subs or links:
                room = self._room(subs + links, bid, touched)
                if room <= 0:
                    break
                stop = i + room if room < n - i else n
            else:
                stop = n
            j = i + 1
            while j < stop and batch[j][0] == topic and batch[j][2] == DATA and batch[j][4] != nid:
                j += 1
            k = j - i
            if subs:
                chunk = batch[i:j]
                if len(subs) == 1:
                    sub = subs[0]
                    sub._pending.extend(chunk)
                    sub._room -= k
                else:
                    shared = [SharedMessage(m[0], m[1]) for m in chunk]
                    for sub in subs:
                        sub._pending.extend(shared)
                        sub._room -= k
            if links:
                onward = [(m[0], m[1], m[2], m[3] - 1, m[4]) for m in batch[i:j] if m[3] > 1]
                for d in links:
                    d._pending.extend(onward)
                    d._room -= k
            i = j
        self._flush(touched)
        return i

    def _other_kind(self, msg: tuple, from_link: Link | None) -> None:
        handler = self.handlers.get(msg[2])
        if handler is not None:
            handler(msg, from_link)

    def _route(self, topic: str) -> _Route:
        subs = tuple(s for s in self.subscribers if topic.startswith(s.prefixes))
        links = tuple(x for x in self.links.values() if topic.startswith(x.prefixes))
        onward = tuple(x for x in links if x.takes_forwarded)
        routes = self._routes
        if len(routes) >= ROUTE_CACHE_SIZE:
            routes.clear()
        route = routes[topic] = (subs, links, links if len(onward) == len(links) else onward)
        return route

    def _topology_changed(self) -> None:
        """Destinations changed: forget cached routes and retry whatever was stalled."""
        self._routes.clear()
        if self._stalled:
            self.wake()

    # -- subscribers and the filter --------------------------------------------------

    def add_subscriber(self, queue: SubscriberQueue) -> None:
        if self.closed:
            raise ShutdownError("the endpoint is shut down")
        queue.wake_core = self.wake
        self.subscribers.append(queue)
        self._topology_changed()
        self._update_filter()

    def remove_subscriber(self, queue: SubscriberQueue) -> None:
        if queue in self.subscribers:
            self.subscribers.remove(queue)
            self._topology_changed()
            self._update_filter()

    def set_subscriber_prefixes(self, queue: SubscriberQueue, prefixes: tuple[str, ...]) -> None:
        queue.prefixes = prefixes
        if queue in self.subscribers:
            self._topology_changed()
            self._update_filter()

    def add_status_subscriber(self, queue: SubscriberQueue) -> None:
        if self.closed:
            raise ShutdownError("the endpoint is shut down")
        self.status_subscribers.append(queue)

    def remove_status_subscriber(self, queue: SubscriberQueue) -> None:
        if queue in self.status_subscribers:
            self.status_subscribers.remove(queue)

    def add_forward(self, topics: Iterable[str]) -> None:
        for t in topics:
            if t not in self.forwarded:
                self.forwarded.append(t)
        self._update_filter()

    def set_extra_filter(self, owner: object, prefixes: Iterable[str]) -> None:
        """Make ``prefixes`` part of this endpoint's filter for ``owner`` (empty: drop them).

        A WebSocket client subscribes like a local subscriber would: its prefixes
        flood to peers, so matching messages come here and are routed to it.
        """
        prefixes = tuple(prefixes)
        if prefixes:
            self.extra_filters[owner] = prefixes
        elif self.extra_filters.pop(owner, None) is None:
            return
        self._update_filter()

    def _update_filter(self) -> None:
        f = Filter(self.forwarded)
        for s in self.subscribers:
            for p in s.prefixes:
                f.add(p)
        for prefixes in self.extra_filters.values():
            for p in prefixes:
                f.add(p)
        new = tuple(f.prefixes())
        if new != self.filter:
            self.filter = new
            for link in list(self.links.values()):
                link.send_filter(new)

    # -- links -------------------------------------------------------------------------

    def add_link(self, link: Link) -> None:
        """A neighbour is peered: route to it, tell it our filter, report it."""
        if self.closed:
            raise ShutdownError("the endpoint is shut down")
        if link.peer_id == self.node_id:
            raise PeeringError("an endpoint cannot peer with itself", EC.PeerInvalid)
        if link.peer_id in self.links:
            raise PeeringError(f"already peered with {link.peer_str}", EC.RedundantConnection)
        self.links[link.peer_id] = link
        self._topology_changed()
        link.send_filter(self.filter)
        info = link.info()
        self.emit(Status(SC.EndpointDiscovered, info, _STATUS_MESSAGES[SC.EndpointDiscovered]))
        self.emit(Status(SC.PeerAdded, info, _STATUS_MESSAGES[SC.PeerAdded]))
        self._notify_changed()

    def remove_link(self, link: Link, reason: SC = SC.PeerLost) -> bool:
        """Forget a neighbour (closing the link) and report ``reason``; False if unknown."""
        known = self.links.get(link.peer_id) is link
        if known:
            del self.links[link.peer_id]
            self._topology_changed()
            self.wake()  # sources stalled on this link can move on
        if not link.closed:
            link.close(reason)
        if known:
            info = link.info()
            self.emit(Status(reason, info, _STATUS_MESSAGES.get(reason, "")))
            if not self.reachable_elsewhere(link.peer_id):
                self.emit(
                    Status(SC.EndpointUnreachable, info, _STATUS_MESSAGES[SC.EndpointUnreachable])
                )
            self._notify_changed()
        return known

    def on_link_filter(self, link: Link, prefixes: Iterable[str]) -> None:
        """A neighbour announced its complete new filter."""
        link.prefixes = tuple(prefixes)
        if self.links.get(link.peer_id) is link:
            self._topology_changed()
            self._notify_changed()

    # -- status events -----------------------------------------------------------------

    def emit(self, item: Status | Error) -> None:
        """Hand a status or error to the status subscribers that want it."""
        is_error = isinstance(item, Error)
        for q in self.status_subscribers:
            if is_error or q.receive_statuses:
                q.deliver([item])

    def emit_threadsafe(self, item: Status | Error) -> None:
        """:meth:`emit` from any thread."""
        with contextlib.suppress(ShutdownError):
            self.loop_thread.call_soon(self.emit, item)

    # -- waiting on state (any thread) ---------------------------------------------------

    def _notify_changed(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block until ``predicate()`` holds (re-checked on every link or filter change).

        The predicate runs in the caller's thread and should only read
        snapshots (see :meth:`peer_filters`). False on timeout or shutdown.
        """
        deadline = None if timeout is None else monotonic() + timeout
        with self.changed:
            while not predicate():
                if self.closed:
                    return False
                if deadline is None:
                    self.changed.wait()
                else:
                    remaining = deadline - monotonic()
                    if remaining <= 0:
                        return False
                    self.changed.wait(remaining)
        return True

    def peer_filters(self) -> dict[str, tuple[str, ...]]:
        """A snapshot of every neighbour's filter by node id string (thread-safe)."""
        return {link.peer_str: link.prefixes for link in list(self.links.values())}

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every link, release blocked publishers and wake blocked subscribers."""
        with self._sources_lock:
            if self.closed:
                return
            self.closed = True
            sources = list(self.sources)
        links = list(self.links.values())
        self.links.clear()
        self._routes.clear()
        for link in links:
            link.close(SC.PeerLost)
        for hook in self.close_hooks:
            with contextlib.suppress(Exception):
                hook()
        for src in sources:
            src.close()
        for q in self.subscribers + self.status_subscribers:
            q.close(self.at_exit)
        self._ready.clear()
        self._stalled.clear()
        self._notify_changed()

    def close_from_outside(self) -> None:
        """The thread-safe part of :meth:`close`, for when the loop does not answer."""
        with self._sources_lock:
            self.closed = True
            sources = list(self.sources)
        for src in sources:
            src.close()
        for q in list(self.subscribers) + list(self.status_subscribers):
            q.close(self.at_exit)
        self._notify_changed()
