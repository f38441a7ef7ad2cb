"""The Spark side of the demo: a quiet session, the windowed query and its foreachBatch sink.

The query reads Zeek's conn log with ``format("broker")`` and
``format=zeek-logs`` (typed columns: ``ts``, ``service``, ``orig_bytes``...), counts connections and bytes per service per 10-second event-time
window (with a watermark, so old windows' state is dropped) and hands every
micro-batch's updated rows to :class:`SummarySink`, which prints them and
writes them back to Broker twice with ``df.write.format("broker")``: to a
topic (as Zeek events ``demo_summary``) and into a data store.

Why ``foreachBatch``: an aggregation emits updates (``update`` output mode),
and the ``broker`` streaming sink takes appends only; and one sink feeding
both the topic and the store computes the aggregation once. The sink collects
the few updated rows (a handful of services times one or two windows) and
writes them as a small DataFrame, so the stateful batch is evaluated once.

Spark is imported here only, and only when the demo runs, so ``broker-spark
--help`` stays quick.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_spark.demo.table import SummaryRow, WindowTotals

__all__ = [
    "SUMMARY_DDL",
    "SummarySink",
    "build_session",
    "log4j_config",
    "read_conn_log",
    "windowed_totals",
]

#: Event-time windows and how late an event may be before its window is final.
WINDOW = "10 seconds"
WATERMARK = "10 seconds"
#: The rows the sink writes back: one per (window, service).
SUMMARY_DDL = (
    "window_start TIMESTAMP, window_end TIMESTAMP, service STRING, connections BIGINT, bytes BIGINT"
)
#: Where :meth:`SummarySink.warm_up` writes (nobody subscribes: the node drops it).
WARM_UP_TOPIC = "/demo/warm-up"
#: The Zeek event the summaries are published as.
SUMMARY_EVENT = "demo_summary"

#: Loggers that warn about routine things in this demo (start-up notes, per-query advice,
#: the size of the inline partitions of a first, big batch): errors only.
_QUIET_LOGGERS = {
    "native": "org.apache.hadoop.util.NativeCodeLoader",
    "utils": "org.apache.spark.util.Utils",
    "streaming": "org.apache.spark.sql.execution.streaming",
    "sources": "org.apache.spark.sql.execution.datasources",
    "scheduler": "org.apache.spark.scheduler",
}

_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def log4j_config(scratch: Path) -> Path:
    """A log4j2 configuration for the demo's session, written into ``scratch``.

    The project's ``conf/log4j2.properties`` when the package runs from a
    checkout (a console appender, warnings and up), else an equivalent
    base; plus :data:`_QUIET_LOGGERS` at error level, under keys of their own.
    """
    root = Path(__file__).resolve().parents[2]  # up from broker_spark/demo/: the checkout
    shipped = root / "conf" / "log4j2.properties"
    base = shipped.read_text(encoding="utf-8") if shipped.is_file() else _LOG4J
    lines = [base.rstrip("\n"), "", "# Added by broker-spark's demo."]
    for key, name in _QUIET_LOGGERS.items():
        lines += [f"logger.demo_{key}.name = {name}", f"logger.demo_{key}.level = error"]
    path = scratch / "log4j2.properties"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_session(master: str, log4j: Path) -> Any:
    """A SparkSession for the demo: no UI, no progress bars, 2 shuffle partitions, quiet logs.

    In local mode the workers run this interpreter (which has broker_spark)
    and everything binds to loopback; a cluster brings its own settings.
    """
    local = master.startswith("local")
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("broker-spark-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    )
    if local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    return builder.getOrCreate()


def windowed_totals(events: Any) -> Any:
    """Connections and bytes per service per 10-second window of the events' ``ts``."""
    from pyspark.sql import functions as F

    service = F.coalesce(F.nullif(F.col("service"), F.lit("")), F.lit("-")).alias("service")
    return (
        events.where(F.col("ts").isNotNull())
        .withWatermark("ts", WATERMARK)
        .groupBy(F.window("ts", WINDOW).alias("window"), service)
        .agg(
            F.count(F.lit(1)).alias("connections"),
            F.sum(
                F.coalesce(F.col("orig_bytes"), F.lit(0))
                + F.coalesce(F.col("resp_bytes"), F.lit(0))
            ).alias("bytes"),
        )
    )


