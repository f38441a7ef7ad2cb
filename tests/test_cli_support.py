"""Helpers for the CLI tests: the command as a real process, and in-process nodes."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import broker_spark as broker

ROOT = Path(__file__).resolve().parent.parent


class Command:
    """``python -m broker_spark ARGS`` with stdout read line by line in a thread.

    stderr goes to a file (a pipe nobody reads could fill up and block the
    process). :meth:`close` always reaps the process, killing it if needed.
    """

    def __init__(
        self,
        *args: str,
        tmp: Path,
        stdin: IO[Any] | int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        fd, name = _tempfile(tmp)
        self.stderr_path = Path(name)
        env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker_spark", *args],
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,
            cwd=ROOT,
            env=env,
            text=True,
        )
        os.close(fd)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        """The first stdout line (from now on) matching ``pattern``; fails on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r}; saw {self.seen}") from None
            if line is None:
                raise AssertionError(
                    f"exited ({self.proc.wait()}) before {pattern!r}; saw {self.seen}; "
                    f"stderr: {self.stderr()}"
                )
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def rest(self, timeout: float = 30.0) -> list[str]:
        """Every remaining stdout line, once the process ended."""
        self.proc.wait(timeout)
        self._reader.join(timeout)
        out = []
        while (line := self.lines.get(timeout=timeout)) is not None:
            out.append(line)
        return out

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._reader.join(5)


def _tempfile(directory: Path) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix="stderr-", suffix=".txt", dir=directory)


def run_command(*args: str, stdin: str | None = None, timeout: float = 30.0) -> Any:
    """Run the command to its end; the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", "broker_spark", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def plain_endpoint(versions: tuple[int, ...] | None = None) -> broker.Endpoint:
    """An in-process endpoint with TLS off (the CLI side then uses --no-tls)."""
    ep = broker.Endpoint(broker.Configuration(broker.BrokerOptions(disable_ssl=True)))
    if versions is not None:
        ep._tcp().versions = versions
    return ep


@contextmanager
def chain(
    n: int, versions: tuple[int, ...] | None = None
) -> Iterator[tuple[list[broker.Endpoint], list[int]]]:
    """``n`` endpoints peered in a line (each with the one before), all listening on loopback."""
    eps = [plain_endpoint(versions) for _ in range(n)]
    try:
        ports = [ep.listen("127.0.0.1", 0) for ep in eps]
        for i in range(1, n):
            assert eps[i].peer("127.0.0.1", ports[i - 1], retry=0)
        yield eps, ports
    finally:
        for ep in eps:
            ep.shutdown()


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)
    return True
