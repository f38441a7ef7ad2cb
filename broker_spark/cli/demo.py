"""``broker-spark demo``: what ``make demo`` runs; the demo itself is :mod:`broker_spark.demo`.

The demo owns its flags (``broker_spark.demo.add_arguments``: ``--seconds``,
``--rate``, ``--quiet``, ``--master``, ``--peer``, ``--topic``, ``--listen``,
``--advertise``, ``--plain``, ``--certificate``, ``--key``, ``--cafile``,
``--checkpoint``) and its entry point (``main(args) -> int``); this module
only hangs them under the ``broker-spark`` command.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    from broker_spark.demo import add_arguments

    p = sub.add_parser(
        "demo",
        help="the Spark demo: synthetic Zeek events, a streaming aggregation (make demo)",
        description="Publish synthetic Zeek connection events at a steady rate and run a "
        "Spark structured-streaming query over them (connections and bytes per service per "
        "10 seconds), printed as it updates and written back to a topic and a store; ends "
        "with a summary and checks it.",
        epilog="examples:\n"
        "  broker-spark demo --seconds 30\n"
        "  broker-spark demo --master spark://spark-master:7077 --peer broker-b:9999 \\\n"
        "      --listen 0.0.0.0:9999 --advertise driver --checkpoint /shared/demo",
    )
    add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from broker_spark.demo import main

    return int(main(args) or 0)
