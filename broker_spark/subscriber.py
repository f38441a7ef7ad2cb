"""Subscribers: Broker's blocking getters over a bounded queue fed by the core.

``get`` follows Broker's Python bindings exactly: ``get()`` blocks for one
``(topic, data)``; ``get(secs)`` with a *float* (or ``timedelta``) waits at most
that long and returns one item or ``None``; ``get(n)`` with an *int* blocks for
a list of ``n``; ``get(n, secs)`` returns a list of at most ``n`` after at most
``secs``. Topics come back as ``str``.

Payloads are decoded here, in the consumer's thread, after the items left the
queue's lock, so the core's loop never spends time on values and a message
nobody reads is never decoded. A payload that fails to decode is skipped and
reported to status subscribers as ``EC.DeserializationFailed``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import uuid
from collections.abc import Callable
from itertools import count
from time import monotonic
from typing import TYPE_CHECKING, Any

from broker_spark.core.node_message import SharedMessage, decoded, decoded_all, decoded_frozen
from broker_spark.core.queues import SubscriberQueue
from broker_spark.errors import EC, BrokerError, DecodeError, ShutdownError
from broker_spark.status import Error
from broker_spark.topic import as_topic_str

if TYPE_CHECKING:
    from broker_spark.core.actor import Core

__all__ = ["RawSubscriber", "StatusSubscriber", "Subscriber", "parse_get_args"]


def _seconds(value: Any) -> float:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


def parse_get_args(args: tuple, kwargs: dict) -> tuple[int | None, float | None]:
    """Map Broker's overloads onto ``(count or None for a single item, timeout or None)``.

    An ``int`` first argument is a count, a ``float``/``timedelta`` a timeout,
    as pybind11 resolves the bindings' overloads.
    """
    num: int | None = None
    secs: float | None = None
    rest = list(args)
    if len(rest) > 2:
        raise TypeError(f"get() takes at most 2 arguments ({len(rest)} given)")
    if rest:
        first = rest.pop(0)
        if isinstance(first, int) and not isinstance(first, bool):
            num = first
            if rest:
                secs = _seconds(rest.pop(0))
        elif first is None:
            pass
        else:
            secs = _seconds(first)
            if rest:
                raise TypeError("get(timeout, ...) takes no further arguments")
    for key, value in kwargs.items():
        if key in ("num", "n", "count"):
            num = int(value)
        elif key in ("secs", "timeout"):
            secs = None if value is None else _seconds(value)
        else:
            raise TypeError(f"get() got an unexpected keyword argument {key!r}")
    if num is not None and num < 0:
        raise ValueError(f"get() needs a non-negative count, got {num}")
    return num, secs


class _QueueReader:
    """The getters shared by data and status subscribers."""

    _queue: SubscriberQueue

    def _convert(self, items: list) -> list:
        return items

    def _take(self, n: int, timeout: float | None) -> list:
        return self._convert(self._queued(n, timeout))

    def _queued(self, n: int, timeout: float | None) -> list:
        """Up to ``n`` of the queue's own items (see SubscriberQueue.take), not converted."""
        queue = self._queue
        if queue is None:
            raise ShutdownError("the subscriber was reset")
        return queue.take(n, timeout)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        num, secs = parse_get_args(args, kwargs)
        if num is None:
            items = self._take_exactly(1, secs)
            return items[0] if items else None
        return self._take_exactly(num, secs)

    def _take_exactly(self, n: int, secs: float | None) -> list:
        """Collect ``n`` converted items, fewer only when ``secs`` runs out or at shutdown.

        Takes whatever is queued, converts it, and goes back for more: the
        core refills the queue while this thread decodes. Items collected
        before a shutdown are returned; ShutdownError only when there are none.
        """
        deadline = None if secs is None else monotonic() + secs
        out = self._take(n, secs)
        try:
            while len(out) < n:
                if self._queue is not None and self._queue.at_exit:
                    break  # the interpreter exits: what there is, quietly (see take)
                if deadline is None:
                    out.extend(self._take(n - len(out), None))
                    continue
                remaining = deadline - monotonic()
                if remaining <= 0:
                    break
                out.extend(self._take(n - len(out), remaining))
        except ShutdownError:
            if not out:
                raise
        return out

    def poll(self) -> list:
        """Everything available now, without blocking."""
        queue = self._queue
        if queue is None:
            raise ShutdownError("the subscriber was reset")
        return self._convert(queue.poll())

    def available(self) -> int:
        """How many items can be taken without blocking (truthy while any wait)."""
        queue = self._queue
        return 0 if queue is None else queue.available()

    def fd(self) -> int:
        """A descriptor that is readable while items wait (for ``select``/``poll``)."""
        queue = self._queue
        if queue is None:
            raise ShutdownError("the subscriber was reset")
        return queue.fd()

    def dropped(self) -> int:
        """How many messages the overflow policy dropped so far (an extension)."""
        queue = self._queue
        return 0 if queue is None else queue.dropped

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def reset(self) -> None:
        raise NotImplementedError


