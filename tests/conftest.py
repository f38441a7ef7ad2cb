"""Shared test configuration: Hypothesis profiles sized for a 2-core CI machine, leftovers
killed, and the `spawn` fixture for tests that run the command as processes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from broker_spark.reader.receiver_attach import RECEIVER_MODULES

settings.register_profile(
    "default",
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=100)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# -- nothing left behind ------------------------------------------------------------------
#
# The run gets a temporary directory of its own (TMPDIR, inherited by Spark's Python
# workers, the CLI's and the notebooks' processes): whatever a test, a query or the demo
# puts in the system temporary folder lands there. Once the run is over (the shared
# SparkSession stopped, every query's driver-side process ended), nothing of ours may
# remain in it: no private spool, no notebook or demo directory. Then it is removed.

#: What broker-spark, its notebooks and its benchmarks name their temporary directories.
OURS = ("broker-spark-", "broker-notebook-", "bench-spool-")

_run_tmp: str | None = None
_outer_tmp: str | None = None


def pytest_configure(config) -> None:
    global _run_tmp, _outer_tmp
    import tempfile

    _outer_tmp = os.environ.get("TMPDIR")
    _run_tmp = tempfile.mkdtemp(prefix="broker-spark-tests-")
    os.environ["TMPDIR"] = _run_tmp
    tempfile.tempdir = None  # recomputed from TMPDIR


def pytest_sessionfinish(session, exitstatus) -> None:
    import shutil
    import tempfile
    import time

    if _run_tmp is None:
        return
    deadline = time.monotonic() + 15  # Spark ends its Python processes asynchronously
    while True:
        left = sorted(n for n in os.listdir(_run_tmp) if n.startswith(OURS))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    receivers = _stop_receivers_under(_run_tmp)
    if receivers:
        left = [*left, *(f"receiver process {pid} of {path}" for pid, path in receivers)]
    shutil.rmtree(_run_tmp, ignore_errors=True)
    if _outer_tmp is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _outer_tmp
    tempfile.tempdir = None
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = f"left behind in the temporary folder: {', '.join(left)}"
        if reporter is not None:
            reporter.write_line(f"ERROR {text}", red=True)
        session.exitstatus = 1


def _stop_receivers_under(root: str) -> list[tuple[int, str]]:
    """Receiver processes (``spoolPath`` receivers) of spools under ``root`` still running:
    a test that starts one must stop it. They are stopped here, and reported."""
    import contextlib
    import signal

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                words = [w.decode(errors="replace") for w in f.read().split(b"\0")]
        except OSError:
            continue
        if not any(m in words for m in RECEIVER_MODULES):
            continue
        paths = [w for w in words if w.startswith(root)]
        if paths:
            found.append((int(name), paths[0]))
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)
    return found


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    """Start ``broker-spark`` processes (:class:`test_cli_support.Command`); every one is
    killed (if need be) and reaped at the end of the test."""
    from test_cli_support import Command

    started: list[Command] = []

    def start(*args: str, stdin: object = None) -> Command:
        cmd = Command(*args, tmp=tmp_path / "logs", stdin=stdin)
        started.append(cmd)
        return cmd

    try:
        yield start
    finally:
        for cmd in started:
            cmd.close()
