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

import broker_spark
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.parsers.bench import BENCHMARKS

__all__ = ["BENCHMARKS", "find_bench_dir", "run"]


def find_bench_dir(given: str | None) -> Path:
    """``--dir``, else ``bench/`` beside the package's source tree, else ``./bench``."""
    if given:
        path = Path(given)
        if not path.is_dir():
            raise UsageError(f"--dir {given}: not a directory")
        return path

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
