"""A file descriptor that is readable exactly while some condition holds.

Broker's subscribers and publishers expose ``fd()`` for ``select``/``poll``
loops: a subscriber's is readable while messages wait, a publisher's while it
has room. A :class:`Flare` is that descriptor. It is touched only on state
*transitions* (fired when a queue turns non-empty, extinguished when it turns
empty), never per message, and the owner calls it under its own lock so the
descriptor and the state it reports cannot disagree.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["Flare"]

_HAS_EVENTFD = hasattr(os, "eventfd")


class Flare:
    """Readable after :meth:`fire`, not readable after :meth:`extinguish`.

    Uses one ``eventfd`` on Linux and a non-blocking pipe elsewhere. Not
    thread-safe on its own: callers serialise ``fire``/``extinguish`` with the
    lock that guards the state the flare mirrors.
    """

    __slots__ = ("_read_fd", "_write_fd", "_lit")

    def __init__(self) -> None:
        if _HAS_EVENTFD:
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._read_fd = self._write_fd = fd
        else:  # pragma: no cover - non-Linux fallback
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._read_fd, self._write_fd = r, w
        self._lit = False

    def fileno(self) -> int:
        return self._read_fd

    @property
    def lit(self) -> bool:
        return self._lit

    def fire(self) -> None:
        if self._lit or self._write_fd < 0:
            return
        self._lit = True
        with contextlib.suppress(BlockingIOError, OSError):
            if _HAS_EVENTFD:
                os.eventfd_write(self._write_fd, 1)
            else:  # pragma: no cover
                os.write(self._write_fd, b"\x01")

    def extinguish(self) -> None:
        if not self._lit or self._read_fd < 0:
            return
        self._lit = False
        with contextlib.suppress(BlockingIOError, OSError):
            if _HAS_EVENTFD:
                os.eventfd_read(self._read_fd)
            else:  # pragma: no cover
                while os.read(self._read_fd, 512):
                    pass

    def set(self, on: bool) -> None:
        if on:
            self.fire()
        else:
            self.extinguish()

    def close(self) -> None:
        fds = {self._read_fd, self._write_fd}
        self._read_fd = self._write_fd = -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
