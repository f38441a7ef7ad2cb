"""Spark end to end: Zeek events into a streaming query, and a DataFrame out to a subscriber.

Usage: ``python bench/spark_stream.py [--quick] [--json] [--seconds S] [--rows N]``

What is measured, on a local SparkSession (``local[2]``), in one run:

- **read**: a publisher *process* publishes small Zeek events (``publish_batch``
  of 1,000, as fast as the peering lets it) to the query's endpoint, which
  peers with it; the query is ``readStream.format("broker")`` (default schema:
  ``topic``, ``data`` as Zeek JSON, ``sender``, ``received_at``, ``offset``)
  into the ``noop`` sink with a processing-time trigger. Sustained rows per
  second over the batches that carried data, and the delay from publish to
  the end of the batch that held the row, for the oldest and the newest row
  of each batch (the publisher logs its clock every 1,000 messages; spool
  offsets are dense and in publish order, so a batch's offsets name its
  rows). Run three times: Spark's defaults (``partitionData=auto``: in this
  local session the tasks show they run in the driver's JVM after the first
  batch and read the reader's spool from then on), partitions carrying their
  records (``inline``, what a cluster gets) and a named shared spool (``spool``,
  received in the reader's own process: ``receiver=false``). Without a
  ``spoolPath`` (the first two) the spool is private, as by default.
  A third run paces the publisher at 20,000 events/s, below what the query
  keeps up with, for the delay of a query that is not saturated (a
  saturated one's delay is its backlog). A fourth publishes the same events
  pre-encoded (``publish_encoded`` of payloads made from one template), as
  a Zeek node does, whose C++ encoding costs none of the 2 cores: the
  Python encoding in the publisher is a third of the CPU of the other runs.
- **limits**, measured in the same session, into the same sink:
  ``rate-micro-batch`` (Spark's own source, no Python) with batches of
  10,000,000 rows back to back: what the JVM manages here; and a *null Python
  source*: a Python streaming data source whose partitions yield pre-built Arrow
  batches of the reader's default schema (1,000,000 and 4,000,000 rows a batch),
  the most any pure-Python source can deliver through Spark's Python data source
  API here; at 1,000,000 rows a batch, also of the read's own rows (the publisher's
  events, topic and an endpoint id's length of sender: ``_null_source``'s
  ``rows=bench``). Every read figure is given as a share of that same rows' limit,
  and, in brackets, of the tiny event's.
- **write**: ``spark.range(N)`` as ``topic``, ``n``, ``uid``, ``x`` columns (a
  vector per row) written with ``df.write.format("broker")`` to a subscribing
  endpoint in another process; rows per second from the start of ``save()``
  until it returned (every task waits for the subscriber's acknowledgement).

Before measuring, one read and one write run unmeasured: the JVM's JIT
compiler spends more CPU than the query itself in a session's first minute.
Every run also reports the CPU each process used per row (from ``/proc``):
publisher or subscriber, the reader's driver-side process (endpoint, spool,
planning), the Python workers that convert or encode rows, and the JVM. On 2
cores their sum bounds the rate: 2,000,000 / (microseconds per row).

Settings: Spark's defaults, except what a local test session needs. Writers
get Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows
(10,000 by default; 100,000 measured the same); the reader yields one Arrow
batch per partition, of at most ``maxRecordsPerPartition`` rows (100,000).

``--quick`` shortens everything (a smoke test); ``--json`` prints the figures
as JSON instead of a Markdown table.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import broker_spark as broker  # noqa: E402
from broker_spark.config import BrokerOptions, Configuration  # noqa: E402

TOPIC = "zeek/bench/"
TRIGGER = "500 milliseconds"
BATCH = 1000
MARK_EVERY = 1000
PACED_RATE = 20_000.0


def _config() -> Configuration:
    return Configuration(BrokerOptions(disable_ssl=True, publisher_buffer_size=8192))


# --- the processes on the Broker side ---------------------------------------------------------


_MARKER = 0x0102030405060708


#: The event head's ``count 1`` (format, event), made once: a publisher builds only what varies.
_ONE = broker.Count(1)


def _event(i: int) -> tuple:
    return (_ONE, _ONE, ("conn_seen", (broker.Count(i), "CHhAvVGS1DHFjwGM9")))


def _preencoded(first: int, count: int) -> list[tuple[str, bytes]]:
    """The events ``first`` to ``first + count - 1`` as Broker binary, from one template."""
    from broker_spark.data.binary import encode

    template = encode(_event(_MARKER))
    at = template.index(_MARKER.to_bytes(8, "big"))
    head, tail = template[:at], template[at + 8 :]
    topic = TOPIC + "conn"
    return [(topic, head + i.to_bytes(8, "big") + tail) for i in range(first, first + count)]


def _publisher(conn: Any, seconds: float, rate: float | None = None, raw: bool = False) -> None:
    """Listen, wait for the query to subscribe, publish events for ``seconds``; log the clock.

    As fast as the peering takes them, or ``rate`` events per second. ``raw``
    publishes the events' Broker binary (as a Zeek node would, whose encoding
    costs no Python time) instead of encoding each in Python with ``publish_batch``.
    """

    with broker.Endpoint(_config()) as ep:
        conn.send(ep.listen("127.0.0.1", 0))
        while not ep.peer_subscriptions():
            time.sleep(0.01)
        conn.send("subscribed")
        marks: list[tuple[int, float]] = [(0, time.time())]
        sent = 0
        began = time.monotonic()
        stop = began + seconds
        topic = TOPIC + "conn"
        size = BATCH if rate is None else max(1, min(BATCH, int(rate / 100)))
        while time.monotonic() < stop:
            if rate is not None:
                ahead = began + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            if raw:
                ep.publish_encoded(_preencoded(sent, size))
            else:
                ep.publish_batch(*[(topic, _event(i)) for i in range(sent, sent + size)])
            sent += size
            if sent % MARK_EVERY < size:
                marks.append((sent, time.time()))
        conn.send((sent, marks))
        conn.recv()  # the query has read everything


def _subscriber(conn: Any, expected: int) -> None:
    """Listen, count what arrives on the output topic, report the rate."""

    with broker.Endpoint(_config()) as ep:
        sub = ep.make_raw_subscriber(["bench/out"], qsize=8192)
        conn.send(ep.listen("127.0.0.1", 0))
        got, first, last = 0, 0.0, 0.0
        while got < expected:
            items = sub.take(65536, 60.0)
            if not items:
                break
            if not first:
                first = time.time()
            got += len(items)
            last = time.time()
        conn.send((got, first, last))
        sub.close()


# --- where the CPU goes -------------------------------------------------------------------------


def _role(cmd: str, on_executor: bool = False) -> str:
    """What a process is, from its command line (``on_executor``: an executor JVM is among
    its ancestors, as for the Python workers of a cluster's executors)."""
    if "CoarseGrainedExecutorBackend" in cmd:
        return "executor JVMs"
    if "deploy.master.Master" in cmd or "deploy.worker.Worker" in cmd:
        return "cluster daemons (master, workers)"
    if on_executor:
        return "executors' python workers"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "python_streaming_source_runner" in cmd:
        return "reader (driver side)"
    if "pyspark.worker" in cmd:
        return "python workers (read/write)"
    if "multiprocessing" in cmd:
        return "publisher/subscriber"
    if "pyspark" in cmd:
        return "python workers (planning)"
    return "bench (driver, sampler)"


class CpuSampler:
    """CPU seconds used by this process and its descendants while running, by role.

    Reads ``/proc`` every 0.2 s (Linux only; elsewhere it reports nothing): a
    process that ends between two looks loses at most its last 0.2 s.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[float, str]] = {}
        self._base: dict[int, float] = {}
        self._on_executor: set[int] = set()  # processes an executor JVM started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _look(self) -> dict[int, tuple[float, str]]:
        stats: dict[int, tuple[int, float]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(name)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / self._tick)
        ours = {os.getpid()}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _) in stats.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    grew = True
        out = {}
        for pid in ours:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out[pid] = (stats[pid][1], cmd)
        for pid in out:  # under an executor JVM (a cluster's): counted as the executors' work
            parent = stats[pid][0]
            while parent in out and parent not in self._on_executor:
                if "CoarseGrainedExecutorBackend" in out[parent][1]:
                    self._on_executor.add(pid)
                    break
                parent = stats[parent][0]
            else:
                if parent in self._on_executor:
                    self._on_executor.add(pid)
        return out

    def _remember(self, looked: dict[int, tuple[float, str]]) -> None:
        for pid, (cpu, cmd) in looked.items():
            if not cmd and pid in self._seen:  # an exited process: keep what it was
                cmd = self._seen[pid][1]
            self._seen[pid] = (cpu, cmd)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._remember(self._look())

    def __enter__(self) -> CpuSampler:
        if os.path.isdir("/proc"):
            first = self._look()
            self._base = {pid: cpu for pid, (cpu, _) in first.items()}
            self._remember(first)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._remember(self._look())

    def by_role(self, classify: Callable[[str], str] | None = None) -> dict[str, float]:
        """CPU seconds by role: :func:`_role`'s, or ``classify``'s of each command line."""
        roles: dict[str, float] = {}
        for pid, (cpu, cmd) in self._seen.items():
            used = cpu - self._base.get(pid, 0.0)
            if used > 0:
                role = classify(cmd) if classify else _role(cmd, pid in self._on_executor)
                roles[role] = roles.get(role, 0.0) + used
        return dict(sorted(roles.items(), key=lambda kv: -kv[1]))


# --- Spark -------------------------------------------------------------------------------------


def _session(conf: dict[str, str] | None = None) -> Any:
    """The bench's local session; ``conf``: more settings (the table connectors')."""
    from broker_spark.spark.java import require_java

    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    # the workers import the package and the benchmarks' helpers (the null source) by name
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "bench"), path) if p
    )
    from pyspark.sql import SparkSession

    # the catalog's warehouse in a directory of the run's own (Spark's default is
    # ./spark-warehouse, left behind in whatever directory the bench ran from)
    warehouse = tempfile.mkdtemp(prefix="bench-warehouse-")
    atexit.register(shutil.rmtree, warehouse, True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("broker-spark-bench")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
        .config(map=conf or {})
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _progress_time(p: dict) -> float:
    start = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + p["durationMs"].get("triggerExecution", 0) / 1000


def _interpolate(marks: list[tuple[int, float]], index: int) -> float:
    """When message ``index`` was published (linear between the logged marks)."""
    lo, hi = 0, len(marks) - 1
    if index >= marks[hi][0]:
        return marks[hi][1]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if marks[mid][0] <= index:
            lo = mid
        else:
            hi = mid
    (n0, t0), (n1, t1) = marks[lo], marks[hi]
    return t0 + (t1 - t0) * (index - n0) / max(1, n1 - n0)


def _sustained(progress: list[dict]) -> tuple[float, int, float]:
    """Rows per second over the batches that had rows (first start to last end)."""
    busy = [p for p in progress if p["numInputRows"]]
    if not busy:
        return 0.0, 0, 0.0
    rows = sum(p["numInputRows"] for p in busy)
    start = _progress_time(busy[0]) - busy[0]["durationMs"].get("triggerExecution", 0) / 1000
    elapsed = _progress_time(busy[-1]) - start
    return rows / elapsed, rows, elapsed


def _receive(conn: Any, proc: Any, timeout: float = 300.0) -> Any:
    """The next message from a Broker-side process; fails if it died or fell silent (a bare
    ``recv`` would wait forever, holding the benchmark lock)."""
    deadline = time.monotonic() + timeout
    while not conn.poll(0.5):
        if not proc.is_alive():
            raise RuntimeError(f"the {proc.name} process exited (code {proc.exitcode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing from the {proc.name} process in {timeout:.0f} s")
    return conn.recv()


def bench_read(
    spark: Any, seconds: float, partition_data: str, rate: float | None = None, raw: bool = False
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(
        target=_publisher, args=(theirs, seconds, rate, raw), daemon=True, name="publisher"
    )
    proc.start()
    port = _receive(ours, proc, 60.0)
    spool = tempfile.mkdtemp(prefix="bench-spool-")
    reader = (
        spark.readStream.format("broker")
        .option("topics", TOPIC)
        .option("peer", f"127.0.0.1:{port}")
        .option("ssl.disable", "true")
        .option("partitionData", partition_data)
    )
    if partition_data == "spool":  # a named spool, received in the reader's own process
        reader = reader.option("spoolPath", spool).option("receiver", "false")
    sampler = CpuSampler().__enter__()
    query = reader.load().writeStream.format("noop").trigger(processingTime=TRIGGER).start()
    try:
        assert _receive(ours, proc) == "subscribed"
        sent, marks = _receive(ours, proc, seconds + 120.0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = sum(p["numInputRows"] for p in query.recentProgress)
            if done >= sent or query.exception() is not None:
                break
            time.sleep(0.2)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        progress = list(query.recentProgress)
    finally:
        query.stop()
        with contextlib.suppress(OSError):  # the publisher may be gone
            ours.send("done")
        proc.join(10)
        sampler.__exit__()
        shutil.rmtree(spool, ignore_errors=True)
    rate, rows, elapsed = _sustained(progress)
    oldest, newest = [], []
    for p in progress:
        if not p["numInputRows"]:
            continue
        src = p["sources"][0]
        start = _offset_of(src["startOffset"])
        end = _offset_of(src["endOffset"])
        finished = _progress_time(p)
        oldest.append(finished - _interpolate(marks, start))
        newest.append(finished - _interpolate(marks, end - 1))
    return {
        "partition_data": partition_data,
        "paced_rate": rate,
        "published": sent,
        "publish_rate": sent / max(1e-9, marks[-1][1] - marks[0][1]),
        "rows": rows,
        "rows_per_s": rate,
        "seconds": elapsed,
        "batches": len(oldest),
        "delay_oldest_median_s": statistics.median(oldest) if oldest else None,
        "delay_oldest_max_s": max(oldest) if oldest else None,
        "delay_newest_median_s": statistics.median(newest) if newest else None,
        "cpu_us_per_row": _per_row(sampler.by_role(), sent),
    }


def _offset_of(reported: Any) -> int:
    """A progress report's offset: JSON text on Spark 4.2 and later, the Python dict's
    ``repr`` on 4.0 and 4.1 (``{'offset': 5}``), absent (or JSON ``null``) before the
    first batch: a fresh spool's first offset, 0."""
    if not reported or str(reported) == "null":
        return 0
    match = re.search(r"offset\W+(\d+)", str(reported))
    if match is None:
        raise ValueError(f"no offset in the progress report's {reported!r}")
    return int(match.group(1))


