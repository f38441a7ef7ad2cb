"""Throughput of the WebSocket API: one client publishing in, one client subscribed.

Usage: ``python bench/websocket.py [--messages N] [--repeat R] [--json] [--quick]``

What is measured (each figure the best of ``--repeat`` runs; plain ``ws://``
over loopback; the client is the ``websockets`` library's asyncio client in
the benchmark's own thread, the endpoint runs on its own loop thread):

- ``client -> endpoint``: the client sends N data messages (pre-rendered JSON
  text) as fast as the connection takes them; a native subscriber of the
  endpoint reads with ``get(1000, 1.0)``; the clock stops when it has all N.
  This covers frame parsing, JSON decoding, binary encoding, the core's
  routing and the subscriber's decoding.
- ``endpoint -> client``: ``publish_batch`` of N messages on the endpoint;
  the subscribed client counts frames; the clock stops at the N-th. This
  covers the core's routing, decoding the binary payload and rendering JSON.
  The client's send buffer is made large enough for the whole run, since a
  client that falls more than ``send_buffer_size`` behind is disconnected by
  design (here the publisher is much faster than any client).

The *baseline* of each figure is measured in the same run: a bare
``websockets`` server on its own loop thread that does no work beyond the
protocol, receiving (and counting) or sending the very same JSON texts. The
ratio rate/baseline is the share of the raw WebSocket throughput we keep.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import connect  # noqa: E402
from websockets.asyncio.server import ServerConnection, serve  # noqa: E402

import broker_spark as broker  # noqa: E402
from broker_spark import zeek  # noqa: E402
from broker_spark.data.json_codec import encode_data_message  # noqa: E402

TOPIC = "/bench/ws"


def count_value(i: int) -> Any:
    return broker.Count(i)


def event_value(i: int) -> Any:
    return zeek.Event("conn_state", broker.Count(i), "10.0.0.1", broker.Port(80, broker.Port.TCP))


#: Every message differs (a sequence number inside), so no cache can skip the work.
PAYLOADS: dict[str, Callable[[int], Any]] = {"count": count_value, "event": event_value}


class LoopThread:
    """An asyncio loop in a thread, for the bare baseline server."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def best_rate(run: Callable[[], float], n: int, repeat: int) -> float:
    return max(n / run() for _ in range(repeat))


# -- client -> server ------------------------------------------------------------------


def bench_publish_in(make: Callable[[int], Any], n: int, repeat: int) -> tuple[float, float]:
    texts = [encode_data_message(TOPIC + "/in", make(i)) for i in range(n)]
    opts = broker.BrokerOptions(disable_ssl=True)

    def ours() -> float:
        with broker.Endpoint(broker.Configuration(opts)) as ep:
            port = ep.web_socket_listen()
            sub = ep.make_subscriber(TOPIC, qsize=1000)
            done = threading.Event()
            end = [0.0]

            def read() -> None:
                got = 0
                while got < n:
                    got += len(sub.get(1000, 1.0))
                end[0] = time.perf_counter()
                done.set()

            reader = threading.Thread(target=read)
            reader.start()

            async def client() -> float:
                async with connect(
                    f"ws://127.0.0.1:{port}/v1/messages/json", compression=None
                ) as ws:
                    await ws.send("[]")
                    await ws.recv()
                    t0 = time.perf_counter()
                    for text in texts:
                        await ws.send(text)
                    while not done.is_set():
                        await asyncio.sleep(0.001)
                    return t0

            t0 = asyncio.run(client())
            reader.join()
            return end[0] - t0

    def bare() -> float:
        loop = LoopThread()
        received = threading.Event()
        end = [0.0]

        async def handler(ws: ServerConnection) -> None:
            await ws.recv()
            await ws.send('{"type":"ack"}')
            got = 0
            async for _ in ws:
                got += 1
                if got == n:
                    end[0] = time.perf_counter()
                    received.set()

        async def start() -> Any:
            return await serve(handler, "127.0.0.1", 0, compression=None)

        server = loop.run(start())
        port = server.sockets[0].getsockname()[1]

        async def client() -> float:
            async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
                await ws.send("[]")
                await ws.recv()
                t0 = time.perf_counter()
                for text in texts:
                    await ws.send(text)
                while not received.is_set():
                    await asyncio.sleep(0.001)
                return t0

        try:
            t0 = asyncio.run(client())
            return end[0] - t0
        finally:

            async def close() -> None:
                server.close()
                await server.wait_closed()

            loop.run(close())
            loop.stop()

    return best_rate(ours, n, repeat), best_rate(bare, n, repeat)


