"""The Kafka path beside ours, on the same Zeek records, in one run: end to end into tables.

Usage: ``python bench/kafka_path.py [--quick] [--records N] [--json]`` (``make bench-kafka``).

The same records (the recordings' conn, dns and http mix, :mod:`_kafka_records`; 1,000,000
by default, 10,000 with ``--quick``) go two ways into a table per log (Parquet):

- **ours**: a Zeek node's ZeroMQ log batches into a relay node (``broker-spark node
  --zeromq-logs``, :mod:`_relay_node`), read by one ``write_zeek_tables`` query;
- **Kafka**: Zeek's Kafka plugin's messages (a JSON record each, a topic per log) produced
  with confluent-kafka on librdkafka's defaults into a Kafka 4 broker (KRaft, one node,
  :mod:`_kafka_setup`), read by Spark's Kafka source, ``from_json`` into the same typed
  columns, a query per log appending to the same tables (:mod:`_kafka_tables`).

Measured for each, in this order, on the same local[2] Spark session:

- **throughput**: records/s from the first send to the last table commit, unpaced (a
  refused send is retried); CPU per record of each tier (the collector: relay node or
  Kafka's JVM; Spark: its JVM, its Python workers, the driver's Python; the producer);
- **bytes on disk** per record: the relay's spool (its filled files zstd-compressed, as a
  node keeps them) against Kafka's log as produced with librdkafka's default (none) and,
  in a produce-only run, with ``compression.type=zstd``;
- **latency** at a paced 20,000 records/s: p50 and p99 from each record's send (its
  ``ts``) to the commit of the batch that wrote it into its table;
- **a collector crash**: the same paced run, the collector SIGKILLed 40 % into it and
  restarted 2 s later (same spool or log folder, same ports); what the tables lost
  (records sent and accepted, not in a table) and doubled (rows of one record beyond the
  first), with each producer's defaults; drops at the producer are counted apart.

Kafka's JVM and the relay node are stopped, and their folders removed, on every way out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import _kafka_records as kr  # noqa: E402
import _kafka_senders  # noqa: E402
import _kafka_tables as kt  # noqa: E402
from _kafka_setup import KafkaBroker, fetch  # noqa: E402
from _relay_node import RelayNode  # noqa: E402
from spark_stream import CpuSampler, _receive  # noqa: E402

PACED_RATE = 20_000.0
#: Seconds every query must stay idle after the producer's end for a run to be over.
QUIET = 2.0
CRASH_AT = 0.4
CRASH_DOWN = 2.0
#: Records of the paced runs (at 20,000 a second: 10 s of sending).
PACED_RECORDS = 200_000


def tier(cmd: str) -> str:
    """Which tier a process's CPU counts for, from its command line."""
    if "kafka.Kafka" in cmd or "broker_spark node" in cmd:
        return "collector"
    if "multiprocessing" in cmd:
        return "producer"
    if cmd.split(" ", 1)[0].endswith("java"):
        return "spark_jvm"
    if "pyspark" in cmd:
        return "spark_python_workers"
    return "spark_driver_python"


def _kafka_topics(broker: KafkaBroker, prefix: str) -> None:
    """The topics of a run, made first (a topic per log, the broker's default partitions)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(
        {"bootstrap.servers": broker.bootstrap}, logger=_kafka_senders.quiet_librdkafka()
    )
    made = admin.create_topics([NewTopic(prefix + p, 1, 1) for p in kr.TABLES_MIX])
    for future in made.values():
        future.result(60)


def _sender(collector: Any, records: int, rate: float, topics: str, settings: dict) -> tuple:
    """The producer process of ``collector``'s path, started and ready to go."""
    spawn = mp.get_context("spawn")
    here, there = spawn.Pipe()
    if isinstance(collector, RelayNode):
        target, args = _kafka_senders.zeromq_sender, (collector.zeromq, records, rate, there)
    else:
        target = _kafka_senders.kafka_sender
        args = (collector.bootstrap, records, rate, there, topics, settings)
    proc = spawn.Process(target=target, args=args, name="producer", daemon=True)
    proc.start()
    assert _receive(here, proc, 120) == "ready"
    return proc, here


def _started(queries: list[Any], timeout: float = 120.0) -> None:
    """Until every query has run a first batch (its plan made, its source reached)."""
    deadline = time.time() + timeout
    while not all(q.lastProgress for q in queries):
        if time.time() > deadline:
            raise TimeoutError("the queries did not start")
        for q in queries:
            if q.exception() is not None:
                raise RuntimeError(f"a query failed: {q.exception()}")
        time.sleep(0.2)


