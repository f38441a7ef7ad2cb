"""Where Zeek's log records should become typed Arrow: the figures issue 51's design note
rests on (docs/architecture.md, "Where Zeek's log records are decoded").

Usage: ``python bench/log_decode.py [--quick] [--json] [--rows N] [--repeat R]``

In one process, on one core, no Spark, on the recordings' conn, dns and http LogWrites
in Broker Batches of 400 records (the mix conn 5 : dns 3 : http 2, as ``zeek_logs.py``):

- **decode**: today's decoder (``columnar/log_converter.LogConverter.convert``), from the
  messages' bytes to a typed record batch, in µs per record, given one message at a time
  (what decoding each Batch as it arrives costs), 10,000 records at a time and all of
  them at once;
- **IPC**: the typed batches written as an Arrow IPC stream (uncompressed, lz4, zstd) in
  record batches of 400 and of 10,000 rows, and read back into one record batch (what a
  Spark task would pay instead of decoding), in µs per record, with the bytes per record
  beside the Broker bytes;
- **ingest**: a relay spool's ``append_batch`` of the same messages (the relay's default
  zstd compression of filled files included), the ceiling a decode at ingest would cut.
- **relay threads**: what a relay does for the default read (``format=zeek-logs``, JSON
  lines): the mix spooled, read back in its groups (``ROWS_TARGET`` bytes of records) and
  decoded into IPC rows (``spool/served_rows.RangeRows``), by one thread, then by two
  threads at once each decoding all of it (a relay's two decoders serving two tasks): CPU
  and wall µs per record. Python's lock is one, so two threads cost more CPU a record.
- **compiled**: the decode of 10,000 records and the relay's figures again with the optional
  C accelerators turned off (``broker_spark.zeek.compiled``: the numpy and Arrow code every
  install without a C compiler runs), and how much more CPU that costs, in the same run.

Every figure is the best of ``--repeat`` runs; the ratios are to today's decode of
10,000 records at a time, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from _zeek_limits import log_converter, log_payloads
from _zeek_tables import TABLES_MIX as MIX
from _zeek_tables import log_writes, mix_spool
from zeek_logs import best_of

from broker_spark.columnar.converter_spec import converter_spec, schemas_digest
from broker_spark.columnar.log_converter import LogConverter
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import generic_log_schema, log_columns
from broker_spark.spool.relay_protocol import ROWS_TARGET
from broker_spark.spool.relay_server import read_about
from broker_spark.spool.schema_history import LogSchemaHistory
from broker_spark.spool.served_rows import RangeRows
from broker_spark.spool.spool import Spool
from broker_spark.zeek import compiled, standard_schema

LOGS = tuple(MIX)
#: Records per group decoded at once, by what the group is.
GROUPS = {"message": 400, "10k": 10_000}
CODECS: dict[str, str | None] = {"none": None, "lz4": "lz4", "zstd": "zstd"}
#: Spool files of 4 MiB, so that the few megabytes of the ingest figure fill and compress
#: files as a relay's 64 MiB ones do over a longer run.
SEGMENT_BYTES = 4 << 20


@contextlib.contextmanager
def accelerators(on: bool) -> Iterator[bool]:
    """The optional C accelerators on (as installed) or off (the pure-Python fallback);
    yields whether they are on."""
    if on:
        yield compiled.built()
        return
    with compiled.turned_off():
        yield False


def _decode(converter: Any, path: str, payloads: list[bytes]) -> pa.RecordBatch:
    n = len(payloads)
    topic = f"zeek/logs/{standard_schema(path).stream}"
    return converter.convert(
        [topic] * n, payloads, ["zeek"] * n, [1_700_000_000_000_000_000] * n, list(range(n))
    )


def _ipc(batches: list[pa.RecordBatch], codec: str | None) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, batches[0].schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def _read(buf: pa.Buffer) -> pa.RecordBatch:
    return pa.ipc.open_stream(buf).read_all().combine_chunks().to_batches()[0]


def bench_log(path: str, rows: int, repeat: int) -> dict[str, Any]:
    """One log's decode and IPC figures, µs per record."""
    writes = log_writes(path)
    create, *batches = log_payloads(path, rows, writes, 400)
    out: dict[str, Any] = {"broker_bytes_per_record": sum(map(len, batches)) / rows}
    per = 1e6 / rows
    # One converter for the log, kept across calls, as a task keeps one for its partition
    # and a decoding relay would keep one per log (a new one per call costs 0.13 ms, and
    # its first call more: a third more a record in groups of 400).
    converter = log_converter(path)
    stream = [create, *batches]
    out["decode_all"] = best_of(lambda: _decode(converter, path, stream), repeat) * per
    for name, size in GROUPS.items():
        step = size // 400
        groups = [batches[i : i + step] for i in range(0, len(batches), step)]
        groups[0] = [create, *groups[0]]
        out[f"decode_{name}"] = (
            best_of(lambda g=groups: [_decode(converter, path, x) for x in g], repeat) * per
        )  # fmt: skip
        if name == "10k":
            with accelerators(False):
                pure = best_of(lambda g=groups: [_decode(converter, path, x) for x in g], repeat)
            out["decode_10k_pure"] = pure * per
    typed = _decode(log_converter(path), path, stream)
    assert typed.num_rows == rows, (path, typed.num_rows)
    assert _decode(converter, path, stream).equals(typed), path  # a kept one decodes the same
    with accelerators(False):
        assert _decode(log_converter(path), path, stream).equals(typed), path  # and the pure one
    for name, size in GROUPS.items():
        parts = [typed.slice(lo, size) for lo in range(0, rows, size)]
        for codec_name, codec in CODECS.items():
            buf = _ipc(parts, codec)
            assert _read(buf).equals(typed), (path, name, codec_name)
            key = f"ipc_{name}_{codec_name}"
            out[f"{key}_write"] = best_of(lambda p=parts, c=codec: _ipc(p, c), repeat) * per
            out[f"{key}_read"] = best_of(lambda b=buf: _read(b), repeat) * per
            out[f"{key}_bytes_per_record"] = buf.size / rows
    return out


