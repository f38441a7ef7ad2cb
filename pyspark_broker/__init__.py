"""``format("broker")`` with no ``spark.dataSource.register`` call.

Spark looks for top-level modules named ``pyspark_*`` on the Python path and
registers the ``DefaultSource`` each exposes under its ``name()``; this is that
module for :class:`broker_spark.spark.source.BrokerDataSource`. (It is found
by ``pkgutil.iter_modules``, so an editable install must leave the project
root on ``sys.path``, as a regular install does with site-packages.)
"""

from __future__ import annotations

from broker_spark.spark.source import BrokerDataSource

DefaultSource = BrokerDataSource

__all__ = ["BrokerDataSource", "DefaultSource"]
