"""The flags of ``broker-spark logs``; what runs is :mod:`broker_spark.cli.logs`."""

from __future__ import annotations

from typing import Any

from broker_spark.cli.args import (
    add_connect_arguments,
    host_port,
    positive_count,
    positive_float,
)
from broker_spark.zeek.text import TIMESTAMP_FORMATS


def register(sub: Any) -> None:
    p = sub.add_parser(
        "logs",
        help="print Zeek's logs as they arrive, as Zeek's JSON lines",
        description="Print the records of Zeek's logs as they arrive, each as the line Zeek's "
        "JSON writer would write. With one PATH (conn, dns, ...), exactly that log's lines; "
        'otherwise every line starts with "_path". Runs until interrupted, --count records '
        "or --timeout seconds.",
        epilog="examples:\n"
        "  broker-spark logs conn --peer zeek-host:9999\n"
        "  broker-spark logs --listen 127.0.0.1:9999 | jq 'select(._path == \"dns\") | .query'\n"
        "  broker-spark logs conn dns --peer zeek-host:9999 --timestamps iso8601\n"
        "  broker-spark logs --zeromq-bind tcp://127.0.0.1:5557   (Zeek 8.1+, ZeroMQ backend)\n"
        "Off loopback --listen needs mutual TLS and --zeromq-bind CURVE, or --allow-anonymous.",
    )
    p.add_argument("paths", metavar="PATH", nargs="*", help="the logs to print (default: all)")
    p.add_argument(
        "--listen",
        type=host_port,
        metavar="HOST:PORT",
        help="accept Zeek's peering here instead of peering with --peer",
    )
    p.add_argument(
        "--zeromq-bind",
        metavar="ENDPOINT",
        help="be a Zeek cluster's logger on the ZeroMQ backend instead: bind a PULL socket "
        "here (tcp://HOST:PORT) for Zeek's nodes to PUSH their logs to; CURVE keys from Zeek's "
        "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_* environment variables",
    )
    p.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="topic prefix the logs arrive on (repeatable; default zeek/logs/)",
    )
    p.add_argument(
        "--timestamps",
        choices=TIMESTAMP_FORMATS,
        default="epoch",
        help="how times are written, as Zeek's LogAscii::json_timestamps (default epoch)",
    )
    p.add_argument(
        "--include-unset",
        action="store_true",
        help="write unset fields as null, as LogAscii::json_include_unset_fields",
    )
    p.add_argument("--count", type=positive_count, metavar="N", help="exit after N records")
    p.add_argument("--timeout", type=positive_float, metavar="SECONDS", help="exit after SECONDS")
    add_connect_arguments(p)
    p.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="let --listen or --zeromq-bind off loopback take senders without mutual TLS or "
        "CURVE (a warning at start; docs/security.md)",
    )
    p.set_defaults(run="logs:run")
