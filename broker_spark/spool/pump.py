"""The pump: a thread that moves every message a source receives into the spool.

Spark calls the stream reader only when it plans a batch, while messages
arrive all the time; the pump runs in between, in the reader's long-lived
driver-side process. It takes whatever the subscription holds (up to a batch,
waiting briefly when there is nothing), stamps it with one receive time, and
appends it to the spool in one call. An endpoint's subscription numbers the
records as it stamps them (``take_numbered``, appended by
``Spool.append_numbered``), so the per-message cost is one tuple and a msgpack
record; what handed the records over between the threads is one lock taken per
batch, under a twentieth of the pump's time (issue 51 measured it: the pump's
cost a message was its tuples and generators, not the hand-off). Every
``retention_interval`` seconds it also lets the spool drop what its size or age
limits say.

``observe``, when given, sees every appended batch with its first offset
(the Zeek log reader learns LogCreates there). Several pumps may fill one spool
(a relay node's sources: its endpoint and a ZeroMQ logger's socket), sharing a
``lock`` that keeps each append and its ``observe`` together.

The subscription's queue is bounded and blocks the core when full, so a spool
that cannot keep up slows the peers down instead of losing messages. If
appending fails (a full disk), the pump stops and keeps the exception; the
reader raises it at its next call, failing the query with the cause.

A planned stop (:meth:`SpoolPump.finish`) loses nothing the source handed
over: the source stops taking from the network (a source with ``finish``
does that itself; the owner of an endpoint closes its peerings first), the
pump appends whatever the source still holds until it is empty, and syncs
the spool. :meth:`SpoolPump.stop` is the quick way out, for what is being
thrown away anyway.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from broker_spark.errors import ShutdownError
from broker_spark.spool.disk_guard import DiskGuard
from broker_spark.spool.spool import Spool, SpoolError

__all__ = ["SpoolPump", "SpoolSource"]

log = logging.getLogger(__name__)

#: Messages taken from the subscription per spool append, at most.
DEFAULT_BATCH = 8192

#: Seconds the pump waits for a message before looking at its stop flag again.
_IDLE_WAIT = 0.25
#: Seconds without a message after which a finishing pump's source counts as empty.
_DRAINED_WAIT = 0.2
#: Seconds between attempts to append a batch that found the disk full.
_FULL_RETRY = 0.5
#: What a write that found no room fails with.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class SpoolSource(Protocol):
    """Where the pump takes messages: an endpoint's subscription
    (:class:`~broker_spark.subscriber.RawSubscriber`), or the ZeroMQ logger
    (:class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver`). ``take_stamped``
    returns spool records and raises ShutdownError once the source is closed; a source
    that also has ``take_numbered`` (a subscription) is taken from with that."""

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]: ...

    def close(self) -> None: ...


def _finish_source(source: SpoolSource, timeout: float) -> None:
    """Tell a source that can stop taking from the network on its own (the ZeroMQ logger)
    to; a subscription's owner does that by closing its endpoint's peerings."""
    finish = getattr(source, "finish", None)
    if finish is not None:
        finish(timeout)


class SpoolPump:
    """Appends what ``subscription`` receives to ``spool`` from a daemon thread."""

    def __init__(
        self,
        subscription: SpoolSource,
        spool: Spool,
        *,
        batch: int = DEFAULT_BATCH,
        retention_interval: float = 1.0,
        clock_ns: Callable[[], int] = time.time_ns,
        name: str = "broker-spark-spool-pump",
        observe: Callable[[int, list], None] | None = None,
        lock: threading.Lock | None = None,
        guard: DiskGuard | None = None,
    ) -> None:
        self._subscription = subscription
        self._spool = spool
        self._batch = batch
        self._retention_interval = retention_interval
        self._clock_ns = clock_ns
        self._observe = observe
        #: Held around each append and its ``observe`` where several pumps fill one spool,
        #: so what observes them sees the offsets in order.
        self._lock = lock
        #: the spool's free-disk guard: nothing is taken while it holds, and an append that
        #: fails for want of space is kept and retried (see disk_guard)
        self._guard = guard
        self._stop = threading.Event()
        self._finishing = threading.Event()
        #: a source without ``finish`` (a subscription) is drained when it has been idle; one
        #: with it (the ZeroMQ receiver) says so itself, raising ShutdownError once empty
        self._ends_when_idle = getattr(subscription, "finish", None) is None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._appended = 0
        self._appended_cond = threading.Condition()
        self.error: BaseException | None = None

    @property
    def appended(self) -> int:
        """Messages appended so far by this pump."""
        return self._appended

    def start(self) -> None:
        self._thread.start()

    def _taker(self) -> tuple[Callable[..., list], Callable[[list], int]]:
        """How records are taken and appended: numbered as they are taken where the source
        can (an endpoint's subscription: one tuple a record, see Spool.append_numbered),
        else stamped and numbered by the spool."""
        numbered = getattr(self._subscription, "take_numbered", None)
        if numbered is None:
            return self._subscription.take_stamped, self._spool.append_batch
        end = self._spool.end_offset

        def take(n: int, timeout: float | None, clock: Callable[[], int]) -> list:
            return numbered(n, timeout, clock, end)

        return take, self._spool.append_numbered

    def _run(self) -> None:
        take, append = self._taker()
        clock = self._clock_ns
        next_retention = time.monotonic() + self._retention_interval
        try:
            while not self._stop.is_set():
                finishing = self._finishing.is_set()
                if not finishing and self._guard is not None and self._guard.blocked():
                    self._stop.wait(_IDLE_WAIT)  # nothing taken: the backlog stays upstream
                    if time.monotonic() >= next_retention:
                        self._spool.enforce_retention(clock() // 1_000_000)
                        next_retention = time.monotonic() + self._retention_interval
                    continue
                try:
                    items = take(self._batch, _DRAINED_WAIT if finishing else _IDLE_WAIT, clock)
                except ShutdownError:
                    break
                if not items and finishing and self._ends_when_idle:
                    break  # the source is empty: everything it handed over is appended
                if items:
                    self._append_kept(append, items)
                    with self._appended_cond:
                        self._appended += len(items)
                        self._appended_cond.notify_all()
                if not items:
                    self._spool.sync_if_due()
                if time.monotonic() >= next_retention:
                    self._spool.sync_if_due()
                    self._spool.enforce_retention(clock() // 1_000_000)
                    next_retention = time.monotonic() + self._retention_interval
        except BaseException as exc:  # kept for the reader to raise
            if not self._stop.is_set():
                log.error("the spool pump stopped: %s", exc)
                self.error = exc
        finally:
            with self._appended_cond:
                self._appended_cond.notify_all()

    def _append_kept(self, append: Callable[[list], int], items: list) -> None:
        """Append ``items``; when the disk is full, keep them and try again until there is
        room (or the pump is stopped), so what was taken is never dropped here. What a
        failed append did write is told under the shared lock, so another pump's append
        in between is never taken for this one's."""
        while True:
            with self._lock if self._lock is not None else contextlib.nullcontext():
                before = self._spool.end_offset()
                try:
                    written = self._append(append, items)
                    full: BaseException | None = None
                except (SpoolError, OSError) as exc:
                    if self._guard is None or getattr(exc, "errno", None) not in _NO_SPACE:
                        raise
                    full = exc
                    done = self._spool.end_offset() - before  # a batch that spanned a segment
                    if done > 0 and self._observe is not None:
                        self._observe(before, items[:done])
            if full is not None:
                assert self._guard is not None
                items = items[max(done, 0) :]
                self._guard.set_full(str(full))
                if self._stop.wait(_FULL_RETRY):
                    raise full
                self._spool.enforce_retention(self._clock_ns() // 1_000_000)
                continue
            if self._guard is not None:
                self._guard.wrote(written)
                if self._guard.full is not None:
                    self._guard.set_full(None)
            return

    def _append(self, append: Callable[[list], int], items: list) -> int:
        """Append ``items`` and show them to ``observe``; the bytes the spool wrote (read from
        its counter: a sum over the payloads cost a twentieth of the pump's time a message)."""
        before = self._spool.appended_bytes
        last = append(items)
        if self._observe is not None:
            self._observe(last - len(items) + 1, items)
        return self._spool.appended_bytes - before

    def wait_appended(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` messages were appended (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        with self._appended_cond:
            while self._appended < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return self._appended >= count
                self._appended_cond.wait(remaining)
        return True

    def finish(self, timeout: float = 30.0) -> bool:
        """A planned stop: the source stops taking from the network, what it holds is
        appended, the spool synced; True when all of that happened within ``timeout``
        seconds (else the pump is stopped as :meth:`stop` does, and what is left is lost)."""
        deadline = time.monotonic() + timeout
        _finish_source(self._subscription, timeout)
        self._finishing.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(max(0.0, deadline - time.monotonic()))
        done = not self._thread.is_alive()
        if done and self.error is None:
            self._spool.sync()
        self.stop()
        return done and self.error is None

    def stop(self, timeout: float = 2.0) -> None:
        """Stop taking messages and wait for the thread (idempotent)."""
        self._stop.set()
        self._subscription.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
