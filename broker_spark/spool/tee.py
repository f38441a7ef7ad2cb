"""One source, two consumers: a ZeroMQ logger socket feeding both a spool and a log folder.

A PULL socket hands each batch to whoever takes it, once. A relay node that is
also asked to write Zeek's logs into files (``node --spool ... --log-dir ...
--zeromq-logs ...``) needs every batch twice, so :class:`Tee` takes from the
source for the first consumer (the spool's pump) and keeps what it took, as
references (no bytes are copied), for the second (the log folder). The second's
queue is bounded: when it falls that far behind, the first waits for it, as a
single slow consumer would hold back the socket, and Zeek's own queue absorbs
the rest.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from broker_spark.data.msgpack_records import stamped
from broker_spark.errors import ShutdownError

__all__ = ["Tee"]

#: Takes the second consumer may be behind the first before the first waits.
DEFAULT_BEHIND = 64


class Tee:
    """``source`` (``take(n, timeout)`` of ``(topic, payload, sender)``, ``close()``) for two
    consumers: :meth:`take_stamped` (a spool pump) and :attr:`second` (``take``/``close``)."""

    def __init__(self, source: Any, behind: int = DEFAULT_BEHIND) -> None:
        self.source = source
        self.behind = behind
        self._queue: deque[list[tuple[str, bytes, str]]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._second_closed = False
        self.second = _Second(self)

    # --- the first consumer ------------------------------------------------------------

    def take(self, n: int, timeout: float | None) -> list[tuple[str, bytes, str]]:
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while len(self._queue) >= self.behind and not self._second_closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                self._cond.wait(remaining)
        items = self.source.take(n, timeout)
        if items:
            with self._cond:
                if not self._second_closed:
                    self._queue.append(items)
                    self._cond.notify_all()
        return items

    def take_stamped(
        self, n: int, timeout: float | None, clock_ns: Callable[[], int]
    ) -> list[tuple[str, bytes, str, int]]:
        return stamped(self.take(n, timeout), clock_ns)

    def finish(self, timeout: float = 5.0) -> None:
        """A planned stop of the source (see the ZeroMQ receiver's ``finish``): what it still
        hands out reaches both consumers."""
        finish = getattr(self.source, "finish", None)
        if finish is not None:
            finish(timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.source.close()

    # --- the second consumer -----------------------------------------------------------

    def _take_second(self, timeout: float | None) -> list[tuple[str, bytes, str]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue:
                if self._closed:
                    raise ShutdownError("the source is closed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                self._cond.wait(remaining)
            items = self._queue.popleft()
            self._cond.notify_all()
            return items

    def _close_second(self) -> None:
        with self._cond:
            self._second_closed = True
            self._queue.clear()
            self._cond.notify_all()


class _Second:
    """The second consumer's end of a :class:`Tee`."""

    def __init__(self, tee: Tee) -> None:
        self._tee = tee

    def take(self, n: int, timeout: float | None) -> list[tuple[str, bytes, str]]:
        return self._tee._take_second(timeout)

    def close(self) -> None:
        self._tee._close_second()
