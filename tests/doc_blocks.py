"""The shell and Python blocks of the tutorial and the how-to guides, read and run as written.

Every ```sh/```bash/```python block of those pages carries a comment on the line(s) just
before it (invisible where the Markdown is rendered) that says what it is:

- ``<!-- run: SESSION [OPTIONS] -->``: run by ``make test-docs`` (tests/test_doc_blocks.py),
  in order with the page's other blocks of SESSION, in one temporary folder;
- ``<!-- live: NAME -->``: read by name and run by a test of its own: ``make test-live``
  against a real Zeek (tests/live/), or ``spark-pipelines`` (tests/test_spark_pipelines.py);
- ``<!-- excerpt: WHY -->``: not run, and why (a Databricks workspace, a registry, ...).

A ``run`` block is run on loopback as a reader would, with only what a one-machine test
must change: example hosts (``*.example.net``, ``10.0.0.N``, ``0.0.0.0``) become
``127.0.0.1``, every port the session names becomes a free one (the same port for the
same number throughout the session, bare numbers included), and absolute example paths (``/var/lib/...``,
``/etc/broker-spark/...``, ``/Volumes/...``, ``/local_disk0/...``, ``/data/...``) move
under the session's folder. Shell blocks run with ``bash -e`` and the project's ``bin``
first on the ``PATH``; Python blocks run one after the other in one interpreter per
session (names defined by one block are there for the next, as in a notebook). Options:

- ``background``: a command that runs until stopped (a node): started in its own process
  group, and ``ready=REGEX`` waits until its output has a line that matches (``^ready$``:
  a node's last line at start); stopped with SIGTERM at the session's end;
- ``expect=TEXT``: the block's output must hold TEXT;
- ``spark``: a Python block that takes ``spark`` as a notebook has it: a local session is
  made for it first, unless the session already has one;
- ``file=PATH``: the block is a file the reader writes (a pipeline's source, its spec):
  written to PATH in the session's folder, not run;
- ``status=any``: a shell block whose exit status is not checked (its ``expect=`` is).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The pages whose every shell and Python block is marked (and run, where marked so).
MARKED = (
    "tutorial.md",
    "demo.md",
    "command-line.md",
    "deploy.md",
    *(f"how-to/{p.name}" for p in sorted((DOCS / "how-to").glob("*.md"))),
)
SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py", "python3"}

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)")
_MARK = re.compile(r"^\s*<!-- (?P<kind>run|live|excerpt):\s*(?P<rest>.*?)\s*-->\s*$")


@dataclass
class Block:
    """A fenced block of a page, with its markers (kind -> the rest of the marker)."""

    doc: str
    line: int
    lang: str
    text: str
    marks: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"docs/{self.doc}:{self.line}"

    @property
    def session(self) -> str:
        return shlex.split(self.marks["run"])[0]

    @property
    def options(self) -> dict[str, str]:
        out = {}
        for word in shlex.split(self.marks["run"])[1:]:
            name, _, value = word.partition("=")
            out[name] = value
        return out


def blocks(doc: str) -> list[Block]:
    """Every fenced block of ``docs/<doc>``, with the markers on the lines just before it."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence["indent"], fence["lang"].lower()
        marks: dict[str, str] = {}
        j = i - 1
        while j >= 0 and _MARK.match(lines[j]):
            found = _MARK.match(lines[j])
            assert found is not None
            marks[found["kind"]] = found["rest"]
            j -= 1
        body = []
        k = i + 1
        while k < len(lines) and not lines[k].strip().startswith("```"):
            text = lines[k]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            k += 1
        out.append(Block(doc, i + 1, lang, "\n".join(body) + "\n", marks))
        i = k + 1
    return out


def runnable(block: Block) -> bool:
    return block.lang in SHELL | PYTHON


# --- from the doc's site to loopback --------------------------------------------------------

