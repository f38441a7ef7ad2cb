"""Source routing for version 2: multipaths, and what one hop does with a routed message.

A publication carries a *multipath*: the tree of endpoints it travels, rooted
at the endpoint receiving it, each node flagged when that endpoint is a
receiver. The publisher builds the tree from its shortest paths to every
subscribed endpoint (merging shared prefixes), so endpoints that subscribe to
nothing still forward, and loops in the topology cannot duplicate a message:
each receiver is flagged exactly once, even where two branches pass through
the same endpoint. Each hop delivers locally when flagged and sends every child
its own subtree, with the TTL one lower; a branch whose TTL would reach zero is
dropped, so a message travels at most ``ttl`` hops.

Encoding, pre-order: per node a 16-byte id, a u8 flags byte (bit 0: receiver;
other bits zero) and a varbyte child count, then the children. Every subtree is
one contiguous byte range, so a hop forwards its children's subtrees by
slicing, without re-encoding anything, and the payload is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker_spark.data.varbyte import encode_varbyte, read_varbyte
from broker_spark.errors import DecodeError, ProtocolError
from broker_spark.protocol.routing import Path, Router
from broker_spark.protocol.v2_messages import (
    COMMAND_V2,
    DATA_V2,
    DEFAULT_TTL,
    ID_SIZE,
    MAX_PATH_LEN,
    RoutedMessage,
)

__all__ = [
    "FLAG_RECEIVER",
    "Forwarder",
    "HopResult",
    "Multipath",
    "Split",
    "build_branches",
    "multipath_receivers",
    "split_multipath",
]

FLAG_RECEIVER = 0x01

#: Smallest encoded node: id, flags, a one-byte child count.
_NODE_MIN = ID_SIZE + 2

#: Most nodes one multipath may hold (far beyond any real network).
MAX_NODES = 1 << 16

Branches = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class Multipath:
    """A decoded multipath tree, for inspection and tests; hops work on bytes."""

    endpoint: bytes
    is_receiver: bool = False
    children: tuple[Multipath, ...] = ()

    def encode(self) -> bytes:
        out = []
        stack: list[Multipath] = [self]
        while stack:
            node = stack.pop()
            out.append(_node_header(node.endpoint, node.is_receiver, len(node.children)))
            stack.extend(reversed(node.children))
        return b"".join(out)

    @classmethod
    def decode(cls, buf: bytes) -> Multipath:
        built: list[Multipath] = []
        for start, flags, n, _depth in reversed(_scan(buf)):
            children = tuple(built.pop() for _ in range(n))
            built.append(cls(buf[start : start + ID_SIZE], bool(flags & FLAG_RECEIVER), children))
        return built[0]

    def receivers(self) -> list[bytes]:
        """Flagged endpoints in pre-order."""
        return multipath_receivers(self.encode())


def _node_header(endpoint: bytes, receiver: bool, children: int) -> bytes:
    return endpoint + (b"\x01" if receiver else b"\x00") + encode_varbyte(children)


def _scan(buf: bytes) -> list[tuple[int, int, int, int]]:
    """Validate an encoded multipath; return its nodes as (offset, flags, children, depth)."""
    nodes: list[tuple[int, int, int, int]] = []
    pending: list[int] = []  # children still to read, per open node
    size = len(buf)
    pos = 0
    while True:
        depth = len(pending)
        if depth > MAX_PATH_LEN:
            raise DecodeError(f"multipath deeper than {MAX_PATH_LEN} at offset {pos}")
        if pos + ID_SIZE + 1 > size:
            raise DecodeError(f"truncated multipath node at offset {pos}")
        flags = buf[pos + ID_SIZE]
        if flags & ~FLAG_RECEIVER:
            raise DecodeError(f"unknown multipath flags 0x{flags:02x} at offset {pos + ID_SIZE}")
        n, after = read_varbyte(buf, pos + ID_SIZE + 1)
        if n * _NODE_MIN > size - after:
            raise DecodeError(f"multipath node at offset {pos} claims {n} children, too few bytes")
        nodes.append((pos, flags, n, depth))
        if len(nodes) > MAX_NODES:
            raise DecodeError(f"multipath with more than {MAX_NODES} nodes")
        pos = after
        pending.append(n)
        while pending and not pending[-1]:
            pending.pop()
        if not pending:
            break
        pending[-1] -= 1
    if pos != size:
        raise DecodeError(f"{size - pos} trailing bytes after multipath at offset {pos}")
    return nodes


@dataclass(frozen=True, slots=True)
class Split:
    """One hop's view of its multipath: who it is for, deliver or not, and the subtrees."""

    endpoint: bytes
    is_receiver: bool
    branches: Branches


