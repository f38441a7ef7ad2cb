"""Private spools: the temporary directory of a reader without ``spoolPath``, never left behind.

What a reader receives is Zeek data (who talked to whom); nobody asked to keep
it on disk, so a private spool goes away with the reader, however the reader
ends:

* :meth:`ReaderRuntime.close` removes it (the query stopped in-process, a test);
* Spark ends a query's driver-side Python process (query stop, ``spark.stop()``)
  with SIGTERM, which by default kills the process on the spot; the handler
  installed here removes the private spools first, then lets the signal do
  what it did before (the default: the process dies of it);
* an interpreter that exits normally removes them at exit (``atexit``);
* a process killed outright (SIGKILL, a crash, a lost machine) cannot clean
  up. Its spools are named ``broker-spark-spool-<pid>-<random>`` in the system
  temporary directory, and the next private spool made on the machine removes
  those whose process is gone (and that belong to the same user).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PREFIX", "make_private_spool", "release_private_spool", "sweep_stale_spools"]

#: Every private spool's directory name starts with this, then ``<pid>-``.
PREFIX = "broker-spark-spool-"

_NAME = re.compile(re.escape(PREFIX) + r"([0-9]+)-")

#: Re-entrant: the SIGTERM handler runs on the main thread between two bytecodes, possibly
#: while that same thread holds the lock (making or releasing a spool, or the first
#: SIGTERM's handler when Spark sends its second); a plain lock would hang the process
#: there for good, spool and all.
_lock = threading.RLock()
_live: set[str] = set()  # this process's private spools
_removing: set[str] = set()  # being removed right now (no longer in _live)
_hooks_installed = False
_previous_sigterm: Any = None


def make_private_spool(parent: str | None = None) -> str:
    """A new private spool directory (after removing those of processes that are gone)."""
    parent = parent or tempfile.gettempdir()
    sweep_stale_spools(parent)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent)
    with _lock:
        _live.add(path)
    _install_hooks()
    return path


def release_private_spool(path: str) -> None:
    """Remove a private spool (its reader is done with it)."""
    with _lock:
        _removing.add(path)
        _live.discard(path)
    _remove(path)


def _remove(path: str) -> None:
    """Remove ``path`` (listed in ``_removing`` by the caller) even while a pump still
    writes into it (on SIGTERM it may): renamed first, so files opened by their old path
    fail instead of refilling it, then removed until gone. The new name keeps the prefix
    and pid, so a sweep finds what remains."""
    try:
        doomed = _doomed(path)
        try:
            os.rename(path, doomed)
        except OSError:
            doomed = path
        _rmtree(doomed)
    finally:
        with _lock:
            _removing.discard(path)


def _doomed(path: str) -> str:
    return f"{path}-removed"


def _finish(path: str) -> None:
    """Complete a removal that was interrupted wherever it stood (renamed or not)."""
    _rmtree(path)
    _rmtree(_doomed(path))


def _rmtree(path: str) -> None:
    for _ in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return


def sweep_stale_spools(parent: str | None = None) -> list[str]:
    """Remove the private spools in ``parent`` whose process no longer runs; return them."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for entry in entries:
        m = _NAME.match(entry.name)
        if m is None or _alive(int(m.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
                continue  # someone else's: not ours to judge
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or not a pid we can judge
    return True


def _remove_all() -> None:
    with _lock:
        paths = list(_live)
        _removing.update(paths)
        _live.clear()
    for path in paths:
        _remove(path)


def _install_hooks() -> None:
    """Once per process: at exit, and on SIGTERM where this thread may set handlers."""
    global _hooks_installed, _previous_sigterm
    with _lock:
        if _hooks_installed:
            return
        _hooks_installed = True
    atexit.register(_remove_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    with contextlib.suppress(ValueError, OSError):
        _previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    # A removal this signal interrupted is finished here, before the signal ends the
    # process: the query was closing when Spark sent SIGTERM, or Spark sent a second
    # SIGTERM while the first one's handler was removing (stopping a streaming
    # source's worker, Spark destroys the process twice).
    with _lock:
        unfinished = list(_removing)
    for path in unfinished:
        _finish(path)
    _remove_all()
    previous = _previous_sigterm
    if callable(previous):
        handler: Callable[[int, Any], Any] = previous
        handler(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    # The default: die of the signal, as the process would have without us.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
