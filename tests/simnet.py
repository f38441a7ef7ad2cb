"""A deterministic simulated network of version 2 endpoints, for tests.

Real sockets neither lose, duplicate nor reorder messages on demand, and never
the same way twice. :class:`SimNet` does, from a seed: it runs one
:class:`~broker_spark.protocol.routing.Router` and one
:class:`~broker_spark.protocol.multipath.Forwarder` per node, carries every
message across links as encoded bytes (so the codecs are exercised too), and
delivers the messages in flight one at a time -- in random order when
``reorder`` is on, first-in first-out (breadth-first) otherwise. ``drop`` and
``duplicate`` are per-message probabilities applied to the kinds in
``faulty_kinds``. Links are like TCP connections: closing one discards what is
still in flight on it. Nothing reads a clock; the same seed gives the same run.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from broker_spark.protocol.multipath import Forwarder
from broker_spark.protocol.routing import Router, RoutingEvent
from broker_spark.protocol.v2_messages import (
    COMMAND_V2,
    DATA_V2,
    DEFAULT_TTL,
    PathRevocation,
    RoutedMessage,
    SubscriptionUpdate,
    V2Message,
    decode_v2,
    encode_v2,
)

__all__ = [
    "KINDS",
    "SimDelivery",
    "SimNet",
    "SimNode",
    "bfs_distances",
    "chain",
    "full_mesh",
    "random_connected",
    "ring",
    "star",
]

Name = Hashable
Edge = tuple[Name, Name]

KINDS = frozenset(("subscription", "revocation", "data", "command"))


def kind_of(msg: V2Message) -> str:
    if isinstance(msg, SubscriptionUpdate):
        return "subscription"
    if isinstance(msg, PathRevocation):
        return "revocation"
    return "data" if msg.kind == DATA_V2 else "command"


@dataclass(frozen=True, slots=True)
class SimDelivery:
    """A routed message handed to a node's local subscribers."""

    node: Name
    publisher: Name
    topic: str
    payload: bytes
    kind: str


@dataclass(slots=True)
class SimNode:
    """One simulated endpoint: its router, its data plane, and what happened to it."""

    name: Name
    id: bytes
    router: Router
    forwarder: Forwarder
    events: list[RoutingEvent] = field(default_factory=list)
    deliveries: list[SimDelivery] = field(default_factory=list)