def split_multipath(buf: bytes) -> Split:
    """Validate ``buf`` and cut it into the root and one encoded subtree per child."""
    nodes = _scan(buf)
    starts = [start for start, _flags, _n, depth in nodes if depth == 1]
    ends = [*starts[1:], len(buf)]
    branches = tuple((buf[s : s + ID_SIZE], buf[s:e]) for s, e in zip(starts, ends, strict=False))
    if len({child for child, _ in branches}) != len(branches):
        raise DecodeError("multipath node lists the same child twice")
    return Split(buf[:ID_SIZE], bool(nodes[0][1] & FLAG_RECEIVER), branches)


def multipath_receivers(buf: bytes) -> list[bytes]:
    """The flagged endpoints of an encoded multipath, in pre-order."""
    return [buf[s : s + ID_SIZE] for s, flags, _n, _d in _scan(buf) if flags & FLAG_RECEIVER]


# -- building ---------------------------------------------------------------------


class _Trie:
    __slots__ = ("endpoint", "receiver", "children")

    def __init__(self, endpoint: bytes) -> None:
        self.endpoint = endpoint
        self.receiver = False
        self.children: dict[bytes, _Trie] = {}

    def encode(self) -> bytes:
        out = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(_node_header(node.endpoint, node.receiver, len(node.children)))
            stack.extend(reversed(node.children.values()))
        return b"".join(out)


def build_branches(
    own_id: bytes,
    receivers: Iterable[bytes],
    shortest_paths: Callable[[bytes], list[Path]],
) -> tuple[Branches, list[bytes]]:
    """Merge shortest paths into one tree; return its root's encoded branches and the unroutable.

    Receivers are placed nearest first, each on the candidate path sharing the
    longest prefix with the tree so far; one already in the tree no deeper than
    its distance is just flagged there. The result is deterministic.
    """
    root = _Trie(own_id)
    depth_of: dict[bytes, tuple[_Trie, int]] = {}
    unroutable: list[bytes] = []
    placed: list[tuple[int, bytes, list[Path]]] = []
    for r in receivers:
        if r == own_id:
            continue
        candidates = shortest_paths(r)
        if candidates:
            placed.append((len(candidates[0]), r, candidates))
        else:
            unroutable.append(r)
    placed.sort(key=lambda item: (item[0], item[1]))
    for dist, r, candidates in placed:
        seen = depth_of.get(r)
        if seen is not None and seen[1] <= dist:
            seen[0].receiver = True
            continue
        best = candidates[0]
        best_shared = -1
        for path in candidates:
            node, shared = root, 0
            for hop in path:
                node = node.children.get(hop)
                if node is None:
                    break
                shared += 1
            if shared > best_shared:
                best, best_shared = path, shared
        node = root
        for depth, hop in enumerate(best, 1):
            child = node.children.get(hop)
            if child is None:
                child = node.children[hop] = _Trie(hop)
                depth_of.setdefault(hop, (child, depth))
            node = child
        node.receiver = True
    return tuple((cid, child.encode()) for cid, child in root.children.items()), unroutable


