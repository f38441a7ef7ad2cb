"""A node's ``--log-dir``: a remote logger for Zeek, one JSON log file per log path, rotated.

What a Zeek logger does with the logs of a cluster, read from Zeek's
scripts and its ASCII writer (``Ascii::DoRotate``):

* the current file of a log is ``DIR/PATH.log`` (``conn.log``), one JSON line
  per record, no header (JSON logs have none), opened at the first record
  after the start or a rotation (appended to, where Zeek truncates it: a
  restarted node with rotation off keeps what it wrote before);
* rotation happens at local midnight plus whole multiples of the interval
  (``Log::default_rotation_interval``: 1 hour on a cluster's logger); it
  renames the current file to ``PATH.YYYY-MM-DD-HH-MM-SS.log``, the local
  time the file was opened, and opens nothing: the next record opens a new
  current file. A log with no record since the last rotation is not rotated.
* on shutdown, open files are rotated too (Zeek's terminating rotation), so
  every line written is in a rotated file; with rotation off (interval 0)
  files stay as ``PATH.log``.

:class:`LogDirectory` holds that logic, driven by an explicit clock so the
tests can move time; :class:`LogSink` feeds it from an endpoint, or from the
PULL socket Zeek's nodes PUSH their logs to on the ZeroMQ backend.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

from broker_spark.errors import ShutdownError
from broker_spark.zeek.log_lines import LogLines

__all__ = ["DEFAULT_ROTATION", "LogDirectory", "LogSink", "next_rotation"]

log = logging.getLogger("broker_spark.node")

#: Seconds between rotations by default, as a Zeek cluster's logger.
DEFAULT_ROTATION = 3600.0


def next_rotation(now: float, interval: float) -> float:
    """The first rotation time after ``now``: local midnight plus a multiple of ``interval``."""
    local = _dt.datetime.fromtimestamp(now)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    steps = int((now - midnight) // interval) + 1
    return midnight + steps * interval


def rotated_name(path: str, opened: float) -> str:
    """The name Zeek gives a rotated log: ``conn.2024-01-01-00-00-00.log`` (local time)."""
    return f"{path}.{time.strftime('%Y-%m-%d-%H-%M-%S', time.localtime(opened))}.log"


class _OpenLog:
    def __init__(self, handle: IO[str], opened: float) -> None:
        self.handle = handle
        self.opened = opened


class LogDirectory:
    """Writes lines into ``directory/PATH.log`` and rotates them every ``interval`` seconds
    (0: never). Not thread-safe: one writer drives it."""

    def __init__(
        self,
        directory: str,
        interval: float = DEFAULT_ROTATION,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.interval = interval
        self.clock = clock
        self._open: dict[str, _OpenLog] = {}
        self._next = next_rotation(clock(), interval) if interval > 0 else None
        self.rotated: list[str] = []
        os.makedirs(directory, exist_ok=True)

    def write(self, lines: Iterable[tuple[str, str]]) -> int:
        """Append ``(path, line)`` pairs; rotate first when it is time. Lines written."""
        self.tick()
        count = 0
        touched: set[str] = set()
        for path, line in lines:
            entry = self._open.get(path)
            if entry is None:
                name = os.path.join(self.directory, _safe(path) + ".log")
                handle = open(name, "a", encoding="utf-8")  # noqa: SIM115 (kept open till rotation)
                entry = self._open[path] = _OpenLog(handle, self.clock())
            entry.handle.write(line)
            entry.handle.write("\n")
            touched.add(path)
            count += 1
        for path in touched:
            self._open[path].handle.flush()
        return count

    def tick(self) -> None:
        """Rotate every open log if a rotation time has passed."""
        if self._next is None:
            return
        now = self.clock()
        if now < self._next:
            return
        self.rotate()
        self._next = next_rotation(now, self.interval)

    def rotate(self) -> None:
        for path, entry in list(self._open.items()):
            entry.handle.close()
            current = os.path.join(self.directory, _safe(path) + ".log")
            target = os.path.join(self.directory, rotated_name(_safe(path), entry.opened))
            os.replace(current, target)
            self.rotated.append(target)
            log.info("rotated %s to %s", current, target)
        self._open.clear()

    def close(self) -> None:
        """Rotate what is open (as Zeek does when it terminates), or just close (no rotation)."""
        if self.interval > 0:
            self.rotate()
        else:
            for entry in self._open.values():
                entry.handle.close()
            self._open.clear()


def _safe(path: str) -> str:
    """A log path as a file name: no directory parts."""
    return path.replace("/", "_").replace(os.sep, "_").lstrip(".") or "_"


class LogSink:
    """Feeds an endpoint's log messages into a :class:`LogDirectory`, from a thread."""

    def __init__(
        self, endpoint: Any, directory: LogDirectory, topics: Iterable[str], source: Any = None
    ) -> None:
        self.directory = directory
        self.lines = LogLines()
        self.written = 0
        # the endpoint's log topics, or another source of log messages (the ZeroMQ logger's
        # PULL socket: anything with take(n, timeout) and close())
        self._subscription = (
            source
            if source is not None
            else endpoint.make_raw_subscriber(tuple(topics), qsize=8192)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-spark-log-dir", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    items = self._subscription.take(8192, 0.1 if self._stop.is_set() else 0.25)
                except ShutdownError:
                    break
                if items:
                    found = self.lines.lines([(payload, sender) for _t, payload, sender in items])
                    self.written += self.directory.write(found)
                elif self._stop.is_set():
                    break  # stopped, and what had arrived is written
                else:
                    self.directory.tick()
        except Exception as exc:  # a full disk: say so, keep the node running
            log.error("writing logs into %s stopped: %s", self.directory.directory, exc)

    def stop(self) -> None:
        """Write what has arrived, then close (rotating the open files)."""
        self._stop.set()
        self._thread.join(10.0)
        self._subscription.close()
        self.directory.close()
