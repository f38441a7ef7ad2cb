"""Endpoints peered over real loopback sockets: chains, loops, races, unpeering, statuses."""

from __future__ import annotations

import socket
import threading

import pytest
from test_peering_support import (
    LOCAL,
    chain,
    codes,
    endpoints,
    link_count,
    make_endpoint,
    next_matching,
    peering,
    routes_to,
    statuses,
    wait_for,
    wants,
)

import broker_spark as broker
from broker_spark import EC, SC

pytestmark = pytest.mark.timeout(30)

VERSIONS = {"v1": (1, 1), "v2": (1, 2)}


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_chain_delivers_end_to_end_both_ways(n: int, version: str) -> None:
    with endpoints(n, versions=VERSIONS[version]) as eps:
        chain(eps)
        for ep in eps:
            assert peering(ep).versions == VERSIONS[version]
        first, last = eps[0], eps[-1]
        # The middle endpoints subscribe to nothing and must still forward.
        back = first.make_subscriber("/chain/back", qsize=100)
        fwd = last.make_subscriber("/chain/fwd", qsize=100)
        assert wants(first, "/chain/fwd/x")
        assert wants(last, "/chain/back/y")
        for i in range(20):
            first.publish("/chain/fwd/x", i)
            last.publish("/chain/back/y", str(i))
        assert fwd.get(20, 5.0) == [("/chain/fwd/x", i) for i in range(20)]
        assert back.get(20, 5.0) == [("/chain/back/y", str(i)) for i in range(20)]
        # Each link really uses the version asked for.
        link = next(iter(first._core.links.values()))
        assert link.version == VERSIONS[version][1]


def test_chain_with_subscribing_middle_and_batches() -> None:
    with endpoints(3) as eps:
        chain(eps)
        mid = eps[1].make_subscriber("/b", qsize=2000)
        end = eps[2].make_subscriber("/b", qsize=2000)
        assert wants(eps[0], "/b/1")
        assert wait_for(lambda: routes_to(eps[0], eps[2], "/b/1"))
        assert wait_for(lambda: routes_to(eps[0], eps[1], "/b/1"))
        eps[0].publish_batch(*(("/b/1", i) for i in range(1000)))
        assert [v for _, v in mid.get(1000, 5.0)] == list(range(1000))
        assert [v for _, v in end.get(1000, 5.0)] == list(range(1000))


def test_middle_hop_replans_learned_relays_when_routes_change() -> None:
    # b relays a's stream to c and learns what to do with its header; a new
    # neighbour changes b's routes, so the next messages with the same header
    # must be planned again (and still reach c exactly once, in order).
    with endpoints(4) as (a, b, c, d):
        chain([a, b, c])
        end = c.make_subscriber("/r", qsize=500)
        assert wants(a, "/r/x")
        a.publish_batch(*(("/r/x", i) for i in range(100)))
        assert end.get(100, 5.0) == [("/r/x", i) for i in range(100)]
        fabric = peering(b).fabric
        before = fabric.version
        d.make_subscriber("/elsewhere")
        assert d.peer(LOCAL, b.listen(LOCAL, 0), 0)
        assert wait_for(lambda: fabric.version != before)
        a.publish_batch(*(("/r/x", i) for i in range(100, 200)))
        assert end.get(100, 5.0) == [("/r/x", i) for i in range(100, 200)]


def test_triangle_delivers_exactly_once() -> None:
    with endpoints(3) as (a, b, c):
        pa, pb, pc = (ep.listen(LOCAL, 0) for ep in (a, b, c))
        assert a.peer(LOCAL, pb, 0)
        assert b.peer(LOCAL, pc, 0)
        assert c.peer(LOCAL, pa, 0)
        sub_c = c.make_subscriber("/tri", qsize=100)
        sub_b = b.make_subscriber("/other", qsize=100)
        assert wants(a, "/tri/x")
        for i in range(50):
            a.publish("/tri/x", i)
        got = sub_c.get(50, 5.0)
        assert [v for _, v in got] == list(range(50))
        assert sub_c.get(0.3) is None  # no duplicate over the other side of the loop
        assert sub_b.poll() == []
        # The loop stays safe once a link breaks: the message goes the long way round.
        assert a.unpeer(LOCAL, pb)
        assert wait_for(lambda: link_count(a) == 1 and link_count(b) == 1)
        a.publish("/tri/x", "after")
        assert sub_c.get(5.0) == ("/tri/x", "after")