# -- one hop ----------------------------------------------------------------------


@dataclass(slots=True)
class HopResult:
    """What a hop does with a routed message: deliver it here, and send these copies."""

    deliver: bool = False
    forwards: list[tuple[bytes, RoutedMessage]] = field(default_factory=list)
    ttl_dropped: int = 0  # copies not sent because the TTL ran out
    unroutable: int = 0  # receivers with no path left from here


class Forwarder:
    """The data plane of one endpoint: publish along multipaths and act as a hop.

    Multipaths are cached per receiver set and dropped whenever the router's
    paths change (``Router.routes_version``); the router caches topic to
    receivers. A publication to known subscribers therefore costs two dict
    lookups plus one small header per branch.
    """

    def __init__(self, router: Router, *, cache_size: int = 1024) -> None:
        self.router = router
        self._cache: dict[frozenset[bytes], tuple[Branches, int]] = {}
        self._cache_size = cache_size
        self._version = -1

    def plan(self, receivers: Iterable[bytes]) -> tuple[Branches, int]:
        """Encoded branches reaching ``receivers``, and how many of them are unreachable."""
        key = receivers if isinstance(receivers, frozenset) else frozenset(receivers)
        router = self.router
        if self._version != router.routes_version:
            self._cache.clear()
            self._version = router.routes_version
        hit = self._cache.get(key)
        if hit is None:
            branches, unroutable = build_branches(router.own_id, key, router.shortest_paths)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            hit = self._cache[key] = (branches, len(unroutable))
        return hit

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        kind: int = DATA_V2,
        ttl: int = DEFAULT_TTL,
        receivers: Iterable[bytes] | None = None,
    ) -> list[tuple[bytes, RoutedMessage]]:
        """The copies to send for one publication (to the topic's subscribers by default)."""
        if kind not in (DATA_V2, COMMAND_V2):
            raise ValueError(f"kind must be DATA_V2 or COMMAND_V2, got {kind}")
        if not 1 <= ttl <= 0xFFFF:
            raise ValueError(f"ttl must be 1..65535, got {ttl}")
        router = self.router
        targets = router.subscribers(topic) if receivers is None else receivers
        branches, _ = self.plan(targets)
        own = router.own_id
        return [
            (child, RoutedMessage(kind, ttl, topic, own, subtree, payload))
            for child, subtree in branches
        ]

    def receive(self, msg: RoutedMessage) -> HopResult:
        """Split the multipath: deliver here if flagged, forward each subtree to its child.

        Raises :class:`DecodeError` for a malformed multipath and
        :class:`ProtocolError` for one rooted at another endpoint.
        """
        split = split_multipath(msg.multipath)
        own = self.router.own_id
        if split.endpoint != own:
            raise ProtocolError(f"multipath for {split.endpoint.hex()} arrived at {own.hex()}")
        result = HopResult()
        if msg.ttl == 0:
            result.ttl_dropped = len(split.branches) + split.is_receiver
            return result
        result.deliver = split.is_receiver
        if not split.branches:
            return result
        ttl = msg.ttl - 1
        if ttl == 0:
            result.ttl_dropped = len(split.branches)
            return result
        router = self.router
        stranded: list[bytes] = []
        for child, subtree in split.branches:
            if router.is_neighbor(child):
                result.forwards.append(
                    (
                        child,
                        RoutedMessage(
                            msg.kind, ttl, msg.topic, msg.publisher, subtree, msg.payload
                        ),
                    )
                )
            else:
                stranded.extend(multipath_receivers(subtree))
        if stranded:
            # The planned next hop is gone: route its receivers from here instead.
            branches, result.unroutable = self.plan(r for r in stranded if r != own)
            for child, subtree in branches:
                result.forwards.append(
                    (
                        child,
                        RoutedMessage(
                            msg.kind, ttl, msg.topic, msg.publisher, subtree, msg.payload
                        ),
                    )
                )
        return result
