"""A real Zeek cluster into two relay nodes into a table per log: rate and latency, live.

Usage: ``python bench/live_zeek.py [--copies N] [--quick] [--json]``

The path of docs/how-to/zeek-cluster-zeromq.md and docs/how-to/databricks.md, on loopback, with the Zeek 9.1 the live
tests run (a -O0 debug build, several times slower than a release Zeek): a manager and
two workers on the ZeroMQ backend with CURVE, whose loggers are two
``broker-spark node --zeromq-logs --spool --relay`` processes, and one query of
``ZeekTables`` (what ``write_zeek_tables`` runs; Parquet tables, default trigger) over
both relays. Each worker reads a larger trace: wikipedia.pcap, bro.org.pcap and
ecdhe.pcap one after the other, ``--copies`` times (an hour apart, so each copy's
connections are new), about 160 log records a copy.

The query and the relays run through a warm-up round (two copies) first, as a deployment's
query has run for long: its first batches start Spark's Python workers and create the
tables. Then, measured in one run:

- **baseline**: the same two traces read by two standalone Zeeks at once, each writing
  its JSON logs itself: records per second (what this machine's two cores give Zeek
  alone);
- **path**: records per second from the first log write of a Zeek worker to the commit
  of the last record in its table, and that rate as a share of the baseline;
- **latency** of each conn record, from the moment Zeek's script wrote it
  (``Conn::log_policy``, wall clock) to the moment the micro-batch holding it was
  committed to its table (``ZeekTables``' ``after_table``): median and p99, split into
  Zeek to the relay (the relay's ``received_at``: Zeek's own log buffering and the
  PUSH) and the relay to the table (Spark).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "live"))

from cluster import CurveKeys, ZeekCluster, deploy_layout, make_certs, relay_nodes  # noqa: E402
from pcaps import TRACES, replayed  # noqa: E402
from ports import free_port  # noqa: E402
from zeek_procs import ZeekProcess, read_json_logs, zeek_binary  # noqa: E402

WRITES = """
# The wall clock of each conn record's write, by uid (the bench's latency starts here).
global writes = open(fmt("writes-%s.txt", Cluster::node));

hook Conn::log_policy(rec: Conn::Info, id: Log::ID, filter: Log::Filter)
	{
	print writes, fmt("%s %.6f", rec$uid, current_time());
	}