def bench_ingest(rows: int, repeat: int) -> dict[str, Any]:
    """The mix's messages appended to a spool, four at a time (a pump's take), and its
    filled files compressed as a relay's compactor does: µs per record of wall and CPU."""
    messages = []
    for path, share in MIX.items():
        stream = standard_schema(path).stream
        count = rows * share // sum(MIX.values())
        _, *batches = log_payloads(path, count, log_writes(path), 400)
        messages += [(f"zeek/logs/{stream}", b, "zeek") for b in batches]
    records = 400 * len(messages)
    out: dict[str, Any] = {}
    for compression in ("zstd", "none"):
        wall = cpu = float("inf")
        for _ in range(repeat):
            folder = tempfile.mkdtemp(prefix="log-decode-")
            try:
                with Spool(
                    folder, SEGMENT_BYTES, fsync="interval", compression=compression
                ) as spool:
                    c0, t0 = time.process_time(), time.perf_counter()
                    for i in range(0, len(messages), 4):
                        now = time.time_ns()
                        spool.append_batch([(t, m, s, now) for t, m, s in messages[i : i + 4]])
                    while spool.compact_next():
                        pass
                    wall = min(wall, time.perf_counter() - t0)
                    cpu = min(cpu, time.process_time() - c0)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        out[compression] = {"wall_us": wall / records * 1e6, "cpu_us": cpu / records * 1e6}
    return out


def _threads_figures(
    decode: Callable[[list[int]], None], threads: int, rows: int, repeat: int
) -> dict[str, float]:
    """``threads`` threads each running ``decode`` (all ``rows`` records) at once: the best of
    ``repeat`` µs of CPU and of wall time per record."""
    cpu = wall = float("inf")
    for _ in range(repeat):
        done: list[int] = []
        workers = [threading.Thread(target=decode, args=(done,)) for _ in range(threads)]
        c0, t0 = time.process_time(), time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        records = sum(done)
        assert records == rows * threads, (records, rows, threads)
        wall = min(wall, (time.perf_counter() - t0) / records * 1e6)
        cpu = min(cpu, (time.process_time() - c0) / records * 1e6)
    return {"cpu_us": cpu, "wall_us": wall}


