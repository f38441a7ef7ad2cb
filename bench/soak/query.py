"""The soak's Spark queries: Zeek's conn log from relays and from a receiver into one sink.

``python bench/soak/query.py RELAYS CHECKPOINT SINK [LISTEN SPOOL CHECKPOINT2]``

A local driver (``local[2]``) runs one or two streaming queries reading
``format=zeek-logs``, ``logs=conn``, from the earliest offset on a first start,
then from their checkpoints:

* from RELAYS (comma-separated ``host:port``: the soak's cutting proxies in
  front of the relay nodes), checkpointed in CHECKPOINT;
* with LISTEN (``host:port``), SPOOL and CHECKPOINT2, a second query in the same
  SparkSession: ``listen`` with ``spoolPath=SPOOL``, so the reader starts (or
  finds again, after a restart of this driver) the receiver process of SPOOL,
  which owns the Broker endpoint listening on LISTEN and the spool, in a session
  of its own.

Each micro-batch goes, in ``foreachBatch``, into a SQLite table keyed by the
record's position ``(relay, offset, record)`` (``relay`` is the relay's id, or
:data:`RECEIVER_SOURCE` for the receiver's spool): a batch replayed after a
crash writes the same keys again and adds nothing, which is how a sink gets
exactly-once from a replayable source (as with Kafka's ``(partition,
offset)``). A record spooled twice, or read under two positions, would show as
its uid under two keys: that is what the soak's checks count as doubled. The
table ``batches`` keeps each batch's size and time, by query (``source``).

It runs until SIGTERM (a clean stop: the queries stop, the receiver goes on
until the soak stops it) or SIGKILL (the chaos loop's).
``failOnDataLoss=false``: what a relay's retention dropped before it was read is
skipped with a warning, and the soak's checks count it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    relay TEXT NOT NULL, offset INTEGER NOT NULL, record INTEGER NOT NULL, uid TEXT NOT NULL,
    written REAL NOT NULL, PRIMARY KEY (relay, offset, record)
);
CREATE INDEX IF NOT EXISTS rows_uid ON rows (uid);
CREATE TABLE IF NOT EXISTS batches (
    batch_id INTEGER, rows INTEGER, added INTEGER, at REAL, source TEXT NOT NULL
);
"""

#: The ``relay`` of the rows the receiver's query writes (its spool has no relay's id).
RECEIVER_SOURCE = "receiver"


def write_batch(
    sink: Path, batch_id: int, rows: list[tuple[Any, ...]], source: str = "relays"
) -> int:
    """Insert ``rows`` (relay, offset, record, uid) keyed by position; the rows added.
    ``source`` names the query (batch ids are per query)."""
    db = sqlite3.connect(sink, timeout=60)
    now = time.time()
    try:
        before = db.total_changes
        with db:
            db.executemany(
                "INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?, ?)", [(*r, now) for r in rows]
            )
            added = db.total_changes - before
            db.execute(
                "INSERT INTO batches VALUES (?, ?, ?, ?, ?)",
                (batch_id, len(rows), added, now, source),
            )
        return added
    finally:
        db.close()


def main() -> int:
    relays, checkpoint, sink = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    receiver = sys.argv[4:7] if len(sys.argv) >= 7 else None
    db = sqlite3.connect(sink)
    db.executescript(SCHEMA)
    db.close()
    # Spark's Python workers run this interpreter (the project's venv), activated or not.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from broker_spark.spark import register

    warehouse = tempfile.mkdtemp(prefix="soak-warehouse-")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("broker-spark-soak")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.streaming.stopTimeout", "20s")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Djava.io.tmpdir={tempfile.gettempdir()} -XX:-UsePerfData",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    def conn(**options: str) -> Any:
        reader = spark.readStream.format("broker")
        for key, value in {
            **options,
            "ssl.disable": "true",
            "format": "zeek-logs",
            "logs": "conn",
            "startingOffsets": "earliest",
            "failOnDataLoss": "false",
        }.items():
            reader = reader.option(key, value)
        return reader.load()

    def sink_of(source: str) -> Any:
        def each(df: Any, batch_id: int) -> None:
            rows = [tuple(r) for r in df.collect()]
            added = write_batch(sink, batch_id, rows, source)
            stamp = time.strftime("%H:%M:%S")
            print(f"{stamp} {source} batch {batch_id} rows {len(rows)} added {added}", flush=True)

        return each

    def start(stream: Any, source: str, where: str) -> Any:
        return (
            stream.writeStream.foreachBatch(sink_of(source))
            .queryName(f"soak-{source}")
            .option("checkpointLocation", where)
            .trigger(processingTime="2 seconds")
            .start()
        )

    queries = [start(conn(relay=relays).select("relay", "offset", "record", "uid"), "relays",
                     checkpoint)]  # fmt: skip
    if receiver is not None:
        listen, spool, checkpoint2 = receiver
        stream = conn(listen=listen, spoolPath=spool).select(
            F.lit(RECEIVER_SOURCE).alias("relay"), "offset", "record", "uid"
        )
        queries.append(start(stream, RECEIVER_SOURCE, checkpoint2))
    print("started", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1.0):
        for query in queries:
            if not query.isActive:
                print(f"query {query.name} ended: {query.exception()}", flush=True)
                spark.stop()
                return 1
    for query in queries:
        query.stop()
    spark.stop()
    import shutil

    shutil.rmtree(warehouse, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
