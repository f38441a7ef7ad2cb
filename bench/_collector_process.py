"""A collector a bench runs as a process of its own and can crash: Kafka's broker, a relay node.

What both share: loopback ports chosen once (a restart after a SIGKILL takes the same ones, as
a supervisor's restart would), a folder of their own removed at the end, a child that dies
with the bench however the bench ends (``PR_SET_PDEATHSIG``), a clean stop (SIGTERM, then
SIGKILL after 30 s) and a crash (SIGKILL).
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the bench dies (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def on_disk(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (blocks: sparse files count as stored)."""
    return sum(f.stat().st_blocks * 512 for f in folder.rglob("*") if f.is_file())


class CollectorProcess:
    """A process (``start`` is the subclass's) in ``self.folder``; ``with`` stops it and
    removes the folder."""

    def __init__(self, prefix: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.process: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """A clean stop (SIGTERM: the process's own shutdown), SIGKILL after 30 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Any:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
