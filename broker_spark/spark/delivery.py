"""When may a writer task say its messages were delivered? When the first peer has taken them.

Spark retries a failed task, and the promise (as for Spark's Kafka sink) is
at-least-once: a task's ``write`` must not return before its messages have
left the process and reached the peer, or a crash right after ``write``
returned would lose them silently. :func:`acknowledged_flush` waits for that,
and is the last thing a writer task does with its (private, short-lived)
endpoint:

1. the core has taken everything from the publish queue and handed it to
   the links (nothing queued, nothing held back for lack of room);
2. native peers: a ``ping`` (WIRE.md) goes out behind everything else on
   each connection, and the task waits for its ``pong``. A peer reads in
   order and answers a ping only after reading every earlier message, so
   the pong means it has taken them all. The link closes the connection
   when that pong arrives (the mechanism ``unpeer`` uses for its goodbye,
   here with a token that is not ``BYE``), which is the signal we wait for
   and is what the task wants next anyway. Why not ``unpeer`` itself: a
   peer that receives data and the goodbye in one read currently drops the
   data read with it (the link closes before handing the batch to the
   core), so a goodbye right after publishing loses messages;
3. WebSocket bridges: what they send is paced by probes whose echoes say
   the server *processed* everything before them
   (:mod:`~broker_spark.websocket.pacing`), so the task waits until the last
   probe's echo; an unpaced link sends a WebSocket ``ping`` frame once its
   writer has sent everything and awaits the ``pong``.

A peering that ends before its acknowledgement fails the task, so Spark
retries it: the links are taken when the task's endpoint opens
(:func:`peer_links`), and each one must still be up when the ping goes out
and must answer it; a task that published without any link fails too.

The peering code offers no "flush and confirm" call of its own, so this
module reaches into the endpoint's links; an endpoint with a public
``flush(timeout) -> bool`` would be used instead.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from broker_spark.endpoint import Endpoint
from broker_spark.errors import EC, BrokerError

__all__ = ["ACK_PREFIX", "DeliveryError", "acknowledged_flush", "own_routes_known", "peer_links"]

#: Our ping payload: 11 bytes like a goodbye token, but not ``BYE``, so the peer only answers.
ACK_PREFIX = b"ACK"


class DeliveryError(BrokerError):
    """The peer did not confirm it took a task's messages in time."""

    code = EC.PeerTimeout


def _poll(predicate: Any, deadline: float, what: str) -> None:
    delay = 0.0005
    while not predicate():
        if time.monotonic() > deadline:
            raise DeliveryError(f"timed out waiting until {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _wait_drained(endpoint: Endpoint, deadline: float) -> None:
    """Until the core has taken everything published and handed it to the links."""
    source: Any = endpoint._publish_src
    _poll(
        lambda: not source.items and source.held is None,
        deadline,
        "the endpoint handed every message to its peers",
    )


def peer_links(endpoint: Endpoint) -> list[Any]:
    """The endpoint's links (native peerings and WebSocket bridges) as they are now."""
    return list(endpoint._core.links.values())


def own_routes_known(endpoint: Endpoint, links: Sequence[Any]) -> bool:
    """Whether every version 2 peer among ``links`` has told us its own subscription.

    Over version 2 a new neighbour's filter arrives as routing messages, one
    endpoint's at a time, and those of endpoints behind it may come first; until
    its own is in, messages meant for it are routed nowhere. Version 1 peers
    (a Zeek) and WebSocket bridges state their filter up front.
    """
    peering = endpoint._tcp(create=False)
    if peering is None:
        return True
    router = peering.fabric.router
    return all(
        getattr(link, "version", 1) < 2 or router.timestamp_of(link.peer_id) is not None
        for link in links
        if not link.closed
    )


def _native_ping(endpoint: Endpoint, links: list[Any], deadline: float) -> None:
    """Ping every native peer behind our messages; each pong closes its connection."""
    from broker_spark.protocol.messages import encode_ping

    token = ACK_PREFIX + os.urandom(8)

    def send() -> list[Any]:
        conns = []
        for link in links:
            if link.closed:
                raise DeliveryError(f"the peering with {link.peer_str} ended before the ack")
            link.bye_token = token  # the link closes its connection when this pong arrives
            link.send_body(encode_ping(link.own_id, link.peer_id, token))
            conns.append(link.conn)
        return conns

    conns = endpoint._loop.run_sync(send)
    _poll(
        lambda: all(conn.lost for conn in conns),
        deadline,
        f"{len(conns)} peers acknowledged the messages (the pong of our ping)",
    )


def _websocket_ping(endpoint: Endpoint, link: Any, deadline: float) -> None:
    if link.pacer is not None:  # paced: the echo of the last probe is the acknowledgement
        _poll(
            lambda: link.closed or endpoint._loop.run_sync(link.settled),
            deadline,
            "the WebSocket server processed every message (the echo of the last probe)",
        )
        if link.closed:
            raise DeliveryError(
                f"the connection to the WebSocket server {link.peer_str} was lost before it "
                "processed every message"
            )
        return
    _poll(
        lambda: link.closed or (not link.out and link._writer_waiting),
        deadline,
        "the WebSocket bridge sent every message",
    )
    if link.closed:
        raise DeliveryError(f"the WebSocket bridge to {link.peer_str} closed before the pong")

    async def ping() -> None:
        waiter = await link.ws.ping()
        await asyncio.wait_for(waiter, max(0.1, deadline - time.monotonic()))

    try:
        endpoint._loop.run_coro(ping())
    except Exception as exc:
        raise DeliveryError(f"the WebSocket API did not answer our ping: {exc}") from None


def acknowledged_flush(endpoint: Endpoint, timeout: float = 60.0, links: Any = None) -> None:
    """Return once every peer confirmed it took what ``endpoint`` published; else raise.

    ``links`` are the peerings the messages were published to (by default
    those up now): each must still be up and answer, and there must be one.
    The native peerings are closed by the goodbye; shut the endpoint down next.
    """
    deadline = time.monotonic() + timeout
    _wait_drained(endpoint, deadline)
    flush = getattr(endpoint, "flush", None)
    if callable(flush):
        if flush(max(0.0, deadline - time.monotonic())) is False:
            raise DeliveryError(f"the peers did not acknowledge within {timeout} s")
        return
    from broker_spark.core.tcp_link import TcpLink

    links = peer_links(endpoint) if links is None else list(links)
    if not links:
        raise DeliveryError("no peer to acknowledge the messages: the peering never came up")
    for link in links:
        if link.closed:
            raise DeliveryError(f"the peering with {link.peer_str} ended before the ack")
    native = [link for link in links if isinstance(link, TcpLink)]
    bridges = [link for link in links if hasattr(link, "ws") and not isinstance(link, TcpLink)]
    for link in bridges:
        _websocket_ping(endpoint, link, deadline)
    if native:
        _native_ping(endpoint, native, deadline)
