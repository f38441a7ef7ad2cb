"""Typed writes: Zeek events from Spark columns with a signature, and writes to a Zeek-like WebSocket API.

Usage: ``python bench/typed_writes.py [--quick] [--json] [--rows N] [--events N]``

What is measured, in one run:

- **Spark writes** (``local[2]``, ``df.write.format("broker")`` to a
  subscribing endpoint in another process, rows per second from the start
  of ``save()`` until it returned; every task waits for the subscriber's
  acknowledgement). The rows are the event
  ``Intel::seen(indicator: string, host: addr, p: port, n: count)`` made by
  ``spark.range(N)`` with plain Spark columns (``host`` and ``p`` STRING,
  ``n`` BIGINT), written three ways:

  - *signature*: the columns as they are, ``.option("signature", ...)``:
    each argument gets its Zeek type (the new path);
  - *JSON data* (the baseline): the path a user had for Zeek's types before,
    a ``data`` column of Zeek's JSON text built in Spark SQL
    (``format_string``) with the same values and types;
  - *untyped columns* (a reference): ``format=zeek`` with an ``event``
    column; fast, but the arguments go as string and integer, which a Zeek
    rejects for ``addr``, ``port`` and ``count``.

- **WebSocket writes** against the Zeek-like server of the tests
  (``tests/zeek_ws_server.py``: a 32-message queue per client that drops a
  client it finds full, Zeek's errors; written in Python, so its own speed
  bounds every figure here): events per second from the first publish until
  the server confirmed it processed the last (the echo of our last probe),

  - *paced*: an endpoint's ``web_socket_peer`` bridge (groups of 16, window
    32), the events pre-encoded (as a writer task publishes them);
  - *baseline*: the same bridge with the window lifted, to the same server
    with an unlimited queue (so it is not dropped): what pacing costs;
  - a bare ``websockets`` client sending the same events, pre-rendered as
    JSON texts, as fast as it can to the server with an unlimited queue
    (what the server takes at most);
  - *unpaced against the 32-message queue*: the same bare client, dropped
    (how many of the events got in);
  - *Spark*: the signature write above, through ``websocket`` to the server.

The ratio *paced / unpaced bridge* is what pacing costs against a server
that keeps up. The server runs in a process of its own. ``--quick`` shortens everything; ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_stream  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from zeek_ws_server import ZeekLikeServer  # noqa: E402

import broker_spark as broker  # noqa: E402
from broker_spark.config import BrokerOptions, Configuration  # noqa: E402
from broker_spark.data.json_codec import encode_data_message  # noqa: E402

SIGNATURE = "Intel::seen(indicator: string, host: addr, p: port, n: count)"
_ROWS = (
    "'bench/out' AS topic",
    "concat('evil', CAST(id % 1000 AS STRING), '.example.com') AS indicator",
    "concat('10.', CAST(id DIV 65536 % 256 AS STRING), '.', CAST(id DIV 256 % 256 AS STRING),"
    " '.', CAST(id % 256 AS STRING)) AS host",
    "'443/tcp' AS p",
    "id AS n",
)
_JSON = (
    '{"@data-type":"vector","data":[{"@data-type":"count","data":1},'
    '{"@data-type":"count","data":1},{"@data-type":"vector","data":['
    '{"@data-type":"string","data":"Intel::seen"},{"@data-type":"vector","data":['
    '{"@data-type":"string","data":"%s"},{"@data-type":"address","data":"%s"},'
    '{"@data-type":"port","data":"%s"},{"@data-type":"count","data":%d}]}]}]}'
)


def _frame(spark: Any, rows: int, how: str) -> Any:
    df = spark.range(rows, numPartitions=2).selectExpr(*_ROWS)
    if how == "json":
        return df.selectExpr("topic", f"format_string('{_JSON}', indicator, host, p, n) AS data")
    if how == "untyped":
        return df.selectExpr("topic", "'Intel::seen' AS event", "indicator", "host", "p", "n")
    return df


def _write_options(how: str) -> dict[str, str]:
    if how == "signature":
        return {"signature": SIGNATURE}
    if how == "untyped":
        return {"format": "zeek"}
    return {}


def bench_spark_write(spark: Any, rows: int, how: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(
        target=spark_stream._subscriber, args=(theirs, rows), daemon=True, name="subscriber"
    )
    proc.start()
    port = spark_stream._receive(ours, proc, 60.0)
    writer = _frame(spark, rows, how).write.format("broker").mode("append")
    options = {"peer": f"127.0.0.1:{port}", "ssl.disable": "true", **_write_options(how)}
    for key, value in options.items():
        writer = writer.option(key, value)
    start = time.time()
    writer.save()
    elapsed = time.time() - start
    got, _first, _last = spark_stream._receive(ours, proc)
    proc.join(10)
    return {"rows": rows, "received": got, "rows_per_s": rows / elapsed, "seconds": elapsed}


def bench_spark_websocket(spark: Any, rows: int) -> dict[str, Any]:
    with RemoteServer() as server:
        writer = _frame(spark, rows, "signature").write.format("broker").mode("append")
        writer = writer.option("websocket", server.url).option("signature", SIGNATURE)
        start = time.time()
        writer.save()
        elapsed = time.time() - start
        return {"rows": rows, "rows_per_s": rows / elapsed, "seconds": elapsed, **server.stats()}


# --- the Zeek-like server, in a process of its own (so it shares no interpreter lock) ----------


def _serve(conn: Any, queue_size: int) -> None:
    with ZeekLikeServer((SIGNATURE,), queue_size=queue_size) as server:
        conn.send(server.url)
        while True:
            request = conn.recv()
            if request == "stop":
                break
            conn.send(
                {
                    "accepted": len(server.accepted),
                    "dropped": server.dropped,
                    "most_queued": server.most_queued,
                }
            )


class RemoteServer:
    """A :class:`ZeekLikeServer` in a child process: its URL, and its counts on request."""

    def __init__(self, queue_size: int = 32) -> None:
        ctx = mp.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(theirs, queue_size), daemon=True)
        self._proc.name = "zeek-like server"
        self._proc.start()
        self.url = spark_stream._receive(self._conn, self._proc, 60.0)

    def stats(self) -> dict[str, int]:
        self._conn.send("stats")
        return spark_stream._receive(self._conn, self._proc, 60.0)

    def __enter__(self) -> RemoteServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._proc.join(10)


# --- WebSocket without Spark -------------------------------------------------------------------


def _events(n: int) -> list[tuple[str, bytes]]:
    from broker_spark.data.binary import encode
    from broker_spark.zeek import Event

    return [
        (
            "zeek/intel",
            encode(
                Event(
                    "Intel::seen",
                    f"evil{i % 1000}.example.com",
                    _addr(i),
                    broker.Port(443, broker.Port.TCP),
                    broker.Count(i),
                ).as_data()
            ),
        )
        for i in range(n)
    ]


def _addr(i: int) -> Any:
    import ipaddress

    return ipaddress.ip_address(f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}")


def bench_bridge(events: list[tuple[str, bytes]], paced: bool) -> dict[str, Any]:
    """An endpoint's bridge publishing ``events`` (pre-encoded), until the server confirmed
    them all; ``paced=False`` lifts the window (the server's queue is then unlimited too)."""

    config = Configuration(BrokerOptions(disable_ssl=True))
    window = {} if paced else {"window": 1 << 30, "group": 1 << 20}
    with RemoteServer(32 if paced else 1 << 30) as server, broker.Endpoint(config) as ep:
        assert ep.web_socket_peer(server.url, [], retry=0, **window)
        start = time.perf_counter()
        for i in range(0, len(events), 1000):
            ep.publish_encoded(events[i : i + 1000])
        if not ep.web_socket_flush(server.url, 600):
            raise RuntimeError("the server did not confirm the events")
        elapsed = time.perf_counter() - start
        return {"events": len(events), "events_per_s": len(events) / elapsed, **server.stats()}


def bench_bare(texts: list[str], queue_size: int) -> dict[str, Any]:
    """A bare client, as fast as the connection takes them; until all were processed (or the
    client was dropped)."""
    with RemoteServer(queue_size) as server:

        async def run() -> float:
            start = time.perf_counter()
            try:
                async with connect(server.url + "/v1/messages/json", compression=None) as ws:
                    await ws.send("[]")
                    await ws.recv()
                    for text in texts:
                        await ws.send(text)
                    while True:
                        stats = server.stats()
                        if stats["accepted"] >= len(texts) or stats["dropped"]:
                            break
                        await asyncio.sleep(0.005)
            except Exception:  # dropped: the connection was reset
                pass
            return time.perf_counter() - start

        elapsed = asyncio.run(run())
        stats = server.stats()
        return {
            "events": len(texts),
            "events_per_s": stats["accepted"] / elapsed,
            **stats,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--rows", type=int, default=None, help="rows per Spark write")
    parser.add_argument("--events", type=int, default=None, help="events per WebSocket run")
    args = parser.parse_args()
    rows = args.rows or (50_000 if args.quick else 1_000_000)
    n_events = args.events or (5_000 if args.quick else 50_000)

    events = _events(n_events)
    from broker_spark.data.binary import decode

    texts = [encode_data_message(t, decode(p)) for t, p in events]
    results: dict[str, Any] = {
        "ws_paced": bench_bridge(events, paced=True),
        "ws_unpaced_bridge": bench_bridge(events, paced=False),
        "ws_baseline": bench_bare(texts, 1 << 30),
        "ws_unpaced_32": bench_bare(texts, 32),
    }
    spark = spark_stream._session()
    try:
        for how in ("signature", "json", "untyped"):  # warm-up: the JVM's JIT, Python workers
            bench_spark_write(spark, min(rows, 100_000), how)
        for how in ("signature", "json", "untyped"):
            results[f"spark_{how}"] = bench_spark_write(spark, rows, how)
        results["spark_websocket"] = bench_spark_websocket(spark, min(rows, 10 * n_events))
    finally:
        spark.stop()
    results["cpus"] = os.cpu_count()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    _table(results)


def _table(r: dict[str, Any]) -> None:
    sig, js, un = r["spark_signature"], r["spark_json"], r["spark_untyped"]
    print(f"Typed writes on {r['cpus']} cores (Spark local[2])\n")
    print(
        "| Spark write of Intel::seen(indicator, host: addr, p: port, n: count) | rows/s | rows | seconds |"
    )
    print("|---|---:|---:|---:|")
    for label, x in (
        ("signature (typed columns)", sig),
        ("JSON data column (baseline)", js),
        ("untyped columns, format=zeek (Zeek rejects them)", un),
    ):
        print(f"| {label} | {x['rows_per_s']:,.0f} | {x['rows']:,} | {x['seconds']:.1f} |")
    print(f"\nsignature / JSON baseline: {sig['rows_per_s'] / js['rows_per_s']:.2f}")
    p, b, u, s = r["ws_paced"], r["ws_baseline"], r["ws_unpaced_32"], r["spark_websocket"]
    q = r["ws_unpaced_bridge"]
    print(
        "\n| WebSocket writes to the Zeek-like server (32-message queue) | events/s | accepted | dropped |"
    )
    print("|---|---:|---:|---:|")
    print(
        f"| paced bridge (window 32, groups of 16) | {p['events_per_s']:,.0f} | {p['accepted']:,} of {p['events']:,} | {p['dropped']} |"
    )
    print(
        f"| bridge without pacing, unlimited queue (baseline) | {q['events_per_s']:,.0f} | {q['accepted']:,} of {q['events']:,} | {q['dropped']} |"
    )
    print(
        f"| bare client (pre-rendered JSON), unlimited queue | {b['events_per_s']:,.0f} | {b['accepted']:,} of {b['events']:,} | {b['dropped']} |"
    )
    print(
        f"| bare client, 32-message queue | - | {u['accepted']:,} of {u['events']:,} | {u['dropped']} |"
    )
    print(
        f"| Spark signature write over websocket (2 tasks) | {s['rows_per_s']:,.0f} | {s['accepted']:,} of {s['rows']:,} | {s['dropped']} |"
    )
    print(
        f"\npaced / unpaced bridge: {p['events_per_s'] / q['events_per_s']:.2f} "
        f"(most queued at the server: paced {p['most_queued']}, unpaced {q['most_queued']:,})"
    )


if __name__ == "__main__":
    main()
