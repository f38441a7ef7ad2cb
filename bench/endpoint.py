"""Throughput of one endpoint: publish calls, batched publishing, subscriber deliveries.

Usage: ``python bench/endpoint.py [--messages N] [--repeat R] [--json]``

What is measured (each run best of ``--repeat``, since the machine is shared):

- ``publish`` one call at a time into an endpoint with one peer whose filter
  matches; the peer is a counting sink link (end-to-end throughput between
  real endpoints belongs to the peering issue), and the clock stops when the
  sink has received every message, so the core's routing is included.
- ``publish_batch`` of 1,000 messages per call, same setup (messages per second).
- deliveries to one subscriber reading with ``get(1000, 1.0)``, for messages
  injected as they would arrive from a peer (pre-encoded node messages, fed by
  another thread); with Broker's default ``qsize=20``, and with 100 and 1000.
- in-process end to end: ``publish_batch`` on one endpoint, ``get(1000, 1.0)``
  on a second endpoint joined by a MemoryLink (no target; for reference).

Each figure comes with a *baseline* measured in the same run: a bare loop in
one thread doing the same per-message work without the endpoint (encode and
build the message tuple, append to and pop from a deque; or pop and decode),
so the figures can be read as ratios independent of the machine's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import broker_spark as broker  # noqa: E402
from broker_spark.core.link import Link  # noqa: E402
from broker_spark.core.memory_link import connect  # noqa: E402
from broker_spark.core.node_message import DATA, node_message  # noqa: E402
from broker_spark.core.queues import UNBOUNDED_ROOM  # noqa: E402
from broker_spark.data.binary import decode, encode  # noqa: E402
from broker_spark.errors import SC  # noqa: E402

TOPIC = "/bench/data"
PAYLOADS: dict[str, Any] = {
    "count": broker.Count(42),
    "event": ("conn_state", broker.Count(42), "10.0.0.1", 80),
}


class SinkLink(Link):
    """A peer that takes everything at once and counts it."""

    __slots__ = ("count", "target", "done")

    def __init__(self, core: Any) -> None:
        super().__init__(core, os.urandom(16))
        self.count = 0
        self.target = 0
        self.done = threading.Event()

    def room(self) -> int:
        return UNBOUNDED_ROOM

    def want_room(self) -> None:
        pass

    def deliver(self, msgs: list) -> None:
        self.count += len(msgs)
        if self.count >= self.target:
            self.done.set()

    def send_filter(self, prefixes: tuple[str, ...]) -> None:
        pass

    def close(self, reason: SC = SC.PeerLost) -> None:
        self.closed = True


def best_rate(fn: Callable[[], float], n: int, repeat: int) -> float:
    """Messages per second: ``n`` over the fastest of ``repeat`` runs of ``fn`` (which returns seconds)."""
    return n / min(fn() for _ in range(repeat))


def with_sink(fn: Callable[[broker.Endpoint, SinkLink], float]) -> Callable[[], float]:
    def run() -> float:
        with broker.Endpoint() as ep:
            core = ep._core
            sink = SinkLink(core)
            ep._loop.run_sync(core.add_link, sink)
            ep._loop.run_sync(core.on_link_filter, sink, ("/bench",))
            return fn(ep, sink)

    return run


def bench_publish(value: Any, n: int, repeat: int) -> tuple[float, float]:
    def endpoint(ep: broker.Endpoint, sink: SinkLink) -> float:
        sink.target = n
        publish = ep.publish
        t0 = time.perf_counter()
        for _ in range(n):
            publish(TOPIC, value)
        sink.done.wait()
        return time.perf_counter() - t0

    def baseline() -> float:
        dq: deque = deque()
        sender = bytes(16)
        t0 = time.perf_counter()
        for _ in range(n):
            dq.append((TOPIC, encode(value), DATA, 16, sender))
            dq.popleft()
        return time.perf_counter() - t0

    return best_rate(with_sink(endpoint), n, repeat), best_rate(baseline, n, repeat)


def bench_publish_batch(value: Any, n: int, repeat: int, size: int = 1000) -> tuple[float, float]:
    n -= n % size
    batch = [(TOPIC, value)] * size

    def endpoint(ep: broker.Endpoint, sink: SinkLink) -> float:
        sink.target = n
        publish_batch = ep.publish_batch
        t0 = time.perf_counter()
        for _ in range(n // size):
            publish_batch(*batch)
        sink.done.wait()
        return time.perf_counter() - t0

    def baseline() -> float:
        dq: deque = deque()
        sender = bytes(16)
        t0 = time.perf_counter()
        for _ in range(n // size):
            dq.extend([(t, encode(d), DATA, 16, sender) for t, d in batch])
            pop = dq.popleft
            [pop() for _ in range(size)]
        return time.perf_counter() - t0

    return best_rate(with_sink(endpoint), n, repeat), best_rate(baseline, n, repeat)


def bench_deliveries(value: Any, n: int, repeat: int, qsize: int) -> tuple[float, float]:
    chunk = [node_message(TOPIC, value, bytes(15) + b"\x07")] * 1000
    n -= n % 1000

    def endpoint() -> float:
        with broker.Endpoint() as ep:
            sub = ep.make_subscriber("/bench", qsize=qsize)
            core = ep._core

            def inject() -> None:
                for _ in range(n // 1000):
                    core.inject(chunk)

            injector = threading.Thread(target=inject)
            got = 0
            t0 = time.perf_counter()
            injector.start()
            while got < n:
                got += len(sub.get(1000, 1.0))
            elapsed = time.perf_counter() - t0
            injector.join()
            return elapsed

    def baseline() -> float:
        dq: deque = deque()
        t0 = time.perf_counter()
        for _ in range(n // 1000):
            dq.extend(chunk)
            pop = dq.popleft
            items = [pop() for _ in range(1000)]
            [(m[0], decode(m[1])) for m in items]
        return time.perf_counter() - t0

    return best_rate(endpoint, n, repeat), best_rate(baseline, n, repeat)


def bench_memory_link(value: Any, n: int, repeat: int, size: int = 1000) -> float:
    n -= n % size
    batch = [(TOPIC, value)] * size

    def run() -> float:
        with broker.Endpoint() as a, broker.Endpoint() as b:
            sub = b.make_subscriber("/bench", qsize=1000)
            connect(a, b)

            def publish() -> None:
                for _ in range(n // size):
                    a.publish_batch(*batch)

            publisher = threading.Thread(target=publish)
            got = 0
            t0 = time.perf_counter()
            publisher.start()
            while got < n:
                got += len(sub.get(1000, 1.0))
            elapsed = time.perf_counter() - t0
            publisher.join()
            return elapsed

    return best_rate(run, n, repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    n, repeat = args.messages, args.repeat

    rows: list[dict[str, Any]] = []

    def add(name: str, payload: str, rate: float, base: float | None, target: float | None) -> None:
        rows.append(
            {
                "benchmark": name,
                "payload": payload,
                "rate": round(rate),
                "baseline": None if base is None else round(base),
                "ratio": None if base is None else round(rate / base, 2),
                "target": target,
                "meets_target": None if target is None else rate >= target,
            }
        )

    for payload in ("count", "event"):
        value = PAYLOADS[payload]
        primary = payload == "count"
        add(
            "publish() one at a time",
            payload,
            *bench_publish(value, n, repeat),
            300_000 if primary else None,
        )
        add(
            "publish_batch() of 1,000",
            payload,
            *bench_publish_batch(value, n, repeat),
            1_000_000 if primary else None,
        )
        for qsize in (20, 100, 1000):
            rate, base = bench_deliveries(value, n, repeat, qsize)
            add(
                f"deliveries, get(1000, 1.0), qsize={qsize}",
                payload,
                rate,
                base,
                300_000 if primary else None,
            )
        add(
            "MemoryLink end to end, batches",
            payload,
            bench_memory_link(value, n, repeat),
            None,
            None,
        )

    if args.json:
        print(
            json.dumps(
                {"messages": n, "repeat": repeat, "python": sys.version.split()[0], "rows": rows},
                indent=2,
            )
        )
        return 0
    print(
        f"messages per run: {n:,}; best of {repeat}; Python {sys.version.split()[0]}; rates in messages/s\n"
    )
    print("| benchmark | payload | rate | baseline (bare loop) | rate/baseline | target | met |")
    print("|---|---|---:|---:|---:|---:|:---:|")
    for r in rows:
        base = "" if r["baseline"] is None else f"{r['baseline']:,}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        target = "" if r["target"] is None else f"{r['target']:,}"
        met = "" if r["meets_target"] is None else ("yes" if r["meets_target"] else "no")
        print(
            f"| {r['benchmark']} | {r['payload']} | {r['rate']:,} | {base} | {ratio} | {target} | {met} |"
        )
    print("\npayloads: count = Count(42); event = ('conn_state', Count(42), '10.0.0.1', 80)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
