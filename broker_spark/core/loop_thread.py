"""One asyncio event loop running in one daemon thread.

Each endpoint owns exactly one of these: everything that touches endpoint state
runs on this loop, so the core needs no locks, while the public API lives in
the caller's threads and hands work over with :meth:`LoopThread.call_soon`
(fire and forget) or :meth:`LoopThread.run_sync` (wait for the result).

The thread is a daemon so a forgotten endpoint never keeps the interpreter
alive, and :meth:`LoopThread.stop` cancels what still runs, closes the loop and
joins the thread within a bounded time, so an orderly shutdown leaves no
thread behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from broker_spark.errors import ShutdownError

__all__ = ["LoopThread"]

T = TypeVar("T")

#: Seconds given to cancelled tasks to finish when the loop stops.
_CANCEL_GRACE = 0.5


class LoopThread:
    """An event loop in a daemon thread, with thread-safe ways in."""

    def __init__(self, name: str = "broker-spark-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._closing = False
        # Futures of callers waiting in run_sync/run_coro; failed if the loop ends first.
        self._waiting: set[concurrent.futures.Future[Any]] = set()
        self._waiting_lock = threading.Lock()
        self._finished = False
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    # -- running ----------------------------------------------------------------

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
        finally:
            try:
                self._finish_tasks()
            finally:
                loop.close()
                self._closing = True
                with self._waiting_lock:
                    self._finished = True
                    waiting = list(self._waiting)
                for future in waiting:
                    if not future.done():
                        future.set_exception(ShutdownError("the endpoint shut down"))

    def _finish_tasks(self) -> None:
        """Cancel what still runs and give it a moment to clean up, then release the executor."""
        loop = self.loop
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=_CANCEL_GRACE))
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        with contextlib.suppress(Exception):
            loop.run_until_complete(
                asyncio.wait_for(loop.shutdown_default_executor(), _CANCEL_GRACE)
            )

    # -- ways in ------------------------------------------------------------------

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    @property
    def running(self) -> bool:
        return not self._closing and self.thread.is_alive()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the loop from any thread; ShutdownError once stopped."""
        if self._closing:
            raise ShutdownError("the endpoint is shut down")
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            raise ShutdownError("the endpoint is shut down") from None

    def run_sync(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run ``fn(*args)`` on the loop and return its result (or raise its exception).

        Called from the loop's own thread it runs inline, which keeps helpers
        usable from core callbacks without deadlocking.
        """
        if self.in_loop_thread():
            return fn(*args)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

        self.call_soon(call)
        return self._wait(future, timeout)

    def run_coro(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result from another thread."""
        if self._closing:
            coro.close()
            raise ShutdownError("the endpoint is shut down")
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:
            coro.close()
            raise ShutdownError("the endpoint is shut down") from None
        return self._wait(future, timeout)

    def _wait(self, future: concurrent.futures.Future[T], timeout: float | None) -> T:
        """Wait for a submitted ``future``; ShutdownError if the loop ends before it runs."""
        with self._waiting_lock:
            if self._finished and not future.done():
                raise ShutdownError("the endpoint is shut down")
            self._waiting.add(future)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            raise ShutdownError("the endpoint shut down during the call") from None
        finally:
            self._waiting.discard(future)

    # -- stopping -----------------------------------------------------------------

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop the loop and join the thread; True when the thread has ended.

        Idempotent. From the loop's own thread it only asks the loop to stop
        (a thread cannot join itself); the thread ends right after.
        """
        if not self._closing:
            self._closing = True
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.loop.stop)
        if self.in_loop_thread():
            return False
        self.thread.join(timeout)
        return not self.thread.is_alive()
