"""The soak's processes: started, killed, restarted, and measured from ``/proc``.

A :class:`Component` is one long-lived process of the path (a relay node, the
Spark driver, a sender) with its command line, its log file (appended across
restarts) and the line that says it is ready. :meth:`Component.usage` reads
what it and its children use (RSS, descriptors, threads), children included
because a Spark driver's memory is mostly its JVM's.
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

__all__ = ["Component", "Usage"]


@dataclass
class Usage:
    """What a process tree uses at one moment."""

    rss_mb: float
    fds: int
    threads: int
    processes: int


def _children(pid: int) -> list[int]:
    """``pid`` and its descendants (from every process's parent in ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
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

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait for the ready line; the seconds it took."""
        began = time.monotonic()
        offset = self.log.stat().st_size if self.log.exists() else 0
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
            with self.log.open("rb") as f:
                f.seek(offset)
                if pattern.search(f.read().decode(errors="replace")):
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

    def usage(self) -> Usage | None:
        """RSS, descriptors and threads of the process and its children now (None: down)."""
        if not self.alive:
            return None
        assert self.proc is not None
        rss = fds = threads = n = 0
        for pid in _children(self.proc.pid):
            try:
                status = _status(pid)
                rss += int(status.get("VmRSS", "0 kB").split()[0])
                threads += int(status.get("Threads", "0"))
                fds += len(os.listdir(f"/proc/{pid}/fd"))
                n += 1
            except (OSError, ValueError):
                continue
        return Usage(round(rss / 1024, 1), fds, threads, n)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "starts": self.starts, "kills": self.kills}
