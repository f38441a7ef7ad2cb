"""The soak's processes: started, killed, restarted, and measured from ``/proc``.

A :class:`Component` is one long-lived process of the path (a relay node, the
Spark driver, a sender) with its command line, its log file (appended across
restarts) and the line that says it is ready. :meth:`Component.usage` reads
what it and its children use (RSS, descriptors, threads), children included
because a Spark driver's memory is mostly its JVM's.

A component is started in a session of its own, and "its children" are the
processes of that session: a process it started in another session (the
receiver of a query's ``spoolPath``, which outlives its driver by design) is
neither killed with it nor counted in its usage. :func:`alive`,
:func:`usage_of` and :func:`stray` look at processes that are no component's
(the receiver, what is left running at the end).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Component", "Usage", "alive", "stray", "usage_of"]


@dataclass
class Usage:
    """What a process tree uses at one moment."""

    rss_mb: float
    fds: int
    threads: int
    processes: int


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name: state, ppid, pgrp,
    session, ... (None: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    """``pid`` and its descendants in its session (from every process's parent and session
    in ``/proc``): a descendant that started a session of its own is left out, with its
    own descendants."""
    parents: dict[int, list[int]] = {}
    sessions: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(entry)
        if stat is None:
            continue
        parents.setdefault(int(stat[1]), []).append(int(entry))
        sessions[int(entry)] = int(stat[3])
    session = sessions.get(pid)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c in parents.get(p, []) if sessions.get(c) == session)
    return out


def usage_of(pid: int) -> Usage | None:
    """RSS, descriptors and threads of ``pid`` and its children in its session now."""
    rss = fds = threads = n = 0
    for p in _children(pid):
        try:
            status = _status(p)
            rss += int(status.get("VmRSS", "0 kB").split()[0])
            threads += int(status.get("Threads", "0"))
            fds += len(os.listdir(f"/proc/{p}/fd"))
            n += 1
        except (OSError, ValueError):
            continue
    return Usage(round(rss / 1024, 1), fds, threads, n) if n else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def stray(marker: str) -> list[dict[str, Any]]:
    """Processes of this user that name ``marker`` (the run's folder) in their command line
    or environment: what a run left running."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if (marker.encode() in cmdline or marker.encode() in environ) and alive(int(entry)):
            words = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            out.append({"pid": int(entry), "cmdline": words[:200]})
    return out


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


@dataclass
class Component:
    """One process of the soak's path."""

    name: str
    argv: list[str]
    log: Path
    ready: str  # a regular expression a line of its output matches once it serves
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    starts: int = 0
    kills: int = 0

    def log_end(self) -> int:
        """Where its log ends now: a mark for :meth:`said_since`."""
        return self.log.stat().st_size if self.log.exists() else 0

    def said_since(self, mark: int) -> str:
        """What it wrote to its log after ``mark`` (a :meth:`log_end`)."""
        with self.log.open("rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait for the ready line; the seconds it took."""
        began = time.monotonic()
        offset = self.log_end()
        out = self.log.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,
            )
        finally:
            out.close()
        self.starts += 1
        pattern = re.compile(self.ready, re.M)
        while time.monotonic() - began < timeout:
            if pattern.search(self.said_since(offset)):
                return time.monotonic() - began
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): see {self.log}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready in {timeout:g} s: see {self.log}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and everything it started (a crash, a pulled plug)."""
        if self.proc is None:
            return
        _kill_all(_children(self.proc.pid))
        self.proc.wait(30)
        self.kills += 1

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (None if killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        children = _children(self.proc.pid)[1:]
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finally:
            time.sleep(0.5)
            _kill_all(children)  # whatever it started and left (a JVM, Python workers)

    def pids(self) -> list[int]:
        """The process and its children in its session (none when it is down)."""
        return _children(self.proc.pid) if self.proc is not None and self.alive else []

    def usage(self) -> Usage | None:
        """RSS, descriptors and threads of the process and its children now (None: down)."""
        if not self.alive:
            return None
        assert self.proc is not None
        return usage_of(self.proc.pid)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "starts": self.starts, "kills": self.kills}
