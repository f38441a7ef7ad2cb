"""A Spark driver for tests/test_zeek_tables_restart.py: ``write_zeek_tables`` from a relay.

``python tables_driver.py RELAY WAREHOUSE CHECKPOINT [KILL_AFTER]`` writes every log the
relay holds into a table per log of the database ``zt`` (its files in WAREHOUSE), with
``trigger(availableNow=True)``, then prints ``done``. With KILL_AFTER (a table name), the
process group is killed with SIGKILL right after that table's write of the first batch: a
driver that dies between two tables' writes of one batch (the injected fault).
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    relay, warehouse, checkpoint = sys.argv[1:4]
    kill_after = sys.argv[4] if len(sys.argv) > 4 else None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from spark_fixtures import _start_session

    from broker_spark.spark.zeek_tables import ZeekTables, table_input_schema

    spark = _start_session(os.path.join(os.path.dirname(checkpoint), "spark-warehouse"))
    spark.sql(f"CREATE DATABASE IF NOT EXISTS zt LOCATION '{warehouse}'")

    def fault(table: str, batch_id: int) -> None:
        if kill_after is not None and table == f"zt.{kill_after}":
            print(f"killed after {table}", flush=True)
            os.killpg(os.getpgid(0), signal.SIGKILL)

    tables = ZeekTables(  # one table after the other: the kill falls between two of them
        checkpoint=checkpoint,
        table="zt.{path}",
        quarantine="zt.quarantine",
        after_table=fault,
        parallel=1,
    )
    query = (
        spark.readStream.format("broker")
        .option("relay", relay)
        .option("ssl.disable", "true")
        .option("startingOffsets", "earliest")
        .option("format", "zeek-logs")
        .schema(table_input_schema(messages=True))  # as write_zeek_tables reads
        .load()
        .writeStream.foreachBatch(tables)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
