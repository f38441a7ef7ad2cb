"""The demo's entry points: :func:`main` for the command line, :func:`run` for code.

They check what the demo needs (PySpark, Java, sane flags), start the Broker
node and, unless one is given, a SparkSession, hand both to
:class:`~broker_spark.demo.phases.DemoRun` for the run itself, and clean up
whatever happens. ``python -m broker_spark.demo`` and ``broker-spark demo``
end up in :func:`main`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_spark.demo.options import (
    STORE_NAME,
    DemoError,
    DemoOptions,
    DemoResult,
    Wiring,
    add_arguments,
)

__all__ = ["main", "run"]


def main(args: argparse.Namespace | None = None) -> int:
    """Run the demo from parsed flags; 0 when everything checked out."""
    if args is None:
        args = add_arguments(argparse.ArgumentParser(prog="broker-spark demo")).parse_args()
    options = DemoOptions.from_args(args)
    try:
        result = run(options)
    except DemoError as exc:
        print(f"broker-spark demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("broker-spark demo: interrupted", file=sys.stderr)
        return 130
    if result.interrupted:
        print("broker-spark demo: interrupted", file=sys.stderr)
        return 130
    for problem in result.problems:
        print(f"broker-spark demo: {problem}", file=sys.stderr)
    return 0 if result.ok else 1


def _say(text: str) -> None:
    print(text, flush=True)


# --- set-up --------------------------------------------------------------------------------


def _check_spark() -> None:
    # Start-up time (measured, issue 52): every broker-spark command loads this package
    # for the demo's flags; with its imports at the top that is 133 ms of CPU, not 36.
    from broker_spark.spark.java import JavaMissingError, require_java

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise DemoError(
            "the demo needs PySpark: pip install 'broker-spark[spark]' (make demo does)"
        ) from None
    try:
        require_java()
    except JavaMissingError as exc:
        raise DemoError(str(exc)) from None


# --- the run -------------------------------------------------------------------------------


def run(
    options: DemoOptions,
    spark: Any = None,
    out: Callable[[str], None] = _say,
) -> DemoResult:
    """Run the demo; use ``spark`` if given (and leave it running), else start and stop one."""
    # Start-up time, as require_java's import above.
    from broker_spark.endpoint import Endpoint

    started = time.monotonic()
    if options.seconds <= 0 or options.rate <= 0:
        raise DemoError("--seconds and --rate must be positive")
    if spark is None:
        _check_spark()
    wiring = Wiring.from_options(options)
    scratch = Path(tempfile.mkdtemp(prefix="broker-spark-demo-"))
    result = DemoResult()
    say = _silent if options.quiet else out  # progress; the summary always goes to ``out``
    node = None
    try:
        node = Endpoint(wiring.config)
        port = node.listen(wiring.listen_host, wiring.listen_port)
        if not port:
            raise DemoError(f"cannot listen on {options.listen}")
        node_address = wiring.address(port)
        tls = "plain TCP" if options.tls.disable_ssl else "TLS"
        say(
            f"node {node.node_id()[:8]} listening on {node_address} ({tls}); "
            f"master of store '{STORE_NAME}'"
        )
        with _Session(spark, options.master, scratch, say, result) as session:
            # Start-up time, as require_java's import above.
            from broker_spark.demo.phases import DemoRun

            DemoRun(options, session, node, node_address, wiring, scratch, say, out, result).go()
    finally:
        if node is not None:
            node.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    result.wall_seconds = time.monotonic() - started
    out(
        f"took {result.wall_seconds:.1f} s in all (Spark start-up {result.spark_start_seconds:.1f} s)"
    )
    return result


def _silent(_text: str) -> None:
    pass


class _Session:
    """The given SparkSession, or a quiet local one that is stopped on the way out."""

    def __init__(
        self,
        given: Any,
        master: str,
        scratch: Path,
        out: Callable[[str], None],
        result: DemoResult,
    ) -> None:
        self.given = given
        self.master = master
        self.scratch = scratch
        self.out = out
        self.result = result
        self.session: Any = None

    def __enter__(self) -> Any:
        if self.given is not None:
            self.session = self.given
            return self.session
        # Start-up time, as require_java's import in main.
        from broker_spark.demo.spark import build_session, log4j_config

        t = time.monotonic()
        self.session = build_session(self.master, log4j_config(self.scratch))
        self.result.spark_start_seconds = time.monotonic() - t
        self.out(
            f"Spark {self.session.version} on {self.master} ready in "
            f"{self.result.spark_start_seconds:.1f} s"
        )
        return self.session

    def __exit__(self, *exc: object) -> None:
        if self.given is None and self.session is not None:
            self.session.stop()
