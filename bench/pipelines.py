"""Zeek's logs into a pipeline's streaming tables: ``spark-pipelines run`` over a relay.

Usage: ``python bench/pipelines.py [--rows N] [--json]``

A relay process serves a spool of ``--rows`` records (``bench/zeek_logs.py``'s mix:
conn 5 : dns 3 : http 2, a real Zeek's records in Batches of 400). The pipeline of
docs/how-to/pipelines.md (its spec, and a source file of one
``broker_spark.spark.pipelines.zeek_tables`` call for conn, dns and http, moved onto
the local relay) is run by PySpark's ``spark-pipelines run`` twice, with the Hive
catalog the how-to gives for local runs:

- the **first update** writes every record into its log's streaming table (counted
  from the tables' files afterwards: each must hold its log's records);
- the **second update** finds nothing new: its time is the command's fixed cost (its
  Spark Connect server, the graph, the flows starting and stopping).

Baseline, in the same run and before the pipeline: the same relay read by a
``format=zeek-logs`` query into the ``noop`` sink (``trigger(availableNow=True)``),
timed from its start to its end. Reported: records/s of the whole first update, net
of the fixed cost (records / (first - second)), and both against the baseline.
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

SPEC = """name: zeek
storage: file://{storage}
libraries:
  - glob:
      include: transformations/**
"""

SOURCE = """from broker_spark.spark.pipelines import zeek_tables

zeek_tables(
    spark,
    relay="127.0.0.1:{port}",
    logs={logs!r},
    options={{"startingOffsets": "earliest", "ssl.disable": "true"}},
)
"""


def _noop_read(port: int) -> tuple[int, float]:
    """Records and seconds of a ``noop`` read of the whole relay (start to end)."""
    from spark_stream import _session

    from broker_spark.spark.zeek_tables import table_input_schema

    spark = _session()
    try:
        for _ in range(2):  # the first warms the JVM and the workers: not counted
            started = time.monotonic()
            query = (
                spark.readStream.format("broker")
                .option("relay", f"127.0.0.1:{port}")
                .option("ssl.disable", "true")
                .option("startingOffsets", "earliest")
                .option("format", "zeek-logs")
                .schema(table_input_schema())
                .load()
                .writeStream.format("noop")
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(900)
            seconds = time.monotonic() - started
            if query.exception() is not None:
                raise RuntimeError(f"the noop read failed: {query.exception()}")
            rows = sum(p["numInputRows"] for p in query.recentProgress)
        return rows, seconds
    finally:
        spark.stop()


def _table_rows(folder: Path, path: str) -> int:
    import pyarrow.dataset as ds

    return ds.dataset(folder / "spark-warehouse" / f"zeek_{path}", format="parquet").count_rows()


def bench(rows: int) -> dict[str, Any]:
    from _zeek_tables import TABLES_MIX, mix_spool
    from relay import _Relay
    from spark_pipelines_cli import run_spark_pipelines

    work = Path(tempfile.mkdtemp(prefix="bench-pipelines-"))
    relay = None
    try:
        messages = mix_spool(str(work / "spool"), rows)
        per_log = {p: rows * n // sum(TABLES_MIX.values()) for p, n in TABLES_MIX.items()}
        records = sum(per_log.values())
        relay = _Relay(str(work / "spool"), 8)
        noop_rows, noop_seconds = _noop_read(relay.port)
        assert noop_rows == records, f"the noop read made {noop_rows} rows of {records}"
        folder = work / "pipeline"
        (folder / "transformations").mkdir(parents=True)
        (folder / "spark-pipeline.yml").write_text(SPEC.format(storage=folder / "storage"))
        source = SOURCE.format(port=relay.port, logs=list(TABLES_MIX))
        (folder / "transformations" / "zeek.py").write_text(source)
        first, _out = run_spark_pipelines(folder, timeout=1800)
        written = {p: _table_rows(folder, p) for p in TABLES_MIX}
        assert written == per_log, f"the tables hold {written}, not {per_log}"
        second, _out = run_spark_pipelines(folder, timeout=1800)
        assert {p: _table_rows(folder, p) for p in TABLES_MIX} == per_log, "an update added rows"
    finally:
        if relay is not None:
            relay.close()
        shutil.rmtree(work, ignore_errors=True)
    noop_rate = records / noop_seconds
    gross, net = records / first, records / max(first - second, 1e-9)
    return {
        "records": records,
        "messages": messages,
        "noop_read": {"seconds": noop_seconds, "records_per_s": noop_rate},
        "first_update_s": first,
        "noop_update_s": second,
        "records_per_s": gross,
        "records_per_s_net": net,
        "vs_noop_read": gross / noop_rate,
        "net_vs_noop_read": net / noop_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="records in the spool")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    r = bench(args.rows)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(
        f"noop read (baseline): {r['records']:,} records in {r['noop_read']['seconds']:.1f} s, "
        f"{r['noop_read']['records_per_s']:,.0f}/s"
    )
    print(
        f"spark-pipelines run, first update: {r['first_update_s']:.1f} s, "
        f"{r['records_per_s']:,.0f} records/s ({r['vs_noop_read']:.2f}x the noop read)"
    )
    print(
        f"second update (nothing new): {r['noop_update_s']:.1f} s; net of it: "
        f"{r['records_per_s_net']:,.0f} records/s ({r['net_vs_noop_read']:.2f}x)"
    )


if __name__ == "__main__":
    main()
