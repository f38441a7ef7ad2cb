"""The flags of ``broker-spark bench``; what runs is :mod:`broker_spark.cli.bench`."""

from __future__ import annotations

from typing import Any

#: Every benchmark, in the order they run, with the flags of a quick run.
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "codec": ("--quick",),
    "endpoint": ("--messages", "30000", "--repeat", "1"),
    "pubsub": ("--quick",),
    "websocket": ("--quick",),
    "store": ("--quick",),
    "spark_stream": ("--quick",),
    "spool_ingest": ("--events", "200000", "--repeat", "1"),
    "typed_writes": ("--quick",),
    "zeek_logs": ("--quick",),
    "log_decode": ("--quick",),
    "pipelines": ("--rows", "100000"),
    "zeromq_logs": ("--seconds", "2"),
    "relay": ("--quick",),
    "relay_logs": ("--rows", "100000", "--repeat", "1"),
    "relay_restarts": ("--restarts", "2", "--period", "2", "--pacing-seconds", "1"),
    "spool_durability": ("--seconds", "1"),
    "spark_cluster": ("--quick",),
    "live_zeek": ("--quick",),
    "kafka_path": ("--quick",),
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="run the benchmarks under bench/ and print their tables",
        description="Run the benchmark scripts of the source tree (all, or the NAMEs given) "
        f"one after the other. Names: {', '.join(BENCHMARKS)}.",
        epilog="examples:\n  broker-spark bench --quick\n  broker-spark bench codec pubsub",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    p.add_argument("--json", action="store_true", help="ask each benchmark for JSON output")
    p.add_argument("--dir", metavar="DIR", help="the bench/ directory (default: found)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.set_defaults(run="bench:run")
