"""The events path without Spark: what the reader's runtime costs a received event.

Usage: ``python bench/spool_ingest.py [--events N] [--repeat R] [--json]``

A publisher *process* sends small Zeek events pre-encoded (``publish_encoded``,
as a Zeek node's C++ encoder would: no Python encoding in the way) to an
endpoint wired as the stream reader wires its own (:mod:`broker_spark.reader.in_process`):
the reader's queue sizes, a :class:`~broker_spark.spool.service.SpoolService`
subscribed before peering, its pump appending to a spool in a temporary
directory. The clock starts when the publisher starts and stops when the pump
has appended every event.

Reported per run: events per second and the CPU each thread of the reader's
process used per event, from ``/proc`` (Linux only): the endpoint's event loop
(receiving, routing into the subscription's queue), the spool pump (taking
from the queue, appending, counting) and the rest. The CPU per event is the
figure to compare: it varies less with other load on a shared machine than
the rate, which the publisher bounds. This is the driver-side share of
``bench/spark_stream.py``'s reads (issue 51): its read of pre-encoded events
pays this, and Spark's own work on top.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_stream import TOPIC, _config, _preencoded  # noqa: E402

import broker_spark as broker  # noqa: E402
from broker_spark.reader.connect import EndpointSettings  # noqa: E402
from broker_spark.spool.service import SpoolService  # noqa: E402
from broker_spark.spool.spool import Spool  # noqa: E402

#: Events per ``publish_encoded`` call, as the Spark bench's publisher sends them.
BATCH = 1000
#: Distinct pre-encoded batches the publisher cycles through (made before the clock starts).
_TEMPLATES = 20


def _publisher(conn: Any, events: int) -> None:
    """Listen, wait for the reader's subscription and the go, send ``events`` events."""
    with broker.Endpoint(_config()) as ep:
        conn.send(ep.listen("127.0.0.1", 0))
        while not ep.peer_subscriptions():
            time.sleep(0.01)
        batches = [_preencoded(k * BATCH, BATCH) for k in range(_TEMPLATES)]
        conn.recv()
        sent = 0
        while sent < events:
            ep.publish_encoded(batches[(sent // BATCH) % _TEMPLATES])
            sent += BATCH
        conn.send(sent)
        conn.recv()  # the reader has appended everything


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread role."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "")
        if name.startswith("broker-spark-spool-pump"):
            role = "pump"
        elif name.startswith("broker-spark-"):
            role = "endpoint loop"
        else:
            role = "other"
        out[role] = out.get(role, 0.0) + (int(rest[11]) + int(rest[12])) / tick
    return out


def run_once(events: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_publisher, args=(theirs, events), daemon=True, name="publisher")
    proc.start()
    folder = tempfile.mkdtemp(prefix="bench-spool-ingest-")
    spool = Spool(folder)
    service = SpoolService(spool, [TOPIC], queue_size=EndpointSettings().subscriber_queue_size)
    endpoint = broker.Endpoint(EndpointSettings().configure(_config()))
    try:
        port = ours.recv()
        service.subscribe(endpoint)
        endpoint.peer("127.0.0.1", port)
        service.start()
        pump = service.pumps[0]
        before, began = _thread_cpu(), time.monotonic()
        ours.send("go")
        sent = ours.recv()
        if not pump.wait_appended(sent, 300.0):
            raise RuntimeError(f"only {pump.appended} of {sent} events appended")
        elapsed = time.monotonic() - began
        after = _thread_cpu()
        ours.send("done")
    finally:
        service.close()
        endpoint.shutdown()
        spool.close()
        shutil.rmtree(folder, ignore_errors=True)
        proc.join(10)
    us = {role: (after[role] - before.get(role, 0.0)) / sent * 1e6 for role in after}
    return {
        "events": sent,
        "events_per_s": sent / elapsed,
        "cpu_us_per_event": us,
        "cpu_us_per_event_total": sum(us.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs (each printed, median too)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    runs = [run_once(args.events) for _ in range(args.repeat)]
    total = statistics.median(r["cpu_us_per_event_total"] for r in runs)
    if args.json:
        print(json.dumps({"runs": runs, "median_cpu_us_per_event": total}, indent=2))
        return
    for r in runs:
        parts = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["cpu_us_per_event"].items()))
        print(
            f"{r['events']:,} events at {r['events_per_s']:,.0f}/s: "
            f"{r['cpu_us_per_event_total']:.3f} us of CPU an event ({parts})"
        )
    print(f"median: {total:.3f} us an event")


if __name__ == "__main__":
    main()
