"""The receiver of the soak's ``spoolPath`` query, watched from outside.

The receiver is the process a reader with ``listen`` and ``spoolPath`` starts
(in a session of its own) and finds again through ``receiver.json`` in the
spool folder. The soak kills it, expects the query to start another, expects a
restarted driver to attach to the one that ran on, and stops it at the end, as
``broker-spark receiver stop`` does: :class:`ReceiverWatch` answers those
questions from the spool folder, the receiver's own status and ``/proc``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procs import alive

__all__ = ["ReceiverWatch"]


class ReceiverWatch:
    """The receiver of ``spool``; ``wait(at)`` sleeps until ``at`` (the soak samples its
    relay each second meanwhile)."""

    def __init__(self, spool: Path, wait: Callable[[float], None]) -> None:
        self.spool = spool
        self.wait = wait

    def pid(self) -> int | None:
        """The pid ``receiver.json`` names, if that process runs."""
        from broker_spark.reader.receiver_attach import read_info

        info = read_info(str(self.spool))
        pid = info.get("pid") if info is not None else None
        return pid if isinstance(pid, int) and alive(pid) else None

    def status(self) -> dict[str, Any] | None:
        """What the receiver says of itself (``broker-spark status --spool``), or None."""
        from broker_spark.reader.receiver_attach import receiver_status

        running = receiver_status(str(self.spool), "soak")
        return running[1] if running is not None else None

    def await_new(self, other_than: int | None, timeout: float) -> int | None:
        """Until a receiver other than ``other_than`` runs and answers; its pid (None: none
        within ``timeout``)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid = self.pid()
            if pid is not None and pid != other_than and self.status() is not None:
                return pid
            self.wait(time.time() + 0.2)
        return None

    def reattached(
        self, before: int | None, driver_pids: Callable[[], list[int]], timeout: float = 60.0
    ) -> dict[str, Any]:
        """After a restart of the driver (``driver_pids``: its processes now): whether its
        receiver query attached to the receiver that ran before (the same pid, with a reader
        of the new driver's processes attached)."""
        deadline = time.time() + timeout
        began = time.time()
        out: dict[str, Any] = {"receiver_pid_before": before, "receiver_pid_after": None}
        while time.time() < deadline:
            pid = self.pid()
            status = self.status()
            out["receiver_pid_after"] = pid
            ours = set(driver_pids())
            readers = [
                r for r in (status or {}).get("readers", [])
                if r.get("role") == "attach"
                and str(r.get("name", "")).rpartition(":")[2].isdigit()
                and int(str(r["name"]).rpartition(":")[2]) in ours
            ]  # fmt: skip
            if pid is not None and readers:
                out["reattached_s"] = round(time.time() - began, 2)
                break
            self.wait(time.time() + 0.5)
        out["reattached"] = (
            before is not None and out["receiver_pid_after"] == before and "reattached_s" in out
        )
        return out

    def stop(self, known: int | None) -> dict[str, Any]:
        """``broker-spark receiver stop`` on the spool: the pid it stopped, and whether that
        was ``known`` and it is gone with its files (``receiver.json``, the socket)."""
        from broker_spark.reader.receiver_attach import ReceiverError, stop_receiver
        from broker_spark.reader.receiver_files import INFO_FILE, SOCKET_FILE

        try:
            pid = stop_receiver(str(self.spool), 30)
            error = None
        except ReceiverError as exc:
            pid, error = None, str(exc)
        left = [n for n in (INFO_FILE, SOCKET_FILE) if (self.spool / n).exists()]
        return {
            "pid": pid,
            "clean": error is None and pid is not None and pid == known and not alive(pid)
            and not left,
            "files_left": left,
            "error": error,
        }  # fmt: skip

    def starts(self) -> int:
        """How many receivers ran on the spool (each logs one line when it is ready)."""
        text = "".join(
            f.read_text(errors="replace")
            for f in sorted(self.spool.glob("receiver.log*"))
            if f.is_file()
        )
        return len(re.findall(r"INFO broker_spark\.receiver: receiving .* into ", text))
