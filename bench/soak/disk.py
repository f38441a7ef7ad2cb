"""The soak's full disk and its undecodable batches.

:class:`SmallDisk` is a small tmpfs mounted for the run (root only; elsewhere the
run goes on without the full-disk fault and says why), which relay ``B``'s spool
lives on, and which :meth:`SmallDisk.fill` fills to under the relay's free-space
floor. :func:`undecodable_batches` makes what a newer Zeek or a broken sender
would send a relay, and :func:`undecodable_kept` counts how many of them the
relay's spool holds at the end.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
from pathlib import Path

__all__ = ["SmallDisk", "tree_size", "undecodable_batches", "undecodable_kept"]


class SmallDisk:
    """A tmpfs of ``size`` at ``path`` (:meth:`mount`), a filler file on it, unmounted at
    the end."""

    #: Why the last :meth:`mount` made none (None: it made one).
    why_not: str | None = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"
        self.mounted = True

    @classmethod
    def mount(cls, path: Path, size: str) -> SmallDisk | None:
        if os.geteuid() != 0:
            cls.why_not = "not root: no file system mounted, no full-disk fault"
            return None
        path.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            cls.why_not = f"mount failed: {done.stderr.strip()}"
            path.rmdir()
            return None
        cls.why_not = None
        return cls(path)

    def fill(self, leave: int) -> None:
        """Leave about ``leave`` bytes free."""
        st = os.statvfs(self.path)
        size = max(0, st.f_bavail * st.f_frsize - leave)
        with open(self.filler, "wb") as f:
            for _ in range(size // (1 << 20)):
                f.write(b"\0" * (1 << 20))
            f.write(b"\0" * (size % (1 << 20)))

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False
            with contextlib.suppress(OSError):
                self.path.rmdir()


def undecodable_batches(rng: random.Random, each: int = 10) -> list[list[bytes]]:
    """``each`` real Zeek batches under another serializer's name and ``each`` cut in half
    (ZeroMQ log messages of four frames), in a seeded order."""
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    messages = zmq_messages(ZMQ_LOGS)
    out: list[list[bytes]] = []
    for i in range(each):
        head, node, _serializer, batch = messages[i % len(messages)]
        out.append([head, b"soak-newer-zeek", b"zeek-bin-serializer-v2", batch])
    for i in range(each):
        head, node, serializer, batch = messages[(i + each) % len(messages)]
        out.append([head, b"soak-broken-sender", serializer, batch[: len(batch) // 2]])
    rng.shuffle(out)
    return out


def undecodable_kept(spool: Path, sent: list[list[bytes]]) -> int:
    """How many of the messages ``sent`` the spool holds: as an undecodable record with the
    same frames, or (a cut batch whose head still parses) as the batch itself."""
    from broker_spark.spool.spool import Spool
    from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC, unpack_undecodable

    kept_frames: list[tuple[bytes, ...]] = []
    payloads: set[bytes] = set()
    with Spool(spool, readonly=True) as view:
        for record in view.iter_records(view.start_offset(), view.end_offset()):
            if record.topic == UNDECODABLE_TOPIC:
                kept_frames.append(unpack_undecodable(record.payload).frames)
            elif record.sender in ("soak-newer-zeek", "soak-broken-sender"):
                payloads.add(bytes(record.payload))
    found = 0
    for frames in sent:
        if tuple(frames) in kept_frames:
            kept_frames.remove(tuple(frames))
            found += 1
        elif frames[3] in payloads:
            found += 1
    return found


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
