"""A publish right after ``peer()`` returns must reach the peer's subscriber.

Regression: over version 2 the router learned the neighbour's subscription a
moment after the handshake, and ``peer()`` returned before that, so about half
of the first publications were routed nowhere.
"""

from __future__ import annotations

import pytest

import broker_spark as broker


@pytest.mark.timeout(60)
def test_first_publication_after_peer_is_delivered() -> None:
    lost = 0
    for _ in range(15):
        with broker.Endpoint() as a, broker.Endpoint() as b:
            port = a.listen("127.0.0.1", 0)
            sub = a.make_subscriber("/zeek/event")
            assert b.peer("127.0.0.1", port, retry=0)
            b.publish("/zeek/event/hello", broker.Count(1))
            if sub.get(2.0) is None:
                lost += 1
    assert lost == 0


@pytest.mark.timeout(60)
def test_messages_before_the_goodbye_are_not_lost() -> None:
    """Regression: data read in the same chunk as the BYE ping was dropped with the link."""
    from broker_spark.config import BrokerOptions, Configuration

    def plain() -> Configuration:
        return Configuration(BrokerOptions(disable_ssl=True))

    n = 30_000
    for _ in range(3):
        with broker.Endpoint(plain()) as b, broker.Endpoint(plain()) as a:
            port = b.listen("127.0.0.1", 0)
            sub = b.make_subscriber("t", qsize=n)
            assert a.peer("127.0.0.1", port, retry=0)
            pub = a.make_publisher("t")
            pub.publish_batch(*range(n))
            a.unpeer("127.0.0.1", port)
            got = sub.get(n, 10.0)
            assert len(got) == n
