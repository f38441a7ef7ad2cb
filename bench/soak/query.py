"""The soak's Spark query: Zeek's conn log from several relays into a sink keyed by position.

``python bench/soak/query.py RELAYS CHECKPOINT SINK``

A local driver (``local[2]``) reads ``format=zeek-logs``, ``logs=conn`` from
RELAYS (comma-separated ``host:port``: the soak's cutting proxies in front of
the relay nodes), from the earliest offset on a first start, then from its
checkpoint. Each micro-batch goes, in ``foreachBatch``, into a SQLite table
keyed by the record's position ``(relay, offset, record)``: a batch replayed
after a crash writes the same keys again and adds nothing, which is how a sink
gets exactly-once from a replayable source (as with Kafka's ``(partition,
offset)``). A record spooled twice, or read under two positions, would show as
its uid under two keys: that is what the soak's checks count as doubled.

It runs until SIGTERM (a clean stop) or SIGKILL (the chaos loop's).
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
CREATE TABLE IF NOT EXISTS batches (batch_id INTEGER, rows INTEGER, added INTEGER, at REAL);
"""


def write_batch(sink: Path, batch_id: int, rows: list[tuple[Any, ...]]) -> int:
    """Insert ``rows`` (relay, offset, record, uid) keyed by position; the rows added."""
    db = sqlite3.connect(sink, timeout=60)
    now = time.time()
    try:
        before = db.total_changes
        with db:
            db.executemany(
                "INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?, ?)", [(*r, now) for r in rows]
            )
            added = db.total_changes - before
            db.execute("INSERT INTO batches VALUES (?, ?, ?, ?)", (batch_id, len(rows), added, now))
        return added
    finally:
        db.close()


def main() -> int:
    relays, checkpoint, sink = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    db = sqlite3.connect(sink)
    db.executescript(SCHEMA)
    db.close()
    # Spark's Python workers run this interpreter (the project's venv), activated or not.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

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
    stream = (
        spark.readStream.format("broker")
        .option("relay", relays)
        .option("ssl.disable", "true")
        .option("format", "zeek-logs")
        .option("logs", "conn")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load()
        .select("relay", "offset", "record", "uid")
    )

    def each(df: Any, batch_id: int) -> None:
        rows = [tuple(r) for r in df.collect()]
        added = write_batch(sink, batch_id, rows)
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} batch {batch_id} rows {len(rows)} added {added}", flush=True)

    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="2 seconds")
        .start()
    )
    print("started", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1.0):
        if not query.isActive:
            print(f"query ended: {query.exception()}", flush=True)
            spark.stop()
            return 1
    query.stop()
    spark.stop()
    import shutil

    shutil.rmtree(warehouse, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
