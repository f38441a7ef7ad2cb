"""The flags of ``broker-spark demo``; what runs is :mod:`broker_spark.cli.demo`."""

from __future__ import annotations

from typing import Any

from broker_spark.demo import add_arguments


def register(sub: Any) -> None:
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
    p.set_defaults(run="demo:run")
