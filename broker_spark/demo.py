"""``make demo`` / ``broker-spark demo``: Zeek's conn log through Spark and back into Broker.

What runs, all in this process and on loopback unless told otherwise:

1. a Broker node (an :class:`~broker_spark.Endpoint` listening, TLS by
   default) that holds the master of the store ``demo-summary`` and
   subscribes to ``/demo/summary``;
2. a local SparkSession with a structured-streaming query that reads Zeek's
   conn log with ``spark.readStream.format("broker")`` and ``format=zeek-logs``
   (typed columns), counts connections and bytes per service per 10-second
   window, prints each update, and writes the updates back with
   ``format("broker")`` to the topic and to the store
   (:mod:`~broker_spark.demo_spark`);
3. once the query's endpoint has subscribed, a thread publishing synthetic
   connection records as a Zeek does (a LogCreate, then Batches of LogWrites
   on ``zeek/logs/Conn::LOG``) at a steady rate (:mod:`~broker_spark.demo_events`),
   for ``--seconds``; Spark's start-up is not part of that minute.

Then it waits for Spark to read the rest, stops the query, reads the store
back as a table, prints a summary and checks it: every record read, every
summary back on the topic, the store holding the last value of every window.
Exit status 0 when all of that holds, 1 with one line per problem otherwise.

With ``--peer HOST:PORT`` the conn log comes from another node (a Zeek, or
a node a Zeek logs to, on ``--topic``) and the demo generates none;
``--master`` runs the query on a cluster, whose executors reach the node at
``--advertise``.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_spark.errors import BrokerError

__all__ = ["DemoError", "DemoOptions", "DemoResult", "add_arguments", "main", "run"]

SUMMARY_TOPIC = "/demo/summary"
STORE_NAME = "demo-summary"
#: Seconds between two micro-batches.
TRIGGER_SECONDS = 2.0


class DemoError(BrokerError):
    """Something the demo needs is missing or failed; the message says what, on one line."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``broker-spark demo`` was asked to do (see :func:`add_arguments`)."""

    seconds: float = 60.0
    rate: float = 2000.0
    quiet: bool = False
    master: str = "local[2]"
    peer: str | None = None
    topic: str = "zeek/logs/"
    listen: str = "127.0.0.1:0"
    advertise: str | None = None
    plain: bool = False
    certificate: str = ""
    key: str = ""
    cafile: str = ""
    checkpoint: str | None = None
    trigger_seconds: float = TRIGGER_SECONDS

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        """From a parsed command line; flags the parser lacks (or leaves None) take their defaults."""
        defaults = cls()
        values = {}
        for name in cls.__dataclass_fields__:
            value = getattr(args, name, None)
            values[name] = getattr(defaults, name) if value is None else value
        return cls(**values)


@dataclass
class DemoResult:
    """What happened, for the summary and for tests."""

    published: int | None = None  # None: the records came from --peer
    publish_seconds: float = 0.0
    rows_read: int = 0
    batches: int = 0
    windows: int = 0
    services: int = 0
    window_totals: int = 0  # (window, service) pairs
    window_connections: int = 0
    summaries_written: int = 0
    summaries_received: int = 0
    summary_keys: int = 0
    summaries_match: bool = False
    store_entries: int = 0
    store_matches: bool = False
    spark_start_seconds: float = 0.0
    wall_seconds: float = 0.0
    interrupted: bool = False  # by SIGINT or SIGTERM: stopped early, nothing checked
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``demo`` subcommand's flags (the CLI builds its parser with this)."""
    d = DemoOptions()
    parser.add_argument(
        "--seconds", type=float, default=d.seconds, help="how long to publish (%(default)s)"
    )
    parser.add_argument(
        "--rate", type=float, default=d.rate, help="conn records per second (%(default)s)"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument("--master", default=d.master, help="Spark master URL (%(default)s)")
    parser.add_argument(
        "--peer",
        metavar="HOST:PORT",
        help="read the conn log from this node (a Zeek, or a node it logs to) "
        "instead of generating it",
    )
    parser.add_argument(
        "--topic", default=d.topic, help="where the logs arrive (topic prefix, %(default)s)"
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=d.listen,
        help="where the demo's node listens for Spark's writers (%(default)s)",
    )
    parser.add_argument(
        "--advertise",
        metavar="HOST",
        help="the node's address as executors reach it "
        "(default: the --listen host, or this machine's name for 0.0.0.0)",
    )
    parser.add_argument(
        "--plain", "--no-tls", action="store_true", help="peer over plain TCP, without TLS"
    )
    parser.add_argument(
        "--certificate", "--cert", metavar="PEM", help="this side's certificate (mutual TLS)"
    )
    parser.add_argument("--key", metavar="PEM", help="the certificate's private key")
    parser.add_argument(
        "--cafile", "--ca", metavar="PEM", help="CA certificates to verify peers with"
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the query's checkpoint (shared storage in cluster mode; default: a temporary one)",
    )
    return parser


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


@dataclass(frozen=True)
class Wiring:
    """Where things listen and how the Spark options reach them."""

    listen_host: str
    listen_port: int
    advertise: str
    ssl_options: dict[str, str]
    config: Any  # the node's Configuration (TLS settings as the Spark options say)

    def address(self, port: int) -> str:
        host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        return f"{host}:{port}"


def _wiring(options: DemoOptions) -> Wiring:
    from broker_spark.spark.options import parse_host_port, parse_writer_options

    try:
        listen = parse_host_port(options.listen, "--listen", listen=True)
        if options.peer:
            parse_host_port(options.peer, "--peer")
    except BrokerError as exc:
        raise DemoError(str(exc).replace("option ", "", 1)) from None
    host = listen.host or "0.0.0.0"
    advertise = options.advertise or (
        socket.gethostname() if host in ("0.0.0.0", "::") else listen.host
    )
    ssl: dict[str, str] = {}
    if options.plain:
        if options.certificate or options.key or options.cafile:
            raise DemoError("--plain contradicts --certificate/--key/--cafile")
        ssl["ssl.disable"] = "true"
    for name in ("certificate", "key", "cafile"):
        value = getattr(options, name)
        if value:
            if not Path(value).is_file():
                raise DemoError(f"--{name} {value}: no such file")
            ssl[f"ssl.{name}"] = str(Path(value).resolve())
    try:  # the checks Spark's options get (mutual TLS needs all three files, ...)
        probe = parse_writer_options({"peer": "localhost:1", **ssl})
    except BrokerError as exc:
        text = str(exc).replace("option ", "", 1)
        for name in ("certificate", "key", "cafile"):
            text = text.replace(f"ssl.{name}", f"--{name}")
        raise DemoError(text) from None
    return Wiring(host, listen.port, advertise, ssl, probe.connection.configuration())


# --- the run -------------------------------------------------------------------------------


def run(
    options: DemoOptions,
    spark: Any = None,
    out: Callable[[str], None] = _say,
) -> DemoResult:
    """Run the demo; use ``spark`` if given (and leave it running), else start and stop one."""
    from broker_spark.endpoint import Endpoint

    started = time.monotonic()
    if options.seconds <= 0 or options.rate <= 0:
        raise DemoError("--seconds and --rate must be positive")
    if spark is None:
        _check_spark()
    wiring = _wiring(options)
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
        tls = "plain TCP" if options.plain else "TLS"
        say(
            f"node {node.node_id()[:8]} listening on {node_address} ({tls}); "
            f"master of store '{STORE_NAME}'"
        )
        with _Session(spark, options.master, scratch, say, result) as session:
            from broker_spark.demo_run import DemoRun

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
        from broker_spark.demo_spark import build_session, log4j_config

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
