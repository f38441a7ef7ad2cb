"""The Router by hand: flooding rules, versioned paths, revocations, events and queries."""

from __future__ import annotations

import pytest

from broker_spark.errors import ProtocolError
from broker_spark.protocol.routing import (
    EndpointDiscovered,
    EndpointUnreachable,
    FilterChanged,
    Router,
)
from broker_spark.protocol.v2_messages import PathRevocation, SubscriptionUpdate


def eid(c: str) -> bytes:
    return c.encode() * 16


A, B, C, D, E, US = (eid(c) for c in "ABCDEO")


def sub(path: str, stamps: tuple[int, ...], *prefixes: str) -> SubscriptionUpdate:
    return SubscriptionUpdate(tuple(eid(c) for c in path), stamps, prefixes)


def router(*neighbours: bytes, own: bytes = US) -> Router:
    r = Router(own)
    for n in neighbours:
        r.add_neighbor(n)
    r.outgoing()
    return r


def sent(r: Router) -> list[tuple[bytes, object]]:
    return r.outgoing()


# -- flooding -------------------------------------------------------------------


def test_filter_change_ticks_clock_and_floods_to_every_neighbour() -> None:
    r = router(A, B)
    assert r.subscribe("/zeek/event/foo")
    assert not r.subscribe("/zeek/event/foo/bar")  # covered already: no change, no flood
    assert r.clock == 1
    update = SubscriptionUpdate((US,), (1,), ("/zeek/event/foo",))
    assert sent(r) == [(A, update), (B, update)]
    assert r.set_filter(["/zeek/event", "/zeek/event/bar"])
    assert r.filter == ("/zeek/event",) and r.clock == 2
    assert r.unsubscribe("/zeek/event") and r.filter == ()


def test_first_update_is_stored_and_forwarded_to_neighbours_off_the_path() -> None:
    r = router(A, B, C)
    r.receive(A, sub("DA", (5, 1), "/x"))
    assert r.events() == [EndpointDiscovered(D)]
    assert r.paths(D) == {(A, D): (1, 5)}
    assert r.filter_of(D) == ("/x",) and r.timestamp_of(D) == 5
    forwarded = SubscriptionUpdate((D, A, US), (5, 1, 0), ("/x",))
    assert sent(r) == [(B, forwarded), (C, forwarded)]
    # A path that already holds C is not sent back to C.
    r.receive(B, sub("ECB", (1, 1, 1)))
    assert [to for to, _ in sent(r)] == [A]


def test_loops_duplicates_and_older_timestamps_are_dropped() -> None:
    r = router(A, B)
    r.receive(A, sub("DA", (5, 0), "/x"))
    sent(r)
    r.events()
    r.receive(A, sub("DOA", (6, 0, 0), "/y"))  # holds us: a loop
    r.receive(A, sub("DA", (5, 0), "/x"))  # duplicate
    r.receive(A, sub("DA", (4, 0), "/old"))  # older
    assert sent(r) == [] and r.events() == []
    assert r.filter_of(D) == ("/x",) and r.timestamp_of(D) == 5


def test_equal_timestamp_adds_paths_and_forwards_only_improvements() -> None:
    r = router(A, B, C)
    r.receive(A, sub("DEA", (5, 0, 0), "/x"))
    sent(r)
    r.receive(B, sub("DEB", (5, 0, 0), "/x"))  # another path, same length
    assert sent(r) == []
    assert set(r.paths(D)) == {(A, E, D), (B, E, D)}
    r.receive(C, sub("DC", (5, 0), "/x"))  # shorter: forwarded
    assert [to for to, _ in sent(r)] == [A, B]
    assert r.shortest_path(D) == (C, D) and r.next_hop(D) == C and r.distance(D) == 2
    assert r.shortest_paths(D) == [(C, D)]


def test_newer_timestamp_replaces_filter_and_paths() -> None:
    r = router(A, B)
    r.receive(A, sub("DA", (5, 0), "/x"))
    r.receive(B, sub("DB", (5, 0), "/x"))
    r.events()
    sent(r)
    r.receive(B, sub("DB", (6, 0), "/y"))
    assert r.events() == [FilterChanged(D, ("/y",))]
    assert r.paths(D) == {(B, D): (0, 6)}
    assert [to for to, _ in sent(r)] == [A]


def test_messages_from_strangers_are_ignored_and_lies_rejected() -> None:
    r = router(A)
    r.receive(B, sub("DB", (1, 0)))
    assert r.known() == frozenset()
    with pytest.raises(ProtocolError, match="last hop"):
        r.receive(A, sub("DB", (1, 0)))
    with pytest.raises(ProtocolError, match="repeated"):
        r.receive(A, sub("DBDA", (1, 0, 0, 0)))
    with pytest.raises(ProtocolError, match="one timestamp per hop"):
        r.receive(A, SubscriptionUpdate((D, A), (1,), ()))
    with pytest.raises(ProtocolError):
        r.receive(A, "nonsense")  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        r.add_neighbor(US)
    with pytest.raises(ValueError):
        Router(b"short")


def test_path_length_limit_stops_forwarding() -> None:
    r = Router(US, max_path_len=3)
    r.add_neighbor(A)
    r.add_neighbor(B)
    sent(r)
    r.receive(A, sub("DCA", (1, 0, 0)))
    assert sent(r) == [] and r.distance(D) == 3


# -- new links ------------------------------------------------------------------


