"""``broker-spark bench [NAME...]``: run the benchmarks under ``bench/`` and show their tables.

The benchmarks are scripts of the source tree, not of the package: they are
found next to the package (a checkout, or an editable install) or in
``--dir``. Each runs as a subprocess with this interpreter, its table going
straight to the terminal, with a ``[2/6] endpoint ...`` line before it.
``--quick`` passes each script its own short-run flags.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from broker_spark.cli.errors import CliError, UsageError

__all__ = ["BENCHMARKS", "find_bench_dir", "register", "run"]

#: Every benchmark, in the order they run, with the flags of a quick run.
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "codec": ("--quick",),
    "endpoint": ("--messages", "30000", "--repeat", "1"),
    "pubsub": ("--quick",),
    "websocket": ("--quick",),
    "store": ("--quick",),
    "spark_stream": ("--quick",),
    "typed_writes": ("--quick",),
    "zeek_logs": ("--quick",),
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
    p.set_defaults(run=run)


def find_bench_dir(given: str | None) -> Path:
    """``--dir``, else ``bench/`` beside the package's source tree, else ``./bench``."""
    if given:
        path = Path(given)
        if not path.is_dir():
            raise UsageError(f"--dir {given}: not a directory")
        return path
    import broker_spark

    for candidate in (Path(broker_spark.__file__).resolve().parent.parent / "bench", Path("bench")):
        if (candidate / "codec.py").is_file():
            return candidate
    raise CliError(
        "no bench/ directory found: the benchmarks come with a checkout of the source "
        "(git clone), not with an installed wheel; run from the checkout or pass --dir"
    )


def run(args: argparse.Namespace) -> int:
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        raise UsageError(f"unknown benchmark {unknown[0]!r} (choose from {', '.join(BENCHMARKS)})")
    if args.list:
        for name in BENCHMARKS:
            print(name)
        return 0
    bench_dir = find_bench_dir(args.dir)
    names = list(dict.fromkeys(args.names)) or list(BENCHMARKS)
    failed = []
    started = time.monotonic()
    for i, name in enumerate(names, 1):
        script = bench_dir / f"{name}.py"
        if not script.is_file():
            raise CliError(f"{script} is missing")
        flags = list(BENCHMARKS[name]) if args.quick else []
        if args.json:
            flags.append("--json")
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        code = subprocess.run([sys.executable, str(script), *flags], check=False).returncode
        took = time.monotonic() - t0
        outcome = "done" if code == 0 else f"FAILED (exit {code})"
        print(f"[{i}/{len(names)}] {name} {outcome} in {took:.1f} s", file=sys.stderr, flush=True)
        if code != 0:
            failed.append(name)
    total = time.monotonic() - started
    if failed:
        raise CliError(f"{len(failed)} of {len(names)} benchmarks failed: {', '.join(failed)}")
    print(f"{len(names)} benchmark(s) in {total:.1f} s", file=sys.stderr)
    return 0
