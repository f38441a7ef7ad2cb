"""The bounded buffers between the core's loop and everything else.

Two kinds, both bounded so that memory stays flat however fast anyone publishes:

- :class:`Source`: a FIFO *into* the core. Publishers (any thread) append to
  it; a link's inbound side (another loop) offers batches to it; the core
  drains it in batches. A full source blocks thread producers, and tells a
  loop producer (via :meth:`Source.want_room`) to stall until it has room.
- :class:`SubscriberQueue`: a FIFO *out of* the core towards one subscriber,
  read by any thread with ``take``. Its overflow policy decides what a full
  queue does: ``block`` makes the core stall the flow that feeds it,
  ``drop_oldest``/``drop_newest`` keep the flow moving and count drops.
  A ``block`` queue is full when it holds at least ``qsize`` messages *and*
  at least ``max_bytes`` of them (payloads plus a fixed estimate per message):
  ``qsize`` is a floor, not a ceiling. Broker 1.4's rate does not depend on
  its ``qsize`` and the current Broker ignores it, while a 20-message ceiling
  would wake the core every ten messages; the byte bound keeps what a slow
  subscriber can pin to ``max_bytes`` plus the one routing batch in flight.

Waking is done on transitions, not per message: a producer wakes the core
only when the source was not already scheduled, the core wakes a consumer
only when its queue turns non-empty, and a consumer wakes a stalled core only
when its queue has drained to the low-water mark. That is what keeps the hot
path to an ``append`` and a flag test.

Everything the core does with a destination goes through the small
:class:`Sink` protocol (``room``, ``want_room``, ``deliver``), shared by
subscriber queues and links.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from itertools import repeat
from time import monotonic
from typing import Any

from broker_spark.config import DEFAULT_QUEUE_BYTES, check_overflow_policy
from broker_spark.core.flare import Flare
from broker_spark.errors import ShutdownError

__all__ = [
    "DEFAULT_QUEUE_BYTES",
    "ITEM_OVERHEAD",
    "UNBOUNDED_ROOM",
    "Sink",
    "Source",
    "SubscriberQueue",
]

#: The room a destination that never blocks reports.
UNBOUNDED_ROOM = 1 << 60

#: What one queued message costs besides its payload: the tuple, the bytes and
#: topic objects (measured with ``sys.getsizeof`` on CPython 3.11: about 160).
ITEM_OVERHEAD = 160

#: ``deque.popleft``, mapped over ``repeat(queue, k)`` to pop ``k`` items in one C loop.
_popleft = deque.popleft


class Sink:
    """A destination of the core's routing: bounded, and able to wake the core.

    ``_bid``, ``_room`` and ``_pending`` are scratch fields owned by the core
    while it routes one batch (see :mod:`broker_spark.core.actor`).
    """

    __slots__ = ("_bid", "_room", "_pending", "__weakref__")

    def __init__(self) -> None:
        self._bid = -1
        self._room = 0
        self._pending: list = []

    def room(self) -> int:
        """How many more messages :meth:`deliver` may take without overflowing."""
        raise NotImplementedError

    def want_room(self) -> None:
        """Ask to have the core woken when room frees up (called before re-checking)."""
        raise NotImplementedError

    def deliver(self, msgs: list) -> None:
        """Take a batch of messages (called on the core's loop)."""
        raise NotImplementedError


class Source:
    """A bounded FIFO feeding one core.

    ``remote`` sources carry messages that arrived from a peer (or were
    injected as if they had): they go to local subscribers and may be
    forwarded. Local sources carry this endpoint's own publications: they go
    to links only. ``link`` is the peer a remote source belongs to.
    """

    __slots__ = (
        "items",
        "capacity",
        "remote",
        "link",
        "flagged",
        "stalled",
        "held",
        "held_pos",
        "taken",
        "closed",
        "waiting",
        "on_room",
        "_schedule",
        "_cond",
        "_flare",
        "__weakref__",
    )

    def __init__(
        self,
        schedule: Callable[[Source], None],
        capacity: int,
        *,
        remote: bool = False,
        link: Sink | None = None,
    ) -> None:
        self.items: deque = deque()
        self.capacity = capacity
        self.remote = remote
        self.link = link
        self.flagged = False  # queued in the core's ready list (set by producers)
        self.stalled = False  # waiting in the core's stalled list (core only)
        self.held: list | None = None  # a batch taken but not fully routed (core only)
        self.held_pos = 0  # where routing resumes in ``held``
        self.taken = 0  # messages the core has taken, for send rates
        self.closed = False
        self.waiting = False  # a producer waits for room
        self.on_room: Callable[[], None] | None = None  # wakes a loop producer
        self._schedule = schedule
        self._cond = threading.Condition(threading.Lock())
        self._flare: Flare | None = None

    # -- producer side (any thread) ---------------------------------------------

    def put(self, msg: tuple) -> None:
        """Append one message, blocking while the source is full."""
        if self._flare is not None:
            self._put_many_locked([msg])
            return
        items = self.items
        if len(items) >= self.capacity or self.closed:
            self._wait_room()
        items.append(msg)
        if not self.flagged:
            self.flagged = True
            self._schedule(self)

    def put_many(self, msgs: list) -> None:
        """Append messages in order, blocking whenever the source is full."""
        if self._flare is not None:
            self._put_many_locked(msgs)
            return
        items = self.items
        start, total, cap = 0, len(msgs), self.capacity
        while start < total:
            room = cap - len(items)
            if room <= 0 or self.closed:
                self._wait_room()
                continue
            stop = min(total, start + room)
            items.extend(msgs[start:stop] if start or stop < total else msgs)
            start = stop
            if not self.flagged:
                self.flagged = True
                self._schedule(self)

    def offer(self, msgs: list) -> None:
        """Append without waiting: for loop producers that checked :meth:`room` first."""
        if self.closed:
            return
        self.items.extend(msgs)
        if not self.flagged:
            self.flagged = True
            self._schedule(self)

    def room(self) -> int:
        if self.closed:
            return UNBOUNDED_ROOM  # a closed source swallows messages (they are lost anyway)
        return self.capacity - len(self.items)

    def want_room(self) -> None:
        self.waiting = True

    def _wait_room(self) -> None:
        with self._cond:
            while True:
                if self.closed:
                    raise ShutdownError("publishing on a closed endpoint or publisher")
                if len(self.items) < self.capacity:
                    return
                # Check again once the flag is set: the core reads the flag after taking,
                # so either it sees the flag (and notifies, under the lock) or we see the
                # room. Without the second check, a core that took everything between the
                # first check and the flag would notify nobody, and we would wait for room
                # that is already there, for ever (a write task hung so).
                self.waiting = True
                if len(self.items) < self.capacity:
                    return
                self._cond.wait()

    def _put_many_locked(self, msgs: list) -> None:
        """The path taken once someone watches :meth:`fd`: keeps the flare exact."""
        start, total = 0, len(msgs)
        while start < total:
            with self._cond:
                while not self.closed and len(self.items) >= self.capacity:
                    self.waiting = True
                    if len(self.items) < self.capacity:  # checked again: see _wait_room
                        break
                    self._cond.wait()
                if self.closed:
                    raise ShutdownError("publishing on a closed endpoint or publisher")
                stop = min(total, start + self.capacity - len(self.items))
                self.items.extend(msgs[start:stop])
                start = stop
                if self._flare is not None and len(self.items) >= self.capacity:
                    self._flare.extinguish()
            if not self.flagged:
                self.flagged = True
                self._schedule(self)

    def fd(self) -> int:
        """A descriptor readable while the source has room (a publisher's demand)."""
        with self._cond:
            if self._flare is None:
                self._flare = Flare()
                self._flare.set(self.closed or len(self.items) < self.capacity)
            return self._flare.fileno()

    # -- consumer side (the core) -------------------------------------------------

    def take(self, n: int) -> list:
        items = self.items
        k = len(items)
        if k > n:
            k = n
        # k pops in C, each atomic: a producer thread may append meanwhile (a copy and a
        # clear could lose what it appended in between); a third of a Python loop's cost
        out = list(map(_popleft, repeat(items, k)))
        self.taken += k
        if self.waiting:
            self.waiting = False
            with self._cond:
                self._cond.notify_all()
            if self.on_room is not None:
                self.on_room()
        if self._flare is not None and k:
            with self._cond:
                self._flare.set(self.closed or len(items) < self.capacity)
        return out

    def close(self) -> None:
        """Refuse new messages and release blocked producers (they raise ShutdownError)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
            if self._flare is not None:
                self._flare.fire()
        if self.on_room is not None:
            self.on_room()

    def release(self) -> None:
        """Close and free the descriptor (the owner is gone)."""
        self.close()
        with self._cond:
            if self._flare is not None:
                self._flare.close()


class SubscriberQueue(Sink):
    """The bounded queue between the core and one (status) subscriber.

    The core delivers with :meth:`deliver` on its loop; consumers in any
    thread :meth:`take`. ``prefixes`` is the subscriber's filter, read by the
    core only. ``wake_core`` is called (from a consumer thread) when a core
    stalled on this queue may continue.
    """

    __slots__ = (
        "prefixes",
        "qsize",
        "max_bytes",
        "bytes",
        "_unit",
        "policy",
        "blocking",
        "safe",
        "receive_statuses",
        "dropped",
        "closed",
        "at_exit",
        "core_waiting",
        "low_water",
        "items",
        "wake_core",
        "_lock",
        "_cond",
        "_waiters",
        "_flare",
    )

    def __init__(
        self,
        prefixes: tuple[str, ...] = (),
        qsize: int = 20,
        policy: str = "block",
        *,
        safe: bool = False,
        receive_statuses: bool = False,
        wake_core: Callable[[], None] | None = None,
        max_bytes: int = DEFAULT_QUEUE_BYTES,
    ) -> None:
        super().__init__()
        if type(qsize) is not int or qsize < 1:
            raise ValueError(f"qsize must be a positive integer, got {qsize!r}")
        if type(max_bytes) is not int or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
        self.prefixes = prefixes
        self.qsize = qsize
        self.max_bytes = max_bytes
        self.bytes = 0  # what the queued messages cost (``block`` queues only)
        self._unit = 0  # the cost of a message of the last delivery, on average (0: none yet)
        self.policy = check_overflow_policy(policy)
        self.blocking = policy == "block"
        self.safe = safe
        self.receive_statuses = receive_statuses
        self.dropped = 0
        self.closed = False
        self.at_exit = False  # closed because the interpreter exits: getters go quiet
        self.core_waiting = False
        self.low_water = qsize // 2
        self.items: deque = deque(maxlen=qsize) if policy == "drop_oldest" else deque()
        self.wake_core = wake_core
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiters = 0
        self._flare: Flare | None = None

    # -- core side ------------------------------------------------------------------

    def room(self) -> int:
        if not self.blocking or self.closed:
            return UNBOUNDED_ROOM
        floor = self.qsize - len(self.items)
        spare = self.max_bytes - self.bytes
        if spare <= 0 or not self._unit:
            return floor
        # Sizes are known only on delivery: room is counted at the last delivery's average
        # cost (the first delivery, of at most qsize, calibrates it). Messages larger than
        # those may pass the bound, by at most the batch being routed, in memory already.
        return max(floor, spare // self._unit, 1)

    def want_room(self) -> None:
        self.core_waiting = True

    def deliver(self, msgs: list) -> None:
        n = len(msgs)
        if not n:
            return
        with self._lock:
            if self.closed:
                return
            items = self.items
            was_empty = not items
            if self.blocking:
                items.extend(msgs)
                cost = _cost(msgs)
                self.bytes += cost
                self._unit = cost // n
            elif self.policy == "drop_oldest":
                over = len(items) + n - self.qsize
                if over > 0:
                    self.dropped += over
                items.extend(msgs)  # the deque's maxlen discards the oldest
            else:
                free = self.qsize - len(items)
                if free < n:
                    self.dropped += n - max(free, 0)
                    msgs = msgs[: max(free, 0)]
                items.extend(msgs)
            if was_empty and items:
                if self._flare is not None:
                    self._flare.fire()
                if self._waiters:
                    self._cond.notify()
        if self.core_waiting and self.blocking and self.room() > 0:
            # The core stalled on a guess this delivery corrected (the first one
            # calibrates the cost per message): let it go on without a reader.
            self.core_waiting = False
            wake = self.wake_core
            if wake is not None:
                wake()

    # -- consumer side ----------------------------------------------------------------

    def _maybe_wake_core(self) -> None:
        """Wake a core stalled on this queue once it drained to the low-water mark.

        Never called with the lock held: waking writes to the loop's self-pipe,
        which releases the GIL, and the core must not find this lock taken then.
        """
        if self.core_waiting and (
            len(self.items) <= self.low_water or self.bytes <= self.max_bytes >> 1
        ):
            self.core_waiting = False
            wake = self.wake_core
            if wake is not None:
                wake()

    def take(self, n: int, timeout: float | None) -> list:
        """Remove up to ``n`` items as soon as there is at least one.

        Waits at most ``timeout`` seconds (None: forever) for the first item and
        returns an empty list on timeout. Returning early lets the caller decode
        what it got while the core, woken here when the queue drained to its
        low-water mark, refills the queue. Items already queued are still handed
        out after shutdown; an empty queue of a closed subscriber raises ShutdownError,
        except when it was closed because the interpreter exits (:meth:`close` with
        ``at_exit``): a getter that was waiting then returns an empty list, and a new
        one waits out its timeout (forever without one), so a daemon thread's loop
        neither raises nor spins while the process ends.
        """
        if n <= 0:
            return []
        deadline = None
        waited = False
        while True:
            with self._lock:
                items = self.items
                if items:
                    if n >= len(items):
                        out = list(items)
                        items.clear()
                        self.bytes = 0
                        if self._flare is not None:
                            self._flare.extinguish()
                    else:
                        out = list(map(_popleft, repeat(items, n)))
                        if self.blocking:
                            self.bytes -= _cost(out)
                        if self._waiters:
                            self._cond.notify()  # another consumer may take the rest
                    break
                if self.closed:
                    if not self.at_exit:
                        raise ShutdownError(
                            "the subscriber's endpoint is shut down or it was reset"
                        )
                    if waited:
                        return []
                if not self.core_waiting:
                    # Nothing to wake: sleep until the core delivers (or time runs out).
                    if timeout is None:
                        remaining = None
                    else:
                        if deadline is None:
                            deadline = monotonic() + timeout
                        remaining = deadline - monotonic()
                        if remaining <= 0:
                            return []
                    self._waiters += 1
                    try:
                        self._cond.wait(remaining)
                    finally:
                        self._waiters -= 1
                    waited = True
                    continue
            # The core is stalled on this (empty) queue: wake it outside the lock, then wait.
            self._maybe_wake_core()
        self._maybe_wake_core()
        return out

    def poll(self) -> list:
        """Everything queued now, without waiting."""
        with self._lock:
            out = list(self.items)
            self.items.clear()
            self.bytes = 0
            if self._flare is not None:
                self._flare.extinguish()
        self._maybe_wake_core()
        return out

    def available(self) -> int:
        return len(self.items)

    def fd(self) -> int:
        with self._lock:
            if self._flare is None:
                self._flare = Flare()
                self._flare.set(bool(self.items) or self.closed)
            return self._flare.fileno()

    def close(self, at_exit: bool = False) -> None:
        """Wake every waiting consumer; once drained, ``take`` raises ShutdownError (or,
        ``at_exit``, goes quiet: see :meth:`take`)."""
        with self._lock:
            self.closed = True
            self.at_exit = at_exit
            self.core_waiting = False
            self._cond.notify_all()
            if self._flare is not None:
                self._flare.fire()

    def release(self) -> None:
        """Close, drop what is queued and free the descriptor (the subscriber is gone)."""
        with self._lock:
            self.closed = True
            self.items.clear()
            self.bytes = 0
            self._cond.notify_all()
            if self._flare is not None:
                self._flare.close()
                self._flare = None

    def snapshot(self) -> dict[str, Any]:
        return {
            "queued": len(self.items),
            "queued_bytes": self.bytes,
            "qsize": self.qsize,
            "max_bytes": self.max_bytes,
            "policy": self.policy,
            "dropped": self.dropped,
        }


def _cost(msgs: list) -> int:
    """What ``msgs`` cost in a queue: payload bytes plus :data:`ITEM_OVERHEAD` each.

    Node message tuples carry the payload at index 1, a
    :class:`~broker_spark.core.node_message.SharedMessage` as ``payload``; anything
    else (a status) costs the overhead alone.
    """
    try:
        return sum([len(m[1]) for m in msgs]) + ITEM_OVERHEAD * len(msgs)
    except TypeError:
        total = ITEM_OVERHEAD * len(msgs)
        for m in msgs:
            payload = m[1] if type(m) is tuple else getattr(m, "payload", b"")
            if type(payload) is bytes:
                total += len(payload)
        return total
