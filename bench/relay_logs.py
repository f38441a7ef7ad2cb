"""A query that reads some logs from a relay against one that reads them all.

Usage: ``python bench/relay_logs.py [--rows N] [--repeat N] [--json]``

A relay's spool holds the mix of ``bench/zeek_logs.py``'s tables bench (conn 5 :
dns 3 : http 2, a real Zeek's recorded records repeated, in Batches of 400). Each
query reads it from its first offset to its end (``trigger(availableNow=True)``)
as ``format=zeek-logs`` rows of Zeek's JSON lines into the ``noop`` sink, from a
relay process started for that query alone, so its counters are the query's:

- **all logs**: no ``logs`` option (the baseline);
- **one log**: ``logs=conn`` (half the records), and ``logs=http`` (a fifth);
- **a query per log**: three queries, ``logs=conn``, ``logs=dns``, ``logs=http``, one
  after another (what a pipeline's three tables read), summed, against the one
  all-logs query;
- **compression**: the all-logs query again from a spool whose files are compressed
  (``zstd``, as a relay keeps them by default), with the records compressed on the wire
  (``wire_compression="always"``: what a relay does for a reader on another machine;
  here over loopback, where it does not by default), and both: the relay's CPU, the
  query's, and the bytes on the wire.

Per run: the records and bytes the relay sent (``RelayServer.served_records`` and
``served_bytes``; ``wire_bytes``, the frames' bytes), the rows the query made, wall seconds, and CPU seconds by
process role (the relay's own process apart). Best of ``--repeat`` runs by wall time.
"""

from __future__ import annotations

import argparse
import json
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


def _read(
    spark: Any, spool: str, logs: str | None, wire: str = "auto", name: str | None = None
) -> dict[str, Any]:
    from relay import _Relay
    from spark_stream import CpuSampler, run_to_end

    from broker_spark.spark.zeek_schema import generic_log_schema

    relay = _Relay(spool, 8, wire)
    try:
        reader = (
            spark.readStream.format("broker")
            .option("relay", f"127.0.0.1:{relay.port}")
            .option("ssl.disable", "true")
            .option("startingOffsets", "earliest")
            .option("format", "zeek-logs")
            .schema(generic_log_schema())
        )
        if logs:
            reader = reader.option("logs", logs)
        sampler = CpuSampler().__enter__()
        started = time.monotonic()
        query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
        progress = run_to_end(query, sampler, 600)
        wall = time.monotonic() - started
    finally:
        records, sent, relay_cpu = relay.close()
    cpu = {role: round(seconds, 2) for role, seconds in sampler.by_role().items()}
    return {
        "logs": name or logs or "all",
        "rows": sum(p["numInputRows"] for p in progress),
        "served_records": records,
        "served_mib": sent / (1 << 20),
        "wire_mib": relay.wire_bytes / (1 << 20),
        "wall_s": wall,
        "cpu_s": cpu,
        "relay_cpu_s": round(relay_cpu, 2),
    }


def _compressed_copy(spool: str, to: str) -> None:
    """A copy of ``spool`` whose filled files are compressed (as a relay's are by default)."""
    from broker_spark.spool.spool import Spool

    shutil.copytree(spool, to)
    with Spool(to, compression="zstd", index_interval=8) as copy:
        while copy.compact_next():
            pass


def bench(rows: int, repeat: int) -> dict[str, Any]:
    from _zeek_tables import mix_spool
    from spark_stream import _session

    spark = _session()
    work = tempfile.mkdtemp(prefix="bench-relay-logs-")
    try:
        spool = str(Path(work) / "spool")
        mix_spool(spool, rows)
        packed = str(Path(work) / "spool-zstd")
        _compressed_copy(spool, packed)
        _read(spark, spool, None)  # warms the JVM: not measured
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeat):
            for logs in (None, "conn", "http", "dns"):
                got = _read(spark, spool, logs)
                runs.setdefault(got["logs"], []).append(got)
            for name, path, wire in (
                ("all, spool compressed", packed, "auto"),
                ("all, wire compressed", spool, "always"),
                ("all, both compressed", packed, "always"),
            ):
                got = _read(spark, path, None, wire, name)
                runs.setdefault(name, []).append(got)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in runs.items()}
    per_log = [best[p] for p in ("conn", "dns", "http")]
    best["a query per log"] = {
        "rows": sum(r["rows"] for r in per_log),
        "served_records": sum(r["served_records"] for r in per_log),
        "served_mib": sum(r["served_mib"] for r in per_log),
        "wire_mib": sum(r["wire_mib"] for r in per_log),
        "wall_s": sum(r["wall_s"] for r in per_log),
        "cpu_s": {
            role: round(sum(r["cpu_s"].get(role, 0.0) for r in per_log), 2)
            for role in {role for r in per_log for role in r["cpu_s"]}
        },
        "relay_cpu_s": round(sum(r["relay_cpu_s"] for r in per_log), 2),
    }
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="records in the spool")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, best kept")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    results = bench(args.rows, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    base = results["all"]
    print(
        "| query | rows | records sent | MiB sent | MiB on the wire | wall s | CPU s by role "
        "| relay CPU s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for name, r in results.items():
        share = r["served_mib"] / base["served_mib"] if base["served_mib"] else 0.0
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["cpu_s"].items()))
        print(
            f"| {name} | {r['rows']:,} | {r['served_records']:,} | {r['served_mib']:.1f} "
            f"({share:.2f}x) | {r['wire_mib']:.1f} | {r['wall_s']:.1f} | {cpu} "
            f"| {r['relay_cpu_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