# -- server -> client ----------------------------------------------------------------------


async def count_frames(url: str, topics: list[str], n: int, start: Callable[[], None]) -> float:
    """Connect, subscribe, call ``start`` and count n frames; returns the elapsed time."""
    async with connect(url, compression=None) as ws:
        await ws.send(json.dumps(topics))
        await ws.recv()  # the ack
        t0 = time.perf_counter()
        start()
        for _ in range(n):
            await ws.recv()
        return time.perf_counter() - t0


def bench_subscribe_out(make: Callable[[int], Any], n: int, repeat: int) -> tuple[float, float]:
    batch = [(TOPIC + "/out", make(i)) for i in range(n)]
    texts = [encode_data_message(t, v) for t, v in batch]
    opts = broker.BrokerOptions(disable_ssl=True)

    def ours() -> float:
        with broker.Endpoint(broker.Configuration(opts)) as ep:
            port = ep.web_socket_listen(send_buffer_size=n + 16)
            publisher = threading.Thread(target=ep.publish_batch, args=batch)
            url = f"ws://127.0.0.1:{port}/v1/messages/json"
            elapsed = asyncio.run(count_frames(url, [TOPIC], n, publisher.start))
            publisher.join()
            return elapsed

    def bare() -> float:
        loop = LoopThread()

        async def handler(ws: ServerConnection) -> None:
            await ws.recv()
            await ws.send('{"type":"ack"}')
            for text in texts:
                await ws.send(text)
            await ws.wait_closed()

        async def start() -> Any:
            return await serve(handler, "127.0.0.1", 0, compression=None)

        server = loop.run(start())
        port = server.sockets[0].getsockname()[1]
        try:
            return asyncio.run(count_frames(f"ws://127.0.0.1:{port}/", [], n, lambda: None))
        finally:

            async def close() -> None:
                server.close()
                await server.wait_closed()

            loop.run(close())
            loop.stop()

    return best_rate(ours, n, repeat), best_rate(bare, n, repeat)


# -- report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3,000 messages, once")
    args = parser.parse_args(argv)
    n, repeat = (3_000, 1) if args.quick else (args.messages, args.repeat)

    rows: list[dict[str, Any]] = []
    for payload, make in PAYLOADS.items():
        for name, bench in (
            ("client -> endpoint (publish in)", bench_publish_in),
            ("endpoint -> client (subscribed)", bench_subscribe_out),
        ):
            rate, base = bench(make, n, repeat)
            rows.append(
                {
                    "benchmark": name,
                    "payload": payload,
                    "bytes": len(encode_data_message(TOPIC + "/in", make(n))),
                    "rate": round(rate),
                    "baseline": round(base),
                    "ratio": round(rate / base, 2),
                }
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
        f"messages per run: {n:,}; best of {repeat}; Python {sys.version.split()[0]}; "
        "rates in messages/s\n"
    )
    print(
        "| benchmark | payload | JSON bytes | rate | baseline (bare websockets) | rate/baseline |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['benchmark']} | {r['payload']} | {r['bytes']} | {r['rate']:,} "
            f"| {r['baseline']:,} | {r['ratio']:.2f} |"
        )
    print(
        "\npayloads (message i of the run): count = Count(i); "
        "event = zeek.Event('conn_state', Count(i), '10.0.0.1', 80/tcp)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