def _per_row(roles: dict[str, float], rows: int) -> dict[str, float]:
    """CPU microseconds per row by role (all of a run, start-up and draining included)."""
    return {role: round(cpu * 1e6 / max(1, rows), 2) for role, cpu in roles.items()}


def run_to_end(query: Any, sampler: Any, timeout: float) -> list[dict]:
    """The progress of an ``availableNow`` query once it has read everything; stops the query
    and the CPU sampler whatever happens, and fails if the query did."""
    try:
        query.awaitTermination(timeout)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        return list(query.recentProgress)
    finally:
        query.stop()
        sampler.__exit__()


def _run_for(query: Any, seconds: float) -> dict[str, Any]:
    try:
        time.sleep(seconds)
        progress = list(query.recentProgress)
    finally:
        query.stop()
    rate, rows, elapsed = _sustained(progress[1:])  # the first batch warms up
    return {"rows": rows, "rows_per_s": rate, "seconds": elapsed}


def bench_rate_limit(spark: Any, seconds: float, rows_per_batch: int) -> dict[str, Any]:
    """``rate-micro-batch`` batches back to back: the JVM's own limit here."""
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .load()
        .writeStream.format("noop")
        .trigger(processingTime="0 seconds")
        .start()
    )
    return {"rows_per_batch": rows_per_batch, **_run_for(query, seconds)}