class SimNet:
    """Nodes, links and messages in flight; ``run()`` delivers until nothing is left."""

    def __init__(
        self,
        seed: int = 0,
        *,
        drop: float = 0.0,
        duplicate: float = 0.0,
        reorder: bool = True,
        faulty_kinds: Iterable[str] = KINDS,
    ) -> None:
        self.seed = seed
        self.drop = drop
        self.duplicate = duplicate
        self.reorder = reorder
        self.faulty_kinds = frozenset(faulty_kinds)
        self.nodes: dict[Name, SimNode] = {}
        self.links: set[frozenset[Name]] = set()
        self._by_id: dict[bytes, Name] = {}
        self._rng = random.Random(seed)
        self._fifo: deque[tuple[Name, Name, bytes]] = deque()
        self._pool: list[tuple[Name, Name, bytes]] = []
        self.sent: Counter[str] = Counter()  # messages the protocol emitted, by kind
        self.bytes_sent: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()  # lost to faults, by kind
        self.duplicated: Counter[str] = Counter()
        self.ttl_dropped = 0
        self.unroutable = 0
        self.deliveries: list[SimDelivery] = []
        self.steps = 0
        #: Called as ``on_send(from_name, to_name, message)`` for every message emitted.
        self.on_send: Callable[[Name, Name, V2Message], None] | None = None

    # -- building -----------------------------------------------------------------

    def add_node(self, name: Name, prefixes: Iterable[str] = ()) -> SimNode:
        if name in self.nodes:
            raise ValueError(f"node {name!r} exists")
        node_id = hashlib.blake2b(f"{self.seed}:{name!r}".encode(), digest_size=16).digest()
        router = Router(node_id, prefixes)
        node = self.nodes[name] = SimNode(name, node_id, router, Forwarder(router))
        self._by_id[node_id] = name
        return node

    def build(self, edges: Iterable[Edge], nodes: Iterable[Name] = ()) -> SimNet:
        """Add the nodes (those named by edges too) and link them; returns self."""
        edges = list(edges)
        for name in [*nodes, *(n for e in edges for n in e)]:
            if name not in self.nodes:
                self.add_node(name)
        for a, b in edges:
            self.add_link(a, b)
        return self

    def add_link(self, a: Name, b: Name) -> None:
        key = frozenset((a, b))
        if a == b or key in self.links:
            return
        self.links.add(key)
        na, nb = self.nodes[a], self.nodes[b]
        na.router.add_neighbor(nb.id)
        nb.router.add_neighbor(na.id)
        self._flush(na)
        self._flush(nb)

    def remove_link(self, a: Name, b: Name) -> None:
        key = frozenset((a, b))
        if key not in self.links:
            return
        self.links.discard(key)
        keep = [m for m in self._queue() if frozenset((m[0], m[1])) != key]
        self._fifo = deque(keep) if not self.reorder else deque()
        self._pool = keep if self.reorder else []
        na, nb = self.nodes[a], self.nodes[b]
        na.router.remove_neighbor(nb.id)
        nb.router.remove_neighbor(na.id)
        self._flush(na)
        self._flush(nb)

    def isolate(self, name: Name) -> None:
        """Close every link of ``name`` (a crash, as its peers see it)."""
        for key in sorted((k for k in self.links if name in k), key=repr):
            a, b = tuple(key)
            self.remove_link(a, b)

    # -- acting -------------------------------------------------------------------

    def set_filter(self, name: Name, prefixes: Iterable[str]) -> None:
        node = self.nodes[name]
        node.router.set_filter(prefixes)
        self._flush(node)

    def subscribe(self, name: Name, prefix: str) -> None:
        node = self.nodes[name]
        node.router.subscribe(prefix)
        self._flush(node)

    def unsubscribe(self, name: Name, prefix: str) -> None:
        node = self.nodes[name]
        node.router.unsubscribe(prefix)
        self._flush(node)

    def publish(
        self,
        name: Name,
        topic: str,
        payload: bytes,
        *,
        ttl: int = DEFAULT_TTL,
        command: bool = False,
    ) -> int:
        """Publish from ``name``; returns the number of copies the publisher sent."""
        node = self.nodes[name]
        kind = COMMAND_V2 if command else DATA_V2
        copies = node.forwarder.publish(topic, payload, kind=kind, ttl=ttl)
        for hop, msg in copies:
            self._send(node, hop, msg)
        return len(copies)

    # -- running ------------------------------------------------------------------

    def in_flight(self) -> int:
        return len(self._pool) + len(self._fifo)

    def step(self) -> bool:
        """Deliver one message; False when none is in flight."""
        if self._pool:
            pool = self._pool
            i = self._rng.randrange(len(pool))
            pool[i], pool[-1] = pool[-1], pool[i]
            src, dst, body = pool.pop()
        elif self._fifo:
            src, dst, body = self._fifo.popleft()
        else:
            return False
        self.steps += 1
        self._deliver(src, dst, body)
        return True

    def run(self, max_steps: int = 2_000_000) -> int:
        """Deliver until quiescent; returns the steps taken. Raises if it does not settle."""
        taken = 0
        while self.step():
            taken += 1
            if taken > max_steps:
                raise RuntimeError(f"network not quiescent after {max_steps} deliveries")
        return taken

    # -- inspecting ---------------------------------------------------------------

    def id_of(self, name: Name) -> bytes:
        return self.nodes[name].id

    def name_of(self, node_id: bytes) -> Name:
        return self._by_id[node_id]

    def router(self, name: Name) -> Router:
        return self.nodes[name].router

    def path_names(self, src: Name, dst: Name) -> list[Name] | None:
        """``src``'s shortest path to ``dst`` as node names."""
        path = self.router(src).shortest_path(self.id_of(dst))
        return None if path is None else [self._by_id[h] for h in path]

    def received(self, name: Name) -> list[SimDelivery]:
        return self.nodes[name].deliveries

    def reset_stats(self) -> None:
        self.sent.clear()
        self.bytes_sent.clear()
        self.dropped.clear()
        self.duplicated.clear()
        self.ttl_dropped = 0
        self.unroutable = 0
        self.deliveries.clear()
        for node in self.nodes.values():
            node.deliveries.clear()
            node.events.clear()

    # -- internals ----------------------------------------------------------------

    def _queue(self) -> list[tuple[Name, Name, bytes]]:
        return list(self._fifo) + self._pool

    def _flush(self, node: SimNode) -> None:
        router = node.router
        for hop, msg in router.outgoing():
            self._send(node, hop, msg)
        node.events.extend(router.events())

    def _send(self, node: SimNode, hop: bytes, msg: V2Message) -> None:
        kind = kind_of(msg)
        body = encode_v2(node.id, hop, msg)
        self.sent[kind] += 1
        self.bytes_sent[kind] += len(body)
        dst = self._by_id[hop]
        if frozenset((node.name, dst)) not in self.links:
            raise AssertionError(f"{node.name!r} sent to non-neighbour {dst!r}")
        if self.on_send is not None:
            self.on_send(node.name, dst, msg)
        copies = 1
        if kind in self.faulty_kinds:
            if self.drop and self._rng.random() < self.drop:
                self.dropped[kind] += 1
                return
            if self.duplicate and self._rng.random() < self.duplicate:
                self.duplicated[kind] += 1
                copies = 2
        item = (node.name, dst, body)
        for _ in range(copies):
            if self.reorder:
                self._pool.append(item)
            else:
                self._fifo.append(item)

    def _deliver(self, src: Name, dst: Name, body: bytes) -> None:
        sender, receiver, msg = decode_v2(body)
        node = self.nodes[dst]
        if receiver != node.id or sender != self.nodes[src].id:
            raise AssertionError("message arrived with wrong addresses")
        if isinstance(msg, RoutedMessage):
            result = node.forwarder.receive(msg)
            self.ttl_dropped += result.ttl_dropped
            self.unroutable += result.unroutable
            if result.deliver and msg.publisher != node.id:
                delivery = SimDelivery(
                    dst, self._by_id[msg.publisher], msg.topic, msg.payload, kind_of(msg)
                )
                node.deliveries.append(delivery)
                self.deliveries.append(delivery)
            for hop, fwd in result.forwards:
                self._send(node, hop, fwd)
        else:
            node.router.receive(sender, msg)
            self._flush(node)


