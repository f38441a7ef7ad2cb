"""The flags of ``broker-spark subscribe``; what runs is :mod:`broker_spark.cli.subscribe`."""

from __future__ import annotations

from typing import Any

from broker_spark.cli.args import (
    add_connect_arguments,
    add_format_argument,
    positive_count,
    positive_float,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "subscribe",
        help="print messages on topics as JSON lines",
        description="Subscribe to each TOPIC prefix and print every message as one line: "
        '{"topic": ..., "data": <Zeek JSON>} (plus "event": NAME for Zeek events). '
        "Runs until interrupted, --count messages or --timeout seconds.",
        epilog="examples:\n"
        "  broker-spark subscribe /zeek/ --peer 10.0.0.1:9999\n"
        "  broker-spark subscribe /demo --count 1 --timeout 10 --format plain | jq .data",
    )
    p.add_argument("topics", metavar="TOPIC", nargs="+", help="topic prefixes, e.g. /zeek/")
    p.add_argument("--count", type=positive_count, metavar="N", help="exit after N messages")
    p.add_argument(
        "--timeout",
        type=positive_float,
        metavar="SECONDS",
        help="exit after SECONDS (an error if --count was not reached)",
    )
    add_format_argument(p)
    add_connect_arguments(p, websocket=True)
    p.set_defaults(run="subscribe:run")