_PORT = re.compile(
    r'(?<=:)(\d{4,5})\b|\b(\d{4,5})(?=/tcp)|(?<=port: ")(\d{4,5})\b|(?<=-port )(\d{4,5})\b'
)
_NUMBER = re.compile(r"\b\d{4,5}\b")
_HOSTS = re.compile(r"\b(?:[\w-]+\.)+example\.net\b|\b10\.0\.0\.\d{1,3}\b|\b0\.0\.0\.0\b")
_PATHS = re.compile(r"(?<![\w.])/(?:var/lib|etc/broker-spark|Volumes|local_disk0|data)(?![\w-])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Loopback:
    """What a session's blocks change to run on one machine: ports, hosts, paths."""

    folder: Path
    ports: dict[str, str] = field(default_factory=dict)

    def learn(self, text: str) -> None:
        """The ports ``text`` names (``host:PORT``, ``PORT/tcp``, ``port: "PORT"``,
        ``--some-port PORT``), each given a free one."""
        for found in _PORT.finditer(text):
            number = next(g for g in found.groups() if g)
            self.ports.setdefault(number, str(free_port()))

    def apply(self, text: str) -> str:
        """``text`` on loopback: every port the session names becomes its free one,
        wherever a block uses the number (``peer("127.0.0.1", 9999)`` too)."""
        self.learn(text)
        text = _NUMBER.sub(lambda m: self.ports.get(m.group(0), m.group(0)), text)
        text = _HOSTS.sub("127.0.0.1", text)
        return _PATHS.sub(lambda m: str(self.folder) + m.group(0), text)


# --- running a session ----------------------------------------------------------------------

_PYTHON_LOOP = r"""
import sys, traceback
scope = {"__name__": "__main__"}
while True:
    head = sys.stdin.readline()
    if not head:
        break
    code = sys.stdin.read(int(head))
    try:
        exec(compile(code, "<doc block>", "exec"), scope)
    except BaseException:
        traceback.print_exc()
        print("\n@@doc-block-failed@@", flush=True)
    else:
        print("\n@@doc-block-done@@", flush=True)
"""

SPARK_PRELUDE = """
if "spark" not in globals():
    import os, sys
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
"""


class Session:
    """One session of a page: its folder, its background processes, its interpreter."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.loopback = Loopback(folder)
        self.env = dict(
            os.environ,
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            PYSPARK_PYTHON=sys.executable,
            PYTHONUNBUFFERED="1",
            # a JVM that spark-submit starts (spark-pipelines' server) keeps its temporary
            # folders (Hive's <id>_resources among them) in the session's, not in /tmp
            SPARK_SUBMIT_OPTS=f"-Djava.io.tmpdir={folder}",
        )
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.python: subprocess.Popen[str] | None = None
        self.log = folder / "python.log"

    def run(self, block: Block, timeout: float = 300.0) -> str:
        text = self.loopback.apply(block.text)
        options = block.options
        if "file" in options:
            path = self.folder / options["file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return ""
        if block.lang in PYTHON:
            if "spark" in options:
                self._python(SPARK_PRELUDE, block, timeout)
            out = self._python(text, block, timeout)
        elif "background" in options:
            out = self._start(text, block, options.get("ready", ""), timeout)
        else:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", text],
                cwd=self.folder, env=self.env, capture_output=True, text=True,
                timeout=timeout, check=False,
            )  # fmt: skip
            out = done.stdout + done.stderr
            if done.returncode != 0 and options.get("status") != "any":
                raise AssertionError(f"{block.where} exited {done.returncode}:\n{text}\n{out}")
        expected = options.get("expect")
        if expected and expected not in out:
            raise AssertionError(f"{block.where}: no {expected!r} in its output:\n{out}")
        return out

    def _start(self, text: str, block: Block, ready: str, timeout: float) -> str:
        log = self.folder / f"background-{len(self.background)}.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", f"exec {text}" if "\n" not in text.strip() else text],
                cwd=self.folder, env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.background.append((proc, log))
        deadline = time.monotonic() + min(timeout, 90.0)
        while True:
            said = log.read_text(errors="replace")
            if not ready or re.search(ready, said, re.M):
                return said
            if proc.poll() is not None:
                raise AssertionError(f"{block.where} exited {proc.returncode}:\n{text}\n{said}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{block.where}: no {ready!r} within 90 s:\n{said}")
            time.sleep(0.1)

    def _python(self, code: str, block: Block, timeout: float) -> str:
        if self.python is None:
            self._sink = open(self.log, "w")  # noqa: SIM115 - closed in stop()
            self.python = subprocess.Popen(
                [sys.executable, "-u", "-c", _PYTHON_LOOP],
                cwd=self.folder, env=self.env, stdin=subprocess.PIPE, stdout=self._sink,
                stderr=subprocess.STDOUT, text=True, start_new_session=True,
            )  # fmt: skip
        assert self.python.stdin is not None
        start = self.log.stat().st_size
        self.python.stdin.write(f"{len(code)}\n{code}")
        self.python.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, errors="replace") as f:
                f.seek(start)
                said = f.read()
            if "@@doc-block-done@@" in said:
                return said
            if "@@doc-block-failed@@" in said or self.python.poll() is not None:
                raise AssertionError(f"{block.where} failed:\n{code}\n{said}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{block.where}: not done within {timeout:.0f} s:\n{said}")
            time.sleep(0.2)

    def stop(self) -> None:
        """End the interpreter, then every background process (SIGTERM, then SIGKILL)."""
        if self.python is not None:
            assert self.python.stdin is not None
            self.python.stdin.close()
            try:
                self.python.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.python.pid, signal.SIGKILL)
                self.python.wait(10)
            self._sink.close()
        for proc, _log in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
