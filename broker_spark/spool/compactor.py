"""The thread that compresses a spool's sealed segments, off the appending thread.

Compressing a 64 MiB segment takes a few hundred milliseconds. Done by the writer
when it seals a segment, that would pause taking from the network (and a ZeroMQ
PUSH at 5,000 batches a second fills Zeek's queue in a fraction of that), so a
thread of the spool's own does it: woken when a segment is sealed, it compresses
sealed segments one at a time, oldest first, until none is left; it stops between
blocks when the spool closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Compactor"]

log = logging.getLogger(__name__)

#: Seconds to wait before trying again after a compression failed (a full disk, say).
RETRY_AFTER = 30.0


class Compactor:
    """Calls ``compact_next()`` while it returns True, each time it is woken."""

    def __init__(self, compact_next: Callable[[], bool], name: str) -> None:
        self._compact_next = compact_next
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def wake(self) -> None:
        """There may be a sealed segment to compress (started on the first call)."""
        with self._lock:
            if self._stop.is_set():
                return
            if not self._started:
                self._started = True
                self._thread.start()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            try:
                while not self._stop.is_set() and self._compact_next():
                    pass
            except Exception as exc:  # the segment stays as written; readers are not affected
                log.warning("compressing a spool segment failed: %s; trying again later", exc)
                self._stop.wait(RETRY_AFTER)
                self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the block in hand and wait for the thread (idempotent)."""
        with self._lock:
            self._stop.set()
            started = self._started
        self._wake.set()
        if started and self._thread is not threading.current_thread():
            self._thread.join(timeout)
