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
            appended = 0
            began = time.monotonic()
            while time.monotonic() - began < seconds:
                now = time.time_ns()
                spool.append_batch([(t, p, s, now) for t, p, s in batch])
                appended += len(batch)
            took = time.monotonic() - began
        return appended / took
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    }
    print(json.dumps(results, indent=None if not args.json else 2))


if __name__ == "__main__":
    main()
