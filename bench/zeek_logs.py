"""Zeek's logs: records decoded and rendered, and a streaming query reading conn-log Batches.

Usage: ``python bench/zeek_logs.py [--quick] [--json] [--seconds S] [--only render|stream]``

What is measured, in one run:

- **render**: the records of a real Zeek's conn log (the 118 conn records of
  the two recordings in ``tests/vectors``, repeated), arriving as Zeek sends
  them (Batches of 400 LogWrites), turned into Zeek's JSON lines the way
  ``broker-spark logs`` does (:class:`broker_spark.zeek.log_lines.LogLines`:
  find the records, decode, render), against the baseline of plain
  ``json.loads`` of the lines Zeek itself wrote for the same records, in the
  same run. Also: the same records as a Spark partition's typed Arrow batch
  (:class:`broker_spark.columnar.log_converter.LogConverter`, what executors do),
  and the one-record path (``decode_values`` + ``render_line``). Best of five
  runs each, rows per second.
- **stream**: a publisher *process* sends pre-encoded conn-log Batches (400
  records each, of the demo's synthetic conn log: random hosts, ports, sizes,
  mostly IPv4; as a Zeek would: its C++ encoding costs no Python time) at
  340,000 records a second, above the target (faster, it would only fill the
  spool beyond its retention); a query ``readStream.format("broker")
  .option("format", "zeek-logs").option("logs", "conn")`` (typed, nested
  columns; everything else at its default) feeds the ``noop`` sink, with
  Spark's default trigger (a batch as soon as the last ended), then, labelled
  as tuned, with 500 ms (as ``bench/spark_stream.py``) and 2 s processing-time
  triggers. Sustained rows per second over the batches that had rows, and CPU
  per row by process. One unmeasured run (12 s at 250,000 a second) warms the JVM first
  (the first run after start-up is 5 to 10 percent slower, whatever its trigger:
  Spark's code still being compiled).

- **stream_zeromq**: the same query and records, received as the logger of a Zeek
  cluster on the ZeroMQ backend (``zeromq.logs``): a sender process PUSHes batches of
  1000 records in Zeek's ``zeek-bin-serializer`` at the same offered rate, with Zeek's
  defaults (``log_sndhwm`` 1000, non-blocking sends: what the socket refuses is what a
  Zeek drops, counted as ``dropped_at_sender``), right after the Broker run.

- **tables**: a relay's spool holding a mix of logs in about the proportions a Zeek
  sees (conn 5 : dns 3 : http 2, the recordings' records repeated, in Batches of 400),
  read from its first offset to its end (``trigger(availableNow=True)``) three times in
  the same session: into the ``noop`` sink a row a record (``format=zeek-logs``, the
  columns ``write_zeek_tables`` reads, as JSON lines: the baseline; the relay decodes
  the tasks' ranges, as by default), each log's typed columns into ``noop``, a query a log
  (``noop_typed``: ``logs=<path>``, the same rows as the typed limits below), the same with
  ``relayDecode=false`` (``noop_tasks``:
  Spark's tasks decode), into ``noop`` a row
  per log of each message holding the message's bytes (``noop_messages``: the very
  stream ``write_zeek_tables`` reads), and
  with ``write_zeek_tables`` into a table per log (Spark's own Parquet tables in a
  temporary database: the marker path). Records per second of each (the tables'
  records counted in the tables), and each one's share of the ``noop`` rate (target
  for the tables: at least 0.6x). The relay runs in a process of its own on the same
  cores; its CPU per record is the ``relay`` tier.

``--quick`` shortens everything (a smoke test); ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing as mp
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

from _zeek_tables import (  # noqa: E402
    BATCH,
    LAKE_WAYS,
    TABLE_WAYS,
    TABLES_MIX,
    bench_tables,
    log_writes,
)

import broker_spark as broker  # noqa: E402
from broker_spark.config import BrokerOptions, Configuration  # noqa: E402

TRIGGER = "500 milliseconds"
LOG_TOPIC = "zeek/logs/Conn::LOG"


def _conn_records() -> tuple[list[bytes], list[str], Any]:
    """The conn records of the recordings: serial data, Zeek's own lines, and the schema."""
    from zeek_recordings import LOG_RECORDINGS, recording

    from broker_spark.zeek import standard_schema

    serials: list[bytes] = []
    lines: list[str] = []
    for name in LOG_RECORDINGS:
        rec = recording(name)
        serials += rec.writes["conn"]
        lines += rec.local_lines("conn")
    return serials, lines, standard_schema("conn")