"""

_BATCH = re.compile(r"/b(\d{12})-")

#: What each Zeek process logs of itself, not of the traffic: not counted.
NODE_LOGS = ("reporter", "packet_filter", "cluster")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def baseline(zeek: Path, trace: Path, folder: Path) -> tuple[dict[str, int], float]:
    """Two standalone Zeeks reading ``trace`` at once: records written by log, seconds."""
    start = time.monotonic()
    procs = [
        ZeekProcess(zeek, f"standalone-{i}", ["-C", "-r", str(trace), "LogAscii::use_json=T"],
                    folder / f"standalone-{i}")
        for i in range(2)
    ]  # fmt: skip
    for proc in procs:
        proc.finished(1800)
    seconds = time.monotonic() - start
    records: dict[str, int] = {}
    for i in range(2):
        for path, lines in read_json_logs(folder / f"standalone-{i}").items():
            if path not in NODE_LOGS:
                records[path] = records.get(path, 0) + len(lines)
    return records, seconds


def records_in_tables(spark: Any) -> dict[str, int]:
    """The records of the traffic's logs in the tables, by log (not what nodes log of
    themselves)."""
    have = {}
    for t in spark.catalog.listTables("bench_live"):
        if t.name in NODE_LOGS or t.isTemporary:
            continue
        spark.catalog.refreshTable(f"bench_live.{t.name}")
        have[t.name] = spark.table(f"bench_live.{t.name}").count()
    return have


def caught_up(spark: Any, query: Any, timeout: float = 1800.0) -> dict[str, int]:
    """Once the workers are done: wait until the query has taken all the relays hold (no
    data available, the tables' count the same three looks in a row); that count."""
    deadline = time.monotonic() + timeout
    last: dict[str, int] = {}
    same = 0
    while time.monotonic() < deadline:
        have = records_in_tables(spark)
        progress = query.lastProgress or {}
        sources = progress.get("sources") or [{}]
        # the last batch ended where the relays end, and no new data came
        ended = sources[0].get("endOffset") == sources[0].get("latestOffset") is not None
        idle = ended and not query.status["isDataAvailable"]
        same = same + 1 if (have == last and idle) else 0
        if same >= 3:
            return have
        last = have
        time.sleep(1.0)
    raise SystemExit(f"the query did not catch up in {timeout} s ({last} records)")


def run(copies: int) -> dict[str, Any]:
    from spark_fixtures import _start_session

    from broker_spark.spark.zeek_tables import ZeekTables, table_input_schema

    zeek = zeek_binary()
    with tempfile.TemporaryDirectory(prefix="bench-live-zeek-") as tmp:
        folder = Path(tmp)
        traces = [TRACES / "wikipedia.pcap", TRACES / "bro.org.pcap", TRACES / "ecdhe.pcap"]
        trace = replayed(traces, copies).write(folder / "trace.pcap")
        warmup = replayed(traces, 2).write(folder / "warmup.pcap")
        base_logs, base_seconds = baseline(zeek, trace, folder / "baseline")
        base_records = sum(base_logs.values())

        keys = CurveKeys.new()
        certs = make_certs(folder / "certs", "relay1", "relay2", "reader")
        xpub, xsub = free_port(), free_port()
        relays = relay_nodes(
            folder,
            certs,
            keys,
            ["relay1", "relay2"],
            f"tcp://127.0.0.1:{xpub},tcp://127.0.0.1:{xsub}",
        )
        loggers = {f"logger-{i + 1}": int(r.pull.rsplit(":", 1)[1]) for i, r in enumerate(relays)}
        (folder / "site").mkdir()
        writes_script = folder / "site" / "writes.zeek"
        writes_script.write_text(WRITES)
        cluster = ZeekCluster(
            zeek, folder / "zeek", deploy_layout(loggers), keys, scripts=[writes_script],
            xpub=xpub, xsub=xsub,
        )  # fmt: skip
        spark = _start_session(str(folder / "warehouse"))
        spark.sql(f"CREATE DATABASE bench_live LOCATION '{folder / 'tables'}'")
        commits: dict[tuple[str, int], float] = {}
        lock = threading.Lock()

        def committed(table: str, batch_id: int) -> None:
            with lock:
                commits[(table, batch_id)] = time.time()

        tables = ZeekTables(
            checkpoint=str(folder / "checkpoint"), table="bench_live.{path}", quarantine=None,
            after_table=committed,
        )  # fmt: skip
        query = None
        started = ""
        try:
            cluster.start_control()
            for relay in relays:
                relay.start()
            source = (
                spark.readStream.format("broker")
                .option("relay", ",".join(r.relay for r in relays))
                .option("startingOffsets", "earliest")
                .option("ssl.certificate", str(certs / "reader.pem"))
                .option("ssl.key", str(certs / "reader.key"))
                .option("ssl.cafile", str(certs / "ca.pem"))
                .option("format", "zeek-logs")
                # as write_zeek_tables reads: a row per partition, read by the writing tasks
                .option("deferredRows", table_input_schema(runs=True, messages=True).json())
                .load()
            )
            query = (
                source.writeStream.foreachBatch(tables)
                .option("checkpointLocation", str(folder / "checkpoint"))
                .start()
            )
            # a warm-up round: the query's first batches start Spark's workers and create
            # the tables, as a query that runs for days did long ago
            cluster.read([warmup, warmup], deterministic=False)
            before = caught_up(spark, query)
            start = time.time()
            started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start))
            cluster.read([trace, trace], deterministic=False)  # uids of their own
            after = caught_up(spark, query)
            by_log = {p: n - before.get(p, 0) for p, n in after.items()}
            have = sum(by_log.values())
        finally:
            if query is not None:
                batches = [
                    p["durationMs"]["triggerExecution"] / 1000
                    for p in query.recentProgress
                    if p.get("numInputRows") and p["timestamp"] >= started
                ]
                query.stop()
            for relay in relays:
                relay.close()
            cluster.close()

        written: dict[str, float] = {}
        for file in (folder / "zeek").glob("writes-*.txt"):
            for line in file.read_text().splitlines():
                uid, at = line.split()
                written[uid] = float(at)
        rows = spark.sql(
            "select uid, unix_micros(received_at) / 1e6 as received, _metadata.file_path as file "
            "from bench_live.conn"
        ).collect()
        to_relay, to_table, total = [], [], []
        for row in rows:
            if row.uid not in written:
                continue  # the warm-up's (its writes were in files the measured round reopened)
            batch = int(_BATCH.search(row.file).group(1))
            done = commits[("bench_live.conn", batch)]
            wrote = written[row.uid]
            to_relay.append(row.received - wrote)
            to_table.append(done - row.received)
            total.append(done - wrote)
        first_write = min(written.values())
        assert first_write >= start, "a write time of the warm-up round was taken"
        last_commit = max(t for t in commits.values() if t >= first_write)
        spark.stop()
    path_rate = have / (last_commit - first_write)
    base_rate = base_records / base_seconds

    def summary(values: list[float]) -> dict[str, float]:
        return {"median_s": statistics.median(values), "p99_s": percentile(values, 99)}

    return {
        "copies": copies,
        "records": have,
        "baseline_records": base_records,
        "records_by_log": by_log,
        "baseline_records_by_log": base_logs,
        "baseline_records_per_s": base_rate,
        "path_records_per_s": path_rate,
        "path_over_baseline": path_rate / base_rate,
        "path_seconds": last_commit - first_write,
        "conn_records_timed": len(total),
        "micro_batches": len(batches),
        "micro_batch_s": summary(batches) if batches else None,
        "latency": summary(total),
        "zeek_to_relay": summary(to_relay),
        "relay_to_table": summary(to_table),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=150, help="times each trace is replayed")
    parser.add_argument("--quick", action="store_true", help="a smoke test: ten copies")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    if args.quick:
        args.copies = 10
    # SIGTERM ends the run as Ctrl-C does: the Zeeks, relays and the session are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args.copies)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"records: {result['records']} in the tables, {result['baseline_records']} written by the "
        f"standalone Zeeks ({args.copies} copies of the trace, two workers)"
    )
    print(f"baseline, two standalone Zeeks: {result['baseline_records_per_s']:,.0f} records/s")
    print(
        f"path, Zeek -> relays -> tables: {result['path_records_per_s']:,.0f} records/s "
        f"({result['path_over_baseline']:.2f}x the baseline)"
    )
    for name in ("latency", "zeek_to_relay", "relay_to_table"):
        s = result[name]
        print(f"{name}: median {s['median_s']:.2f} s, p99 {s['p99_s']:.2f} s")


if __name__ == "__main__":
    main()
