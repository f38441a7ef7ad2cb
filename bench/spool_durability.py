"""A relay's spool on disk: what each fsync policy costs, the bytes a Zeek log record takes, and
what compressing the spool would save, measured on a real Zeek's logs in one run.

Usage: ``python bench/spool_durability.py [--seconds S] [--json]``

- **fsync**: the log batches of a real Zeek 9.1 (``tests/vectors``, ZeroMQ's
  ``zeek-bin-serializer``; about 3 records and 2 KB a batch) appended as a relay's
  pump appends them (what one take holds: 256 batches, about 512 KB) for ``S``
  seconds with ``fsync`` ``never``, ``interval`` (1 s) and ``always``, the three in
  turn and twice; batches a second, best of two, and each as a ratio of ``never``.
  On this machine's disk (the spool's folder is under ``--dir``, the system's
  temporary folder by default).
- **bytes per record**: the spool's bytes over the log records its batches hold,
  for the ZeroMQ recording and for Zeek's Broker log messages (``Batch``es of
  LogWrites), and so the disk a day takes at 16,000 and 50,000 records a second.
- **compression**: the recording's spool records as one block, and each batch
  alone, compressed with zstd (levels 1 and 3), lz4 and zlib level 1 (pyarrow's
  codecs): the ratio and MB a second to compress and to decompress.
- **compressed spool**: a spool of the default settings (64 MiB files, fsync
  ``interval``) with ``compression`` ``none``, ``zstd`` and ``lz4``: batches a second
  appended for ``S`` seconds while the spool's thread compresses the files it fills
  (the appending thread's rate, as a ratio of ``none``), the thread's MB a second, and a
  reader going back over the whole spool as a relay reads it (MB a second of records
  as written, and as a ratio of ``none``). Each spool holds the recording repeated,
  which compresses by its repeats: its size on disk is not a figure for real logs
  (the ``compression`` block is).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TAKE = 256  # batches a pump appends at once, about (the receiver's 1 MiB take)


def _zmq_records() -> tuple[list[tuple[str, bytes, str]], int]:
    """The ZeroMQ recording as spool records, and the log records they hold."""
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    from broker_spark.zeek.log_batch import read_header, record_count

    out, records = [], 0
    for frames in zmq_messages(ZMQ_LOGS):
        header = read_header(frames[3])
        out.append(("zeek/logs/" + header.stream, frames[3], frames[1].decode()))
        records += record_count(frames[3], header)
    return out, records


def _broker_records() -> tuple[list[tuple[str, bytes, str]], int]:
    from zeek_recordings import recording

    from broker_spark.zeek.log_lines import LogLines

    rec = recording("zeek-logs-dns-edns-ecs")
    out = [(t, p, "zeek") for t, p in rec.data]
    lines = sum(1 for _ in LogLines().lines([(p, "zeek") for _t, p in rec.data]))
    return out, lines


def fsync_rate(
    policy: str, batch: list[tuple[str, bytes, str]], seconds: float, where: str
) -> float:
    from broker_spark.spool.spool import Spool

    work = tempfile.mkdtemp(prefix="broker-spark-fsync-", dir=where)
    try:
        with Spool(work, fsync=policy) as spool:
            return _append_for(spool, batch, seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _append_for(spool: Any, batch: list[tuple[str, bytes, str]], seconds: float) -> float:
    """Append ``batch`` again and again for ``seconds``: batches a second."""
    appended = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        now = time.time_ns()
        spool.append_batch([(t, p, s, now) for t, p, s in batch])
        appended += len(batch)
    return appended / (time.monotonic() - began)


def bytes_per_record(records: list[tuple[str, bytes, str]], logs: int, where: str) -> float:
    from broker_spark.spool.spool import Spool

    work = tempfile.mkdtemp(prefix="broker-spark-size-", dir=where)
    repeat = 200
    try:
        with Spool(work) as spool:
            now = time.time_ns()
            for _ in range(repeat):
                spool.append_batch([(t, p, s, now) for t, p, s in records])
            return spool.total_bytes / (logs * repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compression(records: list[tuple[str, bytes, str]], where: str) -> dict[str, Any]:
    """Each codec on the recording's spool records once (a block with no repeats: a spool of
    the recording repeated would compress by its repeats, not by Zeek's data), and on each
    batch alone (a record at a time)."""
    import pyarrow as pa

    from broker_spark.spool.spool import Spool

    work = tempfile.mkdtemp(prefix="broker-spark-compress-", dir=where)
    try:
        with Spool(work) as spool:
            now = time.time_ns()
            spool.append_batch([(t, p, s, now) for t, p, s in records])
            raw = spool.read_packed(0, spool.end_offset())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"block_kb": round(len(raw) / 1024, 1)}
    codecs: dict[str, Any] = {
        "zstd-1": pa.Codec("zstd", 1),
        "zstd-3": pa.Codec("zstd", 3),
        "lz4": pa.Codec("lz4_frame"),
        "zlib-1": None,
    }
    rounds = 50
    for name, codec in codecs.items():

        def pack(data: bytes, codec: Any = codec) -> bytes:
            return (
                codec.compress(data, asbytes=True) if codec is not None else zlib.compress(data, 1)
            )

        began = time.perf_counter()
        for _ in range(rounds):
            packed = pack(raw)
        c_took = (time.perf_counter() - began) / rounds
        began = time.perf_counter()
        for _ in range(rounds):
            if codec is not None:
                codec.decompress(packed, decompressed_size=len(raw), asbytes=True)
            else:
                zlib.decompress(packed)
        d_took = (time.perf_counter() - began) / rounds
        alone = sum(len(pack(p)) for _t, p, _s in records)
        out[name] = {
            "ratio": round(len(raw) / len(packed), 2),
            "ratio_batch_alone": round(sum(len(p) for _t, p, _s in records) / alone, 2),
            "compress_mb_s": round(len(raw) / 2**20 / c_took),
            "decompress_mb_s": round(len(raw) / 2**20 / d_took),
        }
    return out


def compressed_spool(
    compression: str, batch: list[tuple[str, bytes, str]], seconds: float, where: str
) -> dict[str, float]:
    from broker_spark.spool.relay_server import read_about
    from broker_spark.spool.spool import Spool

    work = tempfile.mkdtemp(prefix="broker-spark-compressed-", dir=where)
    try:
        with Spool(work, fsync="interval", compression=compression) as spool:
            append_rate = _append_for(spool, batch, seconds)
            while spool.compact_next():  # what the thread had not done yet, before reading
                pass
            cpu_began = time.process_time()
            began = time.monotonic()
            at, end, read = 0, spool.end_offset(), 0
            while at < end:
                chunk, at = read_about(spool, at, end, 1 << 20)
                read += len(chunk)
            took = time.monotonic() - began
            cpu = time.process_time() - cpu_began
        return {
            "append_batches_s": round(append_rate),
            "read_mb_s": round(read / 2**20 / took),
            "read_cpu_s_per_gb": round(cpu / (read / 2**30), 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compaction_rate(batch: list[tuple[str, bytes, str]], where: str, codec: str) -> float:
    """MB a second of records as written that one compression thread turns into ``.zlog``."""
    from broker_spark.spool.spool import Spool

    work = tempfile.mkdtemp(prefix="broker-spark-compact-", dir=where)
    try:
        with Spool(work) as spool:  # written first, compressed after: the thread's rate alone
            now = time.time_ns()
            while spool.total_bytes < 256 * 2**20:
                spool.append_batch([(t, p, s, now) for t, p, s in batch])
            size = spool.total_bytes
        with Spool(work, compression=codec) as spool:
            began = time.monotonic()
            while spool.compact_next():
                pass
            return size / 2**20 / (time.monotonic() - began)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the spools go")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    zmq, zmq_logs = _zmq_records()
    broker, broker_logs = _broker_records()
    batch = (zmq * (TAKE // len(zmq) + 1))[:TAKE]
    rates: dict[str, list[float]] = {"never": [], "interval": [], "always": []}
    for _ in range(2):
        for policy in rates:
            rates[policy].append(fsync_rate(policy, batch, args.seconds, args.dir))
    best = {k: max(v) for k, v in rates.items()}
    per_zmq = bytes_per_record(zmq, zmq_logs, args.dir)
    per_broker = bytes_per_record(broker, broker_logs, args.dir)
    results: dict[str, Any] = {
        "fsync_batches_s": {k: round(v) for k, v in best.items()},
        "fsync_ratio_to_never": {k: round(v / best["never"], 3) for k, v in best.items()},
        "bytes_per_record": {"zeromq": round(per_zmq), "broker": round(per_broker)},
        "records_per_batch_zeromq": round(zmq_logs / len(zmq), 2),
        "gib_per_day": {
            f"{rate}_records_s": round(per_zmq * rate * 86400 / 2**30, 1)
            for rate in (16_000, 50_000)
        },
        "compression": compression(zmq, args.dir),
        "compression_broker": compression(broker, args.dir),
    }
    # what a record takes once its file is compressed (zstd 1, the default): the bytes as
    # written over the recording's ratio as one block (a spool of the recording repeated
    # would compress by its repeats)
    zstd_zmq = per_zmq / results["compression"]["zstd-1"]["ratio"]
    zstd_broker = per_broker / results["compression_broker"]["zstd-1"]["ratio"]
    results["bytes_per_record_zstd"] = {
        "zeromq": round(zstd_zmq, 1),
        "broker": round(zstd_broker, 1),
    }
    results["gib_per_day_zstd"] = {
        f"{rate}_records_s": round(zstd_zmq * rate * 86400 / 2**30, 1) for rate in (16_000, 50_000)
    }
    spools: dict[str, list[dict[str, float]]] = {"none": [], "zstd": [], "lz4": []}
    for _ in range(2):
        for codec in spools:
            spools[codec].append(compressed_spool(codec, batch, args.seconds, args.dir))
    best = {
        codec: {
            "append_batches_s": max(r["append_batches_s"] for r in runs),
            "read_mb_s": max(r["read_mb_s"] for r in runs),
            "read_cpu_s_per_gb": min(r["read_cpu_s_per_gb"] for r in runs),
        }
        for codec, runs in spools.items()
    }
    for codec, row in best.items():
        row["append_ratio_to_none"] = round(
            row["append_batches_s"] / best["none"]["append_batches_s"], 3
        )
        row["read_ratio_to_none"] = round(row["read_mb_s"] / best["none"]["read_mb_s"], 3)
        if codec != "none":
            row["compress_mb_s_one_thread"] = round(compaction_rate(batch, args.dir, codec))
    results["compressed_spool"] = best
    print(json.dumps(results, indent=None if not args.json else 2))


if __name__ == "__main__":
    main()
