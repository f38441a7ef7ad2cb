"""The flags of ``broker-spark receiver``; what runs is :mod:`broker_spark.cli.spool_status`."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "receiver",
        help="the receiver process of a query's spoolPath",
        description="A streaming query with a spoolPath receives in a process of its own, "
        "which outlives the query (it stops an hour after its last reader, by default).",
        epilog="examples:\n"
        "  broker-spark status --spool /data/spool\n"
        "  broker-spark receiver stop /data/spool",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    stop = actions.add_parser("stop", help="stop the receiver of a spool")
    stop.add_argument("spool", metavar="SPOOLPATH", help="the query's spoolPath")
    stop.set_defaults(run="spool_status:run_stop")
