"""Multipaths: encoding, splitting at a hop, building from shortest paths, and one hop's work."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.errors import DecodeError, ProtocolError
from broker_spark.protocol.multipath import (
    Forwarder,
    Multipath,
    build_branches,
    multipath_receivers,
    split_multipath,
)
from broker_spark.protocol.routing import Router
from broker_spark.protocol.v2_messages import (
    COMMAND_V2,
    DATA_V2,
    MAX_PATH_LEN,
    RoutedMessage,
    SubscriptionUpdate,
)


def eid(c: str) -> bytes:
    return c.encode() * 16


A, B, C, D, E, X = (eid(c) for c in "ABCDEX")

ids = st.binary(min_size=16, max_size=16)
trees = st.recursive(
    st.builds(Multipath, ids, st.booleans()),
    lambda kids: st.builds(
        Multipath,
        ids,
        st.booleans(),
        st.lists(kids, max_size=3, unique_by=lambda m: m.endpoint).map(tuple),
    ),
    max_leaves=12,
)


def preorder(tree: Multipath) -> list[Multipath]:
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


# -- encoding and splitting ----------------------------------------------------


@given(trees)
def test_round_trip_and_split(tree: Multipath) -> None:
    buf = tree.encode()
    assert Multipath.decode(buf) == tree
    split = split_multipath(buf)
    assert split.endpoint == tree.endpoint
    assert split.is_receiver == tree.is_receiver
    assert split.branches == tuple((c.endpoint, c.encode()) for c in tree.children)
    assert multipath_receivers(buf) == [n.endpoint for n in preorder(tree) if n.is_receiver]


def _only_decode_error(buf: bytes) -> None:
    for fn in (split_multipath, Multipath.decode, multipath_receivers):
        with contextlib.suppress(DecodeError):
            fn(buf)


@settings(max_examples=150)
@given(st.binary(max_size=80))
def test_fuzz_random_bytes(buf: bytes) -> None:
    _only_decode_error(buf)


@settings(max_examples=150)
@given(trees, st.integers(0, 300), st.integers(0, 255), st.integers(0, 300))
def test_fuzz_mutated_trees(tree: Multipath, where: int, value: int, cut: int) -> None:
    buf = bytearray(tree.encode())
    buf[where % len(buf)] = value
    _only_decode_error(bytes(buf))
    _only_decode_error(bytes(buf[:cut]))


def _chain(depth: int) -> bytes:
    """A multipath that is one line ``depth`` edges deep, built by hand."""
    nodes = [i.to_bytes(16, "big") + b"\x00\x01" for i in range(depth)]
    return b"".join(nodes) + (depth).to_bytes(16, "big") + b"\x01\x00"


def test_deep_multipaths_are_bounded_without_recursion() -> None:
    assert len(multipath_receivers(_chain(MAX_PATH_LEN))) == 1
    with pytest.raises(DecodeError, match="deeper"):
        split_multipath(_chain(MAX_PATH_LEN + 1))
    with pytest.raises(DecodeError):
        Multipath.decode(_chain(5000))


@pytest.mark.parametrize(
    ("buf", "message"),
    [
        (A + b"\x02\x00", "flags"),
        (A + b"\x00\x02" + B + b"\x01\x00" + B + b"\x01\x00", "same child twice"),
        (A + b"\x00\x00\x00", "trailing"),
        (A + b"\x00\x05" + B + b"\x01\x00", "children"),
        (A[:10], "truncated"),
        (b"", "truncated"),
    ],
)
def test_malformed_multipaths(buf: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        split_multipath(buf)


# -- building -------------------------------------------------------------------


def paths_from(table: dict[bytes, list[tuple[bytes, ...]]]):
    return lambda r: sorted(table.get(r, []))


def tree_of(own: bytes, branches) -> Multipath:
    return Multipath(own, False, tuple(Multipath.decode(sub) for _, sub in branches))


def flagged(tree: Multipath) -> list[bytes]:
    return [n.endpoint for n in preorder(tree) if n.is_receiver]


def test_shared_prefixes_merge_into_one_branch() -> None:
    table = {B: [(B,)], C: [(B, C)]}
    branches, unroutable = build_branches(A, [C, B], paths_from(table))
    assert unroutable == []
    assert tree_of(A, branches) == Multipath(A, False, (Multipath(B, True, (Multipath(C, True),)),))


def test_prefers_the_candidate_that_shares_the_tree() -> None:
    # D is only reachable via C; E via B or C: E should ride along with D.
    table = {D: [(C, D)], E: [(B, E), (C, E)]}
    branches, _ = build_branches(A, [D, E], paths_from(table))
    assert [child for child, _ in branches] == [C]
    assert sorted(flagged(tree_of(A, branches))) == [D, E]


def test_each_receiver_flagged_once_even_when_branches_cross() -> None:
    # X is on both branches (via B and via C) and is itself a receiver.
    table = {D: [(B, X, D)], E: [(C, X, E)], X: [(B, X)]}
    branches, _ = build_branches(A, [D, E, X], paths_from(table))
    tree = tree_of(A, branches)
    assert sorted(flagged(tree)) == [D, E, X]
    assert [n.endpoint for n in preorder(tree)].count(X) == 2


def test_unroutable_and_own_id_are_left_out() -> None:
    branches, unroutable = build_branches(A, [A, B, E], paths_from({B: [(B,)]}))
    assert unroutable == [E]
    assert flagged(tree_of(A, branches)) == [B]


# -- one hop --------------------------------------------------------------------


def router_with_chain() -> Router:
    """A's router: neighbour B, and C behind B; C subscribes to /t."""
    router = Router(A)
    router.add_neighbor(B)
    router.receive(B, SubscriptionUpdate((B,), (1,), ()))
    router.receive(B, SubscriptionUpdate((C, B), (1, 1), ("/t",)))
    router.outgoing()
    return router


