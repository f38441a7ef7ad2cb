"""Delta and Iceberg tables written by ``write_zeek_tables``, read by their own connectors.

A session of its own with the real connectors (:mod:`lake_fixtures`: Delta's and
Iceberg's Spark jars from Maven Central); ``pytest -m lake``, run by
``.ci/spark-versions`` on the PySpark versions the connectors support. Each table is
read through the connector's Spark reader and compared, column for column, with what
the Parquet path (the tasks' files, checked against Zeek's own logs elsewhere) writes
from the same micro-batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from lake_fixtures import ICEBERG, lake  # noqa: F401
from test_spark_zeek_tables import (
    FOLLOWED,
    _conn_batch,
    _conn_rows,
    _every_row,
    batch_of,
    broker_messages,
    db,  # noqa: F401
    zmq_log_messages,
)
from zeek_recordings import recording

from broker_spark.spark.tables.iceberg_commit import APP_ID, BATCH_ID
from broker_spark.spark.zeek_tables import ZeekTables
from broker_spark.zeek import LogField, LogSchema, standard_schema

pytestmark = [pytest.mark.spark, pytest.mark.lake, pytest.mark.timeout(600)]

HTTP = "zeek-logs-http-methods"


@pytest.fixture(scope="session")
def spark(lake: Any) -> Any:  # noqa: F811
    """The tests' session is the one with the connectors."""
    return lake


def delta_path(tmp: Path, key: str, path: str = "{path}") -> str:
    return f"delta.`{tmp}/delta/{key}/{path}`"


def tables(tmp: Path, key: str, table: str, **kw: Any) -> ZeekTables:
    return ZeekTables(checkpoint=str(tmp / f"cp-{key}"), table=table, quarantine=None, **kw)


def recordings() -> dict[str, tuple[list[tuple[str, bytes, str]], Any]]:
    """Both Broker recordings and the ZeroMQ one: their messages, and the logs they hold."""
    dns = "zeek-logs-dns-edns-ecs"
    return {
        "b1": (broker_messages(HTTP), recording(HTTP).writes),
        "b2": (broker_messages(dns), recording(dns).writes),
        "z": (zmq_log_messages(), ("conn", "http", "files")),
    }


def test_delta_tables_hold_the_parquet_paths_rows_of_every_recording(spark, db, tmp_path) -> None:  # noqa: F811
    """Both Broker recordings and the ZeroMQ one, in two batches each: every log's Delta
    table of the fast path (a path table), read by Delta's Spark reader, holds exactly the
    Parquet path's rows; Spark's Delta writer too (a catalog table; one recording: it is
    slow). Running the batches again adds nothing, and the fast path commits nothing."""
    for key, (messages, paths) in recordings().items():
        half = len(messages) // 2
        parquet = tables(tmp_path, key + "p", f"{db}.{key}_parquet_{{path}}")
        fast = tables(tmp_path, key + "d", delta_path(tmp_path, key), table_format="delta")
        ways = [parquet, fast]
        if key == "b1":
            slow = f"{db}.{key}_dspark_{{path}}"
            ways.append(tables(tmp_path, key + "s", slow, table_format="delta", spark_writer=True))
        for again in (False, True):  # the second time: Spark runs the batches again
            for writer in [fast] if again else ways:
                writer(batch_of(spark, messages[:half]), 0)
                writer(batch_of(spark, messages[half:], first=half), 1)
            if not again:
                versions = {p: DeltaTable(f"{tmp_path}/delta/{key}/{p}").version() for p in paths}
        for path in paths:
            expected = _every_row(spark, f"{db}.{key}_parquet_{path}")
            assert expected, (key, path)
            assert _every_row(spark, delta_path(tmp_path, key, path)) == expected, (key, path)
            if key == "b1":
                assert _every_row(spark, slow.format(path=path)) == expected, path
            table = DeltaTable(f"{tmp_path}/delta/{key}/{path}")
            assert table.version() == versions[path]  # nothing committed the second time
            assert table.transaction_version(fast.app_id) in (0, 1)  # its last batch
            assert table.metadata().partition_columns == ["day"]
            protocol = table.protocol()
            assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
        _skips_files_rightly(spark, f"{db}.{key}_parquet_conn", delta_path(tmp_path, key, "conn"))
        assert (
            DeltaTable(f"{tmp_path}/delta/{key}/conn").get_add_actions(True)["min.ts"].null_count
            == 0
        )


