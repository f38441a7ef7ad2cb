"""The Spark side of bench/kafka_path.py: each path's queries into a table per log, and what
the tables hold once they have.

- **ours**: one query, ``write_zeek_tables`` over the relay node (every log, a table each:
  what the docs tell users to run);
- **Kafka**: a query per log, as users of a topic per log run them: Spark's Kafka source
  (``subscribe`` the log's topic, ``startingOffsets`` earliest, everything else at its
  default), ``from_json`` into the log's typed schema (:func:`parse_zeek_json`, the columns
  a relay stream holds), the Kafka record's topic, timestamp and offset as the table's
  ``topic``, ``received_at`` and ``offset``, appended by Spark's own file sink
  (``toTable``, exactly once through its ``_spark_metadata``) into a table of the same
  columns and ``day`` partitions as ours.

Both run with Spark's default trigger (a batch as soon as the last ended).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
from _zeek_tables import TABLES_MIX
from spark_stream import _progress_time, _session


def session(jars: list[str]) -> Any:
    """The bench's local[2] session (spark_stream's), with Spark's Kafka source on its path."""
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    spark = _session()
    # Ctrl-C raises KeyboardInterrupt at once, for the bench's finally blocks to stop the
    # queries and the collectors (PySpark's own handler cancels Spark's jobs over py4j from
    # inside the signal, and prints py4j's re-entrancy errors)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # an idle query reports every 0.2 s (Spark's default: 10 s), so a run sees its end soon
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200")
    return spark


def database(spark: Any, folder: Path, name: str) -> str:
    spark.sql(f"CREATE DATABASE {name} LOCATION '{folder / name}'")
    return name


def ours(spark: Any, relay_port: int, db: str, checkpoint: Path) -> dict[str, Any]:
    """``write_zeek_tables`` reading the relay node: one query for every log's table."""
    from broker_spark.spark.zeek_tables import write_zeek_tables

    source = (
        spark.readStream.format("broker")
        .option("relay", f"127.0.0.1:{relay_port}")
        .option("ssl.disable", "true")
        .option("startingOffsets", "earliest")
    )
    query = write_zeek_tables(source, str(checkpoint), table=db + ".{path}", quarantine=None)
    return dict.fromkeys(TABLES_MIX, query)


def kafka_table_columns(spark: Any, path: str) -> Any:
    """The columns of ours' table of ``path``: the log's typed columns, then what is kept of
    each record's origin, then ``day``."""
    from pyspark.sql import functions as F

    from broker_spark.spark.zeek_schema import parse_zeek_json

    value = F.col("value").cast("string")
    return [
        parse_zeek_json(value, path).alias("r"),
        F.col("topic"),
        F.lit(None).cast("string").alias("sender"),
        F.col("timestamp").alias("received_at"),
        F.col("offset"),
    ]


def kafka(spark: Any, bootstrap: str, prefix: str, db: str, checkpoint: Path) -> dict[str, Any]:
    """A query per log: the log's topic, ``from_json``, appended to the log's table."""
    from pyspark.sql import functions as F

    queries = {}
    for path in TABLES_MIX:
        frame = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", prefix + path)
            .option("startingOffsets", "earliest")
            .load()
            .select(*kafka_table_columns(spark, path))
            .select("r.*", "topic", "sender", "received_at", "offset")
            .withColumn("day", F.to_date("ts"))
        )
        queries[path] = (
            frame.writeStream.format("parquet")
            .partitionBy("day")
            .option("checkpointLocation", str(checkpoint / path))
            .toTable(f"{db}.{path}")
        )
    return queries


def wait_quiet(queries: list[Any], since: float, quiet: float, timeout: float) -> None:
    """Until every query has been idle for ``quiet`` seconds after ``since`` (the producer's
    end): no batch running, none with rows ended in the last ``quiet`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for q in queries:
            if q.exception() is not None:
                raise RuntimeError(f"a query failed: {q.exception()}")
        last = max([since] + [end for q in queries for end in commit_times(q)])
        busy = any(q.status["isTriggerActive"] for q in queries)
        if not busy and time.time() - last >= quiet:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the queries did not settle in {timeout:.0f} s")


def commit_times(query: Any) -> list[float]:
    """When each of the query's batches that read rows ended (its commit), in order."""
    return [_progress_time(p) for p in query.recentProgress if p["numInputRows"]]


def stop(queries: dict[str, Any]) -> None:
    for q in {id(q): q for q in queries.values()}.values():
        q.stop()


def _files(spark: Any, table: str) -> list[Path]:
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'")
    root = Path(location.first()["data_type"].removeprefix("file:"))
    return [
        f
        for f in root.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts)
    ]


def contents(spark: Any, db: str) -> dict[str, dict[str, int]]:
    """Each table's rows and distinct uids (a uid is a record of the run: more rows than uids
    are records held twice); a table that no record reached has none."""
    out = {}
    for path in TABLES_MIX:
        if not spark.catalog.tableExists(f"{db}.{path}"):  # not one record of the log came
            out[path] = {"rows": 0, "distinct": 0}
            continue
        row = spark.sql(f"SELECT count(*) AS n, count(DISTINCT uid) AS d FROM {db}.{path}").first()
        out[path] = {"rows": int(row["n"]), "distinct": int(row["d"])}
    return out


def latencies(spark: Any, db: str, queries: dict[str, Any]) -> np.ndarray:
    """Seconds from each row's send (its ``ts``) to the commit of the batch that wrote it: a
    data file is written during its batch, so its batch is the first to end after the file's
    modification time."""
    import pyarrow.parquet as pq

    out = []
    for path, query in queries.items():
        if not spark.catalog.tableExists(f"{db}.{path}"):
            continue
        ends = np.array(sorted(commit_times(query)))
        for f in _files(spark, f"{db}.{path}"):
            at = np.searchsorted(ends, f.stat().st_mtime)
            committed = ends[min(at, len(ends) - 1)]
            ts = pq.read_table(f, columns=["ts"]).column("ts").to_numpy()
            out.append(committed - ts.astype("datetime64[us]").astype(np.int64) / 1e6)
    return np.concatenate(out) if out else np.array([])


def percentiles(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {}
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50_ms": round(p50 * 1000, 1), "p99_ms": round(p99 * 1000, 1)}


def utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S")
