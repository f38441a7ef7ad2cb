"""``peer()`` over version 2 waits for the neighbour's first subscription, boundedly.

Over version 2 ``peer()`` returns once the router learned the neighbour's
subscription (so a publish right after it is routed) and the neighbour answered
the ping sent behind ours (so it knows our subscription). These tests script the
neighbour on a raw socket (the fault injection: a real broker-spark endpoint
always floods its subscription at once) to check the two ways that wait could
hang: the link dies before the subscription arrives, or it never arrives.
Regression: the first kept ``peer()`` blocked until shutdown.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from test_peering_support import LOCAL, make_endpoint, next_matching, peering, wait_for
from test_peering_wire import HIGH_ID, LOW_ID, ZeekPeer

import broker_spark as broker
from broker_spark import EC, SC
from broker_spark.protocol.v2_messages import SUBSCRIPTION, SubscriptionUpdate, encode_v2
from broker_spark.protocol.wire_messages import (
    MSG_PING,
    decode_handshake,
    decode_node_message,
    encode_pong_for,
    is_bye_token,
)

pytestmark = pytest.mark.timeout(30)


@contextmanager
def dialling(retry: float) -> Iterator[tuple[broker.Endpoint, socket.socket, Future[bool], object]]:
    """An endpoint calling ``peer(retry=retry)`` (in a thread) on a raw listening socket."""
    ep = make_endpoint()
    peering(ep).routes_timeout = 0.5
    status = ep.make_status_subscriber(True)
    listener = socket.create_server((LOCAL, 0))
    listener.settimeout(5.0)
    pool = ThreadPoolExecutor(1)
    try:
        fut = pool.submit(ep.peer, LOCAL, listener.getsockname()[1], retry)
        yield ep, listener, fut, status
    finally:
        ep.shutdown()  # also releases a peer() that is still blocked
        pool.shutdown(wait=True)
        listener.close()


def v2_neighbour(ep: broker.Endpoint, listener: socket.socket, zid: bytes) -> ZeekPeer:
    """Accept the endpoint's dial and run a version 2 handshake as its neighbour."""
    conn, _ = listener.accept()
    peer = ZeekPeer(conn, zid)
    peer.handshake(ep._core.node_id, "acceptor", (), version=2)
    assert wait_for(lambda: len(ep._core.links) == 1)
    assert next(iter(ep._core.links.values())).version == 2
    return peer


def is_error(item: object) -> bool:
    return isinstance(item, broker.Error)


@pytest.mark.parametrize("zid", [LOW_ID, HIGH_ID], ids=["we-respond", "we-originate"])
def test_subscription_from_the_neighbour_completes_peer(zid: bytes) -> None:
    """The scripted neighbour is realistic: with its subscription, peer() returns True at once."""
    with dialling(retry=0) as (ep, listener, fut, status):
        peer = v2_neighbour(ep, listener, zid)
        try:
            own = ep._core.node_id
            started = time.monotonic()
            update = SubscriptionUpdate((zid,), (1,), ("/v2",))
            peer.send(encode_v2(zid, own, update))
            # Ours reached it too: a SUBSCRIPTION from us, addressed to it, then a ping
            # behind it, whose pong says the neighbour has taken it (test_peering_races).
            body = peer.recv()
            assert body[:16] == own and body[16:32] == zid and body[32] == SUBSCRIPTION
            ping = decode_node_message(peer.recv())
            assert ping.msg_type == MSG_PING and not is_bye_token(ping.payload)
            assert not fut.done()  # peer() waits for the pong
            peer.send(encode_pong_for(ping, zid))
            assert fut.result(timeout=5) is True
            assert time.monotonic() - started < peering(ep).routes_timeout
        finally:
            peer.sock.close()


@pytest.mark.parametrize("zid", [LOW_ID, HIGH_ID], ids=["we-respond", "we-originate"])
def test_link_closed_before_the_subscription_fails_peer(zid: bytes) -> None:
    with dialling(retry=0) as (ep, listener, fut, status):
        peer = v2_neighbour(ep, listener, zid)
        peer.sock.close()  # handshake done, then gone without a subscription
        assert fut.result(timeout=5) is False
        err = next_matching(status, is_error)
        assert err is not None and err.code() == EC.PeerDisconnectDuringHandshake
        assert "before the peer sent its subscriptions" in err.message()
        assert next_matching(status, lambda s: s.code() == SC.PeerLost) is not None
        # retry=0: tried once and forgotten, like any failed attempt.
        assert ep._core.links == {} and ep.peers() == []


def test_link_closed_before_the_subscription_with_retry_redials() -> None:
    with dialling(retry=0.2) as (ep, listener, fut, status):
        peer = v2_neighbour(ep, listener, HIGH_ID)
        peer.sock.close()
        # peer() reports the failed attempt (as for a refused dial with retry > 0)...
        assert fut.result(timeout=5) is False
        err = next_matching(status, is_error)
        assert err is not None and err.code() == EC.PeerDisconnectDuringHandshake
        # ...and the target is redialled in the background until unpeered.
        again, _ = listener.accept()
        with again:
            again.settimeout(5.0)
            hello = ZeekPeer(again, HIGH_ID).recv()
            assert decode_handshake(hello).sender == ep._core.node_id
        assert ep.unpeer(LOCAL, listener.getsockname()[1])


def test_silent_neighbour_does_not_block_peer_forever() -> None:
    with dialling(retry=0) as (ep, listener, fut, status):
        started = time.monotonic()
        peer = v2_neighbour(ep, listener, HIGH_ID)
        try:
            # It never sends a subscription: peer() gives up waiting for it after
            # routes_timeout and reports the peering as up (the handshake succeeded).
            assert fut.result(timeout=5) is True
            assert time.monotonic() - started >= peering(ep).routes_timeout
            assert len(ep._core.links) == 1
            assert next_matching(status, is_error, timeout=0.2) is None
        finally:
            peer.sock.close()


def test_unpeer_while_waiting_for_the_subscription_releases_peer() -> None:
    with dialling(retry=5) as (ep, listener, fut, status):
        peering(ep).routes_timeout = 30.0
        peer = v2_neighbour(ep, listener, HIGH_ID)
        try:
            assert not fut.done()
            assert ep.unpeer(LOCAL, listener.getsockname()[1])
            assert fut.result(timeout=5) is False
            assert peering(ep).awaiting_routes == set()
        finally:
            peer.sock.close()
