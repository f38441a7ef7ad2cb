"""A driver killed between two tables' writes of one batch: after the restart, every table
holds each record exactly once.

The driver (a process group of its own: its JVM, Python workers and reader) writes a
relay's Zeek logs into a table per log with ``write_zeek_tables``' writer; a fault injected
after the first table of the first batch kills the whole group with SIGKILL, as a crashed
driver dies. A second driver starts from the same checkpoint: Spark runs the batch again,
the table written before the kill is skipped (its marker), the others are written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import killable_driver_env, spark  # noqa: F401
from test_spark_relay import Relay
from zeek_recordings import recording

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

DRIVER = str(Path(__file__).with_name("tables_driver.py"))
HTTP = "zeek-logs-http-methods"


def run_driver(tmp: Path, relay: str, *kill: str) -> subprocess.CompletedProcess:
    env = killable_driver_env(tmp)
    args = [sys.executable, DRIVER, relay, str(tmp / "warehouse"), str(tmp / "checkpoint"), *kill]
    with open(tmp / "driver.log", "ab") as log:
        return subprocess.run(
            args, stdout=subprocess.PIPE, stderr=log, env=env, text=True, timeout=240,
            start_new_session=True,
        )  # fmt: skip


def test_a_driver_killed_between_two_tables_leaves_each_record_once(
    spark: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    relay = Relay(tmp_path / "relay")
    try:
        rec = recording(HTTP)
        relay.publish_encoded(rec.data)
        address = f"127.0.0.1:{relay.port}"
        killed = run_driver(tmp_path, address, "conn")
        assert "killed after zt.conn" in killed.stdout and killed.returncode != 0
        marker_dir = tmp_path / "checkpoint" / "_zeek_tables"
        assert (marker_dir / "zt_conn" / "batch-0.done").exists()  # conn was written...
        assert not (marker_dir / "zt_files" / "batch-0.done").exists()  # ...files was not
        done = run_driver(tmp_path, address)
        assert done.returncode == 0 and "done" in done.stdout, (tmp_path / "driver.log").read_text()
    finally:
        relay.close()
    for path in rec.writes:
        table = spark.read.parquet(str(tmp_path / "warehouse" / path))
        keys = table.select("offset", "record").collect()
        assert len(keys) == len(set(keys)) == len(rec.local_lines(path)), path
