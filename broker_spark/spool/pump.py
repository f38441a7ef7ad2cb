"""The pump: a thread that moves every message a source receives into the spool.

Spark calls the stream reader only when it plans a batch, while messages
arrive all the time; the pump runs in between, in the reader's long-lived
driver-side process. It takes whatever the subscription holds (up to a batch,
waiting briefly when there is nothing), stamps it with one receive time, and
appends it to the spool in one call, so the per-message cost is a tuple and a
msgpack record. Every ``retention_interval`` seconds it also lets the spool
drop what its size or age limits say.

``observe``, when given, sees every appended batch with its first offset
(the Zeek log reader learns LogCreates there). Several pumps may fill one spool
(a relay node's sources: its endpoint and a ZeroMQ logger's socket), sharing a
``lock`` that keeps each append and its ``observe`` together.

The subscription's queue is bounded and blocks the core when full, so a spool
that cannot keep up slows the peers down instead of losing messages. If
appending fails (a full disk), the pump stops and keeps the exception; the
reader raises it at its next call, failing the query with the cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from broker_spark.errors import ShutdownError
from broker_spark.spool.spool import Spool

__all__ = ["SpoolPump", "SpoolSource"]

log = logging.getLogger(__name__)

#: Messages taken from the subscription per spool append, at most.
DEFAULT_BATCH = 8192

#: Seconds the pump waits for a message before looking at its stop flag again.
_IDLE_WAIT = 0.25


class SpoolSource(Protocol):
    """Where the pump takes messages: an endpoint's subscription
    (:class:`~broker_spark.subscriber.RawSubscriber`), or the ZeroMQ logger
    (:class:`~broker_spark.zeromq.log_receiver.ZeroMQLogReceiver`). ``take_stamped``
    returns spool records and raises ShutdownError once the source is closed."""

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]: ...

    def close(self) -> None: ...


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
        self._stop = threading.Event()
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

    def _run(self) -> None:
        take = self._subscription.take_stamped
        append = self._spool.append_batch
        clock = self._clock_ns
        next_retention = time.monotonic() + self._retention_interval
        try:
            while not self._stop.is_set():
                try:
                    items = take(self._batch, _IDLE_WAIT, clock)
                except ShutdownError:
                    break
                if items:
                    if self._lock is None:
                        self._append(append, items)
                    else:
                        with self._lock:
                            self._append(append, items)
                    with self._appended_cond:
                        self._appended += len(items)
                        self._appended_cond.notify_all()
                if time.monotonic() >= next_retention:
                    self._spool.enforce_retention(clock() // 1_000_000)
                    next_retention = time.monotonic() + self._retention_interval
        except BaseException as exc:  # kept for the reader to raise
            if not self._stop.is_set():
                log.error("the spool pump stopped: %s", exc)
                self.error = exc
        finally:
            with self._appended_cond:
                self._appended_cond.notify_all()

    def _append(self, append: Callable[[list], int], items: list) -> None:
        last = append(items)
        if self._observe is not None:
            self._observe(last - len(items) + 1, items)

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

    def stop(self, timeout: float = 2.0) -> None:
        """Stop taking messages and wait for the thread (idempotent)."""
        self._stop.set()
        self._subscription.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