def run_path(
    spark: Any, work: Path, collector: Any, name: str, records: int, rate: float = 0.0,
    crash: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """One path end to end: its queries, its producer, ``collector`` (killed and restarted
    with ``crash``); what the tables hold, and each tier's CPU."""
    db = kt.database(spark, work, name)
    topics = f"{name}-"
    checkpoint = work / f"checkpoint-{name}"
    if isinstance(collector, RelayNode):
        queries = kt.ours(spark, collector.port, db, checkpoint)
    else:
        _kafka_topics(collector, topics)
        queries = kt.kafka(spark, collector.bootstrap, topics, db, checkpoint)
    unique = list({id(q): q for q in queries.values()}.values())
    try:
        _started(unique)
        sampler = CpuSampler().__enter__()
        proc, conn = _sender(collector, records, rate, topics, {})
        conn.send("go")
        if crash:
            time.sleep(records / (rate or PACED_RATE) * CRASH_AT)
            collector.kill()
            time.sleep(CRASH_DOWN)
            collector.start()
        report = _receive(conn, proc, 900)
        proc.join(30)
        kt.wait_quiet(unique, report["last"], QUIET, 900)
        sampler.__exit__()
        tables = kt.contents(spark, db)
        latency = kt.latencies(spark, db, queries) if rate else None
        last = max(t for q in unique for t in kt.commit_times(q))
    finally:
        kt.stop(queries)
    if isinstance(collector, RelayNode):
        on_disk = collector.bytes_on_disk()
    else:
        on_disk = collector.bytes_of(topics)
    in_tables = sum(t["rows"] for t in tables.values())
    distinct = sum(t["distinct"] for t in tables.values())
    cpu = sampler.by_role(tier)
    out: dict[str, Any] = {
        "records_sent": report["sent"],
        "dropped_by_producer": report["dropped"],
        "rows_in_tables": in_tables,
        "lost": report["sent"] - distinct,
        "doubled": in_tables - distinct,
        "seconds": round(last - report["first"], 2),
        "records_per_s": round(distinct / (last - report["first"])),
        "cpu_us_per_record": {k: round(v * 1e6 / max(1, distinct), 1) for k, v in cpu.items()},
        "collector_bytes_per_record": round(on_disk / max(1, report["sent"]), 1),
        "tables": tables,
    }
    if latency is not None:
        out["latency"] = kt.percentiles(latency)
    return out


def kafka_zstd_bytes(broker: KafkaBroker, records: int) -> float:
    """Kafka's log per record when the producer compresses with zstd (produce only)."""
    topics = "zstd-"
    _kafka_topics(broker, topics)
    proc, conn = _sender(broker, records, 0.0, topics, {"compression.type": "zstd"})
    conn.send("go")
    report = _receive(conn, proc, 900)
    proc.join(30)
    return round(broker.bytes_of(topics) / max(1, report["sent"]), 1)


def both_paths(spark: Any, work: Path, records: int, paced: int, warm: bool) -> dict[str, Any]:
    """Each measurement of ours, then of Kafka (one broker for all of Kafka's runs, a topic
    prefix each; a relay node of its own for each of ours)."""
    result: dict[str, Any] = {"ours": {}, "kafka": {}}
    runs = [("unpaced", records, 0.0, False), ("paced", paced, PACED_RATE, False)]
    runs.append(("crash", paced, PACED_RATE, True))
    if warm:  # the session's first queries compile Spark's code: one small run each, unmeasured
        runs.insert(0, ("warmup", 20_000, 0.0, False))
    for name, n, rate, crash in runs:
        with RelayNode() as node:
            result["ours"][name] = run_path(spark, work, node, f"ours_{name}", n, rate, crash)
    with KafkaBroker() as broker:
        for name, n, rate, crash in runs:
            result["kafka"][name] = run_path(spark, work, broker, f"kafka_{name}", n, rate, crash)
        result["kafka"]["zstd_bytes_per_record"] = kafka_zstd_bytes(broker, records)
    for path in result.values():
        path.pop("warmup", None)
    return result


def _load() -> str:
    """The machine's load when the run ended (the machine is shared: figures are ratios)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def bench(records: int, quick: bool) -> dict[str, Any]:
    """Both paths: unpaced, paced, crashed; Kafka's zstd log; ratios of ours to Kafka."""
    jars, spark_kafka = fetch()
    spark = kt.session(jars)
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-path-"))
    result: dict[str, Any] = {"records": records, "spark_kafka_source": spark_kafka}
    try:
        result.update(both_paths(spark, work, records, min(records, PACED_RECORDS), not quick))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    a, b = result["ours"]["unpaced"], result["kafka"]["unpaced"]
    result["ours_vs_kafka_records_per_s"] = round(a["records_per_s"] / b["records_per_s"], 2)
    result["load"] = _load()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 records: a smoke run")
    parser.add_argument("--records", type=int, default=0, help="records a run sends")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    records = args.records or (10_000 if args.quick else 1_000_000)
    try:
        result = bench(records, args.quick)
    except KeyboardInterrupt:
        sys.exit(130)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