class Subscriber(_QueueReader):
    """Receives ``(topic, data)`` for every message from peers whose topic has one of its prefixes.

    ``overflow`` (an extension) decides what a full queue does: ``"block"``
    (Broker's behaviour: the flow stalls, publishers block), ``"drop_oldest"``
    or ``"drop_newest"`` (the flow goes on; see :meth:`dropped`).
    """

    def __init__(
        self, core: Core, queue: SubscriberQueue, safe: bool = False, owner: object = None
    ) -> None:
        self._core = core
        self._owner = owner  # keeps the endpoint alive as long as this subscriber
        self._queue: SubscriberQueue | None = queue
        self._safe = safe
        self._to_item: Callable[[Any], tuple[str, Any]] = decoded_frozen if safe else decoded

    def _convert(self, items: list) -> list:
        to_item = self._to_item
        try:
            if to_item is decoded:
                return decoded_all(items)
            return [to_item(m) for m in items]
        except (DecodeError, BrokerError, ValueError, TypeError):
            return self._convert_skipping(items)

    def _convert_skipping(self, items: list) -> list:
        out = []
        for m in items:
            try:
                out.append(self._to_item(m))
            except (DecodeError, BrokerError, ValueError, TypeError) as exc:
                topic = m[0] if type(m) is tuple else m.topic
                self._core.emit_threadsafe(
                    Error(
                        EC.DeserializationFailed,
                        f"dropped a message on {topic!r} whose payload does not decode: {exc}",
                    )
                )
        return out

    def add_topic(self, topic: Any, block: bool = False) -> None:
        """Add a prefix; with ``block`` return only once the core routes by it."""
        self._update(as_topic_str(topic), True, block)

    def remove_topic(self, topic: Any, block: bool = False) -> None:
        """Remove a prefix; with ``block`` return only once the core stopped routing by it."""
        self._update(as_topic_str(topic), False, block)

    def _update(self, topic: str, add: bool, block: bool) -> None:
        queue = self._queue
        if queue is None:
            raise ShutdownError("the subscriber was reset")
        core = self._core

        def apply() -> None:
            prefixes = list(queue.prefixes)
            if add and topic not in prefixes:
                prefixes.append(topic)
            elif not add and topic in prefixes:
                prefixes.remove(topic)
            core.set_subscriber_prefixes(queue, tuple(prefixes))

        if block:
            core.loop_thread.run_sync(apply)
        else:
            core.loop_thread.call_soon(apply)

    def topics(self) -> list[str]:
        """The prefixes this subscriber currently holds (an extension)."""
        queue = self._queue
        return [] if queue is None else list(queue.prefixes)

    def reset(self) -> None:
        """Unsubscribe and release the queue; further getters raise ShutdownError."""
        queue, self._queue = self._queue, None
        if queue is None:
            return
        queue.release()
        with contextlib.suppress(ShutdownError):
            self._core.loop_thread.call_soon(self._core.remove_subscriber, queue)

    def __repr__(self) -> str:
        topics = self.topics()
        return f"Subscriber({topics!r}, safe={self._safe})"