def test_new_neighbour_gets_our_subscription_and_best_paths() -> None:
    r = router(A, B)
    r.set_filter(["/mine"])
    r.receive(A, sub("A", (2,), "/a"))
    r.receive(A, sub("DA", (5, 3), "/d"))
    r.receive(B, sub("EDB", (7, 0, 0), "/e"))
    r.receive(A, sub("EA", (7, 4), "/e"))
    sent(r)
    r.add_neighbor(C)
    assert sent(r) == [
        (C, SubscriptionUpdate((US,), (1,), ("/mine",))),
        (C, SubscriptionUpdate((A, US), (2, 1), ("/a",))),
        (C, SubscriptionUpdate((D, A, US), (5, 3, 1), ("/d",))),
        (C, SubscriptionUpdate((E, A, US), (7, 4, 1), ("/e",))),
    ]
    r.add_neighbor(C)  # already a neighbour: nothing
    assert sent(r) == []


# -- lost links and revocations ----------------------------------------------------


def test_lost_link_revokes_refreshes_and_reports_unreachable() -> None:
    r = router(A, B)
    r.receive(A, sub("A", (1,)))
    r.receive(A, sub("DA", (5, 1)))  # forwarded (advertised) to B
    r.receive(B, sub("DB", (5, 1)))  # equal length: stored only
    r.receive(A, sub("EA", (3, 1)))  # advertised
    r.events()
    sent(r)
    r.remove_neighbor(A)
    assert r.clock == 1
    assert r.events() == [EndpointUnreachable(A), EndpointUnreachable(E)]
    assert sent(r) == [
        (B, PathRevocation(US, 1, A, (D, E))),
        (B, SubscriptionUpdate((US,), (1,), ())),
    ]
    assert r.paths(D) == {(B, D): (1, 5)}
    assert r.reachable() == frozenset({D})
    r.remove_neighbor(A)  # not a neighbour any more: nothing
    assert sent(r) == []


def test_revocation_removes_old_paths_through_the_link_and_is_forwarded_once() -> None:
    r = router(A, B, C)
    r.receive(A, sub("DEA", (5, 2, 4)))  # path us-A-E-D: E's entry 2
    r.receive(B, sub("DEB", (5, 9, 4)))  # path us-B-E-D: E's entry 9 (after relink)
    r.receive(C, sub("DC", (5, 1)))
    r.events()
    sent(r)
    revocation = PathRevocation(E, 3, D)
    r.receive(A, revocation)
    assert set(r.paths(D)) == {(B, E, D), (C, D)}
    assert sent(r) == [(B, revocation), (C, revocation)]
    r.receive(B, revocation)  # a repeat
    assert sent(r) == []
    # A stale copy of the revoked path is refused; one recorded later is kept.
    r.receive(C, sub("DEC", (5, 2, 0)))
    assert (C, E, D) not in r.paths(D)
    r.receive(C, sub("DEC", (5, 3, 0)))
    assert (C, E, D) in r.paths(D)


def test_revocation_naming_us_triggers_a_refresh_flood() -> None:
    r = router(A, B)
    r.receive(A, PathRevocation(C, 4, D, (US,)))
    assert r.clock == 1
    assert sent(r) == [
        (B, PathRevocation(C, 4, D, (US,))),
        (A, SubscriptionUpdate((US,), (1,), ())),
        (B, SubscriptionUpdate((US,), (1,), ())),
    ]


def test_revocation_of_our_own_link_arriving_from_afar() -> None:
    # B tells the world it lost us; our direct path to B predates that.
    r = router(A, B)
    r.receive(B, sub("B", (2,)))
    r.receive(A, sub("BA", (2, 0)))
    r.events()
    r.receive(A, PathRevocation(B, 3, US))
    assert set(r.paths(B)) == {(A, B)}


def test_unreachable_endpoint_comes_back_when_a_path_reappears() -> None:
    r = router(A)
    r.receive(A, sub("DA", (5, 0), "/x"))
    r.remove_neighbor(A)
    r.add_neighbor(B)
    r.events()
    r.receive(B, sub("DB", (5, 0), "/x"))
    assert r.events() == [EndpointDiscovered(D)]
    r.receive(B, sub("DB", (4, 0), "/x"))  # still older than what we know
    assert r.paths(D) == {(B, D): (0, 5)}


# -- queries --------------------------------------------------------------------


def test_subscribers_match_prefixes_and_follow_changes() -> None:
    r = router(A, B)
    r.receive(A, sub("DA", (1, 0), "/zeek/event"))
    r.receive(B, sub("EB", (1, 0), "/zeek"))
    assert r.subscribers("/zeek/event/x") == frozenset({D, E})
    assert r.subscribers("/zeek/log") == frozenset({E})
    assert r.subscribers("/other") == frozenset()
    r.receive(A, sub("DA", (2, 0), "/other"))  # filter change invalidates the cache
    assert r.subscribers("/zeek/event/x") == frozenset({E})
    r.remove_neighbor(B)  # E unreachable: no longer a subscriber
    assert r.subscribers("/zeek/event/x") == frozenset()
    assert r.shortest_path(E) is None and r.next_hop(E) is None and r.distance(E) is None
    assert r.filter_of(eid("Z")) is None and r.paths(eid("Z")) == {}


def test_subscriber_cache_is_bounded() -> None:
    r = Router(US, topic_cache_size=4)
    for i in range(20):
        assert r.subscribers(f"/t/{i}") == frozenset()
    assert len(r._topic_cache) <= 4