def read_conn_log(spark: Any, options: dict[str, str], topic: str, learn: bool = False) -> Any:
    """Zeek's conn log as a streaming DataFrame with its typed columns (``learn``: ask a
    peered Zeek for its columns at load, as it may add some; else Zeek's standard ones)."""
    return (
        spark.readStream.format("broker")
        .options(**options)
        .option("topics", topic)
        .option("format", "zeek-logs")
        .option("logs", "conn")
        .option("schemaWait", "2" if learn else "0")
        .load()
    )


class SummarySink:
    """``foreachBatch`` target: print the updated windows, publish them, put them in the store.

    Runs on the driver (Spark calls it there), so its counters are the
    demo's own: ``written`` summaries and the per-window ``totals``.
    """

    def __init__(
        self,
        writer_options: dict[str, str],
        topic: str,
        store: str,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.writer_options = writer_options
        self.topic = topic
        self.store = store
        self.out = out
        self.totals = WindowTotals()
        self.written = 0
        self._lock = threading.Lock()
        self._closing = False

    def warm_up(self, spark: Any) -> None:
        """Write one row to a topic nobody reads, so Spark's first write is not a batch's.

        The first ``format("broker")`` write of a session starts Python
        workers and imports; done while the query starts, it overlaps with
        that instead of delaying the first micro-batch by seconds.
        """
        (
            spark.createDataFrame([("warm-up",)], "note STRING")
            .write.format("broker")
            .options(**self.writer_options)
            .option("topic", WARM_UP_TOPIC)
            .mode("append")
            .save()
        )

    def close(self, timeout: float) -> bool:
        """Write nothing more; wait up to ``timeout`` s for a call in progress (True: none left).

        Stopping a query while its ``foreachBatch`` function writes cuts the
        writes short (the topic has the batch, the store not) and Spark's
        stream thread can die with a noisy StackOverflowError. So the demo
        closes the sink first. Later batches are still collected: Spark
        fails a stateful batch whose ``foreachBatch`` leaves partitions unread
        (STATE_STORE_COMMIT_VALIDATION_FAILED), and collecting is quick.
        """
        self._closing = True
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        return True

    def __call__(self, df: Any, batch_id: int) -> None:
        with self._lock:
            rows = [
                SummaryRow(r.window.start, r.window.end, r.service, r.connections, r.bytes or 0)
                for r in df.collect()
            ]
            if rows and not self._closing:
                self._write(df.sparkSession, batch_id, rows)

    def _write(self, spark: Any, batch_id: int, rows: list[SummaryRow]) -> None:
        added, windows = self.totals.update(rows)
        if self.out is not None:
            for line in self.totals.render(batch_id, added, windows):
                self.out(line)
        small = spark.createDataFrame(
            [(r.start, r.end, r.service, r.connections, r.bytes) for r in rows], SUMMARY_DDL
        ).coalesce(1)
        (
            small.selectExpr(f"'{SUMMARY_EVENT}' AS event", "*")
            .write.format("broker")
            .options(**self.writer_options)
            .option("topic", self.topic)
            .option("format", "zeek")
            .mode("append")
            .save()
        )
        (
            small.selectExpr(
                "named_struct('service', service, 'window_start', window_start) AS key",
                "named_struct('connections', connections, 'bytes', bytes) AS value",
            )
            .write.format("broker")
            .options(**self.writer_options)
            .option("store", self.store)
            .mode("append")
            .save()
        )
        self.written += len(rows)