def test_publish_routes_to_subscribers_only() -> None:
    fwd = Forwarder(router_with_chain())
    assert fwd.publish("/other", b"p") == []
    [(hop, msg)] = fwd.publish("/t/x", b"p", ttl=5)
    assert hop == B
    assert msg == RoutedMessage(DATA_V2, 5, "/t/x", A, msg.multipath, b"p")
    assert Multipath.decode(msg.multipath) == Multipath(B, False, (Multipath(C, True),))
    with pytest.raises(ValueError):
        fwd.publish("/t", b"p", ttl=0)
    with pytest.raises(ValueError):
        fwd.publish("/t", b"p", kind=3)


def test_plans_are_cached_until_routes_change() -> None:
    router = router_with_chain()
    fwd = Forwarder(router)
    first = fwd.plan({C})
    assert fwd.plan(frozenset({C})) is first
    router.receive(B, SubscriptionUpdate((C, B), (2, 2), ("/t",)))
    assert fwd.plan({C}) is not first


def test_hop_forwards_payload_untouched_and_lowers_ttl() -> None:
    router = Router(B)
    router.add_neighbor(C)
    fwd = Forwarder(router)
    payload = b"\x05\x02hi"
    msg = RoutedMessage(
        COMMAND_V2, 3, "/t", A, Multipath(B, True, (Multipath(C, True),)).encode(), payload
    )
    result = fwd.receive(msg)
    assert result.deliver
    [(hop, out)] = result.forwards
    assert hop == C and out.ttl == 2 and out.kind == COMMAND_V2 and out.publisher == A
    assert out.payload is payload
    assert out.multipath == Multipath(C, True).encode()


def test_ttl_one_delivers_but_does_not_forward_and_zero_drops() -> None:
    router = Router(B)
    router.add_neighbor(C)
    fwd = Forwarder(router)
    mp = Multipath(B, True, (Multipath(C, True),)).encode()
    last = fwd.receive(RoutedMessage(DATA_V2, 1, "/t", A, mp, b""))
    assert last.deliver and last.forwards == [] and last.ttl_dropped == 1
    dead = fwd.receive(RoutedMessage(DATA_V2, 0, "/t", A, mp, b""))
    assert not dead.deliver and dead.forwards == [] and dead.ttl_dropped == 2


def test_misrouted_multipath_is_a_protocol_error() -> None:
    fwd = Forwarder(Router(B))
    with pytest.raises(ProtocolError):
        fwd.receive(RoutedMessage(DATA_V2, 4, "/t", A, Multipath(C, True).encode(), b""))
    with pytest.raises(DecodeError):
        fwd.receive(RoutedMessage(DATA_V2, 4, "/t", A, b"junk", b""))


def test_lost_next_hop_reroutes_or_counts_unroutable() -> None:
    router = Router(B)  # no neighbours at all: C is unknown
    result = Forwarder(router).receive(
        RoutedMessage(DATA_V2, 4, "/t", A, Multipath(B, False, (Multipath(C, True),)).encode(), b"")
    )
    assert result.forwards == [] and result.unroutable == 1
