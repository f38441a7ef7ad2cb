"""The flags of ``broker-spark node``; what runs is :mod:`broker_spark.cli.node`."""

from __future__ import annotations

import argparse
from typing import Any

from broker_spark.cli.args import add_tls_arguments, host_port, positive_float
from broker_spark.node.settings import StoreSpec, size_value

#: Where the WebSocket server's and the metrics' bearer tokens come from without a flag.
WEBSOCKET_TOKEN_ENV = "BROKER_SPARK_WEBSOCKET_TOKEN"
METRICS_TOKEN_ENV = "BROKER_SPARK_METRICS_TOKEN"


#: The CURVE flags, by the CurveKeys field each sets.
CURVE_FLAGS = {
    "curve_server_publickey": "server_publickey",
    "curve_server_secretkey": "server_secretkey",
    "curve_client_publickey": "client_publickey",
    "curve_client_secretkey": "client_secretkey",
}


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the sources beside peering (``node/sources.py``)."""
    group = p.add_argument_group(
        "Zeek's ZeroMQ backend and WebSocket API",
        "Take logs as one of a Zeek cluster's loggers, events through its proxy or its "
        "WebSocket API; with --spool they are kept for Spark readers (docs/how-to/zeek-cluster-zeromq.md).",
    )
    group.add_argument(
        "--zeromq-logs",
        metavar="ENDPOINT",
        help="be a logger of a Zeek cluster on the ZeroMQ backend: a PULL socket bound here "
        "(tcp://HOST:PORT); its logs go to --spool and/or --log-dir",
    )
    group.add_argument(
        "--zeromq-proxy",
        metavar="HOST",
        help="take events of the --subscribe topics through the cluster's XPUB/XSUB proxy "
        "(HOST, or tcp://HOST:5555,tcp://HOST:5556)",
    )
    group.add_argument(
        "--websocket-peer",
        action="append",
        metavar="URL",
        help="subscribe to the --subscribe topics at Zeek's WebSocket API (repeatable)",
    )
    for flag in CURVE_FLAGS:
        secret = "secret" in flag
        group.add_argument(
            "--" + flag.replace("_", "-"),
            metavar="@FILE" if secret else "KEY",
            help=f"CURVE {flag.removeprefix('curve_').replace('_', ' ')} (Z85; a key that "
            "starts with '-' goes after '=')"
            + (", or @FILE to read it from a file" if secret else ""),
        )


def _master_spec(text: str) -> StoreSpec:
    name, _, rest = text.partition(":")
    backend, _, path = rest.partition(":")
    backend = backend.lower() or "memory"
    if not name or backend not in ("memory", "sqlite"):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME, NAME:memory or NAME:sqlite:PATH")
    if backend == "sqlite" and not path:
        raise argparse.ArgumentTypeError(f"{text!r}: the sqlite backend needs a path")
    return StoreSpec(name, backend, path or None)


def _size(text: str) -> int:
    try:
        return size_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size_or_none(text: str) -> int:
    """A size, or ``none``/``0`` for no limit (0)."""
    if text.strip().lower() in ("none", "0"):
        return 0
    return _size(text)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "node",
        help="run an endpoint (listen, peer, serve WebSocket clients, host stores)",
        description="Run a Broker endpoint until interrupted. Settings come from --config "
        "(TOML, see conf/) and from flags, which override the file.",
        epilog="examples:\n"
        "  broker-spark node --listen 127.0.0.1:9999 --no-tls\n"
        "  broker-spark node --config conf/zeek-facing.toml\n"
        "  broker-spark node --listen :0 --peer 10.0.0.1:9999 --master counters:sqlite:c.db",
    )
    p.add_argument("--config", metavar="FILE", help="TOML configuration (see conf/)")
    p.add_argument(
        "--check",
        action="store_true",
        help="check the configuration (files, certificates, keys, tokens, the spool's folder) "
        "and exit: 0 when it would start, else what is wrong; binds nothing",
    )
    p.add_argument(
        "--listen",
        type=host_port,
        metavar="HOST:PORT",
        help="accept peers here (default 127.0.0.1:9999; port 0 picks a free one)",
    )
    p.add_argument("--no-listen", action="store_true", help="do not accept peers")
    p.add_argument(
        "--peer",
        type=host_port,
        action="append",
        metavar="HOST:PORT",
        help="peer with this node (repeatable; replaces the file's peers)",
    )
    p.add_argument(
        "--retry", type=positive_float, metavar="SECONDS", help="redial lost peers (default 10)"
    )
    p.add_argument(
        "--websocket", type=host_port, metavar="HOST:PORT", help="serve Zeek's WebSocket API here"
    )
    p.add_argument(
        "--websocket-token",
        metavar="TOKEN|@FILE",
        help="WebSocket clients must send this bearer token (Authorization: Bearer, or as "
        f"their URL's password); default ${WEBSOCKET_TOKEN_ENV}",
    )
    p.add_argument(
        "--forward", action="append", metavar="TOPIC", help="route TOPIC here (repeatable)"
    )
    p.add_argument(
        "--master",
        type=_master_spec,
        action="append",
        metavar="NAME[:sqlite:PATH]",
        help="master a data store (memory, or SQLite at PATH; repeatable)",
    )
    p.add_argument("--clone", action="append", metavar="NAME", help="clone a data store")
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="write the Zeek logs that arrive into DIR, one JSON file per log, as Zeek's logger",
    )
    p.add_argument(
        "--log-rotate",
        type=positive_float,
        metavar="SECONDS",
        help="rotate the files of --log-dir this often, from local midnight (default 3600; 0: never)",
    )
    p.add_argument(
        "--log-topic",
        action="append",
        metavar="TOPIC",
        help="where the logs arrive (repeatable; default zeek/logs/)",
    )
    spool = p.add_argument_group(
        "relay",
        "Keep what arrives on some topics in a durable spool and serve it to Spark readers "
        '(.option("relay", HOST:PORT)), which replay from their checkpoint: see docs/relay.md.',
    )
    spool.add_argument("--spool", metavar="DIR", help="append what arrives to the spool in DIR")
    spool.add_argument(
        "--subscribe",
        action="append",
        metavar="PREFIX",
        help="topics the spool keeps (repeatable; e.g. zeek/logs/)",
    )
    spool.add_argument(
        "--relay",
        type=host_port,
        metavar="HOST:PORT",
        help="serve the spool to readers here (default 127.0.0.1:9998; TLS as peerings)",
    )
    spool.add_argument("--no-relay", action="store_true", help="keep the spool, serve nobody")
    spool.add_argument(
        "--reader",
        type=_reader_grant,
        action="append",
        metavar="NAME=PREFIX[,PREFIX...]",
        help="limit the relay reader whose certificate is named NAME ('*': any other) to "
        "these topic prefixes (repeatable; needs mutual TLS; empty after '=': nothing)",
    )
    spool.add_argument(
        "--spool-retention",
        type=_size_or_none,
        metavar="SIZE",
        help="drop the oldest records while the spool's files take more than this on disk, "
        "compressed ones at their compressed size (default none: by age, with --spool-min-free)",
    )
    spool.add_argument(
        "--spool-segment",
        type=_size,
        metavar="SIZE",
        help="the size of one spool file; retention drops whole files (default 64m)",
    )
    spool.add_argument(
        "--spool-max-age",
        type=positive_float,
        metavar="SECONDS",
        help="drop records older than this (default 86400: a day)",
    )
    spool.add_argument(
        "--spool-min-free",
        type=_size_or_none,
        metavar="SIZE",
        help="take nothing while the spool's disk has less free (default 1g, or 5%% of the "
        "file system if less; none: no guard); Zeek keeps what it sends meanwhile",
    )
    spool.add_argument(
        "--spool-fsync",
        choices=("never", "interval", "always"),
        help="when appends reach the disk: never (the kernel decides), interval (each "
        "second; the default) or always (each append); docs/relay.md says what a power "
        "cut loses with each",
    )
    spool.add_argument(
        "--spool-compression",
        choices=("zstd", "lz4", "none"),
        help="how files the spool has filled are compressed: zstd (the default: a real "
        "Zeek's ZeroMQ batches take about a thirteenth, its Broker Batches a tenth), lz4 or none; what arrives last is kept "
        "as written",
    )
    spool.add_argument(
        "--relay-compression",
        choices=("auto", "always", "never"),
        help="compress the records the relay sends a reader (zstd; the reader "
        "decompresses): auto (the default) for readers on other machines, not over "
        "loopback; always (a tunnel that arrives on loopback); never",
    )
    spool.add_argument(
        "--relay-decoders",
        type=int,
        metavar="N",
        help="tasks of Zeek log readers whose rows the relay decodes at once, each on a "
        "thread (default 2): they are sent Arrow rows and decode nothing, which moves that "
        "CPU off Spark's cores; tasks beyond them, and every task with 0, decode the "
        "records they fetch",
    )
    spool.add_argument(
        "--metrics",
        type=host_port,
        metavar="HOST:PORT",
        help="serve Prometheus metrics of the spool and its sources here (/metrics)",
    )
    spool.add_argument(
        "--metrics-tls",
        action="store_true",
        help="serve the metrics over HTTPS with the node's certificate and key (--cert, --key)",
    )
    spool.add_argument("--metrics-cert", metavar="FILE", help="or with this certificate (PEM)")
    spool.add_argument("--metrics-key", metavar="FILE", help="and this key (PEM)")
    spool.add_argument(
        "--metrics-token",
        metavar="TOKEN|@FILE",
        help="scrapers must send this bearer token (Prometheus' authorization: "
        f"credentials_file); default ${METRICS_TOKEN_ENV}",
    )
    add_source_arguments(p)
    p.add_argument("--ttl", type=int, help="hops a message may travel (default 16)")
    p.add_argument(
        "--no-forwarding", action="store_true", help="never forward messages between peers"
    )
    add_tls_arguments(p)
    p.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="let listeners off loopback take clients without mutual TLS or CURVE "
        "(a warning at start; docs/security.md)",
    )
    p.add_argument(
        "--connections-per-address",
        type=int,
        metavar="N",
        help="connections one address may hold at once on each listener: the peering, "
        "the WebSocket API and the relay (default 64: a Spark executor host runs a task "
        "per core, each with its own connection); the metrics take a quarter of their 32 "
        "unless this is given",
    )
    p.set_defaults(run="node:run")


def _reader_grant(text: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=PREFIX[,PREFIX...]``: a certificate name and the topic prefixes it may read."""
    name, sep, prefixes = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PREFIX[,PREFIX...]")
    return name.strip(), tuple(p.strip() for p in prefixes.split(",") if p.strip())
