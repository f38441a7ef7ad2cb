"""A Spark driver for the killed-driver tests: ``write_zeek_tables`` from a relay.

``python tables_driver.py RELAY WAREHOUSE CHECKPOINT [KILL_AFTER]`` writes every log the
relay holds into a table per log of the database ``zt`` (its files in WAREHOUSE), with
``trigger(availableNow=True)`` (run again until a run commits no batch), then prints
``done``. With KILL_AFTER (a table name), the process group is killed with SIGKILL right after that table's write of the first batch: a
driver that dies between two tables' writes of one batch (the injected fault).

With ``LAKE_FOLDER`` in the environment (tests/test_lake_restart.py), the session has the
Delta and Iceberg connectors (:func:`lake_fixtures.lake_conf`, the catalog ``lake`` in that
folder) and each batch goes four ways, one after the other: Delta by the fast path (path
tables under WAREHOUSE/delta) and by Spark's writer (under WAREHOUSE/dspark), Iceberg by the fast
path (``lake.ifast.{path}``) and by Spark's writer (``lake.ispark.{path}``). KILL_AFTER
``batch`` kills the group once all four have committed the first batch, before Spark
commits it to the checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

#: The four ways of the lake mode: table names and ZeekTables' settings.
LAKE_WAYS: dict[str, tuple[str, dict[str, Any]]] = {
    "delta": ("delta.`{warehouse}/delta/{{path}}`", {"table_format": "delta"}),
    # a path table: the driver's catalog is in memory, and a restarted driver's would not
    # know a catalog table of the first (a metastore, Unity Catalog would)
    "delta-spark": (
        "delta.`{warehouse}/dspark/{{path}}`",
        {"table_format": "delta", "spark_writer": True},
    ),
    "iceberg": ("lake.ifast.{{path}}", {"table_format": "iceberg"}),
    "iceberg-spark": ("lake.ispark.{{path}}", {"table_format": "iceberg", "spark_writer": True}),
}


def kill_group(why: str) -> None:
    print(why, flush=True)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def main() -> None:
    relay, warehouse, checkpoint = sys.argv[1:4]
    kill_after = sys.argv[4] if len(sys.argv) > 4 else None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from spark_fixtures import _start_session

    from broker_spark.spark.zeek_tables import ZeekTables, table_input_schema

    lake = os.environ.get("LAKE_FOLDER")
    conf = None
    if lake:
        from lake_fixtures import lake_conf

        conf = lake_conf(lake)
    spark = _start_session(os.path.join(os.path.dirname(checkpoint), "spark-warehouse"), conf)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS zt LOCATION '{warehouse}'")

    def fault(table: str, batch_id: int) -> None:
        if kill_after is not None and table == f"zt.{kill_after}":
            kill_group(f"killed after {table}")

    if lake:
        writers = [
            ZeekTables(
                checkpoint=os.path.join(checkpoint, "tables", way),
                table=name.format(warehouse=warehouse),
                quarantine=None,
                **settings,
            )
            for way, (name, settings) in LAKE_WAYS.items()
        ]

        def each_way(batch: Any, batch_id: int) -> None:
            for write in writers:
                write(batch, batch_id)
            if kill_after == "batch" and batch_id == 0:
                kill_group("killed after batch 0's tables")

        tables: Any = each_way
    else:
        tables = ZeekTables(  # one table after the other: the kill falls between two of them
            checkpoint=checkpoint,
            table="zt.{path}",
            quarantine="zt.quarantine",
            after_table=fault,
            parallel=1,
        )

    def run_once() -> None:
        query = (
            spark.readStream.format("broker")
            .option("relay", relay)
            .option("ssl.disable", "true")
            .option("startingOffsets", "earliest")
            .option("format", "zeek-logs")
            # as write_zeek_tables reads: a row per partition, read by the writing tasks
            .option("deferredRows", table_input_schema(runs=True, messages=True).json())
            .load()
            .writeStream.foreachBatch(tables)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")

    def batches_done() -> int:
        commits = os.path.join(checkpoint, "commits")
        return len([n for n in os.listdir(commits) if n.isdigit()]) if os.path.isdir(commits) else 0

    # Spark 4.0 and 4.1 run availableNow as one batch (docs/spark.md): after a kill, that
    # batch is the one run again, and the logs that came since wait for the next run, as a
    # scheduled job's would; so the driver runs the query until a run commits no batch
    done = -1
    while done != batches_done():
        done = batches_done()
        run_once()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
