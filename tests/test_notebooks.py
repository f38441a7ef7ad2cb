"""The notebooks in notebooks/: stored clean, and each runs top to bottom (with nbclient).

A kernel is a separate Python process with its own JVM, which costs seconds
to start; so the notebooks run one after the other in one kernel, as
they would in one Databricks cluster: each starts with ``%reset -f``, so it
sees none of the previous one's variables and must set everything up itself
(its session cell then finds the running SparkSession, as on Databricks).
Each asserts on what its cells print: counts that only come out right when
data went through Spark and Broker and back.

Deselect the runs with ``-m "not notebooks"`` (the storage checks stay).
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_quickstart", "02_zeek_events", "03_stores", "04_zeek_logs", "05_zeek_tables"]

#: Seconds a cell may run (the first starts a JVM) and a notebook may take in all.
CELL_TIMEOUT = 120
NOTEBOOK_TIMEOUT = 240

#: What each notebook must print (one line each, exactly).
EXPECTED = {
    "01_quickstart": [
        "received 100 of 100 messages back from Spark",
        "/demo/out/0 ping [Count(0), 'host-0']",
        "the query read 100 rows",
    ],
    "02_zeek_events": [
        "counted 600 connections in 6 windows",
        "per-service totals match: True {'dns': 141, 'http': 140, 'ssl': 167, 'ssh': 152}",
    ],
    "03_stores": [
        "the master now holds ('switch', 48)",
        "4 entries in the store",
        "changes: insert, update, erase",
    ],
    "04_zeek_logs": [
        "records: broker 1, conn 69, dns 63, reporter 3, weird 12",
        "conn 69 rows, dns 63 rows",
        "joined 63 of 63 dns records to their connections",
        "##############################  9,107 192.168.120.22",
        "##############################     31 192.168.120.22",
        "tables: broker, conn, dns, reporter, weird",
        "rows: broker 1, conn 69, dns 63, reporter 3, weird 12",
        "typed as zeek_log_schema: True",
        "zeek_conn holds the rows of the conn stream: True",
        "zeek_dns holds the rows of the dns stream: True",
        "63 dns records from Zeek's JSON lines",
        "same rows as zeek_dns: True",
        "removed the tables and the spools: True",
    ],
    "05_zeek_tables": [
        "relay node ready",
        "records sent: broker 2, conn 118, dns 63, files 47, http 49, reporter 5, weird 46",
        "tables: zeek_broker, zeek_conn, zeek_dns, zeek_files, zeek_http, zeek_reporter, "
        "zeek_weird",
        "rows: broker 2, conn 118, dns 63, files 47, http 49, reporter 5, weird 46",
        "every record once: True",
        "positions unique: True",
        "services charted: -, dns, http",
        "the same rows after a second run: True",
        "removed the tables and the relay's spool: True",
    ],
}

#: Run in the kernel after a notebook failed, before the failure is reported: its own
#: clean-up cell never ran, so this stops what a notebook may have left running (its
#: queries and the Spark session with their driver-side processes, its endpoints and
#: child processes, the receivers of its spools) and removes the directories its
#: variables name inside the run's temporary folder. The next notebook starts a session
#: of its own, as on a new cluster. Each step goes on after another's error, which it
#: prints (the test shows what it printed).
SALVAGE = """
import os as _os, shutil as _shutil, subprocess as _subprocess, tempfile as _tempfile
import time as _time
import broker_spark as _broker
from broker_spark.spark import stop_receiver as _stop_receiver
from pyspark.sql import SparkSession as _Session


def _attempt(step, *args):
    try:
        step(*args)
    except Exception as exc:
        print(f"salvage: {step.__name__}{args}: {exc!r}")


def _stop_process(process):
    process.terminate()
    process.wait(30)


def _remove(directory):
    # a query's driver-side process that Spark ends late may still start a receiver
    # there: gone means gone for a second after its removal
    for _ in range(10):
        for root, _dirs, _files in _os.walk(directory):
            _attempt(_stop_receiver, root)
        _shutil.rmtree(directory, ignore_errors=True)
        _time.sleep(1)
        if not _os.path.exists(directory):
            return
    raise OSError(f"{directory} still holds {list(_os.walk(directory))}")


