"""Turning SIGINT and SIGTERM into a polite stop for the long-running commands.

``node`` and ``subscribe`` run until interrupted: that is their normal end,
so the signal only sets an event their main loop watches, and they shut the
endpoint down and exit 0. Handlers can only be installed from the main
thread; elsewhere (a test calling ``main`` from a worker thread) the event is
still returned and the default handlers stay.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["stop_on_signals"]


@contextlib.contextmanager
def stop_on_signals(
    stop: threading.Event | None = None, reload: threading.Event | None = None
) -> Iterator[threading.Event]:
    """Within the block, SIGINT and SIGTERM set the yielded event instead of raising; with
    ``reload``, SIGHUP sets that one (``node`` reads its certificates and keys again)."""
    stop = stop if stop is not None else threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP and reload is not None:
            reload.set()
        else:
            stop.set()

    signals = [signal.SIGINT, signal.SIGTERM]
    if reload is not None and hasattr(signal, "SIGHUP"):
        signals.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
