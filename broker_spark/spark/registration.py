"""``broker_spark.spark.register(spark)``: ``format("broker")`` in a session, once.

Spark (4.0 and later) registers a Python data source by itself when its
Python workers can import a top-level ``pyspark_*`` module exposing a
``DefaultSource``, and ``pip install broker-spark`` installs one
(``pyspark_broker``). Where that lookup does not happen or cannot see the
package (the package was installed into the notebook's environment after the
session started, a Spark Connect session, a cluster whose workers lack it at
start), ``format("broker")`` fails with Spark's ``DATA_SOURCE_NOT_FOUND`` and one
call fixes it. The call is safe to make always: Spark 4.0 refuses to register a
name twice (``DATA_SOURCE_ALREADY_EXISTS``), which is taken as done.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``broker`` data source with ``spark`` (a SparkSession); idempotent."""
    from broker_spark.spark.source import BrokerDataSource

    try:
        spark.dataSource.register(BrokerDataSource)
    except Exception as exc:  # Spark wraps its errors in several exception types
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
