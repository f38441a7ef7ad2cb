"""The flags of ``broker-spark status`` and ``topology``; what runs is :mod:`broker_spark.cli.network`."""

from __future__ import annotations

import argparse
from typing import Any

from broker_spark.cli.args import add_connect_arguments, host_port


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """``--spool`` and ``--relay`` for ``broker-spark status``."""
    group = parser.add_argument_group("a spool instead of a node")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--spool", metavar="DIR", help="a spoolPath: its receiver, or the spool")
    where.add_argument("--relay", type=host_port, metavar="HOST:PORT", help="a relay node")


def register(sub: Any) -> None:
    s = sub.add_parser(
        "status",
        help="a node's peers, routes and subscriptions",
        description="Peer with a node and print its peers, the endpoints it reaches (with "
        "the path to each) and everyone's subscriptions; or, with --spool or --relay, a "
        "spool's receiver or relay: peers, offsets, size, oldest record, readers and lag.",
        epilog="examples:\n  broker-spark status --peer 127.0.0.1:9999\n"
        "  broker-spark status --spool /data/spool\n  broker-spark status --relay 10.0.0.5:9998",
    )
    s.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_connect_arguments(s)
    add_status_arguments(s)
    s.set_defaults(run="network:run_status")
    t = sub.add_parser(
        "topology",
        help="draw the network of endpoints as an SVG picture",
        description="Peer with a node and draw every endpoint it reaches and the links "
        "between them as an SVG file (circles and lines, labelled with short node ids).",
        epilog="example:\n  broker-spark topology --peer 127.0.0.1:9999 --out net.svg",
    )
    t.add_argument("--out", required=True, metavar="FILE", help="SVG file to write (- for stdout)")
    add_connect_arguments(t)
    t.set_defaults(run="network:run_topology")
