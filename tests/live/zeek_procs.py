"""A real Zeek for the live tests: where it is, its processes, and its own JSON logs.

The live tests check broker-spark against what a running Zeek writes or prints, so
they need a Zeek. :func:`zeek_binary` finds one: ``$BROKER_SPARK_ZEEK`` (a path to
``zeek`` or to the project's wrapper), else ``shared/zeek/zeek`` in a folder above the
checkout (the build the project's CI provides beside its clone), else ``zeek`` on
``PATH``. Without one the suite fails and says how to get one; it never skips.

Zeek's ``print`` goes to a file here, so the scripts call ``flush_all()`` after each
line a test waits for.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


class ZeekMissing(RuntimeError):
    """No Zeek could be found or run; the message says what to do."""


def _candidates() -> Iterator[Path]:
    env = os.environ.get("BROKER_SPARK_ZEEK")
    if env:
        yield Path(env)
        return
    for folder in ROOT.parents:
        yield folder / "shared" / "zeek" / "zeek"
    found = shutil.which("zeek")
    if found:
        yield Path(found)


def zeek_binary() -> Path:
    """The Zeek to run (see the module's docstring); :class:`ZeekMissing` when none runs."""
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            raise ZeekMissing(
                f"{path} --version exited {done.returncode}: {done.stderr.strip()[-600:]} "
                "(the Debian runtime packages of shared/zeek/debian-packages.txt: "
                ".ci/run installs them as root)"
            )
        return path
    raise ZeekMissing(
        "the live tests need a Zeek and found none (tried "
        + ", ".join(tried)
        + "): set BROKER_SPARK_ZEEK to a zeek binary, or put the project's shared/zeek "
        "beside the checkout"
    )


def zeek_version(zeek: Path) -> str:
    out = subprocess.run([str(zeek), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().split()[-1]


class ZeekProcess:
    """One Zeek process: its stdout and stderr in files of its folder, stopped on close.

    ``cwd`` holds the scripts it loads by name (``cluster-layout.zeek``, the test's own):
    Zeek finds scripts in its working directory first.
    """

    def __init__(
        self,
        zeek: Path,
        name: str,
        args: Sequence[str],
        cwd: Path,
        env: Mapping[str, str] | None = None,
        stdin: int | IO[Any] | None = None,
    ) -> None:
        self.name = name
        self.cwd = cwd
        cwd.mkdir(parents=True, exist_ok=True)
        self.stdout_path = cwd / f"{name}.stdout"
        self.stderr_path = cwd / f"{name}.stderr"
        full_env = dict(os.environ, **(env or {}))
        full_env.setdefault("ZEEK_DNS_FAKE", "1")  # no lookups of the traces' names
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [str(zeek), *args],
                cwd=cwd,
                env=full_env,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        """What Zeek said on stderr, less the two warnings this build always prints (it
        has no Spicy, so no IGMP analyzer)."""
        lines = self.stderr_path.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "IGMP" not in line)

    def lines(self) -> list[str]:
        return self.stdout().splitlines()

    def wait_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first stdout line matching ``pattern``; fails with what Zeek said if the
        process ends first or the time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines():
                found = re.search(pattern, line)
                if found:
                    return found
            if self.proc.poll() is not None:
                for line in self.lines():  # it may have printed it as it ended
                    found = re.search(pattern, line)
                    if found:
                        return found
                raise AssertionError(
                    f"zeek {self.name} exited ({self.proc.returncode}) before printing "
                    f"{pattern!r}; stdout: {self.stdout()[-2000:]!r}; stderr: {self.stderr()[-2000:]!r}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"zeek {self.name} printed no {pattern!r} in {timeout} s; stdout: "
                    f"{self.stdout()[-2000:]!r}; stderr: {self.stderr()[-2000:]!r}"
                )
            time.sleep(0.05)

    def wait(self, timeout: float = 120.0) -> int:
        """Wait for the process to end; its exit code (fails with its output on a timeout)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"zeek {self.name} still runs after {timeout} s; stdout: {self.stdout()[-2000:]!r}; "
                f"stderr: {self.stderr()[-2000:]!r}"
            ) from None

    def finished(self, timeout: float = 120.0) -> None:
        """Wait for a clean end: exit code 0 and no error on stderr."""
        code = self.wait(timeout)
        assert code == 0, f"zeek {self.name} exited {code}: {self.stderr()[-3000:]}"
        errors = [line for line in self.stderr().splitlines() if re.search(r"error", line, re.I)]
        assert not errors, f"zeek {self.name} reported errors: {errors}"

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (Zeek flushes its logs and says goodbye), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    close = stop


def read_json_logs(folder: Path) -> dict[str, list[str]]:
    """The lines of each ``*.log`` Zeek wrote into ``folder`` as JSON, by log path (a
    cluster's logger rotates its files as it ends: ``conn.2026-11-27-22-33-17.log``)."""
    out: dict[str, list[str]] = {}
    for file in sorted(folder.glob("*.log")):
        lines = [line for line in file.read_text().splitlines() if line and line[0] != "#"]
        out.setdefault(file.name.split(".", 1)[0], []).extend(lines)
    return out


#: Logs every Zeek process writes about itself rather than about the traffic: compared per
#: node, not with a standalone Zeek's.
PROCESS_LOGS = frozenset({"reporter", "packet_filter", "cluster", "broker", "loaded_scripts"})


class Oracle:
    """Zeek's own JSON logs of a trace: a standalone ``zeek -D -C -r TRACE`` each.

    ``-D`` seeds Zeek's random numbers with zero, so the uids are those a cluster worker
    started with ``-D`` gives the same trace's connections. Each trace is read once per
    test session, into a folder of the session's.
    """

    def __init__(self, zeek: Path, folder: Path) -> None:
        self.zeek = zeek
        self.folder = folder
        self._logs: dict[str, dict[str, list[str]]] = {}

    def logs(self, trace: Path) -> dict[str, list[str]]:
        """Every log the standalone Zeek wrote for ``trace``, less :data:`PROCESS_LOGS`."""
        key = str(trace)
        if key not in self._logs:
            where = self.folder / trace.stem
            proc = ZeekProcess(
                self.zeek, "standalone", ["-D", "-C", "-r", str(trace), "LogAscii::use_json=T"],
                where,
            )  # fmt: skip
            proc.finished()
            logs = read_json_logs(where)
            self._logs[key] = {p: lines for p, lines in logs.items() if p not in PROCESS_LOGS}
        return self._logs[key]

    def union(self, traces: Sequence[Path]) -> dict[str, list[str]]:
        """The logs of several traces together (a cluster whose workers read them)."""
        out: dict[str, list[str]] = {}
        for trace in traces:
            for path, lines in self.logs(trace).items():
                out.setdefault(path, []).extend(lines)
        return out