_session = _Session.getActiveSession()
if _session is not None:
    for _query in _session.streams.active:
        _attempt(_query.stop)
    _attempt(_session.stop)
_tmp = _os.path.realpath(_tempfile.gettempdir()) + _os.sep
for _value in list(globals().values()):
    if isinstance(_value, _broker.Endpoint):
        _attempt(_value.shutdown)
    elif isinstance(_value, _subprocess.Popen) and _value.poll() is None:
        _attempt(_stop_process, _value)
for _value in list(globals().values()):
    if isinstance(_value, str) and _os.path.realpath(_value).startswith(_tmp):
        if _os.path.isdir(_value):
            _attempt(_remove, _value)
"""

#: Pictures (PNG outputs) a notebook must show.
PICTURES = {"05_zeek_tables": 1}


def _read(name: str) -> Any:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_there_are_exactly_the_expected_notebooks() -> None:
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_stored_clean(name: str) -> None:
    nb = _read(name)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata.kernelspec.name == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert all(not cell.metadata for cell in nb.cells)  # no collapsed/scrolled/execution state
    assert set(nb.metadata) <= {"kernelspec", "language_info"}
    # The install is guarded: harmless outside Databricks, and the first thing that runs.
    first = code[0].source
    assert '"DATABRICKS_RUNTIME_VERSION" in os.environ' in first and "if ON_DATABRICKS:" in first
    assert "pip" in first
    assert not any(
        line.lstrip().startswith("%pip") for cell in code for line in cell.source.splitlines()
    )
    # Uses Databricks' spark when there is one.
    assert any('globals().get("spark")' in cell.source for cell in code)


@pytest.fixture(scope="module")
def kernel() -> Iterator[KernelManager]:
    """One kernel (and so one JVM) for the notebooks; stopped with Spark at the end."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(NOTEBOOKS))
    try:
        yield km
    finally:
        stop = nbformat.v4.new_notebook(
            cells=[
                new_code_cell(
                    "from pyspark.sql import SparkSession\n"
                    "session = SparkSession.getActiveSession()\n"
                    "if session is not None:\n"
                    "    session.stop()"
                )
            ]
        )
        try:
            NotebookClient(stop, km=km, timeout=60).execute()
        finally:
            km.shutdown_kernel(now=False)


def _stdout(nb: Any) -> list[str]:
    lines = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stdout":
                lines += output.text.splitlines()
    return lines


def _salvage(kernel: KernelManager) -> None:
    """Run :data:`SALVAGE` after a failure, which it must not hide (its own errors are
    dropped: the notebook's failure is the one to report)."""
    salvage = nbformat.v4.new_notebook(cells=[new_code_cell(SALVAGE)])
    with contextlib.suppress(Exception):
        NotebookClient(salvage, km=kernel, timeout=120, allow_errors=True).execute()
    printed = "\n".join(_stdout(salvage))
    if printed:
        print(printed, file=sys.stderr)


@pytest.mark.notebooks
@pytest.mark.spark
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str, kernel: KernelManager) -> None:
    nb = copy.deepcopy(_read(name))
    nb.cells.insert(0, new_code_cell("%reset -f"))  # a fresh namespace, as a new notebook has
    started = time.monotonic()
    try:
        NotebookClient(
            nb,
            km=kernel,
            timeout=CELL_TIMEOUT,
            allow_errors=False,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        ).execute()
    except BaseException:
        _salvage(kernel)
        raise
    took = time.monotonic() - started
    printed = _stdout(nb)
    for line in EXPECTED[name]:
        assert line in printed, f"{name} did not print {line!r}; it printed:\n" + "\n".join(printed)
    pictures = [
        output
        for cell in nb.cells
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert len(pictures) >= PICTURES.get(name, 0), f"{name} showed {len(pictures)} pictures"
    assert took < NOTEBOOK_TIMEOUT