class RawSubscriber(Subscriber):
    """A subscriber whose items stay bytes: ``(topic, payload, sender id text)`` (an extension).

    Broker's API decodes every message a subscriber takes. What only stores or
    forwards payloads (the spool of a reader or a relay, the Zeek log tools,
    which decode straight into columns later) takes them as they arrived
    instead: the payload is the Broker binary of the value, never decoded
    here. A message of this endpoint's own stores or WebSocket clients has no
    peer as sender; its sender text is empty.
    """

    #: Sender ids turned to text, remembered up to this many senders.
    SENDERS_KEPT = 4096

    def __init__(self, core: Core, queue: SubscriberQueue, owner: object = None) -> None:
        super().__init__(core, queue, False, owner)
        self._senders: dict[bytes, str] = {}

    def _convert(self, items: list) -> list:
        return [self._record(item) for item in items]

    def take(self, n: int, timeout: float | None) -> list[tuple[str, bytes, str]]:
        """Up to ``n`` messages as soon as there is one; ``[]`` after ``timeout`` seconds.

        Raises :class:`~broker_spark.errors.ShutdownError` once the endpoint is
        shut down and the queue is drained, or after :meth:`reset`.
        """
        return self._take(n, timeout)

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]:
        """Like :meth:`take`, as ``(topic, payload, sender, received_at_ns)``, all stamped
        with one ``clock_ns()`` read when they were taken (the spool's records)."""
        items = self._queued(n, timeout)
        if not items:
            return []
        now = clock_ns()
        senders = self._senders
        try:  # the usual case: tuples from peers whose id text is known already
            return [(item[0], item[1], senders[item[4]], now) for item in items]
        except (KeyError, TypeError, IndexError):
            return [(*self._record(item), now) for item in items]

    def take_numbered(
        self,
        n: int,
        timeout: float | None,
        clock_ns: Callable[[], int],
        next_offset: Callable[[], int],
    ) -> list[tuple[str, bytes, str, int, int]]:
        """Like :meth:`take_stamped`, each record numbered too: offsets one apart from
        ``next_offset()``, read once there is something (a spool pump's rows, for
        :meth:`~broker_spark.spool.spool.Spool.append_numbered`: building them here
        spares a second tuple a record)."""
        items = self._queued(n, timeout)
        if not items:
            return []
        now, first, senders = clock_ns(), next_offset(), self._senders
        try:  # the usual case, as in take_stamped
            return [(i[0], i[1], senders[i[4]], now, o) for o, i in zip(count(first), items)]
        except (KeyError, TypeError, IndexError):
            return [(*self._record(i), now, o) for o, i in zip(count(first), items)]

    def _record(self, item: Any) -> tuple[str, bytes, str]:
        if type(item) is tuple:
            sender = item[4]
            text = self._senders.get(sender)
            if text is None:
                text = str(uuid.UUID(bytes=sender)) if len(sender) == 16 else sender.hex()
                if len(self._senders) >= self.SENDERS_KEPT:
                    self._senders.clear()
                self._senders[sender] = text
            return item[0], item[1], text
        if isinstance(item, SharedMessage):
            return item.topic, item.payload, ""
        raise TypeError(f"unexpected subscriber item {type(item).__name__}")

    def close(self) -> None:
        """The same as :meth:`reset` (what a spool's pump calls on its source)."""
        self.reset()

    def __repr__(self) -> str:
        return f"RawSubscriber({self.topics()!r})"


class StatusSubscriber(_QueueReader):
    """Receives :class:`~broker_spark.status.Error` always, and ``Status`` when asked for."""

    def __init__(self, core: Core, queue: SubscriberQueue, owner: object = None) -> None:
        self._core = core
        self._owner = owner  # keeps the endpoint alive as long as this subscriber
        self._queue: SubscriberQueue | None = queue

    def reset(self) -> None:
        queue, self._queue = self._queue, None
        if queue is None:
            return
        queue.release()
        with contextlib.suppress(ShutdownError):
            self._core.loop_thread.call_soon(self._core.remove_status_subscriber, queue)

    def __repr__(self) -> str:
        return f"StatusSubscriber(statuses={self._queue.receive_statuses if self._queue else None})"