def bench_relay_threads(rows: int, repeat: int) -> dict[str, Any]:
    """The mix (``rows`` records in all) decoded as a relay decodes the default read's
    ranges, by one thread and by two at once: µs of CPU and of wall time per record, best of
    ``repeat``; ``cpu_ratio``: two threads' CPU a record over one's. The same again with the
    C accelerators off (``pure_``); ``compiled_ratio``: the pure CPU a record over the
    accelerated, one thread."""
    folder = tempfile.mkdtemp(prefix="log-decode-relay-")
    try:
        mix_spool(folder, rows)
        spool = Spool(folder, readonly=True, index_interval=8)  # as the tables bench's relay
        history = LogSchemaHistory(folder, readonly=True)
        history.refresh()
        start, end = spool.start_offset(), spool.end_offset()
        groups = []
        while start < end:
            data, hi = read_about(spool, start, end, ROWS_TARGET)
            groups.append((data, hi - start))
            start = hi
        schemas = history.snapshot(spool.start_offset())
        spool.close()
        spark_schema = generic_log_schema(relay=True)
        spec = converter_spec(
            LogConverter(arrow_schema_of(spark_schema), log_columns(spark_schema, ()))
        )

        def decode(done: list[int]) -> None:
            decoder = RangeRows(spec, "relay")
            assert decoder.begin(schemas, schemas_digest(schemas))
            done.append(sum(decoder.decode(data, count)[1] for data, count in groups))

        out: dict[str, Any] = {"groups": len(groups)}
        for prefix, on in (("", True), ("pure_", False)):
            with accelerators(on) as built:
                decode([])  # the converters' first use: not measured
                for threads in (1, 2):
                    figures = _threads_figures(decode, threads, rows, repeat)
                    out[f"{prefix}{threads}_threads"] = figures
            if on:
                out["compiled"] = built
            out[f"{prefix}cpu_ratio"] = (
                out[f"{prefix}2_threads"]["cpu_us"] / out[f"{prefix}1_threads"]["cpu_us"]
            )
        out["compiled_ratio"] = out["pure_1_threads"]["cpu_us"] / out["1_threads"]["cpu_us"]
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records, one run each")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--rows", type=int, default=40_000, help="records of each log (default 40,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each figure (best kept)")
    args = ap.parse_args()
    rows, repeat = (10_000, 1) if args.quick else (args.rows, args.repeat)
    rows = max(10_000, rows // 10_000 * 10_000)  # whole groups of 10,000
    logs = {path: bench_log(path, rows, repeat) for path in LOGS}
    total = sum(MIX.values())
    mix = {
        key: sum(logs[p][key] * MIX[p] for p in LOGS) / total for key in logs[LOGS[0]]
    }  # fmt: skip
    result = {
        "rows": rows,
        "logs": logs,
        "mix": mix,
        "ingest": bench_ingest(rows, repeat),
        "relay_threads": bench_relay_threads(rows * len(LOGS), repeat),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    base = mix["decode_10k"]
    print(f"{rows:,} records of each log, Batches of 400; µs per record (x: over decode_10k)")
    print(f"| figure | {' | '.join(LOGS)} | mix | x |")
    print(f"|---|{'---:|' * (len(LOGS) + 2)}")
    for key in mix:
        cells = " | ".join(f"{logs[p][key]:.3f}" for p in LOGS)
        ratio = "" if "bytes" in key else f"{mix[key] / base:.2f}"
        print(f"| {key} | {cells} | {mix[key]:.3f} | {ratio} |")
    for compression, figures in result["ingest"].items():
        wall, cpu = figures["wall_us"], figures["cpu_us"]
        print(
            f"spool ingest ({compression}): {wall:.3f} µs wall, {cpu:.3f} µs CPU a record "
            f"({1 / wall:.2f}M records/s)"
        )
    relay = result["relay_threads"]
    for prefix, what in (("", "compiled" if relay["compiled"] else "not built"), ("pure_", "pure")):
        for threads in (1, 2):
            figures = relay[f"{prefix}{threads}_threads"]
            print(
                f"relay decode ({what}), JSON lines, {relay['groups']} groups, {threads} "
                f"thread(s): {figures['cpu_us']:.2f} µs CPU, {figures['wall_us']:.2f} µs wall a record"
            )
        print(f"  two threads' CPU a record over one's: {relay[f'{prefix}cpu_ratio']:.2f}")
    print(f"pure over compiled, CPU a record, one thread: {relay['compiled_ratio']:.2f}")


if __name__ == "__main__":
    main()
