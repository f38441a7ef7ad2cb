"""Catching up from a relay: a query replays a relay's spool over loopback, against the same
spool read locally, in one run.

Usage: ``python bench/relay.py [--quick] [--json] [--events N] [--conn-rows N] [--relays 1,2,4] [--only-relays]``

A spool is filled with the records a query would find after a day away: small
Zeek events (the worst case per record) and, in a second spool, the demo's
conn-log Batches (400 records a message, as Zeek sends its logs). Each is then
read from its first offset to its end by a streaming query
(``startingOffsets=earliest``, ``trigger(availableNow=True)``, the ``noop``
sink, every other option at its default), after one unmeasured read, the three setups in
turn in each round:

- **local**: ``spoolPath`` on the same disk (what a query with a receiver reads);
- **relay**: a relay serving that spool (``broker-spark node --spool``'s server,
  plain TCP on loopback), the query with ``.option("relay", ...)``: its tasks
  fetch their ranges from the relay;
- **relay, inline**: the same with ``partitionData=inline`` (the driver fetches
  and ships the records: for executors that cannot reach the relay).

Rows per second over the batches that had rows (first start to last end),
best of ``--repeat`` runs each, and the relay's share of the local rate (the
target is at least half). Also the bare fetch: the record stream of the whole
spool over one connection, against ``read_packed`` of the same ranges.

Then **one query over 1, 2 and 4 relays** (``relay=h:p1,h:p2,...``), each relay
holding what its own sender sent (the conn rows split among them, as a Zeek
cluster's nodes spread their batches over its loggers): rows per second, and the
CPU per row of the driver side (the reader's planning: its offsets, bounds and
partitions, in Spark's driver-side Python process) against the executors'
tasks (the Python workers that fetch and decode). With relays the driver only
plans, so its share should stay small (target: at most 0.2 us a row) and the
rate grow with executors and relays, not with the driver.
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

from broker_spark import zeek  # noqa: E402
from broker_spark.data.binary import encode  # noqa: E402
from broker_spark.spool.spool import Spool  # noqa: E402


def _fill_events(path: str, count: int) -> None:
    import broker_spark as broker

    payloads = [encode(zeek.Event("ping", broker.Count(i), f"host-{i % 500}")) for i in range(1000)]
    with Spool(path) as spool:
        now = time.time_ns()
        for lo in range(0, count, 8192):
            n = min(8192, count - lo)
            spool.append_batch(
                [("zeek/events/ping", payloads[(lo + i) % 1000], "zeek", now) for i in range(n)]
            )


def _fill_conn(path: str, rows: int, seed: int = 7) -> int:
    from broker_spark.demo.events import ConnectionLogs
    from broker_spark.zeek import LogCreate

    source = ConnectionLogs(seed=seed)
    with Spool(path, index_interval=8) as spool:
        now = time.time_ns()
        spool.append_batch(
            [("zeek/logs/Conn::LOG", encode(LogCreate.of(source.schema)), "zeek", now)]
        )
        records = [(topic, encode(batch), "zeek", now) for topic, batch in source.messages(rows)]
        spool.append_batch(records)
        return len(records) + 1


def _serve(
    path: str, index_interval: int, ports: Any, stop: Any, served: Any, wire: str = "auto"
) -> None:
    """A relay's server over an existing spool, in a process of its own (as a relay node is):
    no endpoint, nothing new arrives. At its stop it reports what it sent (records, their
    bytes, the bytes on the wire) and its CPU."""
    import resource

    from broker_spark.spool.relay_server import RelayServer
    from broker_spark.spool.schema_history import LogSchemaHistory
    from broker_spark.spool.service import SpoolService

    spool = Spool(path, index_interval=index_interval)
    server = RelayServer(
        SpoolService(spool, ["zeek/"], history=LogSchemaHistory(path)), wire_compression=wire
    )
    ports.put(server.serve_tcp("127.0.0.1", 0))
    stop.wait()
    server.close()
    spool.close()
    use = resource.getrusage(resource.RUSAGE_SELF)
    served.put(
        (
            server.served_records,
            server.served_bytes,
            use.ru_utime + use.ru_stime,
            server.wire_bytes,
        )
    )


class _Relay:
    def __init__(self, path: str, index_interval: int, wire: str = "auto") -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        ports, self._stop, self._served = ctx.Queue(), ctx.Event(), ctx.Queue()
        self._proc = ctx.Process(
            target=_serve,
            args=(path, index_interval, ports, self._stop, self._served, wire),
            daemon=True,
        )
        self._proc.start()
        self.port = ports.get(timeout=60)
        self.wire_bytes = 0

    def close(self) -> tuple[int, int, float]:
        """Stop the relay: (records sent, bytes sent, its process's CPU seconds); the bytes
        its frames took on the wire are kept in ``wire_bytes``."""
        self._stop.set()
        try:
            records, sent, cpu, self.wire_bytes = self._served.get(timeout=30)
        finally:
            self._proc.join(30)
        return records, sent, cpu


def _query(spark: Any, options: dict[str, str]) -> dict[str, Any]:
    from spark_stream import CpuSampler, _per_row, _sustained, run_to_end

    reader = spark.readStream.format("broker")
    for key, value in options.items():
        reader = reader.option(key, value)
    sampler = CpuSampler().__enter__()
    started = time.monotonic()
    query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    rate, rows, seconds = _sustained(run_to_end(query, sampler, 600))
    return {
        "rows": rows,
        "rows_per_s": rate,
        "seconds": seconds,
        "wall_s": time.monotonic() - started,
        "cpu_us_per_row": _per_row(sampler.by_role(), rows),
    }


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: r["rows_per_s"])


def bench_kind(spark: Any, path: str, logs: bool, repeat: int) -> dict[str, Any]:
    base = {"startingOffsets": "earliest", "ssl.disable": "true"}
    if logs:
        base.update({"format": "zeek-logs", "logs": "conn", "schemaWait": "0"})
    else:
        base["topics"] = "zeek/events/"
    index = 8 if logs else 128
    local = {**base, "spoolPath": path, "receiver": "false", "listen": "127.0.0.1:0"}
    # The relay owns the spool it serves (its lock), so it serves a copy: the three setups can
    # then take turns.
    served = f"{path}-served"
    shutil.copytree(path, served)
    relay = _Relay(served, index)
    try:
        remote = {**base, "relay": f"127.0.0.1:{relay.port}"}
        inline = {**remote, "partitionData": "inline"}
        setups = {"local": local, "relay": remote, "relay_inline": inline}
        # One unmeasured read first, then the three in turn each round: Spark's code is still
        # being compiled in the first queries of a session, which would favour whichever
        # setup came last (measured: 120,000 rows/s in a session's first read, 490,000 to
        # 570,000 in the next three).
        _query(spark, local)
        runs: dict[str, list[dict[str, Any]]] = {key: [] for key in setups}
        for _ in range(repeat):
            for key, options in setups.items():
                runs[key].append(_query(spark, options))
        out: dict[str, Any] = {key: _best(found) for key, found in runs.items()}
        out["fetch"] = _fetch(relay, served)
    finally:
        relay.close()
        shutil.rmtree(served, ignore_errors=True)
    out["relay_vs_local"] = out["relay"]["rows_per_s"] / out["local"]["rows_per_s"]
    out["relay_inline_vs_local"] = out["relay_inline"]["rows_per_s"] / out["local"]["rows_per_s"]
    return out


def bench_relays(
    spark: Any, work: str, rows: int, counts: tuple[int, ...], repeat: int
) -> dict[str, Any]:
    """One query over ``n`` relays for each ``n`` in ``counts``: ``rows`` conn rows in all,
    an equal share in each relay's spool.

    The CPU a query spends on the driver side (the reader's process: planning, offsets) is
    mostly fixed: starting the process, importing pyarrow and the package, reaching each
    relay. What grows with the rows is what the target is about, so each count also runs
    over a quarter of the rows, and the marginal CPU per row (``driver_us_per_row``,
    ``tasks_us_per_row``) is the difference of the two runs over the difference of their
    rows; ``cpu_us_per_row`` keeps the whole run's figures, start included.
    """
    out: dict[str, Any] = {}
    for n in counts:
        runs: dict[int, dict[str, Any]] = {}
        for total in (rows // 4, rows):
            paths = [str(Path(work) / f"relays-{n}-{total}-{i}") for i in range(n)]
            for i, path in enumerate(paths):
                _fill_conn(path, total // n, seed=100 + i)
            relays = [_Relay(path, 8) for path in paths]
            try:
                options = {
                    "startingOffsets": "earliest",
                    "ssl.disable": "true",
                    "format": "zeek-logs",
                    "logs": "conn",
                    "schemaWait": "0",
                    "relay": ",".join(f"127.0.0.1:{r.port}" for r in relays),
                }
                runs[total] = _best([_query(spark, options) for _ in range(repeat)])
                if total == rows:
                    planning = _planning(options, total)
            finally:
                for relay in relays:
                    relay.close()
                for path in paths:
                    shutil.rmtree(path, ignore_errors=True)
        small, best = runs[rows // 4], runs[rows]
        best["planning"] = planning
        best["driver_us_per_row"] = _marginal(small, best, "reader (driver side)")
        best["tasks_us_per_row"] = _marginal(small, best, "python workers (read/write)")
        best["driver_us_per_row_whole_run"] = best["cpu_us_per_row"].get(
            "reader (driver side)", 0.0
        )
        best["quarter_run"] = {"rows": small["rows"], "cpu_us_per_row": small["cpu_us_per_row"]}
        out[str(n)] = best
    return out


def _planning(options: dict[str, str], rows: int, batch_messages: int = 250) -> dict[str, Any]:
    """The driver side's work alone, in this process, without Spark: the reader plans the
    relays' whole spools as a stream does (offsets, partitions, commits), in micro-batches
    of ``batch_messages`` messages (250 Batches of about 400 conn rows: 100,000 rows, what
    a 500 ms trigger takes at 200,000 rows/s). CPU of this process per row of ``rows``."""
    from broker_spark.spark.compat import ReadMaxRows
    from broker_spark.spark.source import BrokerDataSource
    from broker_spark.spark.zeek_schema import zeek_log_schema

    reader = BrokerDataSource(options).streamReader(zeek_log_schema("conn", relay=True))
    try:
        began = time.process_time()
        start = reader.initialOffset()
        batches = partitions = 0
        while True:
            end = reader.latestOffset(start, ReadMaxRows(batch_messages))
            if end == start:
                break
            partitions += len(reader.partitions(start, end))
            reader.commit(end)
            batches += 1
            start = end
        cpu = time.process_time() - began
    finally:
        reader.stop()
    return {
        "batches": batches,
        "partitions": partitions,
        "rows": rows,
        "cpu_s": round(cpu, 4),
        "us_per_row": round(cpu * 1e6 / max(1, rows), 4),
    }


def _marginal(small: dict[str, Any], big: dict[str, Any], role: str) -> float:
    """CPU microseconds of ``role`` per row the bigger run read beyond the smaller one."""
    whole = big["cpu_us_per_row"].get(role, 0.0) * big["rows"]
    part = small["cpu_us_per_row"].get(role, 0.0) * small["rows"]
    return round(max(0.0, whole - part) / max(1, big["rows"] - small["rows"]), 3)


def _fetch(relay: _Relay, path: str) -> dict[str, Any]:
    """The whole spool's record stream: over one relay connection, and read locally."""
    from broker_spark.spool.relay_client import SpoolClient

    with Spool(path, readonly=True) as view:
        start, end = view.start_offset(), view.end_offset()
    step = 100_000
    began = time.perf_counter()
    size = 0
    with SpoolClient.tcp("127.0.0.1", relay.port, None) as client:
        client.hello("follow", "bench")
        for lo in range(start, end, step):
            size += len(client.fetch(lo, min(end, lo + step), 300))
    remote = time.perf_counter() - began
    began = time.perf_counter()
    local_size = 0
    with Spool(path, readonly=True) as view:
        for lo in range(start, end, step):
            local_size += len(view.read_packed(lo, min(end, lo + step)))
    local = time.perf_counter() - began
    assert size == local_size
    return {
        "records": end - start,
        "mib": size / (1 << 20),
        "relay_mib_per_s": size / (1 << 20) / remote,
        "local_mib_per_s": size / (1 << 20) / local,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--events", type=int, default=None, help="small events (1,000,000)")
    parser.add_argument("--conn-rows", type=int, default=None, help="conn rows (1,000,000)")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each, best kept (2)")
    parser.add_argument(
        "--relays", default="1,2,4", help="relay counts of the one-query-over-relays rows"
    )
    parser.add_argument(
        "--only-relays", action="store_true", help="only the one-query-over-relays rows"
    )
    args = parser.parse_args()
    events = args.events or (100_000 if args.quick else 1_000_000)
    conn = args.conn_rows or (40_000 if args.quick else 1_000_000)
    repeat = args.repeat or (1 if args.quick else 2)
    from spark_stream import _session

    work = tempfile.mkdtemp(prefix="bench-spool-relay-")
    spark = _session()
    results: dict[str, Any] = {}
    try:
        if args.only_relays:  # an unmeasured query first: the session's first ones run slow
            bench_relays(spark, work, conn // 4, (1,), 1)
        else:
            events_path = str(Path(work) / "events")
            _fill_events(events_path, events)
            results["events"] = bench_kind(spark, events_path, logs=False, repeat=repeat) | {
                "records": events
            }
            conn_path = str(Path(work) / "conn")
            messages = _fill_conn(conn_path, conn)
            results["conn"] = bench_kind(spark, conn_path, logs=True, repeat=repeat) | {
                "rows": conn,
                "messages": messages,
            }
        counts = tuple(int(n) for n in args.relays.split(",") if n)
        results["relays"] = bench_relays(spark, work, conn, counts, repeat)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    _table(results)


def _table(r: dict[str, Any]) -> None:
    print("| spool | read | rows/s | against local | CPU us/row |")
    print("| --- | --- | ---: | ---: | --- |")
    for kind, label in (("events", "small Zeek events"), ("conn", "conn log, Batches of 400")):
        if kind not in r:
            continue
        x = r[kind]
        for key, how in (
            ("local", "local spoolPath"),
            ("relay", "relay, tasks fetch"),
            ("relay_inline", "relay, partitionData=inline"),
        ):
            run = x[key]
            ratio = (
                "1.00x"
                if key == "local"
                else f"{run['rows_per_s'] / x['local']['rows_per_s']:.2f}x"
            )
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in run["cpu_us_per_row"].items())
            print(f"| {label} | {how} | {run['rows_per_s']:,.0f} | {ratio} | {cpu} |")
        f = x["fetch"]
        print(
            f"| {label} | bare fetch of {f['mib']:,.0f} MiB | relay {f['relay_mib_per_s']:,.0f} MiB/s"
            f" | local read {f['local_mib_per_s']:,.0f} MiB/s | |"
        )
    print()
    print(
        "| relays | rows/s | driver side us/row, marginal (target <= 0.2) | tasks us/row, "
        "marginal | driver side us/row, whole run | CPU us/row, whole run |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    for n, run in r.get("relays", {}).items():
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in run["cpu_us_per_row"].items())
        print(
            f"| {n} | {run['rows_per_s']:,.0f} | {run['driver_us_per_row']:.3f} | "
            f"{run['tasks_us_per_row']:.2f} | {run['driver_us_per_row_whole_run']:.2f} | {cpu} |"
        )


if __name__ == "__main__":
    main()
