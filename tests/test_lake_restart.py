"""A driver killed between its tables' commits and the checkpoint's, on all four ways into
Delta and Iceberg: after the restart, every table holds each record exactly once.

The driver (tests/tables_driver.py in its lake mode: a process group of its own with the
real connectors, the Iceberg catalog the test's session reads) writes a real relay's Zeek
logs four ways, each batch one way after the other: Delta by the fast path (delta-rs
commits the tasks' files, the batch's ``txn``) and by Spark's Delta writer
(``txnAppId``/``txnVersion``), Iceberg by the fast path (pyiceberg, the batch in the
snapshot's summary) and by Spark's Iceberg writer (our mark in the snapshot's summary).
Once all four have committed batch 0, the fault kills the group with SIGKILL: Spark has
not committed the batch to its checkpoint. More logs reach the relay; a second driver
starts from the same checkpoint, runs batch 0 again (every way must skip it) and the new
logs' batch. The test's session then reads each table through the connector's Spark
reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from lake_fixtures import lake, lake_folder  # noqa: F401
from tables_driver import LAKE_WAYS
from test_spark_relay import Relay
from test_zeek_tables_restart import HTTP, run_driver
from zeek_recordings import recording

pytestmark = [pytest.mark.spark, pytest.mark.lake, pytest.mark.timeout(600)]

DNS = "zeek-logs-dns-edns-ecs"


@pytest.fixture(scope="session")
def spark(lake: Any) -> Any:  # noqa: F811
    return lake


def _each_way(tmp: Path) -> dict[str, str]:
    warehouse = tmp / "warehouse"
    return {way: name.format(warehouse=warehouse) for way, (name, _) in LAKE_WAYS.items()}


def test_a_driver_killed_after_its_lake_commits_leaves_each_record_once(
    spark: Any,
    lake_folder: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKE_FOLDER", lake_folder)
    relay = Relay(tmp_path / "relay")
    try:
        relay.publish_encoded(recording(HTTP).data)
        address = f"127.0.0.1:{relay.port}"
        killed = run_driver(tmp_path, address, "batch")
        log = (tmp_path / "driver.log").read_text
        assert "killed after batch 0's tables" in killed.stdout, log()
        assert killed.returncode != 0
        commits = tmp_path / "checkpoint" / "commits"
        assert not (commits / "0").exists()  # the checkpoint has not got batch 0
        tables = _each_way(tmp_path)
        first = {p: len(recording(HTTP).local_lines(p)) for p in recording(HTTP).writes}
        for way, name in tables.items():  # every way committed batch 0 before the kill
            assert spark.table(name.format(path="conn")).count() == first["conn"], way
        conn = DeltaTable(f"{tmp_path}/warehouse/delta/conn")
        version = conn.version()
        relay.publish_encoded(recording(DNS).data)  # the restarted driver's batch 1
        done = run_driver(tmp_path, address)
        assert done.returncode == 0 and "done" in done.stdout, log()
        assert (commits / "0").exists() and (commits / "1").exists()
    finally:
        relay.close()
    expected = dict.fromkeys(set(recording(HTTP).writes) | set(recording(DNS).writes), 0)
    for name in (HTTP, DNS):
        for path in recording(name).writes:
            expected[path] += len(recording(name).local_lines(path))
    for way, name in tables.items():
        for path, lines in sorted(expected.items()):
            keys = spark.table(name.format(path=path)).select("offset", "record")
            assert keys.count() == keys.distinct().count() == lines, (way, path)
    # the run again of batch 0 committed nothing: the fast path's Delta conn table gained
    # one version (batch 1's), and each Iceberg table's batches are 0 and 1, once each
    conn.update_incremental()
    assert conn.version() == version + 1
    for way in ("iceberg", "iceberg-spark"):
        batches = spark.sql(
            f"SELECT summary['broker-spark.batch-id'] AS b FROM {tables[way].format(path='conn')}"
            ".snapshots"
        ).collect()
        assert sorted(r.b for r in batches) == ["0", "1"], way
