"""A micro-batch appended to an Iceberg table by Spark's Iceberg writer, once.

Spark's writer path into Iceberg (``spark_writer=True``, or without pyiceberg):
Iceberg's batch writes have no transaction ids as Delta's do, so the writer marks
each snapshot it makes with the query's identity and the batch id
(``snapshot-property.*`` write options: the keys :mod:`.iceberg_commit` uses) and,
before writing, looks for that mark in the table's snapshots: a batch run again
after the table's commit (a driver killed before the checkpoint's) writes nothing.
No Python library is needed beyond PySpark: the table's ``snapshots`` metadata
table says it all.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_spark.spark.tables.iceberg_commit import APP_ID, BATCH_ID
from broker_spark.spark.tables.stage import DAY

__all__ = ["append_once"]

log = logging.getLogger(__name__)


def append_once(spark: Any, name: str, df: Any, app_id: str, batch_id: int) -> bool:
    """Append ``df`` to Iceberg table ``name`` as batch ``batch_id`` of ``app_id`` (the
    table created, by day, or given ``df``'s new columns first); False when the table holds
    the batch already."""
    from pyspark.sql import functions as F

    properties = {
        f"snapshot-property.{APP_ID}": app_id,
        f"snapshot-property.{BATCH_ID}": str(batch_id),
    }
    if not spark.catalog.tableExists(name):
        df.writeTo(name).using("iceberg").partitionedBy(F.col(DAY)).options(**properties).create()
        return True
    done = (
        spark.table(f"{name}.snapshots")
        .where(F.col("summary")[APP_ID] == app_id)
        .agg(F.max(F.col("summary")[BATCH_ID].cast("long")))
        .first()[0]
    )
    if done is not None and done >= batch_id:
        log.info("batch %d is in Iceberg table %s already: skipped", batch_id, name)
        return False
    present = {f.name for f in spark.table(name).schema.fields}
    new = [f for f in df.schema.fields if f.name not in present]
    if new:
        spec = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({spec})")
    df.writeTo(name).options(**properties).append()
    return True