# -- topologies and ground truth ---------------------------------------------------


def chain(n: int) -> list[Edge]:
    return [(i, i + 1) for i in range(n - 1)]


def ring(n: int) -> list[Edge]:
    return [(i, (i + 1) % n) for i in range(n)]


def star(n: int) -> list[Edge]:
    """Node 0 in the middle, 1..n-1 around it."""
    return [(0, i) for i in range(1, n)]


def full_mesh(n: int) -> list[Edge]:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def random_connected(n: int, extra: int, seed: int) -> list[Edge]:
    """A random spanning tree on 0..n-1 plus ``extra`` distinct random edges."""
    rng = random.Random(seed)
    edges = {frozenset((i, rng.randrange(i))) for i in range(1, n)}
    target = min(len(edges) + extra, n * (n - 1) // 2)
    while len(edges) < target:
        a, b = rng.sample(range(n), 2)
        edges.add(frozenset((a, b)))
    return sorted(tuple(sorted(e)) for e in edges)


def bfs_distances(edges: Iterable[Edge], src: Name) -> dict[Name, int]:
    """Hop counts from ``src`` to every node it can reach (itself excluded)."""
    adj: dict[Name, list[Name]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    dist = {src: 0}
    queue = deque([src])
    while queue:
        cur = queue.popleft()
        for nxt in adj.get(cur, ()):
            if nxt not in dist:
                dist[nxt] = dist[cur] + 1
                queue.append(nxt)
    del dist[src]
    return dist
