"""``Endpoint.flush``: the acknowledged flush, over a real peering and an in-process one.

Once ``flush`` returns, the peer has read everything published before it (its
pong to our ping came back behind the messages), so a subscriber there finds
them all without waiting for more; the peering stays up. Without a peer, or when
the peering ended, ``flush`` says so with a ``DeliveryError`` naming why.
"""

from __future__ import annotations

import time

import pytest
from spark_fixtures import plain_config, wait_for

import broker_spark as broker
from broker_spark.core.memory_link import connect
from broker_spark.errors import DeliveryError

pytestmark = pytest.mark.timeout(60)


def test_flush_returns_once_the_peer_read_everything_and_keeps_the_peering() -> None:
    with broker.Endpoint(plain_config()) as hub, broker.Endpoint(plain_config()) as ep:
        sub = hub.make_subscriber("/f", qsize=100_000)
        port = hub.listen("127.0.0.1", 0)
        assert ep.peer("127.0.0.1", port, retry=0)
        wait_for(lambda: ep.peer_subscriptions(), 20, "the hub's subscription")
        links = ep.links()
        assert [link.kind for link in links] == ["broker"]
        ep.publish_batch(*[("/f/x", broker.Count(i)) for i in range(20_000)])
        ep.flush(30.0, links)
        got = sub.poll()
        deadline = time.monotonic() + 0.5  # the hub's core hands them on to the subscriber
        while len(got) < 20_000 and time.monotonic() < deadline:
            got += sub.poll()
            time.sleep(0.01)
        assert [v for _t, v in got] == [broker.Count(i) for i in range(20_000)]
        assert [p.status for p in ep.peers()] == [broker.PeerStatus.Peered]  # still peered
        ep.flush(30.0)  # again: nothing new, the pong comes at once


def test_flush_without_a_peer_or_after_it_left_says_why() -> None:
    with broker.Endpoint(plain_config()) as lonely:
        lonely.publish("/f", 1)
        with pytest.raises(DeliveryError, match="no peer to acknowledge"):
            lonely.flush(5.0)
    with broker.Endpoint(plain_config()) as hub, broker.Endpoint(plain_config()) as ep:
        port = hub.listen("127.0.0.1", 0)
        assert ep.peer("127.0.0.1", port, retry=0)
        links = ep.links()
        assert ep.unpeer("127.0.0.1", port)
        wait_for(lambda: all(link.closed for link in links), 20, "the peering ended")
        with pytest.raises(DeliveryError, match="ended before the ack"):
            ep.flush(5.0, links)


def test_an_in_process_peering_confirms_at_once() -> None:
    with broker.Endpoint(plain_config()) as a, broker.Endpoint(plain_config()) as b:
        sub = b.make_subscriber("/m")
        connect(a, b)
        wait_for(lambda: a.peer_subscriptions(), 20, "b's subscription")
        a.publish("/m/1", "hello")
        a.flush(5.0)
        assert [link.kind for link in a.links()] == ["memory"]
        assert sub.get(5.0) == ("/m/1", "hello")
