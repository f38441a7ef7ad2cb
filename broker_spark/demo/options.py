"""What the demo is told and what it reports: its flags, options, result and wiring.

Both halves of the demo read these: :mod:`~broker_spark.demo.launch` (which
parses the flags, starts the node and Spark) and
:mod:`~broker_spark.demo.phases` (which runs the query and fills in the
result). Keeping them here, with the names the two share (the summary topic,
the store), lets neither import the other.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_spark.addresses import is_loopback
from broker_spark.config import TLSSettings
from broker_spark.errors import BrokerError

__all__ = [
    "STORE_NAME",
    "SUMMARY_TOPIC",
    "TRIGGER_SECONDS",
    "DemoError",
    "DemoOptions",
    "DemoResult",
    "Wiring",
    "add_arguments",
]

SUMMARY_TOPIC = "/demo/summary"
STORE_NAME = "demo-summary"
#: Seconds between two micro-batches.
TRIGGER_SECONDS = 2.0

#: The demo's certificate flags, named as the TLSSettings fields they set.
_TLS_FLAGS = ("certificate", "key", "cafile")


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
    tls: TLSSettings = field(default_factory=TLSSettings)  # --plain, --certificate, ...
    checkpoint: str | None = None
    trigger_seconds: float = TRIGGER_SECONDS
    allow_anonymous: bool = False  # a --listen off loopback may take peers without mutual TLS

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        """From a parsed command line; flags the parser lacks (or leaves None) take their defaults."""
        defaults = cls()
        values = {}
        for name in cls.__dataclass_fields__:
            value = getattr(args, name, None)
            values[name] = getattr(defaults, name) if value is None else value
        values["tls"] = TLSSettings(
            disable_ssl=bool(getattr(args, "plain", False)),
            **{name: getattr(args, name, None) or "" for name in _TLS_FLAGS},
        )
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
        "--allow-anonymous",
        action="store_true",
        default=None,
        help="let a --listen other hosts reach take peers without mutual TLS (docs/security.md)",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the query's checkpoint (shared storage in cluster mode; default: a temporary one)",
    )
    return parser


@dataclass(frozen=True)
class Wiring:
    """Where things listen and how the Spark options reach them."""

    listen_host: str
    listen_port: int
    advertise: str
    ssl_options: dict[str, str]
    config: Any  # the node's Configuration (TLS settings as the Spark options say)

    @classmethod
    def from_options(cls, options: DemoOptions) -> Wiring:
        """Check the network and TLS flags (before anything starts) and resolve them."""
        # Start-up time (measured, issue 52): every broker-spark command loads this module for
        # the demo's flags; the reader's options are 35 ms more of it.
        from broker_spark.reader.options import parse_host_port, parse_writer_options

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
        tls = options.tls
        if tls.disable_ssl and tls.authenticated:
            raise DemoError("--plain contradicts --certificate/--key/--cafile")
        for name in _TLS_FLAGS:
            value = getattr(tls, name)
            if value:
                if not Path(value).is_file():
                    raise DemoError(f"--{name} {value}: no such file")
                tls = tls.replace(**{name: str(Path(value).resolve())})
        if (
            not is_loopback(host)
            and not (tls.authenticated and not tls.disable_ssl)
            and not options.allow_anonymous
        ):  # the node's rule (node/exposure.py): its store takes writes from any peer
            raise DemoError(
                f"--listen {options.listen} is reachable from other hosts and its peers are "
                "not authenticated: anyone could write into the demo's store. Give "
                "--certificate, --key and --cafile (mutual TLS), bind to 127.0.0.1, or pass "
                "--allow-anonymous"
            )
        ssl = tls.spark_options()
        try:  # the checks Spark's options get (mutual TLS needs all three files, ...)
            probe = parse_writer_options({"peer": "localhost:1", **ssl})
        except BrokerError as exc:
            text = str(exc).replace("option ", "", 1)
            for name in _TLS_FLAGS:
                text = text.replace(f"ssl.{name}", f"--{name}")
            raise DemoError(text) from None
        return cls(host, listen.port, advertise, ssl, probe.connection.configuration())

    def address(self, port: int) -> str:
        host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        return f"{host}:{port}"