def _skips_files_rightly(spark: Any, parquet: str, delta: str) -> None:  # noqa: F811
    """Delta's reader, skipping files by the fast path's statistics, finds what the Parquet
    table holds for predicates on each row's own time and uid (a bound rounded the wrong way
    would lose the rows at the edges)."""
    rows = spark.table(parquet).select("ts", "uid", "id").collect()
    probes = sorted(rows, key=lambda r: r.ts)
    for r in {probes[0], probes[len(probes) // 2], probes[-1]}:
        for where in (
            f"ts = '{r.ts.isoformat()}'",
            f"ts >= '{r.ts.isoformat()}'",
            f"ts <= '{r.ts.isoformat()}'",
            f"uid = '{r.uid}'",
            f"id.orig_p = {r.id.orig_p}",
        ):
            want = spark.table(parquet).where(where).count()
            assert want > 0 and spark.table(delta).where(where).count() == want, where


def test_a_delta_catalog_table_gains_zeek_columns_and_is_fresh(spark, db, tmp_path) -> None:  # noqa: F811
    """A catalog table (created by the fast path at its database's folder): a site's new
    field becomes a column (older rows null), and the session that reads the table (not
    the batches') counts each commit without a REFRESH."""
    schema = standard_schema("conn")
    batches = spark.newSession()  # the session foreachBatch hands a batch in
    writer = tables(tmp_path, "cat", f"{db}.{{path}}", table_format="delta")
    writer(batch_of(batches, _conn_batch(schema, _conn_rows(3))), 0)
    assert spark.table(f"{db}.conn").count() == 3
    wider = LogSchema(schema.stream, schema.path, (*schema.fields, LogField.of("site", "string")))
    writer(batch_of(batches, _conn_batch(wider, _conn_rows(2, ["dc-1"])), first=2), 1)
    rows = spark.table(f"{db}.conn").orderBy("offset", "record").select("uid", "site").collect()
    assert [(r.uid, r.site) for r in rows] == FOLLOWED
    detail = spark.sql(f"DESCRIBE DETAIL {db}.conn").collect()[0]
    assert detail["format"] == "delta" and detail["partitionColumns"] == ["day"]


def test_a_delta_batch_cut_between_two_tables_is_finished_once(spark, db, tmp_path) -> None:  # noqa: F811
    """A batch that died after its first table's commit (a fault injected there), run again
    by the restarted query: both paths into Delta finish it, nothing doubled."""

    def die(table: str, batch_id: int) -> None:
        raise RuntimeError(f"killed after {table}")  # the injected fault

    messages = broker_messages(HTTP)
    rec = recording(HTTP)
    for key, extra in (("f", {}), ("s", {"spark_writer": True})):
        name = delta_path(tmp_path, key)
        with pytest.raises(Exception, match="killed after"):
            tables(tmp_path, key, name, table_format="delta", after_table=die, parallel=1)(
                batch_of(spark, messages), 3
            )
        tables(tmp_path, key, name, table_format="delta", **extra)(batch_of(spark, messages), 3)
        for path in rec.writes:
            keys = spark.table(delta_path(tmp_path, key, path)).select("offset", "record")
            assert keys.count() == keys.distinct().count() == len(rec.local_lines(path)), path


def _snapshots(spark: Any, table: str) -> int:  # noqa: F811
    return spark.table(f"{table}.snapshots").count()


def test_iceberg_tables_hold_the_parquet_paths_rows_of_every_recording(spark, db, tmp_path) -> None:  # noqa: F811
    """Every recording, in two batches: each log's Iceberg table of the fast path (pyiceberg
    into the catalog Spark is configured with), read by Iceberg's Spark reader, holds
    exactly the Parquet path's rows; Spark's Iceberg writer too (one recording). Running
    the batches again adds no snapshot; the batch ids are in the snapshots' summaries."""
    for key, (messages, paths) in recordings().items():
        half = len(messages) // 2
        parquet = tables(tmp_path, key + "p", f"{db}.{key}_parquet_{{path}}")
        fast = tables(tmp_path, key + "i", f"{ICEBERG}.{key}i.{{path}}", table_format="iceberg")
        ways = [parquet, fast]
        if key == "b1":
            slow = tables(
                tmp_path,
                key + "s",
                f"{ICEBERG}.{key}s.{{path}}",
                table_format="iceberg",
                spark_writer=True,
            )
            ways.append(slow)
        for again in (False, True):  # the second time: Spark runs the batches again
            for writer in [fast, *ways[2:]] if again else ways:
                writer(batch_of(spark, messages[:half]), 0)
                writer(batch_of(spark, messages[half:], first=half), 1)
            if not again:
                counts = {p: _snapshots(spark, f"{ICEBERG}.{key}i.{p}") for p in paths}
        for path in paths:
            expected = _every_row(spark, f"{db}.{key}_parquet_{path}")
            assert expected, (key, path)
            assert _every_row(spark, f"{ICEBERG}.{key}i.{path}") == expected, (key, path)
            assert _snapshots(spark, f"{ICEBERG}.{key}i.{path}") == counts[path], path
            if key == "b1":
                assert _every_row(spark, f"{ICEBERG}.{key}s.{path}") == expected, path
            partitions = spark.table(f"{ICEBERG}.{key}i.{path}.partitions").columns
            assert "partition" in partitions
        summary = spark.sql(
            f"SELECT summary FROM {ICEBERG}.{key}i.conn.snapshots ORDER BY committed_at DESC"
        ).first()["summary"]
        assert summary[APP_ID] == fast.app_id and summary[BATCH_ID] in ("0", "1")


def test_an_iceberg_table_gains_zeek_columns_and_is_fresh(spark, tmp_path) -> None:  # noqa: F811
    """A site's new field becomes a column of the Iceberg table (older rows null), and the
    reading session sees each commit without a REFRESH."""
    schema = standard_schema("conn")
    batches = spark.newSession()
    writer = tables(tmp_path, "ice", f"{ICEBERG}.evolve.{{path}}", table_format="iceberg")
    writer(batch_of(batches, _conn_batch(schema, _conn_rows(3))), 0)
    assert spark.table(f"{ICEBERG}.evolve.conn").count() == 3
    wider = LogSchema(schema.stream, schema.path, (*schema.fields, LogField.of("site", "string")))
    writer(batch_of(batches, _conn_batch(wider, _conn_rows(2, ["dc-1"])), first=2), 1)
    table = spark.table(f"{ICEBERG}.evolve.conn")
    rows = table.orderBy("offset", "record").select("uid", "site").collect()
    assert [(r.uid, r.site) for r in rows] == FOLLOWED
