"""The routing table of version 2: subscription flooding with versioned paths.

One :class:`Router` per endpoint, sans-I/O: the shell tells it about links
(:meth:`Router.add_neighbor`, :meth:`Router.remove_neighbor`), hands it what
neighbours sent (:meth:`Router.receive`) and drains :meth:`Router.outgoing`
and :meth:`Router.events`. It follows the developer guide's design (seed 001:
Lamport clocks, subscription flooding with paths, versioned paths) and fills
in what the guide leaves open, so that routes stay shortest and message counts
stay small. The rules, and why:

- The clock ticks on our own changes only: a new filter, or a lost link. Each
  tick is followed by a flood of our subscription, so our latest timestamp is
  always the clock. Timestamps are compared per origin, so Lamport's
  receive-rule buys nothing here.
- An update is dropped when its path holds us (a loop) or when its timestamp
  is older than the origin's latest. A newer timestamp replaces the origin's
  filter and all its paths and is forwarded; an equal one adds its path and is
  forwarded only when the path is shorter than every path we had (a duplicate
  adds nothing and goes nowhere). Forwarding the first copy only would match
  the guide's message counts (n-1 in a chain, (n-1)^2 in a full mesh) but lose
  shortest paths when copies arrive out of order; forwarding on improvement
  keeps those counts when copies arrive in breadth-first order and still
  converges to shortest paths in any order.
- A new link costs no flood: each side sends the other its own subscription
  and its shortest known path to every endpoint, and improvements spread by
  the rule above.
- A lost link ticks the clock at both ends. Each floods a revocation (revoker,
  its timestamp, the lost hop); every endpoint drops the paths that use that
  link and whose revoker entry in the path's vector timestamp is older (paths
  learned after the link healed survive a late revocation), and remembers the
  revocation to reject stale copies still in flight. Removing paths never
  reveals a new shortest one, so the revoker lists the endpoints it lost paths
  to, and each of those re-floods; every path anywhere that crossed the lost
  link ends in a path stored at one of its two ends, so that list suffices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker_spark.errors import ProtocolError
from broker_spark.protocol.v2_messages import (
    ID_SIZE,
    MAX_PATH_LEN,
    PathRevocation,
    SubscriptionUpdate,
    V2Message,
)
from broker_spark.topic import Filter

__all__ = [
    "EndpointDiscovered",
    "EndpointUnreachable",
    "FilterChanged",
    "Router",
    "RoutingEvent",
]

Path = tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class EndpointDiscovered:
    """We have a path to ``endpoint`` again (or for the first time)."""

    endpoint: bytes


@dataclass(frozen=True, slots=True)
class EndpointUnreachable:
    """We lost our last path to ``endpoint``."""

    endpoint: bytes


@dataclass(frozen=True, slots=True)
class FilterChanged:
    """An endpoint we already knew announced a different filter."""

    endpoint: bytes
    filter: tuple[str, ...]


RoutingEvent = EndpointDiscovered | EndpointUnreachable | FilterChanged


class _Remote:
    """What we know about one remote endpoint.

    ``paths`` maps each path from us (next hop first, the endpoint last) to its
    vector timestamp (each hop's clock when it forwarded, aligned with the path).
    """

    __slots__ = ("filter", "timestamp", "paths", "best", "advertised")

    def __init__(self, prefixes: tuple[str, ...], timestamp: int) -> None:
        self.filter = prefixes
        self.timestamp = timestamp
        self.paths: dict[Path, tuple[int, ...]] = {}
        self.best = 0  # length of the shortest path; 0 when there is none
        # Paths we passed on to a neighbour: only these can be suffixes of
        # paths stored elsewhere, so only losing one of them needs a re-flood.
        self.advertised: set[Path] = set()

    def recompute_best(self) -> None:
        self.best = min(map(len, self.paths), default=0)


class Router:
    """Routing state of one endpoint: its clock and filter, neighbours, and paths to all others."""

    def __init__(
        self,
        own_id: bytes,
        prefixes: Iterable[str] = (),
        *,
        max_path_len: int = MAX_PATH_LEN,
        topic_cache_size: int = 4096,
    ) -> None:
        if not isinstance(own_id, bytes) or len(own_id) != ID_SIZE:
            raise ValueError(f"endpoint id must be {ID_SIZE} bytes, got {own_id!r}")
        self.own_id = own_id
        self.clock = 0
        self.max_path_len = min(max_path_len, MAX_PATH_LEN)
        self._filter = tuple(Filter(prefixes).prefixes())
        self._neighbors: set[bytes] = set()
        self._remotes: dict[bytes, _Remote] = {}
        # revoker -> {lost hop -> revoker's timestamp}: the newest revocation per link.
        self._revoked: dict[bytes, dict[bytes, int]] = {}
        self._out: list[tuple[bytes, V2Message]] = []
        self._events: list[RoutingEvent] = []
        self._topic_cache: dict[str, frozenset[bytes]] = {}
        self._topic_cache_size = topic_cache_size
        #: Bumped whenever any stored path changes; multipath caches key on it.
        self.routes_version = 0

    # -- inputs ---------------------------------------------------------------

    @property
    def filter(self) -> tuple[str, ...]:
        return self._filter

    def set_filter(self, prefixes: Iterable[str]) -> bool:
        """Replace our filter; on a change, tick the clock and flood it. True when it changed."""
        new = tuple(Filter(prefixes).prefixes())
        if new == self._filter:
            return False
        self._filter = new
        self._tick_and_flood()
        return True

    def subscribe(self, prefix: str) -> bool:
        return self.set_filter((*self._filter, prefix))

    def unsubscribe(self, prefix: str) -> bool:
        return self.set_filter(p for p in self._filter if p != prefix)

    def add_neighbor(self, peer: bytes) -> None:
        """A link to ``peer`` is up: tell it our subscription and our best path to everyone."""
        if len(peer) != ID_SIZE or peer == self.own_id:
            raise ProtocolError(f"invalid neighbour id {peer!r}")
        if peer in self._neighbors:
            return
        self._neighbors.add(peer)
        out = self._out
        out.append((peer, SubscriptionUpdate((self.own_id,), (self.clock,), self._filter)))
        for origin in sorted(self._remotes):
            remote = self._remotes[origin]
            if origin == peer or not remote.paths:
                continue
            path = min(remote.paths, key=_path_order)
            if peer in path or len(path) >= self.max_path_len:
                continue
            stamps = remote.paths[path]
            remote.advertised.add(path)
            update = SubscriptionUpdate(
                (*reversed(path), self.own_id), (*reversed(stamps), self.clock), remote.filter
            )
            out.append((peer, update))

    def remove_neighbor(self, peer: bytes) -> None:
        """The link to ``peer`` is gone: drop paths through it, revoke it, re-flood ourselves."""
        if peer not in self._neighbors:
            return
        self._neighbors.discard(peer)
        self.clock += 1
        ts = self.clock
        self._revoked.setdefault(self.own_id, {})[peer] = ts
        lost: list[bytes] = []
        for origin, remote in self._remotes.items():
            doomed = [p for p in remote.paths if p[0] == peer]
            if doomed:
                if origin != peer and not remote.advertised.isdisjoint(doomed):
                    lost.append(origin)
                self._remove_paths(origin, remote, doomed)
        revocation = PathRevocation(self.own_id, ts, peer, tuple(sorted(lost)))
        for nb in sorted(self._neighbors):
            self._out.append((nb, revocation))
        self._flood_own()

    def receive(self, sender: bytes, msg: V2Message) -> None:
        """Handle a routing message from neighbour ``sender``.

        Messages from an endpoint that is not (or no longer) a neighbour are
        stale and ignored. Raises :class:`ProtocolError` for a message no
        correct peer sends.
        """
        if sender not in self._neighbors:
            return
        if isinstance(msg, SubscriptionUpdate):
            self._on_subscription(sender, msg)
        elif isinstance(msg, PathRevocation):
            self._on_revocation(sender, msg)
        else:
            raise ProtocolError(f"not a routing message: {type(msg).__name__}")

    # -- outputs --------------------------------------------------------------

    def outgoing(self) -> list[tuple[bytes, V2Message]]:
        """Drain the messages to send, each as ``(neighbour, message)``."""
        out, self._out = self._out, []
        return out

    def events(self) -> list[RoutingEvent]:
        """Drain the events since the last call, in order."""
        events, self._events = self._events, []
        return events

    # -- queries --------------------------------------------------------------

    @property
    def neighbors(self) -> frozenset[bytes]:
        return frozenset(self._neighbors)

    def is_neighbor(self, peer: bytes) -> bool:
        return peer in self._neighbors

    def known(self) -> frozenset[bytes]:
        """Every endpoint we ever heard of, reachable or not."""
        return frozenset(self._remotes)

    def reachable(self) -> frozenset[bytes]:
        return frozenset(o for o, r in self._remotes.items() if r.paths)

    def is_reachable(self, endpoint: bytes) -> bool:
        remote = self._remotes.get(endpoint)
        return remote is not None and bool(remote.paths)

    def paths(self, endpoint: bytes) -> dict[Path, tuple[int, ...]]:
        """All stored paths to ``endpoint`` with their vector timestamps."""
        remote = self._remotes.get(endpoint)
        return dict(remote.paths) if remote else {}

    def shortest_paths(self, endpoint: bytes) -> list[Path]:
        """Every stored path of minimal length, in a stable order."""
        remote = self._remotes.get(endpoint)
        if remote is None or not remote.paths:
            return []
        return sorted(p for p in remote.paths if len(p) == remote.best)

    def shortest_path(self, endpoint: bytes) -> Path | None:
        """The shortest path (ties broken by id order), or None when unreachable."""
        remote = self._remotes.get(endpoint)
        if remote is None or not remote.paths:
            return None
        return min(remote.paths, key=_path_order)

    def distance(self, endpoint: bytes) -> int | None:
        remote = self._remotes.get(endpoint)
        return remote.best if remote is not None and remote.paths else None

    def next_hop(self, endpoint: bytes) -> bytes | None:
        path = self.shortest_path(endpoint)
        return path[0] if path else None

    def filter_of(self, endpoint: bytes) -> tuple[str, ...] | None:
        remote = self._remotes.get(endpoint)
        return remote.filter if remote else None

    def timestamp_of(self, endpoint: bytes) -> int | None:
        remote = self._remotes.get(endpoint)
        return remote.timestamp if remote else None

    def subscribers(self, topic: str) -> frozenset[bytes]:
        """Reachable endpoints whose filter matches ``topic`` (never ourselves); cached."""
        hit = self._topic_cache.get(topic)
        if hit is not None:
            return hit
        found = frozenset(
            o for o, r in self._remotes.items() if r.paths and topic.startswith(r.filter)
        )
        if len(self._topic_cache) >= self._topic_cache_size:
            self._topic_cache.clear()
        self._topic_cache[topic] = found
        return found

    # -- internals ------------------------------------------------------------

    def _tick_and_flood(self) -> None:
        self.clock += 1
        self._flood_own()

    def _flood_own(self) -> None:
        update = SubscriptionUpdate((self.own_id,), (self.clock,), self._filter)
        for nb in sorted(self._neighbors):
            self._out.append((nb, update))

    def _on_subscription(self, sender: bytes, msg: SubscriptionUpdate) -> None:
        path = msg.path
        if not path or len(path) != len(msg.timestamps):
            raise ProtocolError("subscription update needs one timestamp per hop")
        if path[-1] != sender:
            raise ProtocolError("subscription update whose last hop is not its sender")
        if self.own_id in path:
            return  # a loop
        if len(set(path)) != len(path):
            raise ProtocolError("subscription update with a repeated hop")
        if self._is_stale(path, msg.timestamps):
            return
        origin, ts = path[0], msg.timestamps[0]
        ours = path[::-1]
        stamps = msg.timestamps[::-1]
        remote = self._remotes.get(origin)
        if remote is None or ts > remote.timestamp:
            was_reachable = remote is not None and bool(remote.paths)
            if remote is None:
                remote = self._remotes[origin] = _Remote(msg.filter, ts)
            else:
                if remote.filter != msg.filter:
                    remote.filter = msg.filter
                    self._events.append(FilterChanged(origin, msg.filter))
                remote.timestamp = ts
                remote.paths.clear()
                remote.advertised.clear()
            remote.paths[ours] = stamps
            remote.best = len(ours)
            self._routes_changed(filters=True)
            if not was_reachable:
                self._events.append(EndpointDiscovered(origin))
        elif ts < remote.timestamp or ours in remote.paths:
            return  # outdated or a duplicate
        else:
            old_best = remote.best
            remote.paths[ours] = stamps
            self._routes_changed(filters=not old_best)
            if old_best and len(ours) >= old_best:
                return  # equal timestamp, no shorter: store, don't forward
            remote.best = len(ours)
            if not old_best:
                self._events.append(EndpointDiscovered(origin))
        self._forward(msg, remote, ours)

    def _forward(self, msg: SubscriptionUpdate, remote: _Remote, ours: Path) -> None:
        if len(msg.path) >= self.max_path_len:
            return
        remote.advertised.add(ours)
        fwd = SubscriptionUpdate(
            (*msg.path, self.own_id), (*msg.timestamps, self.clock), msg.filter
        )
        on_path = set(msg.path)
        for nb in sorted(self._neighbors):
            if nb not in on_path:
                self._out.append((nb, fwd))

    def _is_stale(self, path: Path, stamps: tuple[int, ...]) -> bool:
        """True when the path crosses a link revoked after the path was recorded."""
        revoked = self._revoked
        if not revoked:
            return False
        last = len(path) - 1
        for i, hop in enumerate(path):
            lost = revoked.get(hop)
            if lost is None:
                continue
            before = path[i - 1] if i else self.own_id
            when = lost.get(before)
            if when is not None and stamps[i] < when:
                return True
            if i < last:
                when = lost.get(path[i + 1])
                if when is not None and stamps[i] < when:
                    return True
        return False

    def _on_revocation(self, sender: bytes, msg: PathRevocation) -> None:
        lost = self._revoked.setdefault(msg.revoker, {})
        if lost.get(msg.hop, -1) >= msg.timestamp:
            return  # seen already (or older than what we know)
        lost[msg.hop] = msg.timestamp
        for origin, remote in self._remotes.items():
            doomed = [
                p
                for p, stamps in remote.paths.items()
                if _crosses(self.own_id, p, stamps, msg.revoker, msg.hop, msg.timestamp)
            ]
            if doomed:
                self._remove_paths(origin, remote, doomed)
        for nb in sorted(self._neighbors):
            if nb != sender:
                self._out.append((nb, msg))
        if self.own_id in msg.refresh:
            self._tick_and_flood()

    def _remove_paths(self, origin: bytes, remote: _Remote, doomed: list[Path]) -> None:
        for p in doomed:
            del remote.paths[p]
            remote.advertised.discard(p)
        remote.recompute_best()
        self._routes_changed(filters=not remote.paths)
        if not remote.paths:
            self._events.append(EndpointUnreachable(origin))

    def _routes_changed(self, *, filters: bool) -> None:
        self.routes_version += 1
        if filters:
            self._topic_cache.clear()


def _path_order(path: Path) -> tuple[int, Path]:
    return len(path), path


def _crosses(
    own: bytes, path: Path, stamps: tuple[int, ...], revoker: bytes, hop: bytes, ts: int
) -> bool:
    """Does ``path`` (from ``own``) use the link revoker-hop with a revoker entry older than ts?"""
    if revoker not in path:
        return False
    i = path.index(revoker)
    if stamps[i] >= ts:
        return False
    before = path[i - 1] if i else own
    return before == hop or (i + 1 < len(path) and path[i + 1] == hop)