def bench_null_source(
    spark: Any, seconds: float, rows_per_batch: int, rows: str = "small"
) -> dict[str, Any]:
    """A Python streaming source that yields pre-built Arrow batches of the reader's default
    schema, two partitions a batch: what any pure-Python source can deliver at most. ``rows``:
    ``bench``, the rows the read gives (its publisher's events, topic and a sender as long as
    an endpoint's id: the same rows' limit), or ``small``, a tiny event."""
    from _null_source import NullSource

    spark.dataSource.register(NullSource)
    query = (
        spark.readStream.format("bench-null")
        .option("rowsPerBatch", str(rows_per_batch))
        .option("rows", rows)
        .load()
        .writeStream.format("noop")
        .trigger(processingTime="0 seconds")
        .start()
    )
    return {"rows_per_batch": rows_per_batch, "rows_shape": rows, **_run_for(query, seconds)}


def bench_write(spark: Any, rows: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_subscriber, args=(theirs, rows), daemon=True, name="subscriber")
    proc.start()
    port = _receive(ours, proc, 60.0)
    df = spark.range(rows, numPartitions=2).selectExpr(
        "'bench/out' AS topic",
        "id AS n",
        "'CHhAvVGS1DHFjwGM9' AS uid",
        "CAST(id AS DOUBLE) * 0.5 AS x",
    )
    start = time.time()
    sampler = CpuSampler().__enter__()
    (
        df.write.format("broker")
        .mode("append")
        .option("peer", f"127.0.0.1:{port}")
        .option("ssl.disable", "true")
        .save()
    )
    elapsed = time.time() - start
    got, first, last = _receive(ours, proc)
    proc.join(10)
    sampler.__exit__()
    return {
        "rows": rows,
        "received": got,
        "rows_per_s": rows / elapsed,
        "seconds": elapsed,
        "subscriber_rows_per_s": got / max(1e-9, last - first) if first else 0.0,
        "cpu_us_per_row": _per_row(sampler.by_role(), rows),
    }