def test_triangle_v1_bounded_by_ttl() -> None:
    # Version 1 has no loop detection: duplicates are possible, but the TTL ends them.
    with endpoints(3, versions=(1, 1), ttl=4) as (a, b, c):
        pa, pb, pc = (ep.listen(LOCAL, 0) for ep in (a, b, c))
        assert a.peer(LOCAL, pb, 0) and b.peer(LOCAL, pc, 0) and c.peer(LOCAL, pa, 0)
        sub = c.make_subscriber("/tri", qsize=100)
        assert wants(a, "/tri/x")
        a.publish("/tri/x", 1)
        first = sub.get(5.0)
        assert first == ("/tri/x", 1)
        extra = sub.get(100, 0.5)
        assert len(extra) < 8  # bounded copies, no storm


def test_simultaneous_dialing_keeps_one_connection() -> None:
    for _ in range(3):
        with endpoints(2) as (a, b):
            pa, pb = a.listen(LOCAL, 0), b.listen(LOCAL, 0)
            results: dict[str, bool] = {}

            def dial(
                ep: broker.Endpoint, port: int, name: str, out: dict[str, bool] = results
            ) -> None:
                out[name] = ep.peer(LOCAL, port, 0.5)

            threads = [
                threading.Thread(target=dial, args=(a, pb, "a")),
                threading.Thread(target=dial, args=(b, pa, "b")),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert results == {"a": True, "b": True}
            assert link_count(a) == 1 and link_count(b) == 1
            assert wait_for(
                lambda: not peering(a).conns - {lk.conn for lk in a._core.links.values()}
            )
            sub = b.make_subscriber("/sim")
            assert wants(a, "/sim/1")
            a.publish("/sim/1", "once")
            assert sub.get(5.0) == ("/sim/1", "once")
            assert sub.get(0.2) is None


def test_status_sequence_unpeer_and_reconnect() -> None:
    with endpoints(2) as (a, b):
        sa = a.make_status_subscriber(True)
        sb = b.make_status_subscriber(True)
        pb = b.listen(LOCAL, 0)
        assert a.peer(LOCAL, pb, 0)
        assert codes(statuses(sa, 2)) == [SC.EndpointDiscovered, SC.PeerAdded]
        assert codes(statuses(sb, 2)) == [SC.EndpointDiscovered, SC.PeerAdded]
        (info,) = a.peers()
        assert info.peer.id == b.node_id()
        assert info.peer.network.address == LOCAL and info.peer.network.port == pb
        assert info.status == broker.PeerStatus.Peered
        assert a.unpeer(LOCAL, pb)
        assert codes(statuses(sa, 2)) == [SC.PeerRemoved, SC.EndpointUnreachable]
        assert codes(statuses(sb, 2)) == [SC.PeerRemoved, SC.EndpointUnreachable]
        assert a.peers() == [] and wait_for(lambda: b.peers() == [])
        assert not a.unpeer(LOCAL, pb)  # not a peer any more
        err = next_matching(sa, lambda s: isinstance(s, broker.Error))
        assert err.code() == EC.PeerInvalid
        # And again.
        assert a.peer(LOCAL, pb, 0)
        assert codes(statuses(sa, 2)) == [SC.EndpointDiscovered, SC.PeerAdded]
        sub = b.make_subscriber("/again")
        assert wants(a, "/again")
        a.publish("/again", 1)
        assert sub.get(5.0) == ("/again", 1)


def test_peer_to_closed_port_reports_unavailable() -> None:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with endpoints(1) as (a,):
            st = a.make_status_subscriber(False)
            assert a.peer(LOCAL, port, 0) is False
            err = st.get(5.0)
            assert isinstance(err, broker.Error)
            assert err.code() == EC.PeerUnavailable
            assert str(port) in err.message()
            assert a.peers() == []


def test_every_failed_retry_is_reported() -> None:
    """As in Broker, a retrying peering reports PeerUnavailable for each failed attempt."""
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        port = s.getsockname()[1]
    with endpoints(1) as (a,):
        st = a.make_status_subscriber(False)
        a.peer_nosync(LOCAL, port, 0.2)
        errors = [st.get(5.0), st.get(5.0)]
        assert [e.code() for e in errors] == [EC.PeerUnavailable, EC.PeerUnavailable]


def test_peer_retries_until_the_peer_listens() -> None:
    with endpoints(2) as (a, b):
        with socket.socket() as s:
            s.bind((LOCAL, 0))
            port = s.getsockname()[1]
        st = a.make_status_subscriber(True)
        assert a.peer(LOCAL, port, 0.05) is False  # first attempt fails, retries go on
        (info,) = a.peers()
        assert info.status in (broker.PeerStatus.Connecting, broker.PeerStatus.Reconnecting)
        assert b.listen(LOCAL, port) == port
        added = next_matching(st, lambda s: s.code() == SC.PeerAdded)
        assert added is not None and added.context().node == b.node_id()
        assert a.peer(LOCAL, port, 0.05) is True  # already peered


def test_peer_nosync_and_await_peer() -> None:
    with endpoints(2) as (a, b):
        pb = b.listen(LOCAL, 0)
        a.peer_nosync(LOCAL, pb, 0)
        assert a.await_peer(b.node_id(), 5.0)
        assert b.await_peer(a.node_id(), 5.0)
        assert not a.await_peer("00000000-0000-0000-0000-000000000000", 0.05)


def test_await_peer_reaches_across_hops() -> None:
    with endpoints(3) as eps:
        chain(eps)
        assert eps[0].await_peer(eps[2].node_id(), 5.0)
        sa = eps[0].make_status_subscriber(True)
        # Lose the far endpoint: the middle one reports PeerLost, the first one
        # loses its last path to it.
        eps[2].shutdown()
        st = next_matching(sa, lambda s: s.code() == SC.EndpointUnreachable)
        assert st is not None and st.context().node == eps[2].node_id()


def test_leaf_does_not_forward() -> None:
    for versions in ((1, 1), (1, 2)):
        a = make_endpoint(versions=versions)
        b = make_endpoint(versions=versions, disable_forwarding=True)
        c = make_endpoint(versions=versions)
        try:
            chain([a, b, c])
            sub_b = b.make_subscriber("/leaf")
            sub_c = c.make_subscriber("/leaf")
            assert wants(a, "/leaf/x")
            assert wants(b, "/leaf/x")
            a.publish("/leaf/x", 1)
            assert sub_b.get(5.0) == ("/leaf/x", 1)
            assert sub_c.get(0.3) is None
            if versions == (1, 2):
                assert not routes_to(a, c, "/leaf/x")
        finally:
            for ep in (a, b, c):
                ep.shutdown()


def test_listen_failure_returns_zero() -> None:
    with endpoints(2) as (a, b):
        port = a.listen(LOCAL, 0)
        st = b.make_status_subscriber()
        assert b.listen(LOCAL, port) == 0
        assert st.get(5.0).code() == EC.CannotOpenResource


def test_unsubscribe_propagates_in_v1() -> None:
    with endpoints(3, versions=(1, 1)) as eps:
        chain(eps)
        sub = eps[2].make_subscriber("/gone")
        assert wants(eps[0], "/gone")
        eps[2]._loop.run_sync(eps[2]._core.remove_subscriber, sub._queue)
        assert eps[0]._core.wait_until(
            lambda: not any(f for f in eps[0]._core.peer_filters().values()), 5.0
        )