def _batches(serials: list[bytes], count: int) -> list[bytes]:
    """``count`` records (cycling through ``serials``) as Batch messages of up to 400."""
    from broker_spark.data.varbyte import encode_varbyte
    from broker_spark.spark.write.log_rows import _batch
    from broker_spark.zeek.log_scan import LOG_WRITE_HEAD

    def text(s: str) -> bytes:
        raw = s.encode()
        return encode_varbyte(len(raw)) + raw

    head = (
        LOG_WRITE_HEAD + text("Conn::LOG") + b"\x0b" + text("Log::WRITER_ASCII") + b"\x05"
        + text("conn") + b"\x05"
    )  # fmt: skip
    writes = [head + encode_varbyte(len(s)) + s for s in serials]
    out = []
    for lo in range(0, count, BATCH):
        n = min(BATCH, count - lo)
        out.append(_batch([writes[(lo + i) % len(writes)] for i in range(n)]))
    return out


def best_of(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def bench_render(rows: int, repeat: int) -> dict[str, Any]:
    from broker_spark.columnar.log_converter import LogConverter
    from broker_spark.data.binary import encode
    from broker_spark.spark.source import arrow_schema_of
    from broker_spark.spark.zeek_schema import log_columns, zeek_log_schema
    from broker_spark.zeek import LogCreate, decode_values, render_line
    from broker_spark.zeek.log_lines import LogLines

    serials, lines, schema = _conn_records()
    create = encode(LogCreate.of(schema))
    messages = [(create, "zeek")] + [(b, "zeek") for b in _batches(serials, rows)]
    zeek_lines = [lines[i % len(lines)] for i in range(rows)]

    def ours() -> None:
        decoder = LogLines()
        # as the CLI takes them: what has arrived (here 25 Batches at a time)
        got = 0
        for lo in range(0, len(messages), 25):
            got += len(decoder.lines(messages[lo : lo + 25]))
        assert got == rows, got

    def baseline() -> None:
        loads = json.loads
        for line in zeek_lines:
            loads(line)

    spark_schema = zeek_log_schema(schema)
    columns = log_columns(spark_schema, schema.names)
    topics = [LOG_TOPIC] * len(messages)
    senders = ["zeek"] * len(messages)
    stamps = [1_700_000_000_000_000_000] * len(messages)
    offsets = list(range(len(messages)))
    payloads = [m for m, _ in messages]

    def typed() -> None:
        conv = LogConverter(arrow_schema_of(spark_schema), columns, known=schema, paths=["conn"])
        batch = conv.convert(topics, payloads, senders, stamps, offsets)
        assert batch.num_rows == rows

    one_at_a_time = serials * max(1, 2000 // len(serials))

    def scalar() -> None:
        names = list(schema.names)
        for s in one_at_a_time:
            render_line(decode_values(s), names)

    # the bulk output equals Zeek's lines
    sample = [line for _path, line in LogLines().lines(messages[:2])]
    assert sample == zeek_lines[: len(sample)]
    t_ours = best_of(ours, repeat)
    t_base = best_of(baseline, repeat)
    t_typed = best_of(typed, repeat)
    t_scalar = best_of(scalar, max(1, repeat // 2))
    return {
        "rows": rows,
        "render_rows_per_s": rows / t_ours,
        "json_loads_rows_per_s": rows / t_base,
        "render_vs_json_loads": t_base / t_ours,
        "typed_arrow_rows_per_s": rows / t_typed,
        "one_record_rows_per_s": len(one_at_a_time) / t_scalar,
    }


# --- the stream ---------------------------------------------------------------------------------


def _config() -> Configuration:
    return Configuration(BrokerOptions(disable_ssl=True, publisher_buffer_size=8192))


def _publisher(conn: Any, seconds: float, rate: float) -> None:
    """Listen, wait for the query, send pre-encoded conn Batches for ``seconds``, ``rate``
    records a second at most (unpaced, a publisher outruns the query and the spool's
    retention drops what the query has not read: data loss, not throughput)."""
    from broker_spark.data.binary import encode
    from broker_spark.demo.events import ConnectionLogs
    from broker_spark.zeek import LogCreate

    source = ConnectionLogs(seed=11)
    schema = source.schema
    # 23,600 distinct records (random hosts, ports, uids, sizes), each Batch reused: no
    # record repeats within LZ4's window, so partitions compress as real ones do
    pool = [encode(batch) for _topic, batch in source.messages(BATCH * 59)]
    with broker.Endpoint(_config()) as ep:
        conn.send(ep.listen("127.0.0.1", 0))
        while not ep.peer_subscriptions():
            time.sleep(0.01)
        ep.publish_encoded([(LOG_TOPIC, encode(LogCreate.of(schema)))])
        conn.send("subscribed")
        sent = 0
        for i in _paced(seconds, rate, 8 * BATCH):
            ep.publish_encoded([(LOG_TOPIC, pool[(8 * i + k) % len(pool)]) for k in range(8)])
            sent += 8 * BATCH
        conn.send(sent)
        conn.recv()


def _paced(seconds: float, rate: float, step: int) -> Any:
    """Yield 0, 1, 2... for ``seconds``, each time ``step`` more records may go out at
    ``rate`` records a second (sleeping when ahead)."""
    began = time.monotonic()
    stop = began + seconds
    i = 0
    while time.monotonic() < stop:
        ahead = began + i * step / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        yield i
        i += 1


def _zeromq_batches(count: int) -> tuple[list[bytes], Any]:
    """The demo's synthetic conn records as Zeek's ZeroMQ log batches of 1000 records
    (``Log::write_buffer_size``), with their schema."""
    from broker_spark.demo.events import ConnectionLogs
    from broker_spark.zeek.log_batch import encode_batch

    source = ConnectionLogs(seed=11)
    records = [source.record() for _ in range(count)]
    schema = source.schema
    return [
        encode_batch(schema, records[lo : lo + ZEEK_BATCH])
        for lo in range(0, len(records), ZEEK_BATCH)
    ], schema


ZEEK_BATCH = 1000


def _zeromq_publisher(conn: Any, seconds: float, rate: float, endpoint: str) -> None:
    """A Zeek node on the ZeroMQ backend: a PUSH socket with Zeek's defaults (``log_sndhwm``
    1000, non-blocking sends) connected to the query's logger PULL, sending batches of 1000
    conn records, ``rate`` records a second; a refused send is what Zeek drops (counted)."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    pool, _schema = _zeromq_batches(BATCH * 59)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.sndhwm = 1000
    push.linger = 0
    monitor = push.get_monitor_socket(zmq.EVENT_CONNECTED)
    push.connect(endpoint)
    conn.send(endpoint)
    while recv_monitor_message(monitor)["event"] != zmq.EVENT_CONNECTED:
        pass
    conn.send("subscribed")
    sent = dropped = 0
    for i in _paced(seconds, rate, ZEEK_BATCH):
        frames = [b"log-write", b"zeromq_bench_worker", b"zeek-bin-serializer", pool[i % len(pool)]]
        try:
            push.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            dropped += ZEEK_BATCH
        sent += ZEEK_BATCH
    conn.send(sent - dropped)
    conn.send(dropped)
    conn.recv()
    push.disable_monitor()
    monitor.close(0)
    push.close(0)
    ctx.term()


#: Records a second the publisher offers: above the target (300,000), so a query that
#: keeps up shows its own rate, and the backlog of one that does not stays within the
#: spool's default retention (1 GiB, about 2.4 million conn records) for 15 s.
OFFERED_RATE = 340_000.0


def bench_stream(
    spark: Any,
    seconds: float,
    rate: float = OFFERED_RATE,
    trigger: str | None = None,
    zeromq: bool = False,
    **options: str,
) -> dict[str, Any]:
    import socket

    from spark_stream import CpuSampler, _per_row, _receive, _sustained

    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    if zeromq:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            where = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        target, args = _zeromq_publisher, (theirs, seconds, rate, where)
    else:
        target, args = _publisher, (theirs, seconds, rate)
    proc = ctx.Process(target=target, args=args, daemon=True, name="publisher")
    proc.start()
    found = _receive(ours, proc, 60.0)
    connect = {"zeromq.logs": found} if zeromq else {"peer": f"127.0.0.1:{found}"}
    sampler = CpuSampler().__enter__()
    query: Any = (
        spark.readStream.format("broker")
        .option("format", "zeek-logs")
        .option("logs", "conn")
        .options(**connect)
        .option("schemaWait", "0")
        .options(**options)
    )
    if not zeromq:
        query = query.option("ssl.disable", "true")
    query = query.load().writeStream.format("noop")
    query = (query.trigger(processingTime=trigger) if trigger else query).start()
    dropped = 0
    try:
        assert _receive(ours, proc) == "subscribed"
        sent = _receive(ours, proc, seconds + 120.0)
        if zeromq:
            dropped = _receive(ours, proc, 10.0)
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
        with contextlib.suppress(OSError):
            ours.send("done")
        proc.join(10)
        sampler.__exit__()
    sustained, rows, elapsed = _sustained(progress)
    return {
        "path": "ZeroMQ logger (PULL)" if zeromq else "Broker peering",
        "dropped_at_sender": dropped,
        "offered_rate": rate,
        "trigger": trigger or "Spark's default (next batch as soon as one ends)",
        "options": options,
        "published": sent,
        "rows": rows,
        "rows_per_s": sustained,
        "seconds": elapsed,
        "batches": sum(1 for p in progress if p["numInputRows"]),
        "cpu_us_per_row": _per_row(sampler.by_role(), sent),
    }


#: Records of each log in the tables' mix, per 10: about what a Zeek on a busy network logs.
def _lake_conf(folder: str) -> dict[str, str]:
    """The tests' settings for Delta and Iceberg (tests/lake_fixtures.py), jars included."""
    from lake_fixtures import lake_conf  # only with --lake: the tests' helper (pytest, mvn)

    return lake_conf(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--seconds", type=float, default=15.0, help="publishing time per run")
    parser.add_argument("--only", choices=("render", "stream", "tables"), help="one part only")
    parser.add_argument(
        "--lake", action="store_true", help="tables: Delta and Iceberg too (their jars by mvn)"
    )
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    results: dict[str, Any] = {}
    if args.only in (None, "render"):
        results["render"] = bench_render(20_000 if args.quick else 100_000, 2 if args.quick else 5)
    if args.only in (None, "stream"):
        from spark_stream import _session

        spark = _session()
        try:
            bench_stream(spark, min(seconds, 12.0), 250_000.0)  # warms the JVM: not measured
            results["stream"] = bench_stream(spark, seconds)
            results["stream_zeromq"] = bench_stream(spark, seconds, zeromq=True)
            results["stream_500ms"] = bench_stream(spark, seconds, trigger="500 milliseconds")
            results["stream_2s"] = bench_stream(spark, seconds, trigger="2 seconds")
        finally:
            spark.stop()
    if args.only in (None, "tables"):
        from _zeek_limits import LIMITS, bench_limits  # pyspark: only for the Spark parts
        from spark_stream import _session

        lake = tempfile.mkdtemp(prefix="bench-lake-")
        spark = _session(_lake_conf(lake) if args.lake else None)
        try:
            bench_tables(spark, 20_000, 1, args.lake)  # warms the JVM and the paths: not measured
            rows = 100_000 if args.quick else 1_000_000
            results["tables"] = tables = bench_tables(
                spark, rows, 1 if args.quick else 2, args.lake
            )
            tables.update(
                bench_limits(spark, rows, 1 if args.quick else 2, TABLES_MIX, log_writes, BATCH)
            )
            for limit in LIMITS:
                for read in ("noop", "noop_typed"):
                    tables[f"{read}_vs_{limit}"] = (
                        tables[read]["rows_per_s"] / tables[limit]["rows_per_s"]
                    )
        finally:
            spark.stop()
            shutil.rmtree(lake, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    _table(results)


def _table(r: dict[str, Any]) -> None:
    if "render" in r:
        x = r["render"]
        print("| records | rows/s | against |")
        print("| --- | ---: | --- |")
        print(
            f"| decode + render (LogLines, Batches of 400) | {x['render_rows_per_s']:,.0f} | "
            f"{x['render_vs_json_loads']:.2f}x json.loads ({x['json_loads_rows_per_s']:,.0f}/s) |"
        )
        print(f"| typed Arrow (LogConverter) | {x['typed_arrow_rows_per_s']:,.0f} | |")
        print(f"| one record at a time | {x['one_record_rows_per_s']:,.0f} | |")
    if "tables" in r:
        from _zeek_limits import LIMITS

        x = r["tables"]
        print()
        print("| relay to | rows/s | against noop (target 0.6x) | CPU us/row |")
        print("| --- | ---: | ---: | --- |")
        reads = ("noop", "noop_typed", "noop_tasks", "noop_messages")
        for kind in (*reads, *TABLE_WAYS, *LAKE_WAYS, *LIMITS):
            if kind not in x:
                continue
            run = x[kind]
            ratio = f"{run['rows_per_s'] / x['noop']['rows_per_s']:.2f}x"
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in run["cpu_us_per_row"].items())
            print(f"| {kind} | {run['rows_per_s']:,.0f} | {ratio} | {cpu} |")
        for limit in LIMITS:
            for read, what in (("noop", "JSON lines"), ("noop_typed", "typed")):
                if f"{read}_vs_{limit}" in x:
                    share = x[f"{read}_vs_{limit}"]
                    print(f"\nthe noop read ({what}) is {share:.3f} of {LIMITS[limit]}")
    for key in ("stream", "stream_zeromq", "stream_500ms", "stream_2s"):
        if key not in r:
            continue
        s = r[key]
        print()
        print(
            f"{key} ({s['path']}, trigger: {s['trigger']}): {s['rows_per_s']:,.0f} rows/s "
            f"sustained ({s['rows']:,} rows in {s['batches']} batches, {s['seconds']:.1f} s; "
            f"{s['dropped_at_sender']:,} dropped at the sender); "
            f"CPU us/row: {s['cpu_us_per_row']}"
        )


if __name__ == "__main__":
    main()