def _warm_up(spark: Any, seconds: float) -> None:
    """A read and a write that are not measured, so the measured ones do not pay for the JVM's
    start: its JIT compiler spends more CPU than the query itself during the first minute
    (measured: 0.45 s of JVM CPU per micro-batch in the first 15 s of a session, 0.13 s after
    a minute), and the read runs came first."""
    spark.range(10).selectExpr("id").collect()
    bench_read(spark, seconds, "auto")
    bench_write(spark, 200_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--seconds", type=float, default=None, help="publishing time per read run")
    parser.add_argument("--rows", type=int, default=None, help="rows to write")
    parser.add_argument(
        "--trigger", default="500 milliseconds", help="processing-time trigger (500 milliseconds)"
    )
    args = parser.parse_args()
    globals()["TRIGGER"] = args.trigger
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    rows = args.rows or (100_000 if args.quick else 2_000_000)

    spark = _session()
    try:
        _warm_up(spark, 5.0 if args.quick else 40.0)
        results = {
            "read_auto": bench_read(spark, seconds, "auto"),
            "read_inline": bench_read(spark, seconds, "inline"),
            "read_spool": bench_read(spark, seconds, "spool"),
            "read_paced": bench_read(spark, seconds, "auto", PACED_RATE),
            "read_raw": bench_read(spark, seconds, "auto", raw=True),
            "rate_limit": bench_rate_limit(spark, seconds, 10_000_000),
            "null_source": bench_null_source(spark, seconds, 1_000_000),
            "null_source_same_rows": bench_null_source(spark, seconds, 1_000_000, "bench"),
            "null_source_4m": bench_null_source(spark, seconds, 4_000_000),
            "write": bench_write(spark, rows),
            "cpus": os.cpu_count(),
        }
    finally:
        spark.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    _table(results)


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _table(r: dict[str, Any]) -> None:
    print(f"Spark end to end on {r['cpus']} cores (local[2], trigger {TRIGGER}, noop sink)\n")
    same = r["null_source_same_rows"]["rows_per_s"] or 1.0
    limit = r["null_source"]["rows_per_s"] or 1.0
    print(
        "| measurement | rows/s | share of the null Python source: same rows (tiny event) "
        "| rows | seconds | publish -> batch end, median (max) |"
    )
    print("|---|---:|---:|---:|---:|---|")
    paced = f"read, defaults, paced at {PACED_RATE:,.0f} events/s"
    for key, label in (
        ("read_auto", "read, defaults (partitionData=auto: local mode reads the spool)"),
        ("read_inline", "read, inline partitions (as on a cluster)"),
        ("read_spool", "read, shared spool"),
        ("read_paced", paced),
        ("read_raw", "read, defaults, publisher sending pre-encoded events"),
    ):
        x = r[key]
        delay = (
            f"oldest row {_fmt(x['delay_oldest_median_s'], 2)} s "
            f"({_fmt(x['delay_oldest_max_s'], 2)} s), "
            f"newest {_fmt(x['delay_newest_median_s'], 2)} s"
        )
        share = f"{x['rows_per_s'] / same:.2f} ({x['rows_per_s'] / limit:.2f})"
        print(
            f"| {label} | {_fmt(x['rows_per_s'])} | {share} | {x['rows']:,} "
            f"| {_fmt(x['seconds'], 1)} | {delay} |"
        )
    for key, label in (
        (
            "null_source_same_rows",
            "limit: null Python source of the read's rows, 1,000,000 a batch",
        ),
        ("null_source", "limit: null Python source of a tiny event, 1,000,000 rows a batch"),
        ("null_source_4m", "limit: null Python source of a tiny event, 4,000,000 rows a batch"),
        ("rate_limit", "limit: rate-micro-batch (JVM only), 10,000,000 rows a batch"),
    ):
        c = r[key]
        share = f"{c['rows_per_s'] / same:.2f} ({c['rows_per_s'] / limit:.2f})"
        print(
            f"| {label} | {_fmt(c['rows_per_s'])} | {share} "
            f"| {c['rows']:,} | {_fmt(c['seconds'], 1)} | |"
        )
    w = r["write"]
    print(
        f"| write: df.write to a subscriber | {_fmt(w['rows_per_s'])} | | {w['rows']:,} "
        f"| {_fmt(w['seconds'], 1)} | subscriber saw {w['received']:,} at "
        f"{_fmt(w['subscriber_rows_per_s'])}/s |"
    )
    print("\nCPU microseconds per row, by process (whole run, start-up and draining included):\n")
    for key in ("read_auto", "read_inline", "read_spool", "read_raw", "write"):
        cpu = r[key]["cpu_us_per_row"]
        parts = ", ".join(f"{role} {us:.2f}" for role, us in cpu.items())
        print(f"- {key}: {sum(cpu.values()):.2f} in all: {parts}")
    x = r["read_auto"]
    print(
        f"\nThe publisher offered {_fmt(x['publish_rate'])} events/s "
        "(it is slowed down by the flow control of the peering when the query lags)."
    )


if __name__ == "__main__":
    main()
