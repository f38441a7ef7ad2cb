"""The free-disk guard: a spool stops taking before its file system is full.

A relay that runs out of disk mid-append has nowhere to put what it read. So
its pumps ask this guard before each take: while the spool's file system has
less than ``min_free_bytes`` free (default 1 GiB, or 5% of the file system
where that is less), nothing is taken. What Zeek sends then waits in ZeroMQ
and in the Zeek node's queue, where Zeek's own high-water mark and drop
counters apply, and a Broker peer is slowed down by the subscription's
bounded queue; readers are served throughout; the pumps take again by
themselves once space returns (retention by age, an operator's cleanup). The
guard says why it holds (the log, ``status`` and the
``broker_spark_spool_paused`` metric show it).

Looking costs one ``statvfs`` call, made every ``check_every`` seconds and
whenever the pumps have written half of the room the last look found, so the
guard is cheap on every take and still stops in time at any rate: what lands
below the limit is at most the one take in flight when the guard looked (a
ZeroMQ logger hands over up to 1 MiB at a time, a Broker subscription up to a
pump's batch of messages), which the default limit dwarfs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["DEFAULT_MIN_FREE_BYTES", "DEFAULT_MIN_FREE_FRACTION", "DiskGuard", "free_bytes"]

log = logging.getLogger(__name__)

#: Free bytes below which a spool takes nothing more (or the fraction below, if smaller).
DEFAULT_MIN_FREE_BYTES = 1 << 30
DEFAULT_MIN_FREE_FRACTION = 0.05
#: Seconds between looks at the file system, at most.
CHECK_EVERY = 0.5


def free_bytes(path: str) -> tuple[int, int]:
    """The bytes free for an unprivileged writer on ``path``'s file system, and its size."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


class DiskGuard:
    """Whether a spool in ``path`` may take more: :meth:`blocked` says why not, or None.

    ``min_free_bytes`` None: the default (1 GiB, or 5% of the file system where that is
    less); 0 turns the guard off. ``statvfs`` is the check (a fake only to inject a fault
    in a test). Thread-safe: every pump of a spool asks the same guard.
    """

    def __init__(
        self,
        path: str,
        min_free_bytes: int | None = None,
        *,
        check_every: float = CHECK_EVERY,
        statvfs: Callable[[str], tuple[int, int]] = free_bytes,
    ) -> None:
        self.path = path
        self._min = min_free_bytes
        self._check_every = check_every
        self._statvfs = statvfs
        self._lock = threading.Lock()
        self._next = 0.0
        self._room = 0  # bytes that may be written before the next look, at most
        self._reason: str | None = None
        self.free: int | None = None
        self.limit: int = 0
        #: times the guard started holding (each a pause the log and metrics show)
        self.pauses = 0
        #: set by a pump whose append failed for want of space (ENOSPC) until it succeeds
        self.full: str | None = None

    def blocked(self) -> str | None:
        """Why the spool must not take now (None: it may)."""
        if self._min == 0:
            return self.full
        now = time.monotonic()
        with self._lock:
            if now >= self._next or self._room <= 0:
                self._next = now + self._check_every
                self._look()
            return self.full or self._reason

    def _look(self) -> None:
        try:
            free, size = self._statvfs(self.path)
        except OSError as exc:  # cannot tell: keep taking, say so once
            if self._reason is None:
                log.warning("spool %s: cannot see its free disk space: %s", self.path, exc)
            return
        limit = self._min
        if limit is None:
            limit = min(DEFAULT_MIN_FREE_BYTES, int(size * DEFAULT_MIN_FREE_FRACTION))
        self.free, self.limit = free, limit
        self._room = (free - limit) // 2
        if free < limit:
            if self._reason is None:
                self.pauses += 1
                log.warning(
                    "spool %s: %d bytes free, under the %d the spool keeps free: taking "
                    "nothing more until there is room (Zeek keeps what it sends meanwhile in "
                    "its own queue; readers are served as before)",
                    self.path,
                    free,
                    limit,
                )
            self._reason = f"disk: {free} bytes free, under the {limit} kept free"
        elif self._reason is not None:
            log.warning("spool %s: %d bytes free again: taking again", self.path, free)
            self._reason = None

    def wrote(self, size: int) -> None:
        """A pump appended about ``size`` bytes (the guard looks again before the room it
        last saw could be gone)."""
        with self._lock:
            self._room -= size

    def set_full(self, reason: str | None) -> None:
        """A pump's append failed for want of space (``reason``), or succeeded again (None)."""
        with self._lock:
            if reason is not None and self.full is None:
                self.pauses += 1
                log.warning(
                    "spool %s: the disk is full (%s): taking nothing more, retrying the "
                    "append until there is room",
                    self.path,
                    reason,
                )
            elif reason is None and self.full is not None:
                log.warning("spool %s: appending again", self.path)
            self.full = reason
            self._next = 0.0
