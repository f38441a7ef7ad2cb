"""Private spools (a reader without ``spoolPath``) never outlive their reader.

Real processes, real signals, real directories: a child process makes a
private spool and is then ended by SIGTERM (as Spark ends a query's
driver-side Python process), by a normal exit, or by SIGKILL, after which
the next private spool made removes what the dead process left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from broker_spark.spool.private import (
    PREFIX,
    make_private_spool,
    release_private_spool,
    sweep_stale_spools,
)

pytestmark = pytest.mark.timeout(60)

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from broker_spark.spool.private import make_private_spool
    path = make_private_spool(sys.argv[1])
    with open(os.path.join(path, "00000000000000000000.log"), "wb") as f:
        f.write(b"who talked to whom" * 1000)
    print(path, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)
    time.sleep(60)
    """
)


def _child(parent: str, how: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, parent, how], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    path = proc.stdout.readline().strip()
    assert path.startswith(os.path.join(parent, PREFIX + str(proc.pid) + "-")), path
    return proc, path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sigterm_removes_the_spool_and_still_ends_the_process(tmp_path) -> None:
    proc, path = _child(str(tmp_path), "sleep")
    assert os.path.isdir(path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM  # it dies of the signal, as before
    assert not os.path.exists(path)


def test_a_normal_exit_removes_the_spool(tmp_path) -> None:
    proc, path = _child(str(tmp_path), "exit")
    assert proc.wait(30) == 0
    assert not os.path.exists(path)


def test_the_next_spool_removes_what_a_killed_process_left(tmp_path) -> None:
    proc, path = _child(str(tmp_path), "sleep")
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(30)
    assert os.path.isdir(path)  # left behind
    mine = make_private_spool(str(tmp_path))
    try:
        assert not os.path.exists(path)
        assert os.path.isdir(mine)
    finally:
        release_private_spool(mine)
    assert not os.path.exists(mine)


def test_the_sweep_spares_live_processes_and_other_names(tmp_path) -> None:
    live = tmp_path / f"{PREFIX}{os.getpid()}-abc"
    parent_pid = tmp_path / f"{PREFIX}{os.getppid()}-abc"
    dead = tmp_path / f"{PREFIX}{_dead_pid()}-abc"
    unrelated = tmp_path / "broker-spark-spool-notapid"
    spool_like_file = tmp_path / f"{PREFIX}{_dead_pid()}-file"
    for d in (live, parent_pid, dead, unrelated):
        d.mkdir()
        (d / "x").write_bytes(b"x")
    spool_like_file.write_bytes(b"not a directory")
    removed = sweep_stale_spools(str(tmp_path))
    assert removed == [str(dead)]
    assert live.is_dir() and parent_pid.is_dir() and unrelated.is_dir()
    assert spool_like_file.is_file()


def test_sigterm_chains_to_a_handler_the_program_set(tmp_path) -> None:
    """A program with its own SIGTERM handler keeps it: ours runs first, then theirs."""
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        def mine(signum, frame):
            print("program handler", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, mine)
        from broker_spark.spool.private import make_private_spool
        print(make_private_spool(sys.argv[1]), flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    path = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 7
    assert proc.stdout.read().strip() == "program handler"
    assert not os.path.exists(path)


STALLING_CHILD = textwrap.dedent(
    """
    import os, shutil, sys, time
    from broker_spark.spool import private as private_spool
    path = private_spool.make_private_spool(sys.argv[1])
    with open(os.path.join(path, "00000000000000000000.log"), "wb") as f:
        f.write(b"who talked to whom" * 1000)
    stall_in, how = sys.argv[2], sys.argv[3]

    class StallingOs:  # the module's view of os, with one stalling call
        calls = 0
        def __getattr__(self, name):
            return getattr(os, name)
        def rename(self, a, b):
            self.stall("rename")
            os.rename(a, b)
    real_rmtree = shutil.rmtree
    def stall(self, where):
        if where == stall_in and StallingOs.calls == 0:
            StallingOs.calls += 1
            print("stalled", flush=True)
            time.sleep(30)
    StallingOs.stall = stall
    def stalling_rmtree(p, ignore_errors=False):
        stall(None, "rmtree")
        real_rmtree(p, ignore_errors=ignore_errors)
    private_spool.os = StallingOs()
    private_spool.shutil.rmtree = stalling_rmtree
    if how == "closing":
        private_spool.release_private_spool(path)  # the query closes its reader
    else:
        print("ready", flush=True)
        time.sleep(30)  # the first SIGTERM's handler removes, and stalls
    """
)


@pytest.mark.parametrize("stall_in", ["rename", "rmtree"])
@pytest.mark.parametrize("how", ["closing", "second-sigterm"])
def test_sigterm_during_a_removal_finishes_it(tmp_path, stall_in, how) -> None:
    """A SIGTERM that lands in the middle of a removal finishes it before the process dies.

    Either the query was closing (removing its spool) when Spark's SIGTERM came, or
    Spark sent its second SIGTERM (it destroys a source's worker twice) while the
    first one's handler was removing. Fault injected: the child's first ``rename`` or
    ``rmtree`` stalls, so the signal surely lands there.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLING_CHILD, str(tmp_path), stall_in, how],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if how == "second-sigterm":
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stalled"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM
    assert os.listdir(tmp_path) == []


HOLDING_CHILD = textwrap.dedent(
    """
    import sys, time
    from broker_spark.spool import private as private_spool
    path = private_spool.make_private_spool(sys.argv[1])
    with private_spool._lock:  # as in the middle of making or releasing a spool
        print("holding", flush=True)
        time.sleep(30)
    """
)


def test_sigterm_while_this_thread_holds_the_lock_neither_hangs_nor_leaks(tmp_path) -> None:
    """Spark's SIGTERM lands while the main thread is inside the module's locked section.

    The handler runs on that same thread and takes the lock again; it must not wait on
    itself (the process would hang forever with its spool). Fault injected: the child
    holds the lock in its main thread when the signal comes.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDING_CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "holding"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == -signal.SIGTERM
        assert os.listdir(tmp_path) == []
    finally:
        proc.kill()
        proc.wait()
