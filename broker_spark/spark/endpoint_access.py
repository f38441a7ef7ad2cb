"""The two endpoint internals the data source needs: payloads in and out as bytes.

Broker's Python API decodes every message a subscriber takes and encodes
every value published. The data source does neither: the stream reader spools
the payloads exactly as they arrived (decoding happens later, on executors,
straight into Arrow), and the writers encode rows themselves, in bulk, before
publishing. So this module reaches one level below the public facade, in one
place, to the core's queues, whose items are node messages (see
:mod:`broker_spark.core.message`):

* :class:`RawSubscription` takes queued items without decoding them;
* :func:`publish_encoded` appends pre-encoded data messages to the endpoint's
  publish queue, exactly where ``Endpoint.publish`` puts what it encoded.

(:mod:`~broker_spark.spark.delivery` reaches into the links, for the same
reason: the facade has no acknowledged flush.)

Should the facade grow public equivalents, only this module changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from broker_spark.core.message import SharedMessage
from broker_spark.endpoint import Endpoint
from broker_spark.errors import ShutdownError
from broker_spark.subscriber import Subscriber
from broker_spark.topic import as_topic_str

__all__ = ["RawSubscription", "publish_encoded"]

_NO_SENDER = ""


class RawSubscription:
    """A subscriber whose items stay ``(topic, payload bytes, sender id text)``.

    Built on an ordinary :class:`Subscriber` (so the endpoint manages its queue,
    filter and shutdown as for any subscriber); only the taking differs.
    """

    def __init__(self, endpoint: Endpoint, topics: Sequence[str], qsize: int) -> None:
        self._subscriber: Subscriber = endpoint.make_subscriber(
            [as_topic_str(t) for t in topics], qsize=qsize
        )
        self._senders: dict[bytes, str] = {}

    def take(self, n: int, timeout: float | None) -> list[tuple[str, bytes, str]]:
        """Up to ``n`` messages as soon as there is one; ``[]`` after ``timeout`` seconds.

        Raises :class:`~broker_spark.errors.ShutdownError` once the endpoint is
        shut down and the queue is drained.
        """
        queue = self._subscriber._queue  # the one private access for reading
        if queue is None:
            raise ShutdownError("the subscription was closed")
        items = queue.take(n, timeout)
        return [self._record(item) for item in items]

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]:
        """Like :meth:`take`, as spool records ``(topic, payload, sender, received_at_ns)``
        all stamped with one ``clock_ns()`` read when they were taken."""
        queue = self._subscriber._queue
        if queue is None:
            raise ShutdownError("the subscription was closed")
        items = queue.take(n, timeout)
        if not items:
            return []
        now = clock_ns()
        senders = self._senders
        try:  # the usual case: tuples from peers whose id text is known already
            return [(item[0], item[1], senders[item[4]], now) for item in items]
        except (KeyError, TypeError, IndexError):
            return [(*self._record(item), now) for item in items]

    def _record(self, item: Any) -> tuple[str, bytes, str]:
        if type(item) is tuple:
            sender = item[4]
            text = self._senders.get(sender)
            if text is None:
                text = str(uuid.UUID(bytes=sender)) if len(sender) == 16 else sender.hex()
                if len(self._senders) > 4096:
                    self._senders.clear()
                self._senders[sender] = text
            return item[0], item[1], text
        if isinstance(item, SharedMessage):
            return item.topic, item.payload, _NO_SENDER
        raise TypeError(f"unexpected subscriber item {type(item).__name__}")

    def close(self) -> None:
        self._subscriber.reset()


def publish_encoded(endpoint: Endpoint, messages: Sequence[tuple[str, bytes]]) -> None:
    """Publish ``(topic, Broker binary payload)`` pairs, in order, as data messages
    (:meth:`Endpoint.publish_encoded`; kept here for the Spark side's callers)."""
    endpoint.publish_encoded(messages)
