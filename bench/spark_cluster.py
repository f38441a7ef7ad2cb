"""Spark on a standalone cluster: read and write rows per second with one worker and with two.

Usage: ``python bench/spark_cluster.py [--quick] [--json] [--seconds S] [--rows N]``

One run, same data for every row: a Spark standalone cluster on loopback
(``tests/spark_daemons.py``: a master and two workers of one core each, from
the venv's pyspark) and, beside it, the local-mode figure:

- **local**: ``local[2]``, the driver's JVM runs the tasks (``partitionData=auto``
  then lets them read the reader's spool);
- **cluster, one worker**: the same query with ``spark.cores.max=1``, so one
  executor of one core on one worker (the other worker idles);
- **cluster, two workers**: ``spark.cores.max=2``, an executor on each.

Each session runs ``bench/spark_stream.py``'s read (a publisher process
sending small Zeek events as fast as the peering takes them into
``readStream.format("broker")`` and the ``noop`` sink, every option at its
default) and write (``spark.range(N)`` written with ``df.write.format("broker")``
to a subscriber process), after an unmeasured read and write that warm the
JVMs. ``register(spark)`` runs once the executors are up, as the docs say to.

The CPU every process spends per row is reported by side: the **driver**
(the reader's driver-side process: endpoint, spool, planning and inline
partitions; the driver's JVM; Python workers it starts for planning) and the
**executors** (their JVMs and Python workers), plus the Broker-side process
and the cluster's daemons. On 2 cores everything shares the same two CPUs,
so two workers cannot double the rate; the point is what the driver spends
per row beyond planning, which bounds a cluster of any size.

``--quick`` shortens everything (a smoke test); ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import spark_stream  # noqa: E402
from spark_daemons import StandaloneCluster, python_env  # noqa: E402

#: Roles of ``spark_stream.CpuSampler`` by side. In local mode the driver's JVM ("jvm") runs
#: the tasks too, and its Python workers (``pyspark.daemon`` and what it forks) do the tasks'
#: conversions: there the executors' side is empty and the driver's holds everything.
DRIVER = ("reader (driver side)", "jvm", "python workers (planning)", "python workers (read/write)")
EXECUTORS = ("executor JVMs", "executors' python workers")


def _session(master_conf: dict[str, str], name: str) -> Any:
    from broker_spark.spark.java import require_java

    require_java()
    for key in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[key] = python_env()[key]
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"broker-spark-bench-{name}")
    for key, value in {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.numRecentProgressUpdates": "10000",
        **master_conf,
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("BENCH_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def _by_side(cpu: dict[str, float]) -> dict[str, float]:
    sides = {"driver": 0.0, "executors": 0.0, "other": 0.0}
    for role, us in cpu.items():
        side = "driver" if role in DRIVER else "executors" if role in EXECUTORS else "other"
        sides[side] += us
    return {side: round(us, 2) for side, us in sides.items()}


def run_setup(
    name: str, conf: dict[str, str], cluster: StandaloneCluster | None, args: Any
) -> dict[str, Any]:
    from broker_spark.spark import register

    spark = _session(conf, name)
    try:
        executors = int(conf.get("spark.cores.max", "0"))
        if cluster is not None:
            cluster.wait_for_executors(spark, executors)
        register(spark)
        spark.range(10).collect()
        spark_stream.bench_read(spark, args.warm, "auto")  # warm-up, not measured
        spark_stream.bench_write(spark, 200_000)
        read = spark_stream.bench_read(spark, args.seconds, "auto")
        write = spark_stream.bench_write(spark, args.rows)
        parallelism = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    for result in (read, write):
        result["cpu_by_side"] = _by_side(result["cpu_us_per_row"])
    return {"setup": name, "parallelism": parallelism, "read": read, "write": write}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--seconds", type=float, default=None, help="publishing time per read")
    parser.add_argument("--rows", type=int, default=None, help="rows to write")
    args = parser.parse_args()
    args.seconds = args.seconds or (3.0 if args.quick else 20.0)
    args.rows = args.rows or (100_000 if args.quick else 2_000_000)
    args.warm = 3.0 if args.quick else 30.0

    results = [run_setup("local", {"spark.master": "local[2]"}, None, args)]
    with StandaloneCluster(workers=2, cores=1) as cluster:
        for name, cores in (("cluster, one worker", 1), ("cluster, two workers", 2)):
            results.append(run_setup(name, cluster.session_config(cores), cluster, args))
    report = {"cpus": os.cpu_count(), "trigger": spark_stream.TRIGGER, "runs": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    _table(report)


def _fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _table(report: dict[str, Any]) -> None:
    runs = report["runs"]
    print(
        f"Spark on {report['cpus']} cores: local mode and a standalone cluster of one-core "
        f"workers (trigger {report['trigger']}, noop sink, every option at its default)\n"
    )
    print("| setup | read rows/s | vs local | write rows/s | vs local |")
    print("|---|---:|---:|---:|---:|")
    base_read = runs[0]["read"]["rows_per_s"] or 1.0
    base_write = runs[0]["write"]["rows_per_s"] or 1.0
    for run in runs:
        r, w = run["read"]["rows_per_s"], run["write"]["rows_per_s"]
        print(
            f"| {run['setup']} | {_fmt(r)} | {r / base_read:.2f}x "
            f"| {_fmt(w)} | {w / base_write:.2f}x |"
        )
    print("\nCPU microseconds per row, driver side against executors (whole run):\n")
    print("| setup | read: driver | read: executors | write: driver | write: executors |")
    print("|---|---:|---:|---:|---:|")
    for run in runs:
        rd, wr = run["read"]["cpu_by_side"], run["write"]["cpu_by_side"]
        print(
            f"| {run['setup']} | {rd['driver']:.2f} | {rd['executors']:.2f} "
            f"| {wr['driver']:.2f} | {wr['executors']:.2f} |"
        )
    print("\nBy process:\n")
    for run in runs:
        for kind in ("read", "write"):
            cpu = run[kind]["cpu_us_per_row"]
            parts = ", ".join(f"{role} {us:.2f}" for role, us in cpu.items())
            print(f"- {run['setup']}, {kind}: {sum(cpu.values()):.2f} in all: {parts}")
    print(
        "\nIn local mode the tasks run in the driver's JVM and its Python workers, so the "
        "driver's side holds them too."
    )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)", file=sys.stderr)
