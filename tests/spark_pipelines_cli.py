"""PySpark's ``spark-pipelines run`` in a folder, as docs/how-to/pipelines.md runs it locally:
for tests/test_spark_pipelines.py and bench/pipelines.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: ``spark-pipelines`` options for a catalog that outlives the server: Hive's metastore, in
#: a Derby database (``metastore_db``) beside the tables (``spark-warehouse``), both in the
#: folder the command runs in. These are settings of the server's start: the spec's
#: ``configuration`` is set again on each flow, where Spark refuses static settings.
SERVER_CONF = (
    "spark.sql.catalogImplementation=hive",
    # each flow's reader starts a Python process, all at once: on 2 shared cores their
    # first connection back may take longer than the default 15 s
    "spark.python.authenticate.socketTimeout=120s",
    "spark.sql.pipelines.execution.maxConcurrentFlows=2",
)


def run_spark_pipelines(folder: Path, timeout: float = 600) -> tuple[float, str]:
    """``spark-pipelines run`` in ``folder`` (its spec and sources there), with this
    Python and the checkout's package: its wall seconds and output. RuntimeError (with the
    output's end) when it failed (a flow that failed is run again by the pipeline, as its
    retries allow)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(bin_dir), env.get("PATH", "")))
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # the server's JVM keeps its temporary folders (Hive's <id>_resources) in the folder
    jvm_tmp = folder / "jvm-tmp"
    jvm_tmp.mkdir(exist_ok=True)
    env["SPARK_SUBMIT_OPTS"] = f"-Djava.io.tmpdir={jvm_tmp}"
    conf = [arg for setting in SERVER_CONF for arg in ("--conf", setting)]
    started = time.monotonic()
    done = subprocess.run(
        [str(bin_dir / "spark-pipelines"), *conf, "run"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    out = done.stdout + done.stderr
    if done.returncode != 0 or "Run is COMPLETED" not in out:
        raise RuntimeError(f"spark-pipelines run failed:\n{out[-4000:]}")
    return seconds, out
