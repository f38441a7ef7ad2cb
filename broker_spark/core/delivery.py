"""An acknowledged flush: when has every peer taken what an endpoint published?

``Endpoint.publish`` returns once the message is queued. Whoever must know that
it arrived (a Spark writer task, whose ``write`` returning tells Spark the rows
are delivered: at-least-once, as Spark's Kafka sink) calls ``Endpoint.flush``,
which runs :func:`flush` on the endpoint's loop:

1. the core has taken everything from the publish queue and handed it to the
   links (nothing queued, nothing held back for lack of room);
2. every link confirms, in its own way (:meth:`~broker_spark.core.link.Link.acknowledge`):
   a Broker peer answers a ping sent behind the messages, a WebSocket server
   echoes the last probe (or answers a WebSocket ping), a Zeek cluster's
   ZeroMQ proxy has had everything written to it (ZeroMQ acknowledges nothing,
   so that link is left once written).

The links that must confirm are those the caller names (the ones its messages
were published to: a peering that ended and came back is not the one that
took them), by default those up now; each must still be up, and there must be
one, else :class:`~broker_spark.errors.DeliveryError` says which and why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from broker_spark.core.link import Link
from broker_spark.errors import DeliveryError

__all__ = ["flush"]


async def _drained(source: Any, deadline: float) -> None:
    """Until the core has taken everything from ``source`` and handed it to the links."""
    loop = asyncio.get_running_loop()
    delay = 0.0005
    while source.items or source.held is not None:
        if loop.time() > deadline:
            raise DeliveryError(
                "timed out waiting until the endpoint handed every message to its peers"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


async def flush(source: Any, links: Sequence[Link], timeout: float) -> None:
    """Return once every link in ``links`` confirmed it took what ``source`` (the endpoint's
    publish queue) held; raise :class:`DeliveryError` otherwise (runs on the core's loop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    await _drained(source, deadline)
    if not links:
        raise DeliveryError("no peer to acknowledge the messages: the peering never came up")
    for link in links:
        if link.closed:
            raise DeliveryError(f"the peering with {link.peer_str} ended before the ack")
    results = await asyncio.gather(
        *(link.acknowledge(deadline) for link in links), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
