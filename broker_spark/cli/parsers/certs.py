"""The flags of ``broker-spark certs``; what runs is :mod:`broker_spark.cli.certs`."""

from __future__ import annotations

import argparse
import re
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")


def _node_name(text: str) -> str:
    if not _NAME.match(text) or text == "ca":
        raise argparse.ArgumentTypeError(
            f"{text!r}: node names are letters, digits, '.', '_' or '-' (and not 'ca')"
        )
    return text


def register(sub: Any) -> None:
    p = sub.add_parser(
        "certs",
        help="make a CA and node certificates for mutual TLS",
        description="Create a certificate authority and a certificate signed by it for each "
        "node, for the TLS flags (--cert, --key, --ca) and the [tls] section of node configs.",
        epilog="example:\n  broker-spark certs --out conf/certs --nodes a b",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write to")
    p.add_argument(
        "--nodes",
        nargs="+",
        type=_node_name,
        default=["a", "b"],
        metavar="NAME",
        help="node names; each gets NAME.pem and NAME.key (default: a b)",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="extra host name or address for every node certificate (repeatable)",
    )
    p.add_argument(
        "--days",
        type=int,
        default=825,
        help="validity of node certificates, in days (the CA: 10 years)",
    )
    p.add_argument("--force", action="store_true", help="replace existing files")
    p.set_defaults(run="certs:run")
