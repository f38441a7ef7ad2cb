"""How fast each codec round-trips a typical Zeek event, against plain msgpack as the ceiling.

Run ``.venv/bin/python bench/codec.py`` (``--quick`` for a short run,
``--seconds S`` to choose the time per codec, ``--json`` for machine-readable
output instead of the markdown table).

The workload is a pool of Zeek ``connection_established``-style events (the
envelope ``[Count(1), Count(1), (name, args)]`` with ten mixed arguments:
count, address, port, string, timestamp, set of strings, integer, real,
timespan, enum), varied the way real traffic varies: a few hundred hosts and a
handful of services and enum names, unique ids, timestamps and durations. Each
codec encodes and decodes every event of the pool; the ceiling is
``msgpack.packb``/``unpackb`` of the same events as plain Python structures
(ints, strings, lists; addresses, ports and enums as strings), measured in the
same run. The machine is shared and noisy, so codecs are measured in
interleaved slices and each reports its best slice.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa

try:
    import broker_spark  # noqa: F401
except ImportError:  # run from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_spark.data import binary, records
from broker_spark.data.arrow import from_arrow, to_arrow
from broker_spark.data.json_codec import dumps_value, loads_value
from broker_spark.data.types import Count, Enum, Port, Timespan, Timestamp

POOL_SIZE = 500
SLICES = 5

TARGETS = {"broker binary": 0.25, "msgpack records": 0.60}

EVENT_ARROW_TYPE = pa.struct(
    [
        ("format", pa.uint64()),
        ("type", pa.uint64()),
        (
            "content",
            pa.struct(
                [
                    ("name", pa.string()),
                    (
                        "args",
                        pa.struct(
                            [
                                ("id", pa.uint64()),
                                ("orig_h", pa.string()),
                                ("resp_p", pa.string()),
                                ("uid", pa.string()),
                                ("ts", pa.timestamp("ns", tz="UTC")),
                                ("services", pa.list_(pa.string())),
                                ("depth", pa.int64()),
                                ("score", pa.float64()),
                                ("duration", pa.duration("ns")),
                                ("kind", pa.string()),
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)

_SERVICES = ["http", "ssl", "dns", "ssh", "smtp", "ftp", "quic"]
_ENUMS = ["Conn::LOG", "HTTP::LOG", "SSL::LOG", "DNS::LOG", "Notice::ACTION_LOG"]


def make_events(n: int, seed: int = 7) -> tuple[list[Any], list[Any]]:
    """``n`` events as Broker values, and the same events as plain msgpack-able structures."""
    rng = random.Random(seed)
    hosts = [ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(300)]
    ports = [Port(p, Port.TCP) for p in (22, 25, 53, 80, 443, 8080, 8443)]
    ts = 1_700_000_000_000_000_000
    events, plains = [], []
    for _ in range(n):
        ts += rng.randrange(1, 5_000_000_000)
        ident = rng.getrandbits(40)
        host = rng.choice(hosts)
        port = rng.choice(ports)
        uid = "C" + "".join(
            rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789")
            for _ in range(17)
        )
        services = set(rng.sample(_SERVICES, rng.randint(1, 3)))
        depth = rng.randint(-1000, 1000)
        score = rng.random() * 100
        span = rng.randrange(1, 60_000_000_000)
        kind = rng.choice(_ENUMS)
        args = (
            Count(ident),
            host,
            port,
            uid,
            Timestamp.from_ns(ts),
            services,
            depth,
            score,
            Timespan.from_ns(span),
            Enum(kind),
        )
        events.append((Count(1), Count(1), ("connection_established", args)))
        plain_args = [
            ident,
            str(host),
            str(port),
            uid,
            ts,
            sorted(services),
            depth,
            score,
            span,
            kind,
        ]
        plains.append([1, 1, ["connection_established", plain_args]])
    return events, plains


# Each runner round-trips the whole pool once and returns how many messages it did.


def run_plain(plains: list[Any]) -> int:
    packb, unpackb = msgpack.packb, msgpack.unpackb
    for p in plains:
        unpackb(packb(p))
    return len(plains)


def run_binary(events: list[Any]) -> int:
    encode, decode = binary.encode, binary.decode
    for e in events:
        decode(encode(e))
    return len(events)


def run_records(events: list[Any]) -> int:
    pack, unpack = records.pack_value, records.unpack_value
    for e in events:
        unpack(pack(e))
    return len(events)


def run_json(events: list[Any]) -> int:
    for e in events:
        loads_value(dumps_value(e))
    return len(events)


def run_arrow(events: list[Any]) -> int:
    array, misfits = to_arrow(events, EVENT_ARROW_TYPE)
    assert misfits == 0, misfits
    from_arrow(array)
    return len(events)


def check_round_trips(events: list[Any]) -> None:
    """Fail loudly if a codec under test does not round-trip the workload."""
    for e in events[:20]:
        assert binary.decode(binary.encode(e)) == e
        assert records.unpack_value(records.pack_value(e)) == e
        back = loads_value(dumps_value(e))
        assert back[2][1][0] == e[2][1][0] and back[2][1][5] == e[2][1][5]
    rows = from_arrow(to_arrow(events[:20], EVENT_ARROW_TYPE)[0])
    assert rows[0][2][1][3] == events[0][2][1][3]


def measure(
    runners: dict[str, tuple[Callable[[list[Any]], int], list[Any]]], seconds: float
) -> dict[str, float]:
    """Best messages per second for each runner, over interleaved slices."""
    best = dict.fromkeys(runners, 0.0)
    per_slice = seconds / SLICES
    for _ in range(SLICES):
        for name, (run, data) in runners.items():
            done = 0
            start = time.process_time()
            deadline = start + per_slice
            while True:
                done += run(data)
                now = time.process_time()
                if now >= deadline:
                    break
            best[name] = max(best[name], done / (now - start))
    return best


def report(rates: dict[str, float]) -> list[dict[str, Any]]:
    ceiling = rates["plain msgpack (ceiling)"]
    rows = []
    for name, rate in rates.items():
        target = TARGETS.get(name)
        ratio = rate / ceiling
        rows.append(
            {
                "codec": name,
                "msgs_per_s": round(rate),
                "ratio_to_plain": round(ratio, 3),
                "target": target,
                "meets_target": None if target is None else ratio >= target,
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"Codec round trip (encode + decode), pool of {POOL_SIZE} events, "
        f"{seconds:g} s per codec, best of {SLICES} slices",
        "",
        "| codec | msgs/s | ratio to plain msgpack | target |",
        "|---|---:|---:|---|",
    ]
    for r in rows:
        target = ""
        if r["target"] is not None:
            target = f">= {r['target']:.0%} ({'met' if r['meets_target'] else 'NOT met'})"
        lines.append(
            f"| {r['codec']} | {r['msgs_per_s']:,} | {r['ratio_to_plain']:.1%} | {target} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (0.3 s per codec)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per codec")
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (0.3 if args.quick else 2.0)

    events, plains = make_events(POOL_SIZE)
    check_round_trips(events)
    runners = {
        "plain msgpack (ceiling)": (run_plain, plains),
        "broker binary": (run_binary, events),
        "msgpack records": (run_records, events),
        "Zeek JSON": (run_json, events),
        "Arrow typed columns (rows/s)": (run_arrow, events),
    }
    rows = report(measure(runners, seconds))
    if args.json:
        print(json.dumps({"seconds_per_codec": seconds, "pool": POOL_SIZE, "rows": rows}, indent=2))
    else:
        print(markdown(rows, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
