"""Publishers: a topic bound to a bounded queue into the core, with Broker's demand API.

Values are encoded here, once, in the caller's thread; the core and the links
only ever move the bytes. The queue holds ``capacity`` messages; ``demand`` is
how many more fit before ``publish`` blocks, and ``fd`` is readable exactly
while there is demand, so a ``select`` loop can wait for it.
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Any

from broker_spark.core.node_message import DATA
from broker_spark.data.binary import encode
from broker_spark.errors import ShutdownError
from broker_spark.topic import as_topic_str

if TYPE_CHECKING:
    from broker_spark.core.actor import Core
    from broker_spark.core.queues import Source

__all__ = ["Publisher"]

#: Seconds over which ``send_rate`` averages.
_RATE_WINDOW = 1.0


class Publisher:
    """Publishes values on one topic (``Endpoint.make_publisher(topic)``)."""

    def __init__(self, core: Core, topic: Any, owner: object = None) -> None:
        self._core = core
        self._owner = owner  # keeps the endpoint alive as long as this publisher
        self._topic = as_topic_str(topic)
        self._ttl = core.options.ttl
        self._sender = core.node_id
        self._src: Source | None = core.make_source(core.options.publisher_buffer_size)
        self._rate_t0 = monotonic()
        self._rate_n0 = 0
        self._rate = 0.0

    def _source(self) -> Source:
        src = self._src
        if src is None:
            raise ShutdownError("the publisher was reset")
        return src

    # -- publishing ----------------------------------------------------------------

    def publish(self, data: Any) -> None:
        """Publish one value; blocks while the queue is full (zero demand)."""
        self._source().put((self._topic, encode(data), DATA, self._ttl, self._sender))

    def publish_batch(self, *batch: Any) -> None:
        """Publish each argument as one message, in order."""
        topic, ttl, sender = self._topic, self._ttl, self._sender
        self._source().put_many([(topic, encode(d), DATA, ttl, sender) for d in batch])

    # -- demand ----------------------------------------------------------------------

    def demand(self) -> int:
        """Messages that can be published right now without blocking."""
        src = self._src
        if src is None or src.closed:
            return 0
        return max(0, src.capacity - len(src.items))

    def buffered(self) -> int:
        """Messages waiting for the core to take them."""
        src = self._src
        return 0 if src is None else len(src.items)

    def capacity(self) -> int:
        src = self._src
        return 0 if src is None else src.capacity

    def free_capacity(self) -> int:
        return self.demand()

    def send_rate(self) -> float:
        """Messages per second the core took from this publisher, over the last second or two."""
        src = self._src
        if src is None:
            return 0.0
        now = monotonic()
        elapsed = now - self._rate_t0
        if elapsed <= 0:
            return self._rate
        self._rate = (src.taken - self._rate_n0) / elapsed
        if elapsed >= _RATE_WINDOW:
            self._rate_t0, self._rate_n0 = now, src.taken
        return self._rate

    def fd(self) -> int:
        """A descriptor readable while ``demand() > 0``."""
        return self._source().fd()

    # -- lifetime --------------------------------------------------------------------

    def reset(self) -> None:
        """Stop publishing; what is queued still flows, later calls raise ShutdownError."""
        src, self._src = self._src, None
        if src is not None:
            src.release()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def __repr__(self) -> str:
        return f"Publisher({self._topic!r})"
